#!/usr/bin/python3
"""Parity group: how Llama-family weights are stored. Sharded checkpoints (model.safetensors.index.json
+ shards, tools/make_llama_model.py --shards N) and F16 / BF16 files against the reference
(tools/kvscope_reference/llama.py reads the same rounded weights), with and without --dtype bf16; then
broken sharded folders, each refused with one line, exit 1, nothing written.

    llama_checkpoints.py --kvscope BIN --work DIR
"""
import json
import os
import shutil
import sys

import numpy as np

from common import Failure, check_case, generate, main, make_model, prompt, reference_model, refused_folder, run_cli

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402
from kvscope_reference import safetensors_io  # noqa: E402

INDEX = safetensors_io.INDEX_NAME
MODELS = {
    "sharded":          dict(heads=4, kv_heads=2, shards=3, seed=20),
    "single":           dict(heads=4, kv_heads=2, shards=1, seed=20),   # the same tensors in one file
    "sharded_qwen3_bf16": dict(model_type="qwen3", heads=4, kv_heads=1, head_dim=12, dtype="BF16", shards=4,
                               tied=True, seed=21),
    "sharded_f16_bias": dict(heads=4, kv_heads=2, attention_bias=True, mlp_bias=True, dtype="F16", shards=2, seed=22),
    "f16_mqa":          dict(heads=4, kv_heads=1, dtype="F16", seed=23),
    "bf16_gqa":         dict(heads=8, kv_heads=2, hidden=64, dtype="BF16", seed=24),
    "bf16_qwen2":       dict(model_type="qwen2", heads=4, kv_heads=2, dtype="BF16", seed=25),
}
LOW_PRECISION_TOL = 1e-3  # F16/BF16 files: the reference reads the same rounded weights


def model_dir(work, name):
    path = os.path.join(work, "models", name)
    make_llama_model.write(path, **MODELS[name])
    return path


def sharded_equals_single(kvscope, work):
    """The same tensors split over three shards or in one file: identical logits, bit for bit."""
    p = prompt(400, 10)
    _, a, _ = generate(kvscope, model_dir(work, "sharded"), [p], 6)
    _, b, _ = generate(kvscope, model_dir(work, "single"), [p], 6)
    if not np.array_equal(a, b):
        raise Failure(f"sharded and single-file folders differ (max diff {float(np.max(np.abs(a - b))):.3g})")
    return "3 shards = model.safetensors, bit for bit"


def gpt2_sharded(kvscope, work):
    """A GPT-2 folder ("transformer."-prefixed, with buffers, mixed dtypes) split over shards reads as the
    single file does: the checkpoint is the family-independent layer under both name maps."""
    config, tensors, dtypes = make_model.build(prefix="transformer.", with_buffers=True, hf_style=True, untied=True,
                                               seed=40)
    single, sharded = os.path.join(work, "models", "gpt2_single"), os.path.join(work, "models", "gpt2_sharded")
    for d in (single, sharded):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
    safetensors_io.write(os.path.join(single, "model.safetensors"), tensors, dtypes)
    safetensors_io.write_sharded(sharded, tensors, 4, dtypes)
    p = prompt(440, 8)
    _, a, _ = generate(kvscope, single, [p], 5)
    _, b, _ = generate(kvscope, sharded, [p], 5)
    if not np.array_equal(a, b):
        raise Failure(f"GPT-2: 4 shards and one file differ (max diff {float(np.max(np.abs(a - b))):.3g})")
    check_case(kvscope, sharded, [p], 5)
    return "GPT-2 (transformer.-prefixed, buffers): 4 shards = model.safetensors bit for bit, = reference"


