#!/usr/bin/python3
"""Write a random-weight Llama-family model folder the way Hugging Face ships one.

config.json with LlamaForCausalLM keys, model.safetensors with HF tensor names in nn.Linear [out, in]
layout. No tokenizer files: drive it with --prompt-ids. Shapes of real checkpoints are presets
(--shape smollm2-135m); tests use tiny ones.

    make_llama_model.py OUT_DIR [--heads 4 --kv-heads 2 --head-dim 16 ...] [--shape smollm2-135m] [--shards 3]

--shards N writes model.safetensors.index.json and N shard files (model-0000i-of-0000N.safetensors)
instead of model.safetensors, as save_pretrained does for large models.
"""
import argparse
import json
import os
import re
import sys

try:
    import torch
except ImportError:
    sys.exit("error: make_llama_model.py needs PyTorch: run it as tools/make_llama_model.py (its first line names "
             "/usr/bin/python3, which has Debian's python3-torch) or install python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvscope_reference import safetensors_io  # noqa: E402

DEFAULTS = dict(vocab=300, hidden=32, inner=64, layers=2, heads=4, kv_heads=2, head_dim=None,
                positions=128, rope_theta=10000.0, rope_scaling=None, tied=False, attention_bias=False,
                mlp_bias=False, eps=1e-5, dtype="F32", seed=0, shards=1, std=0.3, act="silu", model_type="llama",
                # windows: Mistral's sliding_window; Qwen2/Qwen3 with use_sliding_window and
                # max_window_layers; Gemma 3's sliding_window with layer_types or sliding_window_pattern
                sliding_window=None, max_window_layers=None, layer_types=None, sliding_window_pattern=None,
                # Gemma 3
                query_pre_attn_scalar=None, rope_local_base_freq=10000.0, final_logit_softcapping=None)

SHAPES = {
    "smollm2-135m": dict(vocab=49152, hidden=576, inner=1536, layers=30, heads=9, kv_heads=3, positions=8192,
                         rope_theta=100000.0, tied=True, std=0.02),
    "qwen2.5-0.5b": dict(model_type="qwen2", vocab=151936, hidden=896, inner=4864, layers=24, heads=14, kv_heads=2,
                         positions=32768, rope_theta=1000000.0, tied=True, eps=1e-6, std=0.02),
    "llama-tiny-gqa": dict(vocab=512, hidden=64, inner=128, layers=2, heads=4, kv_heads=2, positions=256),
    "gemma-3-270m": dict(model_type="gemma3_text", vocab=262144, hidden=640, inner=2048, layers=18, heads=4,
                         kv_heads=1, head_dim=256, positions=32768, rope_theta=1000000.0, tied=True, eps=1e-6,
                         std=0.02, sliding_window=512, query_pre_attn_scalar=256, act="gelu_pytorch_tanh",
                         layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                      for i in range(18)]),
    "gemma3-tiny": dict(model_type="gemma3_text", vocab=300, hidden=32, inner=64, layers=6, heads=4, kv_heads=1,
                        head_dim=16, positions=128, rope_theta=1000000.0, tied=True, sliding_window=4,
                        sliding_window_pattern=3, query_pre_attn_scalar=24, act="gelu_pytorch_tanh"),
}


