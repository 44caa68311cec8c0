#!/usr/bin/python3
"""Write a kvscope model folder (config.json + model.safetensors) with deterministic random weights.

    /usr/bin/python3 tools/make_model.py OUT_DIR [--vocab 300] [--n-embd 64] [--n-layer 2] [--n-head 4]
        [--n-positions 128] [--n-inner N|null] [--activation gelu_new|gelu|relu] [--no-qkv-bias]
        [--lm-head-bias] [--untied] [--norm pre|post] [--positions learned|sinusoidal]
        [--embedding-scale 8.0] [--no-final-ln] [--dtype F32|F16|BF16] [--prefix transformer.]
        [--with-buffers] [--hf-style] [--seed S] [--std 0.2]

Weights come from one torch.Generator seeded with --seed, drawn in a fixed order, so the same
arguments give the same bytes. They are large on purpose: matrices have std `--std` at fan-in 64
(scaled by sqrt(64 / fan_in)), layer-norm gains are 1 ± 0.1, so attention is far from uniform and
the best logit usually beats the second by a wide margin (greedy parity is then robust).

--with-buffers adds GPT-2's attention buffers h.{i}.attn.bias [1, 1, P, P] and h.{i}.attn.masked_bias []
that kvscope must ignore. --hf-style writes config.json the way Hugging Face does (model_type, n_ctx,
dropout keys...) and leaves out kvscope's extension keys that are at their defaults.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvscope_reference import safetensors_io  # noqa: E402

DEFAULTS = dict(vocab=300, n_embd=64, n_layer=2, n_head=4, n_positions=128, n_inner=None,
                activation="gelu_new", qkv_bias=True, lm_head_bias=False, untied=False, norm="pre",
                positions="learned", embedding_scale=1.0, final_ln=True, dtype="F32", prefix="",
                with_buffers=False, hf_style=False, seed=0, std=0.2)


def build(**kw):
    """-> (config dict, list of (name, tensor), per-tensor dtype dict). Keys as in DEFAULTS."""
    o = dict(DEFAULTS)
    unknown = set(kw) - set(o)
    if unknown:
        raise TypeError(f"unknown options {sorted(unknown)}")
    o.update(kw)
    V, C, L, P = o["vocab"], o["n_embd"], o["n_layer"], o["n_positions"]
    F = o["n_inner"] if o["n_inner"] is not None else 4 * C
    if C % o["n_head"] or C % 2:
        raise ValueError("n_embd must be even and divisible by n_head")
    g = torch.Generator().manual_seed(o["seed"])

    def mat(rows, cols):  # [rows, cols], rows = fan-in for Conv1D weights
        return torch.randn(rows, cols, generator=g) * (o["std"] * math.sqrt(64.0 / rows))

    def vec(n, scale=0.05):
        return torch.randn(n, generator=g) * scale

    def gain(n):
        return 1.0 + torch.randn(n, generator=g) * 0.1

    pre = o["prefix"]
    tensors = [(pre + "wte.weight", torch.randn(V, C, generator=g) * o["std"])]       # [V, C]
    if o["positions"] == "learned":
        tensors.append((pre + "wpe.weight", torch.randn(P, C, generator=g) * o["std"]))  # [P, C]
    buffers = []
    for il in range(L):
        p = f"{pre}h.{il}."
        tensors += [
            (p + "ln_1.weight", gain(C)), (p + "ln_1.bias", vec(C)),
            (p + "attn.c_attn.weight", mat(C, 3 * C)),                                    # [C, 3C]
        ]
        if o["qkv_bias"]:
            tensors.append((p + "attn.c_attn.bias", vec(3 * C, 0.1)))                    # [3C]
        tensors += [
            (p + "attn.c_proj.weight", mat(C, C)), (p + "attn.c_proj.bias", vec(C)),      # [C, C]
            (p + "ln_2.weight", gain(C)), (p + "ln_2.bias", vec(C)),
            (p + "mlp.c_fc.weight", mat(C, F)), (p + "mlp.c_fc.bias", vec(F, 0.1)),      # [C, F]
            (p + "mlp.c_proj.weight", mat(F, C)), (p + "mlp.c_proj.bias", vec(C)),        # [F, C]
        ]
        if o["with_buffers"]:
            buffers += [(p + "attn.bias", torch.tril(torch.ones(P, P)).view(1, 1, P, P)),
                        (p + "attn.masked_bias", torch.tensor(-1e4))]
    if o["final_ln"]:
        tensors += [(pre + "ln_f.weight", gain(C)), (pre + "ln_f.bias", vec(C))]
    if o["untied"]:
        tensors.append(("lm_head.weight", torch.randn(V, C, generator=g) * o["std"]))   # [V, C]
    if o["lm_head_bias"]:
        tensors.append(("lm_head.bias", vec(V, 0.5)))                                     # [V]
    # Buffers interleave with the weights of their layer, as in real checkpoints; they stay F32.
    all_tensors = tensors + buffers
    all_tensors.sort(key=lambda nt: _order_key(nt[0]))
    dtypes = {n: o["dtype"] for n, _ in all_tensors}
    for n, _ in buffers:
        dtypes[n] = "F32"

    config = {
        "vocab_size": V, "n_positions": P, "n_embd": C, "n_layer": L, "n_head": o["n_head"],
        "n_inner": o["n_inner"], "activation_function": o["activation"],
        "layer_norm_epsilon": 1e-5, "tie_word_embeddings": not o["untied"],
    }
    ext = {"qkv_bias": o["qkv_bias"], "lm_head_bias": o["lm_head_bias"], "norm_position": o["norm"],
           "position_embedding": o["positions"], "embedding_scale": o["embedding_scale"],
           "final_layer_norm": o["final_ln"]}
    ext_defaults = {"qkv_bias": True, "lm_head_bias": False, "norm_position": "pre",
                    "position_embedding": "learned", "embedding_scale": 1.0, "final_layer_norm": True}
    if o["hf_style"]:
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_ctx": P,
                  "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "bos_token_id": V - 1,
                  "eos_token_id": V - 1, "initializer_range": 0.02, **config}
        if not o["untied"]:
            del config["tie_word_embeddings"]  # HF leaves it out; the default is true
        ext = {k: v for k, v in ext.items() if v != ext_defaults[k]}
    config.update(ext)
    return config, all_tensors, dtypes


def _order_key(name):
    """File order: embeddings, then layers by index, then the rest (lm_head last)."""
    bare = name[len("transformer."):] if name.startswith("transformer.") else name
    if bare.startswith("h."):
        il = int(bare.split(".")[1])
        return (1, il, bare)
    return ({"wte.weight": 0, "wpe.weight": 0}.get(bare, 2), 0, bare)


def write(out_dir, **kw):
    config, tensors, dtypes = build(**kw)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    safetensors_io.write(os.path.join(out_dir, "model.safetensors"), tensors, dtypes,
                         metadata={"format": "pt", "generator": "tools/make_model.py"})
    return config


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--vocab", type=int, default=DEFAULTS["vocab"])
    ap.add_argument("--n-embd", type=int, default=DEFAULTS["n_embd"])
    ap.add_argument("--n-layer", type=int, default=DEFAULTS["n_layer"])
    ap.add_argument("--n-head", type=int, default=DEFAULTS["n_head"])
    ap.add_argument("--n-positions", type=int, default=DEFAULTS["n_positions"])
    ap.add_argument("--n-inner", default="null", help="an integer, or null for 4 * n_embd")
    ap.add_argument("--activation", choices=["gelu_new", "gelu", "relu"], default="gelu_new")
    ap.add_argument("--no-qkv-bias", dest="qkv_bias", action="store_false")
    ap.add_argument("--lm-head-bias", action="store_true")
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--norm", choices=["pre", "post"], default="pre")
    ap.add_argument("--positions", choices=["learned", "sinusoidal"], default="learned")
    ap.add_argument("--embedding-scale", type=float, default=1.0)
    ap.add_argument("--no-final-ln", dest="final_ln", action="store_false")
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    ap.add_argument("--prefix", default="", help='tensor name prefix, e.g. "transformer."')
    ap.add_argument("--with-buffers", action="store_true")
    ap.add_argument("--hf-style", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=DEFAULTS["std"])
    a = vars(ap.parse_args(argv))
    out_dir = a.pop("out_dir")
    a["vocab"] = a.pop("vocab")
    a["n_inner"] = None if a["n_inner"] in ("null", "none", "None") else int(a["n_inner"])
    return out_dir, a


if __name__ == "__main__":
    out, opts = parse_args(sys.argv[1:])
    write(out, **opts)
    print(out)
