#!/usr/bin/python3
"""`kvscope generate --edit` against numpy: the edit's KL, top-1 and movers in --json equal those numpy
computes in float64 from --dump-logits of the same run with and without the edit (the step after the
edit is the "after"; the unedited run's same step the "before"), the --trace step folder lists the edit,
and bad --edit values fail in one line with exit 2.

Usage: check_cache_edits_cli.py --kvscope BIN --assets DIR --work DIR
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

PROMPT = "The cat sat on the mat"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def generate(a, *extra, ok=True):
    p = subprocess.run([a.kvscope, "generate", "--model", os.path.join(a.assets, "llama-gqa"), "--prompt", PROMPT,
                        "--max-new-tokens", "3", *extra], capture_output=True, text=True, errors="replace", timeout=120)
    if ok and p.returncode != 0:
        fail("generate %s: exit %d: %s" % (" ".join(extra), p.returncode, p.stderr))
    return p


def softmax(z):
    z = z.astype(np.float64)
    p = np.exp(z - z.max())
    return p / p.sum()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    plain = os.path.join(a.work, "plain.npy")
    generate(a, "--dump-logits", plain)
    for spec in ("0:evict:2", "0:evict:4:1", "0:evict:1:all:0", "1:evict:0", "0:patch:2:all:The dog sat on the mat"):
        edited, trace = os.path.join(a.work, "edited.npy"), os.path.join(a.work, "trace")
        out = json.loads(generate(a, "--edit", spec, "--json", "--dump-logits", edited, "--trace", trace).stdout)
        after_step = int(spec.split(":")[0])
        before, after = np.load(plain)[after_step + 1], np.load(edited)[after_step + 1]
        pb, pa = softmax(before), softmax(after)
        kl = float(np.sum(pb * (np.log(pb) - np.log(pa))))
        e = out["edits"][0]
        if not kl > 0 or abs(e["kl"] - kl) > 1e-9 * kl:
            fail("%s: --json KL %r, numpy %r" % (spec, e["kl"], kl))
        if (e["top1_before"]["id"], e["top1_after"]["id"]) != (int(np.argmax(before)), int(np.argmax(after))):
            fail("%s: top-1 %r -> %r, numpy %d -> %d" % (spec, e["top1_before"], e["top1_after"],
                                                        np.argmax(before), np.argmax(after)))
        want = [int(i) for i in np.argsort(-np.abs(pa - pb), kind="stable")[:5]]
        if [m["id"] for m in e["movers"]] != want:
            fail("%s: movers %r, numpy %r" % (spec, [m["id"] for m in e["movers"]], want))
        if e["after_step"] != after_step or e["before_step"] != after_step + 1:
            fail("%s: after_step %r before_step %r" % (spec, e["after_step"], e["before_step"]))
        meta = json.load(open(os.path.join(trace, "step_%04d" % (after_step + 1), "meta.json")))
        if [(m["kind"], m["position"]) for m in meta["edits"]] != [(e["kind"], e["position"])]:
            fail("%s: the traced step lists %r" % (spec, meta["edits"]))
        print("ok %-40s KL %.6g (numpy %.6g)" % (spec, e["kl"], kl))
    for spec, words in (("0:evict:99", "position 99"), ("0:evict:1:9", "layer 9"), ("0:evict:1:0:5", "K/V head 5"),
                        ("0:restore:1", "not evicted"), ("0:frob:1", "--edit wants"), ("7:evict:1", "3 steps"),
                        ("0:patch:8:all:The dog", "no position 8"), ("0:evict", "--edit wants")):
        p = generate(a, "--edit", spec, ok=False)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        if p.returncode != 2 or len(lines) != 1 or words not in lines[0]:
            fail("%s: exit %d, stderr %r (expected exit 2 and one line naming %r)" % (spec, p.returncode, p.stderr, words))
        print("ok refused %-32s %s" % (spec, lines[0]))
    print("OK")


if __name__ == "__main__":
    main()