def too_long(kvscope, work):
    """A request beyond max_position_embeddings (128) on a sharded folder: exit 2, one line, refused before
    any work: neither the logits file nor the trace folder exists afterwards."""
    m = model_dir(work, "sharded")
    out, trace = os.path.join(work, "too_long.npy"), os.path.join(work, "too_long_trace")
    shutil.rmtree(trace, ignore_errors=True)
    if os.path.exists(out):
        os.remove(out)
    rc, _, err = run_cli(kvscope, ["generate", "--model", m, "--prompt-ids", ",".join(["5"] * 120), "--max-new-tokens",
                                   "9", "--dump-logits", out, "--trace", trace])
    lines = err.strip().splitlines()
    if rc != 2 or len(lines) != 1 or "max_position_embeddings" not in lines[0] or os.path.exists(out) or os.path.exists(trace):
        raise Failure(f"120 + 9 positions of 128: expected exit 2, one line naming max_position_embeddings, nothing "
                      f"written; got exit {rc}, {err!r}, logits {os.path.exists(out)}, trace {os.path.exists(trace)}")
    return "120 + 9 positions of 128: exit 2, " + lines[0]


def inspect_sharded(kvscope, work):
    """inspect --json names the shards it read and counts their bytes."""
    m = model_dir(work, "sharded")
    rc, out, err = run_cli(kvscope, ["inspect", "--model", m, "--json"])
    if rc != 0:
        raise Failure(f"inspect on a sharded folder: exit {rc}: {err.strip()}")
    info = json.loads(out)
    shards = [safetensors_io.shard_name(i, 3) for i in range(3)]
    size = sum(os.path.getsize(os.path.join(m, s)) for s in shards)
    if info["weight_files"] != shards or not info["sharded"] or info["file_bytes"] != size:
        raise Failure(f"inspect --json: weight_files {info['weight_files']}, sharded {info['sharded']}, "
                      f"file_bytes {info['file_bytes']}; expected {shards}, true, {size}")
    return f"inspect --json: 3 shards, {size} bytes"


def bf16_in_place(kvscope, m, p):
    """--dtype bf16 on a BF16 file: greedy ids and logits within 1e-3 of the reference with its K/V
    rounded to bfloat16 as the cache stores them, and inspect says the matrices were not converted at
    load (the file's bytes are used in place)."""
    obj, logits, _ = generate(kvscope, m, [p], 6, extra=("--dtype", "bf16"))
    ref = reference_model(m)
    seq, want = list(p), []
    ref.kv_bf16 = True
    try:
        for _ in range(6):
            row = ref.forward(seq)[-1]
            want.append(row.numpy())
            seq.append(int(row.argmax()))
    finally:
        ref.kv_bf16 = False
    if obj["generated_ids"] != seq[len(p):]:
        raise Failure(f"{os.path.basename(m)} --dtype bf16: ids {obj['generated_ids']}, reference {seq[len(p):]}")
    gap = float(np.max(np.abs(logits.astype(np.float64) - np.array(want))))
    if gap > LOW_PRECISION_TOL * max(1.0, float(np.max(np.abs(want)))):
        raise Failure(f"{os.path.basename(m)} --dtype bf16: logits off by {gap:.3g}")
    rc, out, err = run_cli(kvscope, ["inspect", "--model", m, "--dtype", "bf16", "--json"])
    if rc != 0:
        raise Failure(f"inspect --dtype bf16: exit {rc}: {err.strip()}")
    info = json.loads(out)
    # Only the norm weights and biases (float32 in compute) are widened, 4 bytes per element; the
    # matrices (embeddings, *_proj, lm_head) are the file's bfloat16 bytes, copied as they are.
    def is_matrix(name):
        return name.endswith("proj.weight") or name in ("model.embed_tokens.weight", "lm_head.weight")
    want = sum(4 * int(np.prod(t["shape"])) for t in info["tensors"] if not is_matrix(t["name"]))
    if info["converted_bytes"] != want:
        raise Failure(f"{os.path.basename(m)} --dtype bf16: {info['converted_bytes']} bytes converted at load, "
                      f"expected {want} (norms and biases only): a matrix was converted instead of used as stored")
    return (f"{os.path.basename(m)} --dtype bf16: ids = reference, logits within {gap:.2g}; "
            f"{want} bytes converted (norms, biases), {info['matrix_bytes']} bytes of matrices as stored")


def broken_shards(kvscope, work, label, edit, expect):
    """A sharded folder with one fault: exit 1, one line containing `expect`, nothing written."""
    return refused_folder(kvscope, model_dir(work, "sharded"), work, label, edit, expect)


