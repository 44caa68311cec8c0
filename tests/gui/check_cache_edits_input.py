#!/usr/bin/python3
"""Real-input test of the Cache edits tab: the interactive window on assets/llama-gqa driven by xdotool.

Type a prompt, click "Prefill step", click the "Cache edits" tab, click the position stepper's + twice
(position 2) and "Evict": the tab shows one pending edit, and its KL, top-1 and movers equal what the
scripted window shows for `evict 2` (which gui.cache_edits checks against numpy). "Restore" of position 0,
which is not evicted, shows the refusal in the tab's problem box and leaves the edit alone. "Step back"
undoes the edit: no pending edit, still one step.
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import os
import sys
import time

from guitest import App, input_main, TIMEOUT, fail, window

PROMPT = "The cat sat on the mat"


def texts(app):
    return (app.state() or {}).get("texts", {})


def wait_text(app, name, want):
    t0 = time.time()
    while time.time() - t0 < TIMEOUT:
        if texts(app).get(name) == want:
            return
        time.sleep(0.1)
    fail("%s: expected %r, the tab shows %r" % (name, want, texts(app).get(name)))


def inner(a):
    work = a.work
    model = os.path.join(a.assets, "llama-gqa")
    scripted = window(a.kvscope, model, work, "scripted", (1280, 720),
                      ["prompt " + PROMPT, "step", "evict 2", "panel Cache edits"])["texts"]
    app = App(a.kvscope, work, ["--model", model])
    try:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.prefill(PROMPT)
        app.workspace("Lab")
        app.click("tab Cache edits")
        wait_text(app, "edits pending", "0")
        app.screenshot("cache edits tab")
        app.click("edit position +")
        app.click("edit position +")
        app.click("edits evict")
        wait_text(app, "edits pending", "1")
        app.screenshot("evicted position 2")
        shown = texts(app)
        for name in ("edits kl", "edits top1", "edits movers"):
            if shown.get(name) != scripted.get(name):
                fail("%s: clicked %r, scripted %r" % (name, shown.get(name), scripted.get(name)))
        print("  ok: Evict by clicks shows %s, as the script does" % shown.get("edits kl"))
        for _ in range(2):
            app.click("edit position -")
        app.click("edits restore")
        app.wait_dump("the refusal in the tab", lambda d: "problem edits" in d["widgets"])
        app.screenshot("restore refused")
        if texts(app).get("edits pending") != "1":
            fail("a refused Restore changed the pending edits: %r" % texts(app).get("edits pending"))
        app.click("Step back")
        wait_text(app, "edits pending", "0")
        if app.state()["state"]["steps"] != 1:
            fail("Step back undid a step instead of the edit: %d steps" % app.state()["state"]["steps"])
        app.screenshot("edit undone")
        print("  ok: Restore of an unevicted position refused in the tab; Step back undid the edit")
    finally:
        app.close()
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
