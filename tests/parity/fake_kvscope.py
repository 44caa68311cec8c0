#!/usr/bin/python3
"""A stand-in for `kvscope generate`, built on the reference's *cached* path in float32.

It exists to test the parity harness itself (tests/parity/selfcheck.py runs cases through it, and
KVSCOPE_FAKE_PERTURB=1e-3 shows what a failure report looks like). It is not a model of kvscope's
error messages beyond the contract: one line `error: ...` on stderr, exit 1 (runtime) or 2 (usage).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))


class Usage(Exception):
    pass


def main(argv):
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("cmd")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", action="append", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--dump-logits")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--window", type=int)
    ap.add_argument("--prefill-chunk", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--top-p", type=float)
    ap.error = lambda msg: (_ for _ in ()).throw(Usage(msg))
    a = ap.parse_args(argv)
    if a.cmd != "generate":
        raise Usage(f"unknown command {a.cmd}")
    for name, v, ok in [("--window", a.window, lambda x: x >= 1), ("--prefill-chunk", a.prefill_chunk, lambda x: x >= 1),
                        ("--max-new-tokens", a.max_new_tokens, lambda x: x >= 1),
                        ("--temperature", a.temperature, lambda x: x > 0), ("--top-p", a.top_p, lambda x: 0 < x <= 1)]:
        if v is not None and not ok(v):
            raise Usage(f"{name} {v} is out of range")
    try:
        prompts = [[int(t) for t in s.split(",")] for s in a.prompt_ids]
    except ValueError:
        raise Usage("--prompt-ids wants comma-separated integers")

    import numpy as np
    import torch
    import kvscope_reference as ref
    t0 = time.time()
    m = ref.Model(a.model, torch.float32)
    V, P = m.cfg["vocab_size"], m.cfg["n_positions"]
    for p in prompts:
        if any(t < 0 or t >= V for t in p):
            raise Usage(f"prompt id out of range 0..{V - 1}")
        if len(p) + a.max_new_tokens > P:
            raise Usage(f"prompt + new tokens exceed n_positions {P}")
    results = []
    for p in prompts:
        if a.no_cache:
            ids, rows = ref.greedy(m, p, a.max_new_tokens, a.window)
        else:
            ids, rows = ref.greedy_cached(m, p, a.max_new_tokens, a.window, a.prefill_chunk)
        results.append((ids, rows.numpy() + float(os.environ.get("KVSCOPE_FAKE_PERTURB", "0"))))
    if a.dump_logits:
        arr = np.stack([r for _, r in results]).astype(np.float32)
        np.save(a.dump_logits, arr[0] if len(prompts) == 1 else arr)
    single = len(prompts) == 1
    out = {"prompt_ids": prompts[0] if single else prompts,
           "generated_ids": results[0][0] if single else [r[0] for r in results],
           "text": None, "timing": {"total_ms": (time.time() - t0) * 1000}}
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Usage as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - the contract is one line, whatever went wrong
        print(f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        sys.exit(1)
