#!/usr/bin/python3
"""Parity group: Llama-family folders (tools/make_llama_model.py) against the Llama reference
(tools/kvscope_reference/llama.py), model_type llama, qwen2 and qwen3: GQA, MQA and full multi-head K/V, default / linear / llama3 rotary
frequencies, an explicit head_dim that is not hidden_size / heads, biases, tied embeddings, F16 and BF16
files; cached, --no-cache, chunked, windowed and batched runs. Then the classic mistakes, each switched
into the reference alone, must put kvscope outside the tolerance, so these cases would catch them.

    llama.py --kvscope BIN --work DIR
"""
import json
import os
import shutil
import sys

import numpy as np

import common
from common import TOL, Failure, trace_weights_gap, generate, main, prompt, reference_model, refused_config, check_case, run_cli

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
MODELS = {
    "gqa":          dict(heads=4, kv_heads=2),
    "mqa":          dict(heads=4, kv_heads=1, seed=1),
    "mha":          dict(heads=4, kv_heads=4, seed=2),
    "llama3_rope":  dict(heads=4, kv_heads=2, rope_theta=500000.0, rope_scaling=LLAMA3, seed=3),
    "linear_rope":  dict(heads=4, kv_heads=2, rope_scaling={"rope_type": "linear", "factor": 4.0}, seed=4),
    "head_dim_12":  dict(heads=4, kv_heads=2, head_dim=12, seed=5),
    "bias_tied":    dict(heads=4, kv_heads=2, attention_bias=True, mlp_bias=True, tied=True, seed=6),
    "gelu_tanh_3_layers": dict(heads=8, kv_heads=2, hidden=64, layers=3, act="gelu_pytorch_tanh", seed=7),
    "f16":          dict(heads=4, kv_heads=2, dtype="F16", seed=8),
    "qwen2":        dict(model_type="qwen2", heads=4, kv_heads=2, tied=True, seed=10),
    "qwen2_mqa_bf16": dict(model_type="qwen2", heads=4, kv_heads=1, dtype="BF16", seed=11),
    "qwen3":        dict(model_type="qwen3", heads=4, kv_heads=2, head_dim=12, seed=12),
    "qwen3_bias_tied": dict(model_type="qwen3", heads=4, kv_heads=1, attention_bias=True, tied=True, seed=13),
    "bf16":         dict(heads=4, kv_heads=1, dtype="BF16", seed=9),
}
MUTATIONS = ("interleaved", "modulo", "weight_first")


def model_dir(work, name):
    path = os.path.join(work, "models", name)
    make_llama_model.write(path, **MODELS[name])
    return path


def mutant_differs(kvscope, m, p, mutation):
    """kvscope's logits must lie outside the tolerance of a reference with `mutation` switched in."""
    obj, logits, _ = generate(kvscope, m, [p], 1)
    ref = reference_model(m)
    ref.mutation = mutation
    try:
        want = ref.forward(p)[-1].numpy()
    finally:
        ref.mutation = None
    gap = float(np.max(np.abs(logits[0].astype(np.float64) - want)))
    if gap <= 10 * TOL:
        raise Failure(f"{os.path.basename(m)}: a reference with the mistake {mutation!r} agrees with kvscope "
                      f"(max diff {gap:.3g}): this group would not catch it")
    return f"{os.path.basename(m)} mistake {mutation!r} would be caught (max diff {gap:.3g})"


def bit_identical(kvscope, m, p):
    """Cached, --no-cache, chunked and batched runs give the same float32 logits bit for bit."""
    _, base, _ = generate(kvscope, m, [p], 6)
    runs = {"no-cache": generate(kvscope, m, [p], 6, no_cache=True)[1],
            "chunk 1": generate(kvscope, m, [p], 6, chunk=1)[1],
            "chunk 4": generate(kvscope, m, [p], 6, chunk=4)[1],
            "batched": generate(kvscope, m, [prompt(350, 3), p], 6)[1][1]}
    for label, got in runs.items():
        if not np.array_equal(got.reshape(base.shape), base):
            raise Failure(f"{os.path.basename(m)}: {label} logits differ from the cached run's "
                          f"(max diff {float(np.max(np.abs(got.reshape(base.shape) - base))):.3g})")
    return f"{os.path.basename(m)} cached = no-cache = chunked = batched, bit for bit"


