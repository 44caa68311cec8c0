#!/usr/bin/python3
"""Parity group: the paged KV cache, prefix sharing, prompt cache files and attention sinks, each run
through `kvscope generate` and compared with the PyTorch reference (tools/kvscope_reference, float64,
full recompute with the mask written out; it has no cache, no blocks and no files), tokens exact and
logits within TOL.

    sharing.py --kvscope BIN --work DIR

- ragged batches whose prompts share a system prompt, --share-prefix with blocks of 4 (the system
  prompt is not a whole number of blocks, so the last shared block is copied on write), chunked,
  --no-cache, windowed; and the JSON's block figures against counts made here from the lengths;
- --prompt-cache: a first run writes the file, a second loads all but the last prompt token, a
  prompt that matches only partly loads the common part and rewrites the file; a corrupt or
  foreign file is refused (exit 1, one line) and left byte for byte as it was;
- --sinks with a window against the reference's mask with sinks.
"""
import os
import shutil
import sys

import numpy as np
import torch

from common import Failure, check_case, generate, main, model_dir, prompt, reference_model, run_cli
import common

import kvscope_reference.generate as ref


def blocks(n, b):
    return (n + b - 1) // b


def sharing_figures(kvscope, m, system, suffixes, n_new, block):
    prompts = [system + s for s in suffixes]
    obj, _, _ = generate(kvscope, m, prompts, n_new, extra=("--share-prefix", "--block-size", str(block)))
    kv = obj.get("kv", {})
    # Sequence 0 computes everything; every later one maps the system prompt's positions (its full
    # blocks and the partly filled one after them) and copies that partial block before writing.
    P = len(system)
    full = P // block
    want = {
        "prefill_positions_shared": P * (len(prompts) - 1),
        "copies_on_write": (len(prompts) - 1) if P % block else 0,
        "blocks_mapped": sum(blocks(len(p) + n_new - 1, block) for p in prompts),
    }
    want["blocks_distinct"] = want["blocks_mapped"] - full * (len(prompts) - 1)
    for key, value in want.items():
        if kv.get(key) != value:
            raise Failure(f"--share-prefix: kv.{key} = {kv.get(key)}, expected {value} (kv: {kv})")
    return f"figures: {want}"


def bf16_batch_equals_solo(kvscope, m, prompts, n_new, extra):
    """--dtype bf16 (weights and KV cache in bfloat16): a paged, sharing batch gives every prompt the tokens
    and logits, bit for bit, of that prompt run alone with the contiguous cache."""
    dtype = ("--dtype", "bf16")
    obj, logits, _ = generate(kvscope, m, prompts, n_new, extra=dtype + extra)
    for b, p in enumerate(prompts):
        solo, solo_logits, _ = generate(kvscope, m, [p], n_new, extra=dtype)
        if obj["generated_ids"][b] != solo["generated_ids"]:
            raise Failure(f"bf16 {' '.join(extra)}: prompt {b} generated {obj['generated_ids'][b]}, "
                          f"alone {solo['generated_ids']}")
        if not np.array_equal(logits[b], solo_logits):
            diff = np.abs(logits[b] - solo_logits).max()
            raise Failure(f"bf16 {' '.join(extra)}: prompt {b}'s logits differ from its solo run (max {diff:.3g})")
    return f"bf16 batch {' '.join(extra)} == solo runs"


