#!/usr/bin/python3
"""Real-input test of the K/V quantization tab: the interactive window on the default model driven by xdotool.

Type a prompt, click "Prefill step", "layer +" and "head +" twice (layer 1, head 2), the K/V quantization
tab, then the format with the mouse (fp8, then int8). Hover cells of the K error and V error maps: each
tooltip must name the position and channel under the pointer and show numpy's reconstruction error there,
k_hat - k, where numpy quantizes the rows `kvscope generate --trace` exports with
tests/reference/kv_quant_reference.py (written from the README, not from core/).
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "reference")))
from guitest import App, input_main, fail  # noqa: E402
import kv_quant_reference as ref  # noqa: E402
import subprocess  # noqa: E402

PROMPT = "Tom saw the cat. Tom saw the dog. Tom saw the"
LAYER, HEAD = 1, 2
TAB = "K/V quant"


def tooltip_at(app, x, y):
    app.xdo(["mousemove", "--window", app.wid, str(int(x)), str(int(y))])
    d = app.wait_dump("the tooltip at %d,%d" % (x, y), lambda d: "quant tooltip" in d["texts"], frames=2,
                      shown=lambda d: d["texts"])
    return d["texts"]["quant tooltip"]


def check_cells(app, fmt, k, v):
    """Hover cells of both maps; compare each tooltip with numpy's k_hat - k / v_hat - v."""
    P, D = k.shape
    want = {"key": ref.dequantize_kv(k, fmt) - k, "value": ref.dequantize_kv(v, fmt) - v}
    if not np.any(want["key"]) or not np.any(want["value"]):
        fail("%s: numpy finds no reconstruction error: the check would teach nothing" % fmt)
    n = 0
    for which, name in (("key", "quant K error"), ("value", "quant V error")):
        x0, y0, x1, y1 = app.state()["widgets"][name]
        for p, ch in ((0, 0), (P // 2, D // 3), (P - 1, D - 1), (3, D - 5)):
            tip = tooltip_at(app, x0 + (ch + 0.5) * (x1 - x0) / D, y0 + (p + 0.5) * (y1 - y0) / P)
            head = "%s of position %d, channel %d" % (which, p, ch)
            lines = tip.split("\n")
            if lines[0] != head or len(lines) != 2 or not lines[1].startswith("reconstruction error "):
                fail("%s: hovering %s shows %r" % (fmt, head, tip))
            got, exp = float(lines[1].split()[-1]), float(want[which][p, ch])
            if abs(got - exp) > 6e-6 * abs(exp) + 1e-12:  # the tooltip prints 6 significant digits
                fail("%s: %s: the tooltip's error %.7g, numpy's %.7g" % (fmt, head, got, exp))
            n += 1
    print("  ok %s: %d hovered cells show numpy's reconstruction error" % (fmt, n))


def inner(a):
    work = a.work
    model = os.path.join(a.assets, "default")
    trace = os.path.join(work, "trace")
    p = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "1",
                        "--trace", trace], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail("kvscope generate failed: %s" % p.stderr)
    step = os.path.join(trace, "step_0000")
    k, v = (np.load(os.path.join(step, n + ".npy")) for n in ("k", "v"))  # (L, P, C)
    D = k.shape[2] // 4  # the default model: 4 heads
    k, v = k[LAYER, :, HEAD * D:(HEAD + 1) * D], v[LAYER, :, HEAD * D:(HEAD + 1) * D]

    with App(a.kvscope, work, ["--model", model]) as app:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.prefill(PROMPT)
        app.click("layer +")
        app.click("head +")
        app.click("head +")
        app.wait("layer 1, head 2", lambda s: s["layer"] == LAYER and s["head"] == HEAD)
        app.workspace("Cache")
        app.click("tab " + TAB)
        app.wait_dump("the tab's maps", lambda d: "quant K error" in d["widgets"])
        for fmt, radio in (("fp8", "quant fp8"), ("int8", "quant int8")):
            app.click(radio)
            app.wait_dump("the tab on %s" % fmt, lambda d: (" %s stores" % fmt) in d["texts"].get("quant header", ""),
                          shown=lambda d: d["texts"].get("quant header"))
            app.screenshot(fmt)
            header = app.state()["texts"]["quant header"]
            if "layer %d head %d" % (LAYER, HEAD) not in header or "%d keys" % k.shape[0] not in header:
                fail("%s: the header %r does not name layer %d head %d and %d keys" % (fmt, header, LAYER, HEAD, k.shape[0]))
            check_cells(app, fmt, k, v)
        app.click_empty()
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