def with_sinks(kvscope, m, p, window, sinks, positions="text"):
    """--window with --sinks against the reference's banded mask plus the first `sinks` positions; with
    positions "cache", against the reference's StreamingLLM numbering, which must differ from text's."""
    ref = reference_model(m)
    want = []
    seq = list(p)
    ref.sinks, ref.sink_positions = sinks, positions
    try:
        for _ in range(6):
            row = ref.forward(seq, window)[-1]
            want.append(row.numpy())
            seq.append(int(row.argmax()))
    finally:
        ref.sinks, ref.sink_positions = 0, "text"
    label = f"{os.path.basename(m)} window={window} sinks={sinks} sink positions {positions}"
    extra_positions = ("--sink-positions", positions) if positions != "text" else ()
    for extra in ((), ("--no-cache",), ("--prefill-chunk", "3"), ("--block-size", "4")):
        obj, logits, _ = generate(kvscope, m, [p], 6, window=window,
                                  extra=("--sinks", str(sinks)) + extra_positions + extra)
        if obj["generated_ids"] != seq[len(p):]:
            raise Failure(f"{label} {extra}: ids {obj['generated_ids']}, reference {seq[len(p):]}")
        gap = float(np.max(np.abs(logits.astype(np.float64) - np.array(want))))
        if gap > TOL * max(1.0, float(np.max(np.abs(want)))):
            raise Failure(f"{label} {extra}: logits off by {gap:.3g}")
        if obj["settings"]["sink_positions"] != positions:
            raise Failure(f"{label} {extra}: settings say sink_positions {obj['settings']['sink_positions']!r}")
    if positions == "cache":  # the numbering must matter here, or this case shows nothing
        _, text_logits, _ = generate(kvscope, m, [p], 6, window=window, extra=("--sinks", str(sinks)))
        gap = float(np.max(np.abs(text_logits.astype(np.float64)[:len(want)] - np.array(want))))
        if gap <= 10 * TOL:
            raise Failure(f"{label}: text positions agree with the cache numbering (max diff {gap:.3g})")
    return f"{label}: cached, no-cache, chunked, paged = reference"


def cache_numbered_trace(kvscope, m, work):
    """--trace under --sink-positions cache: the exported weights of a 12-token prefill (window 4, 2 sinks)
    equal the reference's StreamingLLM softmax in every layer and head, so the views show what ran."""
    p = prompt(362, 12)
    folder = os.path.join(work, "trace_sinks_cache")
    shutil.rmtree(folder, ignore_errors=True)
    rc, _, err = run_cli(kvscope, ["generate", "--model", m, "--prompt-ids", ",".join(map(str, p)), "--max-new-tokens",
                                   "1", "--window", "4", "--sinks", "2", "--sink-positions", "cache", "--trace", folder])
    if rc != 0:
        raise Failure(f"--trace: exit {rc} {err}")
    ref = reference_model(m)
    ref.sinks, ref.sink_positions, ref.attention_record = 2, "cache", []
    try:
        ref.forward(p, 4)
        want = ref.attention_record
    finally:
        ref.sinks, ref.sink_positions, ref.attention_record = 0, "text", None
    worst = trace_weights_gap(folder, want, "sink positions cache")
    if worst > 1e-5:
        raise Failure(f"--trace weights under sink positions cache differ from the reference by {worst:.3g}")
    with open(os.path.join(folder, "step_0000", "meta.json")) as f:
        mask = json.load(f)["mask"]
    if mask.get("sink_positions") != "cache":
        raise Failure(f"meta.json mask says sink_positions {mask.get('sink_positions')!r}")
    return f"{os.path.basename(m)} --trace weights under sink positions cache = reference (max diff {worst:.2g})"


def logit_lens_trace(kvscope, m, work):
    """--trace's residual.npy equals the reference's residual stream entering each layer and leaving the
    last, and logit_lens.json's top tokens at every depth equal the reference's final norm and output
    layer applied to its own residuals (softmax probabilities within the tolerance)."""
    import torch
    p = prompt(370, 10)
    folder = os.path.join(work, "trace_logit_lens_" + os.path.basename(m))
    shutil.rmtree(folder, ignore_errors=True)
    rc, _, err = run_cli(kvscope, ["generate", "--model", m, "--prompt-ids", ",".join(map(str, p)), "--max-new-tokens",
                                   "1", "--trace", folder])
    if rc != 0:
        raise Failure(f"--trace: exit {rc} {err}")
    ref = reference_model(m)
    ref.residual_record = []
    try:
        ref.forward(p)
        want = torch.stack(ref.residual_record).numpy()                      # [L + 1, T, C]
    finally:
        ref.residual_record = None
    got = np.load(os.path.join(folder, "step_0000", "residual.npy"))        # (L + 1, R, C)
    if got.shape != want.shape:
        raise Failure(f"residual.npy has shape {got.shape}, the reference {want.shape}")
    gap = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
    if gap > TOL:
        raise Failure(f"residual.npy differs from the reference's residual stream by {gap:.3g}")
    with open(os.path.join(folder, "step_0000", "logit_lens.json")) as f:
        lens = json.load(f)
    w = ref.w
    head = w["model.embed_tokens.weight"] if ref.cfg["tie_word_embeddings"] else w["lm_head.weight"]
    worst = 0.0
    for d, depth in enumerate(lens["depths"]):
        x = torch.from_numpy(want[d, -1:].copy()).to(head.dtype)
        probs = torch.softmax(ref.rms_norm(x, w["model.norm.weight"]) @ head.T, dim=-1)[0].double().numpy()
        top = [t["id"] for t in depth["top"]]
        order = np.argsort(-probs)
        if top[0] != int(order[0]) and probs[order[0]] - probs[order[1]] > 2 * TOL:
            raise Failure(f"logit lens depth {d}: top token {top[0]}, the reference's {int(order[0])}")
        worst = max(worst, max(abs(t["probability"] - probs[t["id"]]) for t in depth["top"]))
    if worst > TOL:
        raise Failure(f"logit lens probabilities differ from the reference's by {worst:.3g}")
    return (f"{os.path.basename(m)} --trace residual stream = reference (max rel diff {gap:.2g}), logit lens at "
            f"{len(lens['depths'])} depths = reference (max prob diff {worst:.2g})")


