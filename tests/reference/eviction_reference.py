#!/usr/bin/env python3
"""Independent numpy reference of kvscope's KV-cache eviction policies (core/run/eviction.h), written from the
README's definitions ("Eviction under a budget"), sharing no code with the engine.

Given a fixed attention history, it replays a generation step by step and says which positions each
(layer, K/V head) keeps after every step, and the score that decided each eviction.

  python3 tests/reference/eviction_reference.py CASE_DIR      reads CASE_DIR/case.txt and CASE_DIR/weights.f32,
                                                    writes CASE_DIR/ref_kept.txt and CASE_DIR/ref_events.txt
  python3 tests/reference/eviction_reference.py --selfcheck   small hand-checked cases

case.txt, one line: policy budget sinks recent obs pool pool_kind L K G N P chunk
  (policy: oracle-off | window+sinks | h2o | snapkv | pyramid; recent -1 = budget // 2; pool_kind max | avg;
   N positions in all, the first P the prompt, prefilled `chunk` at a time, then one token per step)
weights.f32: float32 (N, L, K, G, N): row q holds the weights query q's G heads gave keys 0..q.

Rules (the same words as eviction.h):
- after each step, every (layer, K/V head) holding more than its budget evicts down to it;
- a key evicted before a step gets weight 0 from that step's queries;
- h2o: score = sum of every query's weights over the group's heads (float64); keep the `recent` newest,
  then the highest scores; ties: the lower position is kept;
- snapkv: once, when the prompt is complete; score = the sum over the queries of the last `obs` prompt
  positions; window = the last min(obs, n) alive positions; the others' scores pooled (kernel k, stride 1,
  padding k // 2; max pads -inf, avg divides the window sum by k); keep the last min(window, budget) and
  the top budget - that of the pooled; ties: the lower position;
- pyramid: snapkv with budget_l = floor(mean * (3(L-1) - 2l) / (2(L-1)) + 1/2), at least 1;
- window+sinks: keep the alive positions below `sinks` (at most budget), then the newest up to budget.
"""
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np


def pyramid_budgets(mean, L):
    if L < 2:
        return [mean] * L
    out = []
    for l in range(L):
        x = Fraction(mean * (3 * (L - 1) - 2 * l), 2 * (L - 1))
        out.append(max(1, int(np.floor(x + Fraction(1, 2)))))
    return out


def top(positions, scores, m):
    """positions of the m highest scores, ties to the lower position."""
    if m <= 0 or len(positions) == 0:
        return []
    order = np.lexsort((np.asarray(positions), -np.asarray(scores, dtype=np.float64)))
    return [positions[i] for i in order[:m]]


def pool(scores, k, kind):
    s = np.asarray(scores, dtype=np.float64)
    h = k // 2
    if kind == "max":
        padded = np.concatenate([np.full(h, -np.inf), s, np.full(h, -np.inf)])
        return np.array([padded[i:i + k].max() for i in range(len(s))])
    padded = np.concatenate([np.zeros(h), s, np.zeros(h)])
    return np.array([padded[i:i + k].sum() / k for i in range(len(s))])


