#!/usr/bin/python3
"""Parity group: encoder-decoder models (assets/README.md's format) in every architecture variant,
through `kvscope generate --source-ids`, against tools/kvscope_reference/encoder_decoder.py in float64
(written from document 002's text; it shares no code with kvscope). Tokens exact, logits within TOL.

    encoder_decoder.py --kvscope BIN --work DIR

Variants flip every key the format reads: post/pre-LN, sinusoidal/learned positions, embedding scale,
tied/untied output (with and without its bias), final norms, q/k/v biases, activation, F32 and BF16
storage. Each runs cached, --no-cache, with a decoder prompt prefilled in chunks, as a ragged batch of
two decoder prompts over one source, and with --dtype bf16 (tokens exact, logits within 0.05 here).
"""
import json
import math
import os
import sys

import numpy as np
import torch

from common import TOOLS, TOL, Failure, first_mismatches, generate, main, prompt  # noqa: F401

sys.path.insert(0, TOOLS)
import make_seed_models as seeds  # noqa: E402
from kvscope_reference import safetensors_io  # noqa: E402
from kvscope_reference.encoder_decoder import EncoderDecoder, greedy  # noqa: E402

VARIANTS = {
    "shipped_like": {},
    "pre_learned_untied": {"norm_position": "pre", "position_embedding": "learned", "tie_word_embeddings": False,
                           "lm_head_bias": True, "final_layer_norm": True, "embedding_scale": 1.0,
                           "activation_function": "gelu_new"},
    "no_qkv_bias_gelu": {"qkv_bias": False, "activation_function": "gelu", "n_encoder_layer": 3, "n_layer": 1,
                         "n_inner": 96},
}


def write_variant(work, name, dtype):
    cfg = seeds.encoder_decoder_config()
    cfg.update(VARIANTS[name])
    cfg["torch_dtype"] = "float32"
    folder = os.path.join(work, "models", f"{name}_{dtype.lower()}")
    os.makedirs(folder, exist_ok=True)
    tensors = [(n, t.to(torch.bfloat16).to(torch.float32)) for n, t in seeds.encoder_decoder_tensors(cfg, seed=77)]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    safetensors_io.write(os.path.join(folder, "model.safetensors"), tensors, dtype)
    return folder


def compare(desc, got_ids, got_logits, want, tol):
    want_ids, want_rows = want
    if got_ids != want_ids:
        raise Failure(f"{desc}: tokens {got_ids} vs reference {want_ids}")
    n_bad, lines = first_mismatches(got_logits.astype(np.float64), want_rows.numpy()) if tol == TOL else (0, [])
    d = float(np.abs(got_logits.astype(np.float64) - want_rows.numpy()).max())
    if n_bad or d > tol:
        raise Failure(f"{desc}: logits off (max |diff| {d:.3g}, tolerance {tol}):\n" + "\n".join(lines))
    return f"{desc}: tokens equal, max |diff| {d:.2g}"


def case(kvscope, folder, ref, source, prompts, n, no_cache=False, chunk=None, extra=(), tol=TOL):
    want = [greedy(ref, source, p, n) for p in prompts]
    args = ("--source-ids", ",".join(map(str, source))) + tuple(extra)
    obj, logits, _ = generate(kvscope, folder, [p for p in prompts if p], n, None, chunk, no_cache, args)
    got = obj["generated_ids"]
    if len(prompts) == 1:
        got, logits = [got], logits.reshape(1, n, -1)
    desc = (f"{os.path.basename(folder)} source {len(source)} prompts {[len(p) for p in prompts]}"
            f"{' no-cache' if no_cache else ''}{f' chunk {chunk}' if chunk else ''} {' '.join(extra)}")
    return "; ".join(compare(desc if b == 0 else f"  prompt {b}", got[b], logits[b], want[b], tol)
                     for b in range(len(prompts)))


def cases(kvscope, work):
    for name in VARIANTS:
        for dtype in ("F32", "BF16"):
            folder = write_variant(work, name, dtype)
            ref = EncoderDecoder(folder, torch.float64)
            src = prompt(900 + len(name), 9, vocab=700)
            p1, p2 = prompt(901, 5, vocab=700), prompt(902, 2, vocab=700)
            yield lambda f=folder, r=ref, s=src: case(kvscope, f, r, s, [[]], 10)
            yield lambda f=folder, r=ref, s=src: case(kvscope, f, r, s, [[]], 10, no_cache=True)
            yield lambda f=folder, r=ref, s=src, p=p1: case(kvscope, f, r, s, [p], 8, chunk=2)
            yield lambda f=folder, r=ref, s=src, p=p1: case(kvscope, f, r, s, [p], 8, no_cache=True, chunk=3)
            yield lambda f=folder, r=ref, s=src, a=p1, b=p2: case(kvscope, f, r, s, [a, b], 6)
            if dtype == "F32":
                yield lambda f=folder, r=ref, s=src: case(kvscope, f, r, s, [[]], 8, extra=("--dtype", "bf16"), tol=0.05)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