def sink_positions_refused(kvscope, m, gpt2):
    """--sink-positions: a bad value, cache without sinks, and cache on learned positions exit 2."""
    checks = [([ "--model", m, "--sink-positions", "middle", "--window", "4", "--sinks", "2"], "must be text or cache"),
              (["--model", m, "--sink-positions", "cache", "--window", "4"], "give --window and --sinks"),
              (["--model", gpt2, "--sink-positions", "cache", "--window", "4", "--sinks", "2"], "need rotary positions")]
    for args, expect in checks:
        rc, _, err = run_cli(kvscope, ["generate", "--prompt-ids", "1,2,3", "--max-new-tokens", "2"] + args)
        if rc != 2 or expect not in err or len(err.strip().splitlines()) != 1:
            raise Failure(f"{args}: exit {rc}, {err!r}; want exit 2 and one line with {expect!r}")
    return "--sink-positions: a bad value, no sinks, learned positions: exit 2 with one line each"


def bad_config(kvscope, work, label, edit, expect):
    return refused_config(kvscope, os.path.join(work, "models", "gqa"), work, label, edit, expect)


def too_long(kvscope, m):
    rc, _, err = run_cli(kvscope, ["generate", "--model", m, "--prompt-ids", ",".join(["1"] * 120),
                                   "--max-new-tokens", "20"])
    if rc != 2 or "max_position_embeddings" not in err:
        raise Failure(f"a request beyond max_position_embeddings: exit {rc}, {err!r}")
    return "beyond max_position_embeddings: exit 2, " + err.strip()


def cases(kvscope, work):
    for i, name in enumerate(MODELS):
        m = model_dir(work, name)
        p = prompt(300 + i, 9, vocab=300)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 10)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 10, no_cache=True)
    for name in ("gqa", "mqa", "llama3_rope", "head_dim_12", "qwen2", "qwen3"):
        m = model_dir(work, name)
        p = prompt(320, 11, vocab=300)
        for c in (1, 3, 64):
            yield lambda m=m, p=p, c=c: check_case(kvscope, m, [p], 8, chunk=c)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, window=4)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, window=4, chunk=3)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, window=4, no_cache=True)
        yield lambda m=m: check_case(kvscope, m, [prompt(330, 5), prompt(331, 12), prompt(332, 1)], 6)
    for name in ("gqa", "mqa", "head_dim_12", "bf16"):
        m = model_dir(work, name)
        yield lambda m=m: bit_identical(kvscope, m, prompt(345, 10))
    for name in ("gqa", "mqa", "llama3_rope"):
        m = model_dir(work, name)
        yield lambda m=m: with_sinks(kvscope, m, prompt(360, 12), 4, 2)
    for name in ("gqa", "llama3_rope", "qwen2", "qwen3"):
        m = model_dir(work, name)
        yield lambda m=m: with_sinks(kvscope, m, prompt(361, 12), 4, 2, positions="cache")
    yield lambda: cache_numbered_trace(kvscope, model_dir(work, "gqa"), work)
    for name in ("gqa", "head_dim_12", "bias_tied"):
        yield lambda name=name: logit_lens_trace(kvscope, model_dir(work, name), work)
    yield lambda: sink_positions_refused(kvscope, model_dir(work, "gqa"), common.model_dir(work, "f16"))
    model_dir(work, "gqa")
    yield lambda: bad_config(kvscope, work, "unknown_model_type",
                             lambda c: c.update(model_type="falcon"), 'model_type "falcon" is not supported')
    yield lambda: bad_config(kvscope, work, "yarn_rope", lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
                             'rope_scaling type "yarn" is not supported')
    yield lambda: bad_config(kvscope, work, "heads_not_divisible", lambda c: c.update(num_key_value_heads=3),
                             "not divisible by num_key_value_heads")
    yield lambda: too_long(kvscope, model_dir(work, "gqa"))
    for name in ("gqa", "llama3_rope"):
        m = model_dir(work, name)
        p = prompt(340, 12)
        for mutation in MUTATIONS:
            yield lambda m=m, p=p, mutation=mutation: mutant_differs(kvscope, m, p, mutation)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
