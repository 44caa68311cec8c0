#!/usr/bin/python3
"""Parity group: the engine's features on Llama-family GQA folders (tools/make_llama_model.py), each
checked against an independent computation or an invariant between two different code paths:

  trace     --trace's k.npy / v.npy hold n_kv_head heads, as meta.json and trace.json say; layer 0's
            keys and values equal the reference's (embedding -> RMSNorm -> k/v_proj -> (k_norm) ->
            rotate-half at the row's position), so the cache stores keys after rotation; every head's
            weights.npy equals softmax of q.npy against the K/V head h / (H / K) of k.npy
  paged     --block-size / --share-prefix batches with a common prefix (shared blocks, a copy on
            write) equal each prompt's solo run, bit for bit, float32 and --dtype bf16
  prompt    --prompt-cache: a second run that loads the rows gives the first run's logits bit for bit;
  cache     a folder whose config.json differs in one key the forward pass reads is refused (exit 1,
            one line), nothing written
  example   assets/llama-gqa (tools/make_llama_example.py) against the reference; `heads` scores its
            L x H query heads; assets/chat (trained by tools/train_chat_model.sh: qwen3, a sliding layer of
            window 8, 8 query heads over 2 K/V heads) against the reference on prompts past its window

    llama_features.py --kvscope BIN --work DIR
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

from common import Failure, check_case, generate, main, prompt, reference_model, run_cli

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402

MODELS = {
    "gqa":       dict(heads=4, kv_heads=2, seed=30),
    "mqa_qwen3": dict(model_type="qwen3", heads=4, kv_heads=1, head_dim=12, seed=31),
    "gqa_llama3_bias": dict(heads=8, kv_heads=2, hidden=64, attention_bias=True, head_dim=16, seed=32,
                            rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                               "original_max_position_embeddings": 16}),
}


def model_dir(work, name):
    path = os.path.join(work, "models", name)
    make_llama_model.write(path, **MODELS[name])
    return path


def layer0_kv(ref, ids):
    """The reference's layer-0 keys (rotated) and values for `ids` at positions 0..T-1: [K, T, D] each."""
    cfg, w, K, D = ref.cfg, ref.w, ref.K, ref.D
    T = len(ids)
    p = "model.layers.0."
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    h = ref.rms_norm(x, w[p + "input_layernorm.weight"])
    k = ref.linear(h, p + "self_attn.k_proj", cfg["qkv_bias"]).view(T, K, D).transpose(0, 1)
    v = ref.linear(h, p + "self_attn.v_proj", cfg["qkv_bias"]).view(T, K, D).transpose(0, 1)
    if cfg["qk_norm"]:
        k = ref.rms_norm(k, w[p + "self_attn.k_norm.weight"])
    angles = torch.arange(T, dtype=ref.dtype)[:, None] * ref.inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    half = D // 2
    rotated = torch.cat((-k[..., half:], k[..., :half]), dim=-1)
    return k * emb.cos() + rotated * emb.sin(), v


