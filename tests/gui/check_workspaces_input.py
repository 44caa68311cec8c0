#!/usr/bin/python3
"""Real-input test of the workspaces: the interactive window under Xvfb, keys and clicks sent with xdotool.

  1. the window opens on Step; keys 1-5 and the bar's buttons switch between Step, Cache, Memory, Lab and
     Chat, and switching never changes the session: the steps, the prompt, the status line, the shown
     step and the selected layer and head stay as they were;
  2. a digit typed into the prompt box goes into the prompt and leaves the workspace alone;
  3. the window remembers the last workspace, its size and the UI scale (set in the View menu): closed by SIGTERM (as Ctrl-C), it leaves
     XDG_CONFIG_HOME/kvscope/settings.json saying so, and a second window with that config folder and no
     --size opens there, at that size;
  4. a settings.json the user wrote is read and honoured but never replaced (its bytes stay; one warning
     line says why); a settings.json that is not valid gives the defaults and one warning line naming it.

Needs xvfb-run, xdotool, ImageMagick's import. Usage:
  check_workspaces_input.py --kvscope BUILD/app/kvscope --assets SOURCE/assets --work DIR
"""
import json
import os
import sys

from guitest import App, fail, input_main

PROMPT = "Tom saw the cookie at school. Tom saw the"
KEYS = [("2", "Cache"), ("5", "Chat"), ("3", "Memory"), ("4", "Lab"), ("1", "Step")]
SESSION = ("steps", "prompt", "status", "shown_step", "layer", "head", "cache_on", "turns")


def session(state):
    return {k: state[k] for k in SESSION}


def warnings(app):
    with open(os.path.join(app.work, "kvscope.log")) as f:
        return [l for l in f.read().splitlines() if l.startswith("warning:")]


def run_dir(work, name):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    for f in ("layout.json", "kvscope.log"):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    return d


def closed(app, what):
    app.close()
    if app.proc.returncode != 0:
        fail("%s: kvscope exited %d on SIGTERM, expected a clean close (0)" % (what, app.proc.returncode))


