#!/usr/bin/python3
"""Real-input test of K/V head selection: the interactive window on assets/llama-gqa (4 query heads, 2 K/V
heads, read by h // 2; config.json) driven by xdotool.

Type a prompt, click "Prefill step", then click in the KV cache panel's group line: query head h3 selects
query head 3 and its K/V head (the panel's rows title it "K/V head 1 (read by query heads 2..3)"); K/V
head KV0 selects its group (query head 0); KV1 again selects query head 2, its first reader; a click on a
K/V head that already holds the selection keeps it. Expected heads come from config.json, not the window.
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import json
import os
import sys
import time

from guitest import App, input_main, TIMEOUT, fail

PROMPT = "The quick brown fox jumps over the lazy dog"


def inner(a):
    model = os.path.join(a.assets, "llama-gqa")
    cfg = json.load(open(os.path.join(model, "config.json")))
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    G = H // K
    app = App(a.kvscope, a.work, ["--model", model])
    try:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.prefill(PROMPT)

        def expect(head, what):
            kv = head // G
            want = "K/V head %d (read by query heads %d..%d)" % (kv, kv * G, kv * G + G - 1)
            app.wait(what, lambda s: s["head"] == head)
            # The title is drawn above the group line, so it follows the click one frame later.
            t0 = time.time()
            while time.time() - t0 < TIMEOUT:
                header = (app.state() or {}).get("texts", {}).get("kv header", "")
                if want in header:
                    return
                time.sleep(0.1)
            fail("%s: the KV panel's title %r lacks %r" % (what, header, want))

        clicks = [("kv query h%d" % (H - 1), H - 1), ("kv head KV0", 0), ("kv head KV%d" % (K - 1), (K - 1) * G),
                  ("kv query h%d" % ((K - 1) * G + 1), (K - 1) * G + 1), ("kv head KV%d" % (K - 1), (K - 1) * G + 1)]
        app.workspace("Cache")
        for name, head in clicks:
            app.click(name)
            expect(head, "%s selects query head %d" % (name, head))
        app.screenshot("kv group selected")
    finally:
        app.close()
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
