#!/usr/bin/python3
"""A newcomer's first five minutes, by mouse and keyboard (xdotool), as the README's tour tells them:

  1. the window opens on the default model with its prompt typed, the Step workspace in front;
  2. Learn > 1. Prefill vs decode: each step is done the way a learner does it, never with "Do it for me":
     Space prefills (the check passes: cache rows = the prompt's tokens, counted by `kvscope tokenize`),
     Next; Space decodes one token, Next; Space three times, Finish;
  3. Learn > 2. Why the cache saves work: Space prefills, Next; Space decodes and the check passes on the
     Cache on vs off panel's FLOPs (the step without the cache costs at least 5 times as much: its ratio is
     read back from the lesson's check line), Next; the KV cache switch in Controls is clicked off and Space
     recomputes every position (check passed), Finish.

Every step leaves a screenshot (WORK/first_NN_*.png; with --shots DIR also DIR/NN-*.png, the pictures of
docs/window.md's "First five minutes"). Needs xvfb-run, xdotool, ImageMagick's import. Usage:
  check_first_minutes_input.py --kvscope BUILD/app/kvscope --assets SOURCE/assets --work DIR [--shots DIR]
"""
import os
import re
import sys

from guitest import App, fail, input_main, prompt_length

PROMPT = "Tom saw the cookie at school. Tom saw the"
SHOTS = os.environ.get("KVSCOPE_FIRST_MINUTES_SHOTS", "")  # set by --shots (input_main runs us again under Xvfb)


def text(d, name):
    return d.get("texts", {}).get(name, "")


def passed(app, what, steps, title=None):
    """Wait until the session has `steps` steps and the lesson's check passed; returns the check line."""
    d = app.wait_dump(what, lambda d: d["state"]["idle"] and d["state"]["steps"] == steps and
                      text(d, "lesson check").startswith("Check passed") and (title is None or title in text(d, "lesson title")),
                      frames=2, shown=lambda d: (d["state"]["steps"], text(d, "lesson title"), text(d, "lesson check")))
    print("  ok: %-40s %s" % (what, text(d, "lesson check")))
    return text(d, "lesson check")


def shot(app, n, label):
    path = app.screenshot(label)
    if SHOTS:  # the window alone (it sits at the screen's top left: Xvfb runs no window manager)
        from PIL import Image
        os.makedirs(SHOTS, exist_ok=True)
        w, h = app.state()["viewport"]
        Image.open(path).crop((0, 0, w, h)).save(os.path.join(SHOTS, "%02d-%s.png" % (n, label.replace(" ", "-"))))


def open_lesson(app, n, title):
    app.click("menu Learn")
    app.wait_dump("the Learn menu", lambda d: "learn %d" % n in d["widgets"], frames=2)
    app.click("learn %d" % n)
    app.wait_dump("lesson %d open" % n, lambda d: d["state"]["idle"] and "%s  step 1 of" % title in text(d, "lesson title")
                  or title in text(d, "lesson title") and "step 1 of" in text(d, "lesson title"), frames=3,
                  shown=lambda d: text(d, "lesson title"))


def inner(a):
    n_prompt = prompt_length(a.kvscope, os.path.join(a.assets, "default"), PROMPT)
    with App(a.kvscope, a.work, [], size="1280x720") as app:
        d = app.wait("the window open", lambda s: s["frames"] > 3 and s["prompt"] == PROMPT)
        if d["state"]["workspace"] != "Step":
            fail("a first start shows the %r workspace" % d["state"]["workspace"])
        shot(app, 1, "open")

        # Lesson 1, the learner's own keys.
        open_lesson(app, 1, "Prefill vs decode")
        shot(app, 2, "lesson 1")
        app.key("space")
        line = passed(app, "lesson 1, step 1: Space prefills", 1)
        if "cache rows = %d (the prompt's tokens)" % n_prompt not in line:
            fail("step 1's check %r; `kvscope tokenize` counts %d prompt tokens" % (line, n_prompt))
        shot(app, 3, "prefill checked")
        app.click("lesson next")
        app.wait_dump("step 2", lambda d: "step 2 of 3" in text(d, "lesson title"), frames=2)
        app.key("space")
        passed(app, "lesson 1, step 2: Space decodes", 2, "step 2 of 3")
        shot(app, 4, "decode checked")
        app.click("lesson next")
        app.wait_dump("step 3", lambda d: "step 3 of 3" in text(d, "lesson title"), frames=2)
        for n in (3, 4, 5):
            app.key("space")
            app.wait("decode to step %d" % n, lambda s: s["steps"] == n)
        passed(app, "lesson 1, step 3: three more decodes", 5, "step 3 of 3")
        shot(app, 5, "three decodes checked")
        app.click("lesson next")
        app.wait_dump("lesson 1 done", lambda d: text(d, "lesson check") == "Lesson done.", frames=2)

        # Lesson 2: keys, and the cache switch clicked.
        open_lesson(app, 2, "Why the cache saves work")
        app.wait("lesson 2 starts from no step", lambda s: s["steps"] == 0)
        app.key("space")
        passed(app, "lesson 2, step 1: Space prefills", 1, "step 1 of 3")
        shot(app, 6, "lesson 2 prefill")
        app.click("lesson next")
        app.wait_dump("step 2", lambda d: "step 2 of 3" in text(d, "lesson title"), frames=2)
        app.key("space")
        line = passed(app, "lesson 2, step 2: Space decodes", 2, "step 2 of 3")
        m = re.search(r"(\d+(?:\.\d+)?)x", line)
        if not m or float(m.group(1)) < 5:
            fail("step 2's check %r names no FLOPs ratio of 5x or more" % line)
        shot(app, 7, "flops checked")
        app.click("lesson next")
        app.wait_dump("step 3", lambda d: "step 3 of 3" in text(d, "lesson title"), frames=2)
        app.click("cache switch")
        app.wait("the cache off", lambda s: not s["cache_on"])
        app.key("space")
        passed(app, "lesson 2, step 3: cache off, Space", 3, "step 3 of 3")
        shot(app, 8, "cache off checked")
        app.click("lesson next")
        app.wait_dump("lesson 2 done", lambda d: text(d, "lesson check") == "Lesson done.", frames=2)
    print("ok: the first five minutes: lessons 1 and 2 followed by keys and clicks, every check passed")


def main():
    if "--shots" in sys.argv:
        i = sys.argv.index("--shots")
        os.environ["KVSCOPE_FIRST_MINUTES_SHOTS"] = os.path.abspath(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    return input_main(__file__, inner)


if __name__ == "__main__":
    sys.exit(main())
