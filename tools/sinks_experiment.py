#!/usr/bin/python3
"""How much a sliding window loses, with and without attention sinks, on the default model.

    /usr/bin/python3 tools/sinks_experiment.py [--kvscope build/app/kvscope] [--model DIR]

Teacher-forced: for every prefix of a fixed text (from token 24 on) kvscope predicts the next token
once with full attention and once per (window, sinks) setting, all prefixes as one batch
(`generate --max-new-tokens 1 --dump-logits`). Prints the next-token loss on the text, the KL
divergence from the full-attention distribution, and how often the top token agrees. Also prints,
per head, the mean softmax weight on position 0 against the mean weight of the other keys.
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np

TEXT = ("Tom saw the cookie at school. Grace can't find the old island! Don't open the red box; the dog ran "
        "to the park. Tom saw the cookie at school. The cat sat on the mat and the bird sang in the tree. "
        "Ben can't find the yellow goat! Don't open the old box; Grace saw the dog at the park.")
FIRST = 24


def log_softmax(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", default="build/app/kvscope")
    ap.add_argument("--model", default="assets/default")
    a = ap.parse_args()
    ids = [int(t) for t in subprocess.run([a.kvscope, "tokenize", "--model", a.model, "--text", TEXT],
                                          check=True, capture_output=True, text=True).stdout.split()]
    tmp = tempfile.mkdtemp()

    def predict(extra):
        npy = os.path.join(tmp, "logits.npy")
        args = [a.kvscope, "generate", "--model", a.model, "--max-new-tokens", "1", "--dump-logits", npy] + extra
        for t in range(FIRST, len(ids)):
            args += ["--prompt-ids", ",".join(map(str, ids[:t]))]
        subprocess.run(args, check=True, capture_output=True)
        return np.load(npy)[:, 0, :]

    targets = np.array(ids[FIRST:])
    full = log_softmax(predict([]))
    print(f"{len(ids)} tokens; full attention: next-token loss {-full[np.arange(len(targets)), targets].mean():.3f}")
    for window in (8, 16):
        for sinks in (0, 1, 4):
            got = log_softmax(predict(["--window", str(window)] + (["--sinks", str(sinks)] if sinks else [])))
            kl = (np.exp(full) * (full - got)).sum(1).mean()
            loss = -got[np.arange(len(targets)), targets].mean()
            agree = (full.argmax(1) == got.argmax(1)).mean() * 100
            print(f"window {window:2d} sinks {sinks}: loss {loss:.3f}, KL to full {kl:.3f}, top-1 agrees {agree:.0f}%")

    trace = os.path.join(tmp, "trace")
    subprocess.run([a.kvscope, "generate", "--model", a.model, "--prompt-ids", ",".join(map(str, ids[:40])),
                    "--max-new-tokens", "1", "--trace", trace], check=True, capture_output=True)
    meta = json.load(open(os.path.join(trace, "step_0000", "meta.json")))
    L, H = meta["model"]["n_layer"], meta["model"]["n_head"]
    print("mean weight on position 0 vs on the other keys (queries 8 ..):")
    for il in range(L):
        for h in range(H):
            w = np.load(os.path.join(trace, "step_0000", f"l{il:02d}_h{h:02d}_weights.npy"))[8:]
            other = np.mean([row[1:8 + i + 1].mean() for i, row in enumerate(w)])
            print(f"  layer {il} head {h}: {w[:, 0].mean():.3f} vs {other:.3f}")


if __name__ == "__main__":
    main()