def replay(p, W):
    policy, budget, sinks, recent, obs, k, kind = p["policy"], p["budget"], p["sinks"], p["recent"], p["obs"], p["pool"], p["pool_kind"]
    L, K, G, N, P, chunk = p["L"], p["K"], p["G"], p["N"], p["P"], p["chunk"]
    if recent < 0:
        recent = budget // 2
    budgets = pyramid_budgets(budget, L) if policy == "pyramid" else [budget] * L
    alive = [[[] for _ in range(K)] for _ in range(L)]
    scores = np.zeros((L, K, N), dtype=np.float64)
    compressed = False
    steps = []
    a = 0
    while a < N:
        b = min(a + chunk, P) if a < P else a + 1
        steps.append((a, b))
        a = b
    kept_lines, event_lines = [], []
    for si, (a, b) in enumerate(steps):
        for l in range(L):
            for kv in range(K):
                alive[l][kv].extend(range(a, b))
        for q in range(a, b):
            observed = policy == "h2o" or (policy in ("snapkv", "pyramid") and not compressed and P - obs <= q < P)
            if not observed:
                continue
            for l in range(L):
                for kv in range(K):
                    w = W[q, l, kv, :, :q + 1].astype(np.float64)
                    mask = np.zeros(q + 1, dtype=bool)
                    mask[[x for x in alive[l][kv] if x <= q]] = True
                    for g in range(G):
                        scores[l, kv, :q + 1] += np.where(mask, w[g], 0.0)
        prompt_done = b >= P
        decide = policy in ("h2o", "window+sinks") or (policy in ("snapkv", "pyramid") and prompt_done and not compressed)
        if policy in ("snapkv", "pyramid") and prompt_done:
            compressed = True
        for l in range(L):
            for kv in range(K):
                al = sorted(alive[l][kv])
                n, bud = len(al), budgets[l]
                decided = {}
                if decide and n > bud and policy != "oracle-off":
                    if policy == "window+sinks":
                        s = [x for x in al if x < sinks][:bud]
                        rest = [x for x in al if x not in s]
                        m = bud - len(s)
                        kept = s + (rest[len(rest) - m:] if m > 0 else [])
                        decided = {x: float(x) for x in al}
                    elif policy == "h2o":
                        r = min(recent, bud)
                        older = al[:n - r]
                        kept = top(older, [scores[l, kv, x] for x in older], bud - r) + al[n - r:]
                        decided = {x: scores[l, kv, x] for x in al}
                    else:
                        win = min(obs, n)
                        prefix = al[:n - win]
                        pooled = pool([scores[l, kv, x] for x in prefix], k, kind) if prefix else np.zeros(0)
                        fw = min(win, bud)
                        kept = top(prefix, pooled, bud - fw) + al[n - fw:]
                        decided = {x: scores[l, kv, x] for x in al}
                        decided.update({x: pooled[i] for i, x in enumerate(prefix)})
                    kept = sorted(kept)
                    for x in al:
                        if x not in kept:
                            event_lines.append(f"{si} {l} {kv} {x} {np.float32(decided[x]).item()!r}")
                    alive[l][kv] = kept
                kept_lines.append(f"{si} {l} {kv} " + " ".join(str(x) for x in sorted(alive[l][kv])))
    return kept_lines, event_lines


def read_case(d):
    f = (Path(d) / "case.txt").read_text().split()
    keys = ["policy", "budget", "sinks", "recent", "obs", "pool", "pool_kind", "L", "K", "G", "N", "P", "chunk"]
    p = {key: (v if key in ("policy", "pool_kind") else int(v)) for key, v in zip(keys, f)}
    W = np.fromfile(Path(d) / "weights.f32", dtype=np.float32).reshape(p["N"], p["L"], p["K"], p["G"], p["N"])
    return p, W


def selfcheck():
    assert pyramid_budgets(8, 3) == [12, 8, 4], pyramid_budgets(8, 3)
    assert pyramid_budgets(5, 2) == [8, 3], pyramid_budgets(5, 2)  # 7.5 rounds up
    assert top([0, 1, 2, 3], [1.0, 2.0, 2.0, 0.5], 2) == [1, 2]
    assert top([0, 1, 2, 3], [1.0, 1.0, 1.0, 1.0], 2) == [0, 1]
    assert list(pool([1, 5, 2, 0], 3, "max")) == [5, 5, 5, 2]
    assert list(pool([3, 0, 3], 3, "avg")) == [1, 2, 1]
    # h2o by hand: one layer, head, query head; budget 2, recent 1; prompt of 3 in one chunk
    p = dict(policy="h2o", budget=2, sinks=0, recent=1, obs=1, pool=1, pool_kind="max", L=1, K=1, G=1, N=3, P=3, chunk=3)
    W = np.zeros((3, 1, 1, 1, 3), dtype=np.float32)
    W[0, 0, 0, 0, :1] = [1]
    W[1, 0, 0, 0, :2] = [0.25, 0.75]
    W[2, 0, 0, 0, :3] = [0.5, 0.25, 0.25]
    kept, events = replay(p, W)
    assert kept == ["0 0 0 0 2"], kept  # scores 1.75, 1.0, (2 is recent): 0 kept, 1 evicted
    assert events == ["0 0 0 1 1.0"], events
    print("eviction_reference selfcheck ok")


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--selfcheck":
        return selfcheck()
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: eviction_reference.py CASE_DIR | --selfcheck", file=sys.stderr)
        return 2
    p, W = read_case(sys.argv[1])
    kept, events = replay(p, W)
    (Path(sys.argv[1]) / "ref_kept.txt").write_text("".join(x + "\n" for x in kept))
    (Path(sys.argv[1]) / "ref_events.txt").write_text("".join(x + "\n" for x in events))
    return 0


if __name__ == "__main__":
    sys.exit(main())
