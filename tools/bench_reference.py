#!/usr/bin/env python3
"""Decode speed of the independent PyTorch implementation (tools/kvscope_reference, float32), written the
way the reference documents write theirs: nn-style layers, a concatenating K/V cache for the cached
path, a full recompute of the sequence for the uncached one. Prints one JSON object.

    /usr/bin/python3 tools/bench_reference.py MODEL_DIR [--threads 2] [--new-tokens 200] [--repeat 3]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvscope_reference as ref  # noqa: E402


def timed(fn, repeat):
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        runs.append(n / (time.perf_counter() - t0))
    return {"min": min(runs), "median": statistics.median(runs), "max": max(runs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-len", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=200)
    ap.add_argument("--uncached-new-tokens", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = ref.Model(a.model, dtype=torch.float32)
    vocab = model.cfg["vocab_size"]
    prompt = [(i * 7919 + 13) % vocab for i in range(a.prompt_len)]

    with torch.no_grad():
        cached = timed(lambda: len(ref.greedy_cached(model, prompt, a.new_tokens)[0]), a.repeat)
        uncached = timed(lambda: len(ref.greedy(model, prompt, a.uncached_new_tokens)[0]), a.repeat)
    print(json.dumps({"implementation": "PyTorch %s (tools/kvscope_reference, float32)" % torch.__version__,
                      "threads": a.threads, "prompt_len": a.prompt_len,
                      "cached": {"new_tokens": a.new_tokens, "tokens_per_s": cached},
                      "uncached": {"new_tokens": a.uncached_new_tokens, "tokens_per_s": uncached}}))


if __name__ == "__main__":
    main()