def inner(a):
    model = os.path.join(a.assets, "default")
    config = os.path.join(a.work, "config")
    settings = os.path.join(config, "kvscope", "settings.json")
    if os.path.exists(settings):
        os.remove(settings)

    # 1, 2, 3: switch, type, close.
    app = App(a.kvscope, run_dir(a.work, "first"), ["--model", model], size="1280x720", config=config)
    try:
        d = app.wait_dump("first frames", lambda d: d["state"]["frames"] > 3)
        if d["state"]["workspace"] != "Step":
            fail("a first start shows workspace %r, expected Step" % d["state"]["workspace"])
        app.prefill(PROMPT)
        app.click("layer +")
        app.click("head +")
        app.wait("layer 1, head 1", lambda s: s["layer"] == 1 and s["head"] == 1)
        before = session(app.state()["state"])
        for key, name in KEYS:
            app.key(key)
            d = app.wait_dump("key %s: %s" % (key, name), lambda d: d["state"]["workspace"] == name, frames=2)
            if session(d["state"]) != before:
                fail("key %s changed the session: %s, was %s" % (key, session(d["state"]), before))
            print("  ok: key %s shows %-6s, the session as it was" % (key, name))
        for name in ("Lab", "Cache", "Step"):
            app.workspace(name)
            if session(app.state()["state"]) != before:
                fail("the bar's %s changed the session" % name)
        print("  ok: the bar's buttons switch too, the session as it was")
        app.workspace("Lab")
        app.type_into("prompt", "3 cats")
        app.wait("the prompt takes the 3", lambda s: s["prompt"] == "3 cats")
        d = app.wait_dump("still Lab", lambda d: True, frames=3)
        if d["state"]["workspace"] != "Lab":
            fail("typing 3 into the prompt box switched to %r" % d["state"]["workspace"])
        print("  ok: a digit typed into the prompt box stays there")
        app.click_empty()
        app.click("menu View")
        app.wait_dump("the View menu open", lambda d: "view scale 125" in d["widgets"])
        app.click("view scale 125")
        app.wait_dump("the UI at 125 %", lambda d: d["state"]["ui_scale_setting"] == 1.25, frames=2)
        app.key("3")
        app.wait_dump("key 3: Memory", lambda d: d["state"]["workspace"] == "Memory", frames=2)
    finally:
        closed(app, "first window")
    saved = json.load(open(settings))
    if saved != {"workspace": "Memory", "ui_scale": "1.25", "width": 1280, "height": 720}:
        fail("settings.json after the first window: %s" % saved)
    print("  ok: closed by SIGTERM, settings.json says %s" % saved)

    app = App(a.kvscope, run_dir(a.work, "second"), ["--model", model], size=None, config=config)
    try:
        d = app.wait_dump("first frames", lambda d: d["state"]["frames"] > 3)
        if d["state"]["workspace"] != "Memory" or d["viewport"] != [1280, 720] or d["state"]["ui_scale_setting"] != 1.25:
            fail("the second window opens on %r at %s, UI scale %s, expected Memory at [1280, 720], 1.25" % (
                d["state"]["workspace"], d["viewport"], d["state"]["ui_scale_setting"]))
        if warnings(app):
            fail("the second window warns: %s" % warnings(app))
    finally:
        closed(app, "second window")
    print("  ok: a second window opens on Memory at 1280x720, UI scale 125 %")

    # 4. A file kvscope did not write: honoured, never replaced.
    foreign = os.path.join(a.work, "config_foreign")
    os.makedirs(os.path.join(foreign, "kvscope"), exist_ok=True)
    mine = '{"workspace": "Cache"}\n'
    with open(os.path.join(foreign, "kvscope", "settings.json"), "w") as f:
        f.write(mine)
    app = App(a.kvscope, run_dir(a.work, "foreign"), ["--model", model], config=foreign)
    try:
        d = app.wait_dump("first frames", lambda d: d["state"]["frames"] > 3)
        if d["state"]["workspace"] != "Cache":
            fail("the user's settings.json says Cache, the window opened on %r" % d["state"]["workspace"])
        app.key("4")
        app.wait_dump("key 4: Lab", lambda d: d["state"]["workspace"] == "Lab", frames=2)
    finally:
        closed(app, "window over a foreign settings.json")
    if open(os.path.join(foreign, "kvscope", "settings.json")).read() != mine:
        fail("the user's settings.json was replaced")
    w = warnings(app)
    if len(w) != 1 or "settings.json" not in w[0] or "not remembered" not in w[0]:
        fail("over the user's settings.json, expected one warning naming it, got %s" % w)
    print("  ok: the user's settings.json honoured and kept; %s" % w[0])

    bad = os.path.join(a.work, "config_bad")
    os.makedirs(os.path.join(bad, "kvscope"), exist_ok=True)
    with open(os.path.join(bad, "kvscope", "settings.json"), "w") as f:
        f.write('{"workspace": "Kitchen"}')
    app = App(a.kvscope, run_dir(a.work, "bad"), ["--model", model], config=bad)
    try:
        d = app.wait_dump("first frames", lambda d: d["state"]["frames"] > 3)
        if d["state"]["workspace"] != "Step":
            fail("a bad settings.json: the window opened on %r, expected the default Step" % d["state"]["workspace"])
    finally:
        closed(app, "window over a bad settings.json")
    w = warnings(app)
    if len(w) != 1 or "settings.json" not in w[0] or "Kitchen" not in w[0]:
        fail("a bad settings.json: expected one warning naming the file and the workspace, got %s" % w)
    print("  ok: a bad settings.json: the defaults and %s" % w[0])


def main():
    return input_main(__file__, inner)


if __name__ == "__main__":
    sys.exit(main())
