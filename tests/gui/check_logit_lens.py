#!/usr/bin/python3
"""The Logit lens tab against numpy, from the rows `kvscope generate --trace` exports.

On assets/llama-gqa (tied embeddings, RMSNorm) the window runs a prompt's prefill, selects query position
3 and shows the Logit lens tab. numpy reads residual.npy of the same prefill from the trace, applies
model.norm (RMSNorm in float64) and the embedding matrix as the output layer at every depth 0..L, and
takes the softmax: at each depth the tab's five tokens must be numpy's five most likely, with their
probabilities. The tab's last depth must be the full model's prediction there, and the lens must change
its answer between some two depths (or the tab would teach nothing on this model).
"""
import json
import os
import subprocess
import sys

import numpy as np

from guitest import arguments, fail, window

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
from kvscope_reference import safetensors_io  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog"
QPOS = 3


def main():
    a = arguments()
    model = os.path.join(a.assets, "llama-gqa")
    trace = os.path.join(a.work, "trace")
    # The generated text goes nowhere: a random model's token need not be valid UTF-8.
    p = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "1",
                        "--trace", trace], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    if p.returncode != 0:
        fail("kvscope generate failed: %s" % p.stderr.decode(errors="replace"))
    residual = np.load(os.path.join(trace, "step_0000", "residual.npy")).astype(np.float64)  # (L + 1, R, C)
    cfg = json.load(open(os.path.join(model, "config.json")))
    tensors, _, _ = safetensors_io.read_folder(model)
    norm = tensors["model.norm.weight"].double().numpy()
    head = (tensors["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else tensors["lm_head.weight"]).double().numpy()

    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        d = window(a.kvscope, model, a.work, "lens_" + label, size,
                   ["prompt " + PROMPT, "prefill", "select %d 0" % QPOS, "panel Logit lens"])
        t = d["texts"]
        if "position %d " % QPOS not in t.get("lens header", ""):
            fail("%s: the tab's header %r does not name position %d" % (label, t.get("lens header"), QPOS))
        tops = []
        for depth in range(residual.shape[0]):
            x = residual[depth, QPOS]
            n = x / np.sqrt(np.mean(x * x) + cfg["rms_norm_eps"]) * norm
            logits = head @ n
            p = np.exp(logits - logits.max())
            p /= p.sum()
            want = np.argsort(-p)[:5]
            shown = [(int(i), float(q)) for i, q in (w.split(":") for w in t.get("lens depth %d" % depth, "").split())]
            if len(shown) != 5:
                fail("%s: depth %d shows %r" % (label, depth, t.get("lens depth %d" % depth)))
            for rank, (i, q) in enumerate(shown):
                if i != int(want[rank]) and abs(p[i] - p[want[rank]]) > 1e-5:
                    fail("%s: depth %d rank %d shows token %d, numpy %d" % (label, depth, rank, i, int(want[rank])))
                if abs(q - p[i]) > 1e-5:
                    fail("%s: depth %d token %d probability %.6f, numpy %.6f" % (label, depth, i, q, p[i]))
            tops.append(shown[0][0])
        if len(set(tops)) < 2:
            fail("%s: every depth predicts token %d: the lens shows no change on this model" % (label, tops[0]))
        print("  ok %s: position %d, top token by depth %s = numpy" % (label, QPOS, tops))
    print("ok: the Logit lens tab equals numpy's final norm and output layer over the exported residual stream")


if __name__ == "__main__":
    main()