def prompt_cache_round(kvscope, m, foreign, work):
    path = os.path.join(work, "prompt.kvc")
    if os.path.exists(path):
        os.remove(path)
    base = prompt(700, 14)
    other = base[:9] + prompt(701, 6)
    extra = ("--prompt-cache", path)
    steps = []
    for p in (base, other):  # a new file; then one that matches only the first 9 tokens
        check_case(kvscope, m, [p], 6, extra=extra)  # tokens and logits equal the reference
        obj, _, _ = generate(kvscope, m, [p], 6, extra=extra)
        pc = obj["kv"]["prompt_cache"]
        # check_case above already ran this exact command once, so the file holds this prompt now
        # and the second run loads everything but the last token.
        if pc["loaded_positions"] != len(p) - 1 or pc["written"]:
            raise Failure(f"--prompt-cache rerun: {pc}, expected {len(p) - 1} positions loaded, no write")
        steps.append(f"{len(p)} tokens")
    # Refusals leave the file as it was.
    good = open(path, "rb").read()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x40
    broken = os.path.join(work, "broken.kvc")
    open(broken, "wb").write(bytes(bad))
    for target in (broken,):
        rc, _, err = run_cli(kvscope, ["generate", "--model", m, "--prompt-ids", ",".join(map(str, base)),
                                         "--prompt-cache", target])
        lines = err.strip().splitlines()
        if rc != 1 or len(lines) != 1 or not lines[0].startswith("error:"):
            raise Failure(f"corrupt prompt cache: exit {rc}, stderr {err!r}")
        if open(target, "rb").read() != bytes(bad):
            raise Failure("a refused prompt cache file was changed")
    rc, _, err = run_cli(kvscope, ["generate", "--model", foreign, "--prompt-ids", "1,2,3", "--prompt-cache", path])
    if rc != 1 or "another model" not in err or open(path, "rb").read() != good:
        raise Failure(f"prompt cache of another model: exit {rc}, stderr {err!r}")
    leftovers = [f for f in os.listdir(work) if f not in ("prompt.kvc", "broken.kvc")]
    if leftovers:
        raise Failure(f"files left behind next to the prompt cache: {leftovers}")
    return "prompt cache: " + ", ".join(steps) + ", corrupt and foreign files refused"


def sinks_case(kvscope, m, p, n_new, window, sinks, chunk=None, no_cache=False):
    r = reference_model(m)
    r.sinks = sinks
    try:
        expected = [ref.greedy(r, p, n_new, window)]
    finally:
        r.sinks = 0
    obj, logits, args = generate(kvscope, m, [p], n_new, window, chunk, no_cache, ("--sinks", str(sinks)))
    common._compare(f"sinks {sinks} window {window}", r, [p], n_new, expected, obj, logits)
    # and the mask really differs from the plain window (the case is not vacuous)
    plain = ref.greedy(r, p, n_new, window)[1]
    if torch.allclose(plain, expected[0][1]):
        raise Failure("sinks case: the reference gives the same logits with and without sinks")
    return f"sinks {sinks} window {window} chunk {chunk} no-cache {no_cache}"


def cases(kvscope, work):
    os.makedirs(work, exist_ok=True)
    m = model_dir(work, "base")
    system = prompt(600, 13)
    suffixes = [prompt(601, 5), prompt(602, 1), prompt(603, 9)]
    ps = [system + s for s in suffixes]
    share = ("--share-prefix", "--block-size", "4")
    yield lambda: check_case(kvscope, m, ps, 7, extra=share)
    yield lambda: check_case(kvscope, m, ps, 7, chunk=3, extra=share)
    yield lambda: check_case(kvscope, m, ps, 7, no_cache=True, extra=share)
    yield lambda: check_case(kvscope, m, ps, 7, window=5, extra=share)
    yield lambda: check_case(kvscope, m, [ps[0], ps[0], ps[0]], 5, extra=share)
    yield lambda: check_case(kvscope, m, ps, 7, extra=("--block-size", "3"))
    yield lambda: sharing_figures(kvscope, m, system, suffixes, 7, 4)
    yield lambda: bf16_batch_equals_solo(kvscope, m, ps, 7, share)
    pc_dir = os.path.join(work, "prompt_cache")
    shutil.rmtree(pc_dir, ignore_errors=True)
    os.makedirs(pc_dir)
    foreign = model_dir(work, "original_transformer")
    yield lambda: prompt_cache_round(kvscope, m, foreign, pc_dir)
    for w, s in ((3, 1), (4, 2)):
        p = prompt(650 + w, 10)
        yield lambda p=p, w=w, s=s: sinks_case(kvscope, m, p, 8, w, s)
        yield lambda p=p, w=w, s=s: sinks_case(kvscope, m, p, 8, w, s, chunk=3)
        yield lambda p=p, w=w, s=s: sinks_case(kvscope, m, p, 8, w, s, no_cache=True)
        yield lambda p=p, w=w, s=s: sinks_case(kvscope, m, p, 8, w, s, chunk=2, no_cache=False)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
