#!/usr/bin/python3
"""Real-input test of the Rotary tab: the interactive window on assets/llama-gqa driven by xdotool.

Type a prompt, click "Prefill step", click a cell of the attention map (Step workspace), then the Cache
workspace and its "Rotary" tab: the tab
then names the clicked query and key positions, and the score it shows equals q·k/sqrt(D) computed by
numpy from the rows `kvscope generate --trace` exports for the same prompt, layer 0 and head 0.
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

from guitest import App, input_main, TIMEOUT, fail

PROMPT = "The quick brown fox jumps over the lazy dog"


def inner(a):
    work = a.work
    model = os.path.join(a.assets, "llama-gqa")
    app = App(a.kvscope, work, ["--model", model])
    try:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.prefill(PROMPT)
        # A cell two thirds down and one third across the Step workspace's map: a query late in the prompt,
        # an earlier key. The selection is the window's, so the Cache workspace's Rotary tab shows it.
        x0, y0, x1, y1 = app.state()["widgets"]["attention map"]
        x, y = int(x0 + (x1 - x0) / 3), int(y0 + (y1 - y0) * 2 / 3)
        app.xdo(["mousemove", "--window", app.wid, str(x), str(y)])
        time.sleep(0.3)
        app.press_release()
        app.screenshot("cell selected")
        app.workspace("Cache")
        app.click("tab Rotary")
        t0 = time.time()
        header = None
        while time.time() - t0 < TIMEOUT:
            texts = (app.state() or {}).get("texts", {})
            header, score = texts.get("rotary header", ""), texts.get("rotary score", "")
            m = re.search(r"query at position (\d+), key at (\d+)", header)
            if m and int(m.group(2)) > 0:
                break
            time.sleep(0.1)
        else:
            fail("the Rotary tab did not follow the click (header %r)" % header)
        app.screenshot("rotary selected")
        qpos, kpos = int(m.group(1)), int(m.group(2))
        shown = float(re.search(r"score q·k·scale = (-?[0-9.]+)", score).group(1))
        print("  ok: clicked query %d, key %d; the tab shows score %.4f" % (qpos, kpos, shown))
    finally:
        app.close()

    trace = os.path.join(work, "trace")
    p = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "1",
                        "--trace", trace], capture_output=True, text=True, errors="replace", timeout=120)
    if p.returncode != 0:
        fail("kvscope generate failed: %s" % p.stderr)
    meta = json.load(open(os.path.join(trace, "step_0000", "meta.json")))
    q = np.load(os.path.join(trace, "step_0000", "q.npy"))  # (L, R, H*D)
    k = np.load(os.path.join(trace, "step_0000", "k.npy"))  # (L, R, K*D)
    D = meta["model"]["head_dim"]
    first = meta["first_computed_position"]
    want = float(q[0, qpos - first, :D].astype(np.float64) @ k[0, kpos - first, :D].astype(np.float64) / np.sqrt(D))
    print("  numpy from the trace: %.6f" % want)
    if abs(want - shown) > 6e-5:  # the tab prints four decimals
        fail("the Rotary tab shows %.4f for query %d key %d, numpy gives %.6f" % (shown, qpos, kpos, want))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