def trace_case(kvscope, m, chunk):
    ref = reference_model(m)
    H, K, D, L = ref.H, ref.K, ref.D, ref.cfg["num_hidden_layers"]
    p = prompt(500, 7)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace")
        extra = ("--trace", out) + (("--prefill-chunk", str(chunk)) if chunk else ())
        obj, _, _ = generate(kvscope, m, [p], 3, extra=extra)
        ids = p + obj["generated_ids"]
        want_k, want_v = layer0_kv(ref, ids)                                             # [K, T, D]
        with open(os.path.join(out, "trace.json")) as f:
            tmodel = json.load(f)["model"]
        shape = {key: tmodel.get(key) for key in ("n_layer", "n_head", "n_kv_head", "head_dim")}
        if shape != {"n_layer": L, "n_head": H, "n_kv_head": K, "head_dim": D} or tmodel.get("layer_windows") != [0] * L:
            raise Failure(f"trace.json model is {tmodel}")
        steps = sorted(d for d in os.listdir(out) if d.startswith("step_"))
        n_checked = 0
        for step in steps:
            d = os.path.join(out, step)
            with open(os.path.join(d, "meta.json")) as f:
                meta = json.load(f)
            R, first = meta["n_rows_computed"], meta["first_computed_position"]
            if meta["model"]["n_kv_head"] != K:
                raise Failure(f"{step}: meta.json n_kv_head {meta['model']['n_kv_head']}, model has {K}")
            q, k, v = (np.load(os.path.join(d, n + ".npy")) for n in ("q", "k", "v"))
            if q.shape != (L, R, H * D) or k.shape != (L, R, K * D) or v.shape != (L, R, K * D):
                raise Failure(f"{step}: q {q.shape}, k {k.shape}, v {v.shape}; expected ({L}, {R}, {H * D}) and "
                              f"({L}, {R}, {K * D})")
            for r in range(R):
                pos = first + r
                got_k, got_v = k[0, r].reshape(K, D), v[0, r].reshape(K, D)
                gap = max(float(np.max(np.abs(got_k - want_k[:, pos].numpy()))),
                          float(np.max(np.abs(got_v - want_v[:, pos].numpy()))))
                if gap > 1e-5:
                    raise Failure(f"{os.path.basename(m)} {step}: layer 0 K/V of position {pos} differ from the "
                                  f"reference's rotated keys by {gap:.3g}")
            # Every head's weights from q.npy and the K/V head h / (H / K) of this step's and earlier keys.
            keys = {}  # position -> [L, K*D], from every step so far
            for s in steps[: steps.index(step) + 1]:
                with open(os.path.join(out, s, "meta.json")) as f:
                    m0 = json.load(f)["first_computed_position"]
                ks = np.load(os.path.join(out, s, "k.npy"))
                for r in range(ks.shape[1]):
                    keys[m0 + r] = ks[:, r]
            kpos = meta["key_positions"]
            for il in range(L):
                for h in range(H):
                    g = h // (H // K)
                    qh = q[il, :, h * D:(h + 1) * D].astype(np.float64)                    # [R, D]
                    kh = np.stack([keys[pp][il, g * D:(g + 1) * D] for pp in kpos]).astype(np.float64)  # [P, D]
                    mask = np.load(os.path.join(d, f"l{il:02d}_h{h:02d}_mask.npy")).astype(bool)
                    s_ = np.where(mask, qh @ kh.T / np.sqrt(D), -np.inf)
                    e = np.exp(s_ - s_.max(axis=1, keepdims=True))
                    want_w = e / e.sum(axis=1, keepdims=True)
                    got_w = np.load(os.path.join(d, f"l{il:02d}_h{h:02d}_weights.npy"))
                    if float(np.max(np.abs(got_w - want_w))) > 1e-5:
                        raise Failure(f"{os.path.basename(m)} {step} layer {il} head {h}: weights.npy is not softmax "
                                      f"of q against K/V head {g}")
                    n_checked += 1
    return (f"{os.path.basename(m)} --trace{f' chunk {chunk}' if chunk else ''}: k/v.npy hold {K} heads, layer 0 = "
            f"reference's rotated keys, {n_checked} maps = softmax(q, K/V head h/(H/K))")


def paged_sharing(kvscope, m, dtype):
    system = prompt(510, 9)
    prompts = [system + prompt(511 + i, 2 + i) for i in range(3)]
    extra = ("--dtype", dtype)
    obj, batch, _ = generate(kvscope, m, prompts, 5, extra=extra + ("--block-size", "4", "--share-prefix"))
    # Prompts 1 and 2 map the 9 common positions to prompt 0's blocks (the partly filled third block is
    # copied on write when they diverge): 2 x 9.
    if obj["kv"]["prefill_positions_shared"] != 2 * len(system) or obj["kv"]["copies_on_write"] < 1:
        raise Failure(f"{os.path.basename(m)} {dtype}: {obj['kv']['prefill_positions_shared']} prefill positions "
                      f"shared, {obj['kv']['copies_on_write']} copies on write; expected {2 * len(system)} and >= 1")
    for i, p in enumerate(prompts):
        _, solo, _ = generate(kvscope, m, [p], 5, extra=extra)
        if not np.array_equal(batch[i], solo.reshape(batch[i].shape)):
            raise Failure(f"{os.path.basename(m)} {dtype}: prompt {i} of a sharing paged batch differs from its solo "
                          f"run (max diff {float(np.max(np.abs(batch[i] - solo.reshape(batch[i].shape)))):.3g})")
    return f"{os.path.basename(m)} {dtype}: paged batch sharing a 9-token prefix = solo runs, bit for bit"