def edit_index(path, change):
    with open(os.path.join(path, INDEX)) as f:
        index = json.load(f)
    change(index["weight_map"])
    with open(os.path.join(path, INDEX), "w") as f:
        json.dump(index, f)


def move_tensor(path, name, to_shard, keep_source):
    """Rewrite the shards so tensor `name` sits in `to_shard` (and stays in its own when keep_source)."""
    with open(os.path.join(path, INDEX)) as f:
        weight_map = json.load(f)["weight_map"]
    source = weight_map[name]
    for shard in sorted(set(weight_map.values())):
        tensors, dtypes, meta = safetensors_io.read(os.path.join(path, shard))
        items = list(tensors.items())
        if shard == source and not keep_source:
            items = [(n, t) for n, t in items if n != name]
        if shard == to_shard:
            src, _, _ = safetensors_io.read(os.path.join(path, source))
            items.append((name, src[name]))
        safetensors_io.write(os.path.join(path, shard), items, "F32", meta)


def cases(kvscope, work):
    for i, name in enumerate(MODELS):
        m = model_dir(work, name)
        p = prompt(410 + i, 9)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, no_cache=True)
    for name in ("sharded", "sharded_qwen3_bf16"):
        m = model_dir(work, name)
        yield lambda m=m: check_case(kvscope, m, [prompt(420, 11)], 6, chunk=3)
        yield lambda m=m: check_case(kvscope, m, [prompt(421, 4), prompt(422, 9)], 5)
    yield lambda: sharded_equals_single(kvscope, work)
    yield lambda: inspect_sharded(kvscope, work)
    yield lambda: gpt2_sharded(kvscope, work)
    yield lambda: too_long(kvscope, work)
    for name in ("bf16_gqa", "bf16_qwen2", "sharded_qwen3_bf16"):
        yield lambda name=name: bf16_in_place(kvscope, model_dir(work, name), prompt(430, 8))

    shard1, shard2 = safetensors_io.shard_name(0, 3), safetensors_io.shard_name(1, 3)
    yield lambda: broken_shards(kvscope, work, "missing_shard", lambda d: os.remove(os.path.join(d, shard2)),
                                shard2 + ": is missing")
    yield lambda: broken_shards(kvscope, work, "tensor_in_two_shards",
                                lambda d: move_tensor(d, "model.norm.weight", shard1, keep_source=True),
                                '"model.norm.weight" is in two shards')
    yield lambda: broken_shards(kvscope, work, "tensor_not_in_index",
                                lambda d: edit_index(d, lambda m: m.pop("model.norm.weight")),
                                "which model.safetensors.index.json does not list")
    yield lambda: broken_shards(kvscope, work, "tensor_in_another_shard",
                                lambda d: move_tensor(d, "model.norm.weight", shard1, keep_source=False),
                                "which the index puts in")
    yield lambda: broken_shards(kvscope, work, "listed_but_absent",
                                lambda d: edit_index(d, lambda m: m.update({"model.extra.weight": shard1})),
                                "does not hold tensor \"model.extra.weight\"")
    yield lambda: broken_shards(kvscope, work, "shard_outside_folder",
                                lambda d: edit_index(d, lambda m: m.update({"model.norm.weight": "../" + shard1})),
                                "is not a file name in the model folder")
    yield lambda: broken_shards(kvscope, work, "absolute_shard",
                                lambda d: edit_index(d, lambda m: m.update({"model.norm.weight": "/etc/passwd"})),
                                "is not a file name in the model folder")
    yield lambda: broken_shards(kvscope, work, "index_not_json",
                                lambda d: open(os.path.join(d, INDEX), "w").write("{\"weight_map\": "),
                                "model.safetensors.index.json: is not valid JSON")
    yield lambda: broken_shards(kvscope, work, "missing_tensor",
                                lambda d: move_tensor(d, "model.norm.weight", shard1, keep_source=False) or
                                edit_index(d, lambda m: m.pop("model.norm.weight")) or
                                safetensors_io.write(os.path.join(d, shard1),
                                                     [(n, t) for n, t in safetensors_io.read(os.path.join(d, shard1))[0].items()
                                                      if n != "model.norm.weight"], "F32"),
                                "tensor model.norm.weight is missing")


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
