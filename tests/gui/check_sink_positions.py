#!/usr/bin/env python3
"""Sinks numbered inside the cache (Controls' "sinks at cache positions", script `sink-cache=1`) against
StreamingLLM's numbering written out in numpy.

On assets/llama-gqa with window 4 and 2 sinks, the window runs a prompt and three decode steps and writes
the Attention panel's map of the last step (attention-json). numpy takes the rotated q and k rows
`kvscope generate --trace` exports for the same run, turns them back to before rotation, rotates the sinks
at cache slots 0..1, the window keys at the slots after them and the query at the last slot, and takes
the softmax: the panel's weights must be those, and must differ from the same map with text positions.
The Rotary panel, with the last query and the sink at position 0 selected, must name the distance that
sink was scored at (its cache slot's, not its text position's) and give numpy's score at that distance.
"""
import json
import os

import numpy as np

from guitest import arguments, fail, run, window

PROMPT = "The quick brown fox jumps over the lazy dog and the cat"
LAYER, HEAD, WINDOW, SINKS, DECODE = 1, 2, 4, 2, 3


def turn(x, angles):  # rotate-half layout: pairs (i, i + D/2)
    h = len(angles)
    a, b = x[:h], x[h:]
    return np.concatenate([a * np.cos(angles) - b * np.sin(angles), b * np.cos(angles) + a * np.sin(angles)])


def window_map(kvscope, model, work, sink_cache, qpos):
    """The Attention panel's map and the Rotary panel's view of (query qpos, key 0) of the last step."""
    out, rotary = os.path.join(work, "attention_%d.json" % sink_cache), os.path.join(work, "rotary_%d.json" % sink_cache)
    window(kvscope, model, work, "sinks_%d" % sink_cache, (1280, 720),
           ["options window=%d sinks=%d sink-cache=%d" % (WINDOW, SINKS, sink_cache), "prompt " + PROMPT, "prefill",
            "decode %d" % DECODE, "layer %d" % LAYER, "head %d" % HEAD, "attention-json " + out,
            "select %d 0" % qpos, "panel Rotary", "rotary-json " + rotary])
    return json.load(open(out)), json.load(open(rotary))


def main():
    a = arguments()
    model = os.path.join(a.assets, "llama-gqa")

    trace = os.path.join(a.work, "trace")
    run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", str(DECODE + 1),
         "--window", str(WINDOW), "--sinks", str(SINKS), "--sink-positions", "cache", "--trace", trace])
    steps = sorted(d for d in os.listdir(trace) if d.startswith("step_"))
    cfg = json.load(open(os.path.join(model, "config.json")))
    meta = json.load(open(os.path.join(trace, steps[-1], "meta.json")))
    D, H, K = meta["model"]["head_dim"], meta["model"]["n_head"], meta["model"]["n_kv_head"]
    kv = HEAD // (H // K)
    keys, values = {}, {}
    for s in steps:
        m = json.load(open(os.path.join(trace, s, "meta.json")))
        k = np.load(os.path.join(trace, s, "k.npy"))  # (L, R, K*D)
        for r in range(k.shape[1]):
            keys[m["first_computed_position"] + r] = k[LAYER, r, kv * D:(kv + 1) * D].astype(np.float64)
    q = np.load(os.path.join(trace, steps[-1], "q.npy"))[LAYER, -1, HEAD * D:(HEAD + 1) * D].astype(np.float64)
    qpos = meta["query_positions"][-1]

    freq = (1.0 / (np.float32(cfg["rope_theta"]) ** (np.arange(0, D, 2, dtype=np.float32) / np.float32(D)))).astype(np.float64)
    raw = lambda x, p: turn(x, -p * freq)  # noqa: E731  back to before rotation
    lo = max(0, qpos - WINDOW + 1)
    n_sink = min(SINKS, lo)
    seen = list(range(n_sink)) + list(range(lo, qpos + 1))
    if lo - n_sink < 3:
        fail("the run is too short for the numbering to matter (window starts at %d)" % lo)
    slots = np.arange(len(seen))
    q_cache = turn(raw(q, qpos), slots[-1] * freq)
    scores = np.array([turn(raw(keys[p], p), s * freq) @ q_cache for p, s in zip(seen, slots)]) / np.sqrt(D)
    want = np.exp(scores - scores.max())
    want /= want.sum()

    got, rotary = window_map(a.kvscope, model, a.work, 1, qpos)
    text, rotary_text = window_map(a.kvscope, model, a.work, 0, qpos)
    row = np.array(got["weights"][-1], dtype=np.float64)
    cols = [got["key_positions"].index(p) for p in seen]
    gap = float(np.max(np.abs(row[cols] - want)))
    hidden = float(np.sum(np.delete(row, cols)))
    text_gap = float(np.max(np.abs(np.array(text["weights"][-1], dtype=np.float64)[cols] - want)))
    print("  query %d: sinks 0..%d at cache slots 0..%d, window %d..%d after them" % (qpos, n_sink - 1, n_sink - 1, lo, qpos))
    print("  cache numbering: panel vs numpy max |diff| %.2e (bound 1e-5); weight outside the visible keys %.1e"
          % (gap, hidden))
    print("  text numbering (sink-cache=0) vs numpy StreamingLLM: max |diff| %.2e (must exceed 1e-3)" % text_gap)
    if not gap <= 1e-5:
        fail("the panel's weights under sink-cache=1 differ from StreamingLLM's numbering by %g" % gap)
    if hidden != 0:
        fail("weight on masked keys: %g" % hidden)
    if not text_gap > 1e-3:
        fail("sink-cache=0 gives the same weights as the cache numbering (%g): the option does nothing" % text_gap)
    # The Rotary panel on the sink at position 0: scored at its slot's distance from the query's slot.
    want_distance = int(slots[-1] - slots[0])
    rotary_gap = abs(rotary["score"] - scores[0])
    print("  Rotary panel, sink 0: scored at distance %d (text distance %d), score %.6f, numpy %.6f"
          % (rotary["scored_distance"], qpos, rotary["score"], scores[0]))
    if rotary["scored_distance"] != want_distance or rotary["query_turned_back"] != lo - n_sink:
        fail("the Rotary panel scores sink 0 at distance %d (turned back by %d), expected %d (by %d)"
             % (rotary["scored_distance"], rotary["query_turned_back"], want_distance, lo - n_sink))
    if not rotary_gap <= 1e-5:
        fail("the Rotary panel's score of sink 0 differs from numpy's cache numbering by %g" % rotary_gap)
    if rotary_text["scored_distance"] != qpos or rotary_text["query_turned_back"] != 0:
        fail("with text positions the Rotary panel scores sink 0 at distance %d, expected %d"
             % (rotary_text["scored_distance"], qpos))
    print("ok: the Attention and Rotary panels under sinks at cache positions = StreamingLLM's numbering in numpy")


if __name__ == "__main__":
    main()