def prompt_cache(kvscope, m, work):
    name = os.path.basename(m)
    cache = os.path.join(work, name + ".kvcache")
    if os.path.exists(cache):
        os.remove(cache)
    p = prompt(520, 12)
    _, plain, _ = generate(kvscope, m, [p], 4)
    _, first, _ = generate(kvscope, m, [p], 4, extra=("--prompt-cache", cache))
    if not os.path.exists(cache):
        raise Failure(f"{name}: --prompt-cache wrote no file")
    obj, again, _ = generate(kvscope, m, [p + [7]], 4, extra=("--prompt-cache-ro", cache))
    loaded = obj["kv"]["prompt_cache"]["loaded_positions"]
    if loaded != len(p):
        raise Failure(f"{name}: the loading run took {loaded} positions from the file, expected {len(p)}")
    _, want, _ = generate(kvscope, m, [p + [7]], 4)
    for label, got, ref in (("writing run", first, plain), ("loading run", again, want)):
        if not np.array_equal(got, ref):
            raise Failure(f"{name}: the {label} differs from a run without the file "
                          f"(max diff {float(np.max(np.abs(got - ref))):.3g})")
    return f"{name}: --prompt-cache write and load = runs without it, bit for bit"


CONFIG_EDITS = {
    "rope_theta": lambda c: c.update(rope_theta=c["rope_theta"] * 2),
    "rope_scaling": lambda c: c.update(rope_scaling={"rope_type": "linear", "factor": 2.0}),
    "rms_norm_eps": lambda c: c.update(rms_norm_eps=1e-6),
    "hidden_act": lambda c: c.update(hidden_act="gelu_pytorch_tanh"),
    "max_position_embeddings": lambda c: c.update(max_position_embeddings=c["max_position_embeddings"] + 1),
}


def prompt_cache_refused(kvscope, work, key):
    src = model_dir(work, "gqa")
    cache = os.path.join(work, "gqa.kvcache")
    p = prompt(530, 10)
    if os.path.exists(cache):
        os.remove(cache)
    generate(kvscope, src, [p], 2, extra=("--prompt-cache", cache))
    before = open(cache, "rb").read()
    path = os.path.join(work, "edited", key)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(src, path)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    CONFIG_EDITS[key](cfg)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    out = os.path.join(work, "edited", key + ".npy")
    if os.path.exists(out):
        os.remove(out)
    rc, _, err = run_cli(kvscope, ["generate", "--model", path, "--prompt-ids", ",".join(map(str, p)),
                                   "--prompt-cache", cache, "--dump-logits", out])
    lines = err.strip().splitlines()
    if rc != 1 or len(lines) != 1 or "was made by another model" not in lines[0] or os.path.exists(out):
        raise Failure(f"prompt cache for another {key}: expected exit 1, one line 'was made by another model', "
                      f"nothing written; got exit {rc}, {err!r}")
    if open(cache, "rb").read() != before:
        raise Failure(f"prompt cache for another {key}: the refused file was changed")
    return f"prompt cache made before {key} changed: exit 1, {lines[0][:140]}"


ASSET = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "llama-gqa"))
CHAT = os.path.join(os.path.dirname(ASSET), "chat")


def heads_case(kvscope):
    """`heads` on the GQA example: one score pair per query head (L x H), not per K/V head."""
    ref = reference_model(ASSET)
    L, H = ref.cfg["num_hidden_layers"], ref.H
    rc, out, err = run_cli(kvscope, ["heads", "--model", ASSET, "--json"])
    if rc != 0:
        raise Failure(f"heads on {ASSET}: exit {rc}: {err.strip()}")
    heads = json.loads(out)["heads"]
    got = [(h["layer"], h["head"]) for h in heads]
    if got != [(il, h) for il in range(L) for h in range(H)]:
        raise Failure(f"heads on the GQA example lists {got}, expected every (layer, query head) of {L} x {H}")
    if not all(0.0 <= h[k] <= 1.0 for h in heads for k in ("previous_token", "induction")):
        raise Failure("heads: a score outside [0, 1]")
    return f"heads on assets/llama-gqa: {L} x {H} query heads scored (K/V heads: {ref.K})"


def cases(kvscope, work):
    yield lambda: check_case(kvscope, ASSET, [prompt(540, 9, vocab=768)], 8)
    yield lambda: check_case(kvscope, ASSET, [prompt(541, 12, vocab=768)], 6, chunk=5, no_cache=False)
    yield lambda: heads_case(kvscope)
    yield lambda: check_case(kvscope, CHAT, [prompt(542, 40, vocab=770)], 8)
    yield lambda: check_case(kvscope, CHAT, [prompt(543, 30, vocab=770)], 6, chunk=7, no_cache=False)
    for name in MODELS:
        m = model_dir(work, name)
        yield lambda m=m: trace_case(kvscope, m, None)
        yield lambda m=m: trace_case(kvscope, m, 3)
        for dtype in ("f32", "bf16"):
            yield lambda m=m, dtype=dtype: paged_sharing(kvscope, m, dtype)
        yield lambda m=m: prompt_cache(kvscope, m, work)
    for key in CONFIG_EDITS:
        yield lambda key=key: prompt_cache_refused(kvscope, work, key)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
