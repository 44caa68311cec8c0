#!/usr/bin/python3
"""Real-input GUI test: start `kvscope gui` (the interactive window, not the script mode) under Xvfb and
drive it with X events from xdotool, as a new user would:

  type a prompt into the prompt box, click "Prefill step", press Space (decode), Backspace (step back),
  click the cache switch, press Space again (a cache-off step), tap Space and Backspace faster than a
  frame while both cores are busy (each press applies, in order), click the layer / head arrows, hover
  the attention map (a decoder-only model's tooltip says "layer", not "decoder layer"), type an export
  folder and click "Export snapshot".

Widgets are found by name in the JSON the app keeps updated with --layout-dump FILE (rectangles of named
widgets plus a little state: steps, idle, cache, layer, head, status, frame counter), so no pixel
coordinates are hard-coded. After every action the test checks

  1. the app state moved as the action asks (steps, cache switch, layer/head, prompt text);
  2. a screenshot of the X screen (ImageMagick `import -window root`) changed;
  3. the frame counter keeps advancing (the window is not frozen);
and at the end that the export folder holds the right step (meta.json step and cache flag, files of the
selected layer/head) and that its logits equal `kvscope generate --dump-logits` for the same prompt
(the CLI path: an independent run of the engine, no GUI involved).

Needs xvfb-run, xdotool, ImageMagick's import, /usr/bin/python3 with numpy and PIL (guitest.App drives the
window). Usage:
  check_input.py --kvscope BUILD/app/kvscope --work DIR
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

from guitest import App, TIMEOUT, fail, input_main

PROMPT = "The quick brown fox jumps over"


def inner(a):
    work = a.work
    app = App(a.kvscope, work)
    try:
        print("window %s; layout dump %s" % (app.wid, app.dump))
        app.wait("first frames", lambda s: s["frames"] > 3 and s["prompt"] != "")
        app.screenshot("start")

        app.type_into("prompt", PROMPT)
        app.wait("prompt typed", lambda s: s["prompt"] == PROMPT and s["steps"] == 0)
        app.screenshot("typed")

        app.click_empty()
        app.click("Prefill step")
        app.wait("prefill", lambda s: s["steps"] == 1)
        app.screenshot("prefill")

        app.click_empty()
        app.key("space")
        app.wait("space = decode", lambda s: s["steps"] == 2)
        app.screenshot("decode")

        app.key("BackSpace")
        app.wait("backspace = step back", lambda s: s["steps"] == 1)
        app.screenshot("back")

        app.click("cache switch")
        app.wait("cache switch off", lambda s: not s["cache_on"])
        app.key("space")
        app.wait("space = cache-off decode", lambda s: s["steps"] == 2)
        app.screenshot("cache_off_step")

        # Keys tapped faster than a frame while both cores are busy: each press is applied, in order
        # (ImGui 1.86 alone sees only the key state at each frame and would drop such taps).
        # A burner spins until its parent (this script) is gone, so a killed test leaves no busy process.
        burn = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
        burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2)]
        try:
            app.xdo(["key", "--delay", "0", "space", "BackSpace"])
            app.wait("space+backspace at once", lambda s: s["steps"] == 2 and "stepped back to 2 steps" in s["status"])
            app.xdo(["key", "--delay", "0", "space"])
            app.wait("one quick space", lambda s: s["steps"] == 3)
            app.xdo(["key", "--delay", "0", "BackSpace"])
            app.wait("one quick backspace", lambda s: s["steps"] == 2)
        finally:
            for b in burners:
                b.kill()
                b.wait()

        app.click("layer +")  # the default model has 2 layers and 4 heads
        app.click("head +")
        app.click("head +")
        app.wait("layer 1, head 2", lambda s: s["layer"] == 1 and s["head"] == 2)
        app.screenshot("layer_head")

        # Hovering a cell of the map: the tooltip of a decoder-only model says "layer", not "decoder layer".
        x, y = app.centre("attention map")
        app.xdo(["mousemove", "--window", app.wid, str(x), str(y)])
        t0 = time.time()
        while time.time() - t0 < TIMEOUT and "attention tooltip" not in (app.state() or {}).get("texts", {}):
            time.sleep(0.1)
        tip = (app.state() or {}).get("texts", {}).get("attention tooltip")
        if tip != "layer 1 head 2":
            fail("the attention tooltip reads %r, expected 'layer 1 head 2'" % tip)
        print("  ok: tooltip %r" % tip)
        app.click_empty()

        out = os.path.join(work, "exported")
        app.type_into("export dir", out)
        app.click_empty()
        app.click("Export snapshot")
        app.wait("export snapshot", lambda s: "exported step 1" in s["status"])

        # Frames kept coming the whole time: the loop never stalled.
        f = app.frames()
        time.sleep(1.0)
        if app.frames() <= f:
            fail("the frame counter stopped (%d): the window froze" % f)
    finally:
        app.close()

    # The export: the shown step (1, the cache-off decode) for the selected layer 1 / head 2.
    step_dir = os.path.join(out, "step_0001")
    if not os.path.isdir(step_dir):
        fail("Export snapshot wrote %s, expected step_0001" % (os.listdir(out) if os.path.isdir(out) else "nothing"))
    with open(os.path.join(step_dir, "meta.json")) as f:
        meta = json.load(f)
    if meta["step"] != 1 or meta["phase"] != "decode" or meta["cache_on"]:
        fail("exported meta says step %s %s cache_on=%s, expected step 1 decode with the cache off" % (
            meta["step"], meta["phase"], meta["cache_on"]))
    for name in ("l01_h02_weights.npy", "l01_h02_scores.npy", "l01_h02_mask.npy", "logits.npy"):
        if not os.path.exists(os.path.join(step_dir, name)):
            fail("export lacks %s (has %s)" % (name, sorted(os.listdir(step_dir))))
    weights = np.load(os.path.join(step_dir, "l01_h02_weights.npy"))
    n_prompt = meta["query_positions"][-1]  # the decode query sits at position len(prompt)
    if weights.shape[0] != n_prompt + 1:
        fail("cache-off decode should recompute %d query rows, export has %s" % (n_prompt + 1, weights.shape))
    if not np.allclose(weights.sum(axis=1), 1, atol=1e-5):
        fail("exported weights rows do not sum to 1")
    print("export: %s step %d (%s, cache off), weights %s" % (step_dir, meta["step"], meta["phase"], weights.shape))

    # The numbers equal an independent CLI run of the same prompt (cache on; the cache does not change them).
    dump = os.path.join(work, "generate_logits.npy")
    p = subprocess.run([a.kvscope, "generate", "--prompt", PROMPT, "--max-new-tokens", "2", "--json", "--dump-logits",
                        dump], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail("kvscope generate failed: %s" % p.stderr)
    gen = json.loads(p.stdout)
    ref = np.load(dump)  # (2, V)
    got = np.load(os.path.join(step_dir, "logits.npy"))
    worst = float(np.abs(got - ref[1]).max())
    print("logits of the exported step vs kvscope generate: max |d| %.2e; chosen %d vs %d" % (
        worst, meta["chosen"]["id"], gen["generated_ids"][1]))
    if worst > 1e-4 or meta["chosen"]["id"] != gen["generated_ids"][1]:
        fail("the GUI's step differs from kvscope generate")
    print("OK")
    return 0


def main():
    return input_main(__file__, inner, assets=False)


if __name__ == "__main__":
    sys.exit(main())
