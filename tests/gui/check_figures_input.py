#!/usr/bin/python3
"""Real-input test of the KV cache panel's Save figure button: the interactive window on the default model
driven by xdotool.

Type a prompt, click "Prefill step", click the KV cache panel's "Save figure": the line beside it names the
two files of layer 0 head 0's K and V, PNGs (the Export panel's default format) in the Export folder's
figures/ (gui.figures checks such files' cells against numpy). Then a file of another kind is put where the K figure goes and the button clicked
again: the line says it cannot write that file, which is left as it was.
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import os
import sys
import time

from PIL import Image

from guitest import App, input_main, TIMEOUT, fail

PROMPT = "Tom saw the cat"
STATUS = "save figure kv-cache status"


def wait_status(app, pred, what):
    t0 = time.time()
    text = ""
    while time.time() - t0 < TIMEOUT:
        text = ((app.state() or {}).get("texts", {})).get(STATUS, "")
        if pred(text):
            return text
        time.sleep(0.1)
    fail("%s: the line beside Save figure says %r" % (what, text))


def inner(a):
    work = a.work
    model = os.path.join(a.assets, "default")
    figs = os.path.join(work, "kvscope_export", "figures")  # the Export panel's default folder, in the window's cwd
    k_png = os.path.join(figs, "kv_cache_step0_l0_h0_K.png")
    app = App(a.kvscope, work, ["--model", model])
    try:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.prefill(PROMPT)
        app.workspace("Cache")
        app.click("save figure kv-cache")
        text = wait_status(app, lambda t: t.startswith("saved"), "first click")
        if "kv_cache_step0_l0_h0_K.png" not in text or "kv_cache_step0_l0_h0_V.png" not in text:
            fail("the line beside Save figure does not name both files: %r" % text)
        app.screenshot("saved")
        print("  ok: %s" % text)
        with open(k_png, "rb") as f:
            png_before = f.read()
        if png_before[:8] != b"\x89PNG\r\n\x1a\n":
            fail("%s is not a PNG" % k_png)
        # A file of another kind in the way: refused in the line, the file kept.
        with open(k_png, "wb") as f:
            f.write(b"not a picture")
        app.click("save figure kv-cache")
        text = wait_status(app, lambda t: "cannot write" in t, "file in the way")
        if "kv_cache_step0_l0_h0_K.png" not in text:
            fail("the refusal does not name the file: %r" % text)
        if open(k_png, "rb").read() != b"not a picture":
            fail("the file in the way was overwritten")
        print("  ok: refused: %s" % text)
    finally:
        app.close()

    # What the click saved is a whole PNG (gui.figures checks its cells against numpy).
    with open(k_png, "wb") as f:
        f.write(png_before)
    Image.open(k_png).verify()
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
