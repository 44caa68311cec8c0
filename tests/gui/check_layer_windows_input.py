#!/usr/bin/python3
"""Real-input test of per-layer windows: the interactive window on a Gemma 3 folder (tools/make_llama_model.py's
gemma3-tiny shape: 6 layers, sliding window 4, every third layer full; assets/llama-gqa's tokenizer) driven
by xdotool.

Type a prompt, click "Prefill step" and "Decode step" twice, then step through the layers with the
attention panel's "layer +" / "layer -" buttons. For each layer reached, the timeline's note names the
keys the last query saw (q - 3 .. q on a sliding layer, 0 .. q on a full one) and the KV cache panel's
per-layer fill reads, seen/stored, min(N, 4) of the min(N, 4 - 1 + 1) a sliding layer stores after a decode
step, or N of N: both from config.json's layer pattern, not from the window. Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
from guitest import App, input_main, TIMEOUT, fail, prompt_length  # noqa: E402
import make_llama_model  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog"


def wait_text(app, name, want, what):
    t0 = time.time()
    got = None
    while time.time() - t0 < TIMEOUT:
        got = (app.state() or {}).get("texts", {}).get(name, "")
        if want in got:
            print("  ok: %-34s %s" % (what, want))
            return
        time.sleep(0.1)
    fail("%s: %s reads %r, expected it to hold %r" % (what, name, got, want))


def inner(a):
    model = os.path.join(a.work, "gemma3")
    make_llama_model.write(model, **dict(make_llama_model.SHAPES["gemma3-tiny"], vocab=768, seed=31))
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(a.assets, "llama-gqa", f), model)
    cfg = json.load(open(os.path.join(model, "config.json")))
    L, W, pattern = cfg["num_hidden_layers"], cfg["sliding_window"], cfg["sliding_window_pattern"]
    sliding = [(i + 1) % pattern != 0 for i in range(L)]  # Gemma3TextConfig's layer pattern
    n = prompt_length(a.kvscope, model, PROMPT) + 2  # the prompt, then two decode steps
    q = n - 1
    app = App(a.kvscope, a.work, ["--model", model])
    try:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.prefill(PROMPT)
        app.click("Decode step")
        app.wait("decode 1", lambda s: s["steps"] == 2)
        app.click("Decode step")
        app.wait("decode 2", lambda s: s["steps"] == 3)
        # a sliding layer stores its window plus the chunk being written: W - 1 + 1 after a decode step
        app.workspace("Cache")  # the KV cache panel's per-layer fill
        want_seen = " ".join("%d/%d" % ((min(n, W), min(n, W)) if s else (n, n)) for s in sliding)
        wait_text(app, "layer windows", want_seen, "per-layer fill, seen/stored")
        full = sliding.index(False)
        route = [("layer +", layer) for layer in range(1, full + 1)] + [("layer -", full - 1)]
        for button, layer in route:
            app.click(button)
            app.wait("%s: layer %d" % (button, layer), lambda s: s["layer"] == layer)
            want = ("layer %d slides (window %d): its last query saw keys %d..%d" % (layer, W, q - W + 1, q)
                    if sliding[layer] else "layer %d: full attention, keys 0..%d" % (layer, q))
            wait_text(app, "timeline layer window", want, "timeline note at layer %d" % layer)
            if layer == full:
                app.screenshot("full layer")
    finally:
        app.close()
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
