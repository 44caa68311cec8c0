#!/usr/bin/python3
"""The real model with an eviction policy against numpy recomputing the policy from the exported trace.

kvscope generate --evict POLICY --trace DIR writes, per step, every (layer, head)'s attention weights
(weights.npy: the numbers the forward pass used, 0 for evicted keys) and the evictions the policy made
(meta.json "eviction"). This script replays the policy from those weights alone with the rules of
tests/reference/eviction_reference.py (sums in float64 in query, then head order, as README "Eviction under a
budget" states) and demands the same evicted positions, in every layer and K/V head, at every step, with
the same deciding scores; it also checks that an evicted key gets weight 0 from every later query.
assets/llama-gqa has 4 query heads on 2 K/V heads, so the group sums are exercised.

    check_eviction_trace.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import eviction_reference as ref  # noqa: E402

MODEL = os.path.join(HERE, "..", "..", "assets", "llama-gqa")
PROMPT = "5,17,300,42,9,9,120,77,64,3,250,18,6,91,33,400"


def replay(trace_dir, policy, budget, recent, obs, pool, pool_kind):
    doc = json.load(open(os.path.join(trace_dir, "trace.json")))
    L, H, K = doc["model"]["n_layer"], doc["model"]["n_head"], doc["model"]["n_kv_head"]
    G = H // K
    P = len(PROMPT.split(","))
    n_total = sum(len(s["tokens"]) for s in doc["steps"])
    scores = np.zeros((L, K, n_total))
    alive = [[[] for _ in range(K)] for _ in range(L)]
    budgets = ref.pyramid_budgets(budget, L) if policy == "pyramid" else [budget] * L
    compressed = False
    failures = 0
    for s in doc["steps"]:
        folder = os.path.join(trace_dir, s["folder"])
        meta = json.load(open(os.path.join(folder, "meta.json")))
        qpos, kpos = meta["query_positions"], meta["key_positions"]
        for l in range(L):
            for kv in range(K):
                alive[l][kv].extend(range(s["first_position"], s["first_position"] + len(s["tokens"])))
        for l in range(L):
            for h in range(H):
                w = np.load(os.path.join(folder, "l%02d_h%02d_weights.npy" % (l, h)))
                kv = h // G
                gone = set(range(n_total)) - set(alive[l][kv])
                for j, p in enumerate(kpos):
                    if p in gone and np.any(w[:, j] != 0):
                        print(f"FAIL step {s['index']} layer {l} head {h}: evicted key {p} has weight != 0")
                        failures += 1
        # observed queries, summed in query order then head order
        for r, q in enumerate(qpos):
            observed = policy == "h2o" or (policy in ("snapkv", "pyramid") and not compressed and P - obs <= q < P)
            if not observed:
                continue
            for l in range(L):
                for kv in range(K):
                    for g in range(G):
                        w = np.load(os.path.join(folder, "l%02d_h%02d_weights.npy" % (l, kv * G + g)))
                        for j, p in enumerate(kpos):
                            scores[l, kv, p] += np.float64(w[r, j])
        prompt_done = s["first_position"] + len(s["tokens"]) >= P
        decide = policy == "h2o" or (policy in ("snapkv", "pyramid") and prompt_done and not compressed)
        if policy in ("snapkv", "pyramid") and prompt_done:
            compressed = True
        want = []
        for l in range(L):
            for kv in range(K):
                al = sorted(alive[l][kv])
                n, bud = len(al), budgets[l]
                if not decide or n <= bud:
                    continue
                if policy == "h2o":
                    rr = min(recent, bud)
                    older = al[:n - rr]
                    kept = ref.top(older, [scores[l, kv, x] for x in older], bud - rr) + al[n - rr:]
                    decided = {x: scores[l, kv, x] for x in al}
                else:
                    win = min(obs, n)
                    prefix = al[:n - win]
                    pooled = ref.pool([scores[l, kv, x] for x in prefix], pool, pool_kind)
                    fw = min(win, bud)
                    kept = ref.top(prefix, pooled, bud - fw) + al[n - fw:]
                    decided = {x: scores[l, kv, x] for x in al}
                    decided.update({x: pooled[i] for i, x in enumerate(prefix)})
                for x in al:
                    if x not in kept:
                        want.append((l, kv, x, float(np.float32(decided[x]))))
                alive[l][kv] = sorted(kept)
        got = [(e["layer"], e["kv_head"], e["position"], float(np.float32(e["score"]))) for e in meta["eviction"]["events"]]
        if [g[:3] for g in got] != [w[:3] for w in want]:
            print(f"FAIL step {s['index']}: evicted {[g[:3] for g in got]}, numpy says {[w[:3] for w in want]}")
            failures += 1
        else:
            for g, w in zip(got, want):
                if abs(g[3] - w[3]) > 1e-6 * max(1.0, abs(w[3])):
                    print(f"FAIL step {s['index']}: layer {g[0]} head {g[1]} position {g[2]}: score {g[3]}, numpy {w[3]}")
                    failures += 1
    return failures, sum(len(json.load(open(os.path.join(trace_dir, s["folder"], "meta.json")))["eviction"]["events"])
                         for s in doc["steps"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    failures = 0
    cases = [
        ("h2o", ["--evict-recent", "2", "--prefill-chunk", "5"], dict(budget=6, recent=2, obs=0, pool=1, pool_kind="max")),
        ("snapkv", ["--evict-obs", "4", "--evict-pool", "3", "--evict-pool-kind", "max"],
         dict(budget=7, recent=0, obs=4, pool=3, pool_kind="max")),
        ("pyramid", ["--evict-obs", "3", "--evict-pool", "5", "--prefill-chunk", "7"],
         dict(budget=8, recent=0, obs=3, pool=5, pool_kind="avg")),
    ]
    for policy, extra, p in cases:
        out = os.path.join(a.work, policy)
        cmd = [a.kvscope, "generate", "--model", MODEL, "--prompt-ids", PROMPT, "--max-new-tokens", "6",
               "--evict", policy, "--kv-budget", str(p["budget"]), "--trace", out, "--json"] + extra
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL {policy}: exit {run.returncode}: {run.stderr.strip()}")
            failures += 1
            continue
        report = json.loads(run.stdout)
        if report["eviction"]["policy"] != policy:
            print(f"FAIL {policy}: --json says policy {report['eviction']['policy']}")
            failures += 1
        f, n = replay(out, policy, **p)
        if n == 0:
            print(f"FAIL {policy}: nothing was evicted; the case tests nothing")
            failures += 1
        failures += f
        print(f"{policy}: {n} evictions checked against numpy, {f} mismatches")
    if failures:
        print("reproduce:", " ".join(cmd))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
