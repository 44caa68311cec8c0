#!/usr/bin/python3
"""Loss, logits and every parameter's gradient of a Llama-family decoder, by PyTorch autograd in float64.

The independent side of tests/llama_train.tests.cpp: the C++ test writes a random model and a batch, this
script runs Hugging Face's Llama computation on it (transformers/models/llama/modeling_llama.py, with
Qwen3's q_norm / k_norm and the sliding-window mask of masking_utils), written here from those rules and
sharing nothing with kvscope's C++, and writes back what autograd computes.

    /usr/bin/python3 tests/reference/llama_train_reference.py WORK [WORK...]

WORK/case.json   {"config": {...}, "layout": [{"name", "shape", "offset"}], "B", "T", "tokens", "targets"}
                 config: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
                 num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps, rope_theta,
                 tie_word_embeddings, qk_norm, layer_windows (per layer, 0 = full attention)
WORK/params.f64  every tensor's values at its offset, float64, native byte order
writes WORK/grads.f64 (same layout), WORK/logits.f64 (B*T, V) and WORK/loss.txt

Two deliberate departures from HF's float32 habits, so that float64 stays float64: the softmax runs in
float64 (eager_attention_forward asks for dtype=float32), and so does RMSNorm. The rotary cos / sin are
made as LlamaRotaryEmbedding makes them (float32 inv_freq and angles, cos and sin rounded to float32),
then widened.
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):  # LlamaRMSNorm.forward
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rotate_half(x):  # modeling_llama.rotate_half
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_cos_sin(theta, D, T):  # LlamaRotaryEmbedding (rope_type "default"), float32
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1).double()  # (T, D)
    # HF takes emb.cos() in float32; torch's float32 cos may be 1 ulp off the correctly rounded value, so
    # the rounding is done here from float64 (the value HF's float32 cos approximates).
    return emb.cos().float().double(), emb.sin().float().double()


def repeat_kv(x, n_rep):  # modeling_llama.repeat_kv: (B, K, T, D) -> (B, K*n_rep, T, D)
    B, K, T, D = x.shape
    return x[:, :, None, :, :].expand(B, K, n_rep, T, D).reshape(B, K * n_rep, T, D)


def attention(p, pre, x, cfg, cos, sin, window):  # LlamaAttention / Qwen3Attention, eager
    B, T, _ = x.shape
    H, K, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    q = F.linear(x, p[pre + "q_proj.weight"]).view(B, T, H, D)
    k = F.linear(x, p[pre + "k_proj.weight"]).view(B, T, K, D)
    v = F.linear(x, p[pre + "v_proj.weight"]).view(B, T, K, D)
    if cfg["qk_norm"]:
        q = rms_norm(q, p[pre + "q_norm.weight"], cfg["rms_norm_eps"])
        k = rms_norm(k, p[pre + "k_norm.weight"], cfg["rms_norm_eps"])
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
    q = q * cos + rotate_half(q) * sin  # apply_rotary_pos_emb
    k = k * cos + rotate_half(k) * sin
    k, v = repeat_kv(k, H // K), repeat_kv(v, H // K)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i  # causal_mask_function
    if window > 0:
        allowed = allowed & (j > i - window)  # sliding_window_overlay
    scores = (q @ k.transpose(2, 3)) * D ** -0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
    out = out.transpose(1, 2).reshape(B, T, H * D)
    return F.linear(out, p[pre + "o_proj.weight"])


def forward(p, cfg, tokens):
    B, T = tokens.shape
    eps = cfg["rms_norm_eps"]
    cos, sin = rotary_cos_sin(cfg["rope_theta"], cfg["head_dim"], T)
    x = p["model.embed_tokens.weight"][tokens]
    for il in range(cfg["num_hidden_layers"]):  # LlamaDecoderLayer
        pre = f"model.layers.{il}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        x = x + attention(p, pre + "self_attn.", h, cfg, cos, sin, cfg["layer_windows"][il])
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        gate = F.linear(h, p[pre + "mlp.gate_proj.weight"])
        up = F.linear(h, p[pre + "mlp.up_proj.weight"])
        x = x + F.linear(F.silu(gate) * up, p[pre + "mlp.down_proj.weight"])  # LlamaMLP
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return F.linear(x, head)  # (B, T, V)


def expected_shapes(cfg):
    V, C, Fw = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    H, K, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    for il in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{il}."
        shapes.update({pre + "input_layernorm.weight": [C], pre + "post_attention_layernorm.weight": [C],
                       pre + "self_attn.q_proj.weight": [H * D, C], pre + "self_attn.k_proj.weight": [K * D, C],
                       pre + "self_attn.v_proj.weight": [K * D, C], pre + "self_attn.o_proj.weight": [C, H * D],
                       pre + "mlp.gate_proj.weight": [Fw, C], pre + "mlp.up_proj.weight": [Fw, C],
                       pre + "mlp.down_proj.weight": [C, Fw]})
        if cfg["qk_norm"]:
            shapes.update({pre + "self_attn.q_norm.weight": [D], pre + "self_attn.k_norm.weight": [D]})
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [V, C]
    return shapes


def run(work):
    with open(f"{work}/case.json") as f:
        case = json.load(f)
    cfg = case["config"]
    flat = np.fromfile(f"{work}/params.f64", dtype=np.float64)
    layout = case["layout"]
    want = expected_shapes(cfg)
    got = {t["name"]: list(t["shape"]) for t in layout}
    if got != want:
        wrong = sorted(n for n in set(got) | set(want) if got.get(n) != want.get(n))
        sys.exit(f"layout differs from Hugging Face's names and shapes at {wrong}")
    params = {}
    for t in layout:
        n = int(np.prod(t["shape"]))
        params[t["name"]] = torch.tensor(flat[t["offset"]:t["offset"] + n].reshape(t["shape"]), requires_grad=True)
    B, T = case["B"], case["T"]
    tokens = torch.tensor(case["tokens"], dtype=torch.int64).view(B, T)
    targets = torch.tensor(case["targets"], dtype=torch.int64).view(B * T)
    logits = forward(params, cfg, tokens)
    loss = F.cross_entropy(logits.view(B * T, -1), targets, ignore_index=-1)
    loss.backward()
    grads = np.zeros_like(flat)
    for t in layout:
        g = params[t["name"]].grad
        if g is not None:
            grads[t["offset"]:t["offset"] + g.numel()] = g.numpy().ravel()
    grads.tofile(f"{work}/grads.f64")
    logits.detach().numpy().astype(np.float64).tofile(f"{work}/logits.f64")
    with open(f"{work}/loss.txt", "w") as f:
        f.write(repr(loss.item()) + "\n")


if __name__ == "__main__":
    for work in sys.argv[1:]:  # one process for every case: importing torch takes seconds
        run(work)