def build(**kw):
    o = dict(DEFAULTS)
    o.update(kw)
    g = torch.Generator().manual_seed(o["seed"])
    V, C, F, L, H, K = o["vocab"], o["hidden"], o["inner"], o["layers"], o["heads"], o["kv_heads"]
    D = o["head_dim"] or C // H
    std = o["std"]
    qwen2 = o["model_type"] == "qwen2"  # Qwen2: q, k, v biases always, o never, no attention_bias key
    qwen3 = o["model_type"] == "qwen3"  # Qwen3: q_norm / k_norm per head
    gemma = o["model_type"] == "gemma3_text"  # Gemma 3: q_norm / k_norm, four norms per layer
    qkv_bias, o_bias = o["attention_bias"] or qwen2, o["attention_bias"] and not qwen2

    def mat(out, inp):  # nn.Linear weight [out, in]
        return torch.randn(out, inp, generator=g) * (std if out == V else 1.0 / inp ** 0.5)

    def vec(n, scale=0.1):
        return torch.randn(n, generator=g) * scale

    def gain(n):  # norm weights near 1, not exactly 1, so a missing weight shows; Gemma's multiply by
        return (0.0 if gemma else 1.0) + torch.randn(n, generator=g) * 0.2  # 1 + weight: weights near 0

    t = [("model.embed_tokens.weight", torch.randn(V, C, generator=g) * std)]                # [V, C]
    for il in range(L):
        p = f"model.layers.{il}."
        t.append((p + "input_layernorm.weight", gain(C)))
        for name, out, inp in (("q_proj", H * D, C), ("k_proj", K * D, C), ("v_proj", K * D, C),
                               ("o_proj", C, H * D)):
            t.append((p + f"self_attn.{name}.weight", mat(out, inp)))                         # [out, in]
            if (o_bias if name == "o_proj" else qkv_bias):
                t.append((p + f"self_attn.{name}.bias", vec(out)))
        if qwen3 or gemma:
            t += [(p + "self_attn.q_norm.weight", gain(D)), (p + "self_attn.k_norm.weight", gain(D))]
        t.append((p + "post_attention_layernorm.weight", gain(C)))
        if gemma:
            t += [(p + "pre_feedforward_layernorm.weight", gain(C)), (p + "post_feedforward_layernorm.weight", gain(C))]
        for name, out, inp in (("gate_proj", F, C), ("up_proj", F, C), ("down_proj", C, F)):
            t.append((p + f"mlp.{name}.weight", mat(out, inp)))
            if o["mlp_bias"]:
                t.append((p + f"mlp.{name}.bias", vec(out)))
    t.append(("model.norm.weight", gain(C)))
    if not o["tied"]:
        t.append(("lm_head.weight", mat(V, C)))                                              # [V, C]
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": V, "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": K, "max_position_embeddings": o["positions"],
        "rms_norm_eps": o["eps"], "rope_theta": o["rope_theta"], "rope_scaling": o["rope_scaling"],
        "tie_word_embeddings": o["tied"], "attention_bias": o["attention_bias"], "mlp_bias": o["mlp_bias"],
        "hidden_act": o["act"], "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[o["dtype"]],
        "attention_dropout": 0.0, "initializer_range": 0.02,
    }
    if o["head_dim"]:
        config["head_dim"] = D
    if qwen2:
        config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                      sliding_window=o["positions"], max_window_layers=L)
        del config["attention_bias"], config["mlp_bias"]
    if qwen3:
        config.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", use_sliding_window=False,
                      sliding_window=None, max_window_layers=L, head_dim=D)
        del config["mlp_bias"]
    if qwen2 or qwen3:
        if o["sliding_window"]:
            config.update(use_sliding_window=True, sliding_window=o["sliding_window"])
        if o["max_window_layers"] is not None:
            config["max_window_layers"] = o["max_window_layers"]
    if o["model_type"] == "mistral":
        config.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=o["sliding_window"],
                      head_dim=D)
        del config["attention_bias"], config["mlp_bias"]
    if gemma:
        config.update(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", head_dim=D,
                      sliding_window=o["sliding_window"] or 4096, hidden_activation=o["act"],
                      query_pre_attn_scalar=o["query_pre_attn_scalar"] or D,
                      rope_local_base_freq=o["rope_local_base_freq"],
                      final_logit_softcapping=o["final_logit_softcapping"], attn_logit_softcapping=None,
                      bos_token_id=2, eos_token_id=1, pad_token_id=0, use_bidirectional_attention=False)
        del config["hidden_act"], config["mlp_bias"]
        if o["sliding_window_pattern"]:
            config["sliding_window_pattern"] = o["sliding_window_pattern"]
    if o["layer_types"]:
        config["layer_types"] = o["layer_types"]
    return config, t


def write(out_dir, **kw):
    config, tensors = build(**kw)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    dtype = kw.get("dtype", DEFAULTS["dtype"])
    metadata = {"format": "pt", "generator": "tools/make_llama_model.py"}
    shards = kw.get("shards") or 1
    # A rewritten folder holds one form only: the single file wins over an index when both are present.
    for name in os.listdir(out_dir):
        if name in ("model.safetensors", safetensors_io.INDEX_NAME) or re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", name):
            os.remove(os.path.join(out_dir, name))
    if shards > 1:
        safetensors_io.write_sharded(out_dir, tensors, shards, dtype, metadata)
    else:
        safetensors_io.write(os.path.join(out_dir, "model.safetensors"), tensors, dtype, metadata)
    return config


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", help="the model folder to write (created if missing)")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="a real checkpoint's shape: its preset values, "
                    "which the options below override")
    helps = {"vocab": "vocabulary size", "hidden": "hidden_size", "inner": "intermediate_size (the MLP's width)",
             "layers": "num_hidden_layers", "heads": "num_attention_heads (query heads)",
             "kv_heads": "num_key_value_heads (K/V heads; fewer than --heads is grouped-query attention)",
             "head_dim": "head_dim (default hidden / heads)", "positions": "max_position_embeddings",
             "seed": "seed of the random weights", "shards": "write N shards and an index instead of model.safetensors"}
    for key, text in helps.items():
        default = "" if DEFAULTS[key] is None else " (default %s)" % DEFAULTS[key]
        ap.add_argument("--" + key.replace("_", "-"), type=int, help=text + default)
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], help="tensor dtype in the file (default F32)")
    ap.add_argument("--model-type", choices=["llama", "qwen2", "qwen3", "mistral", "gemma3_text"],
                    help="config.json's model_type and its family's tensors (default llama)")
    ap.add_argument("--sliding-window", type=int, help="the model's own sliding window (Mistral: every layer)")
    ap.add_argument("--tied", action="store_true", default=None, help="tie the output layer to the embedding")
    a = ap.parse_args(argv)
    kw = dict(SHAPES[a.shape]) if a.shape else {}
    kw.update({k: v for k, v in vars(a).items() if k not in ("out_dir", "shape") and v is not None})
    write(a.out_dir, **kw)


if __name__ == "__main__":
    main(sys.argv[1:])
