"""A plain PyTorch forward pass for Llama-family folders (model_type llama, qwen2, qwen3) (Hugging Face config.json + model.safetensors
with HF tensor names), written from the semantics of transformers' modeling_llama.py. No cache: every
call recomputes the whole sequence with an explicit causal (optionally banded) mask.

Shapes: T = tokens, C = hidden_size, H = num_attention_heads, K = num_key_value_heads, D = head_dim,
F = intermediate_size, V = vocab_size.

The rules, and the upstream function each follows:
  rms_norm        LlamaRMSNorm.forward: x * rsqrt(mean(x^2) + eps) in float32, then weight * x
  rope_inv_freq   ROPE_INIT_FUNCTIONS: default 1 / theta^(2i/D); "linear" divides by factor;
                  "llama3" is _compute_llama3_parameters (wavelength bands, smooth interpolation)
  apply_rope      apply_rotary_pos_emb + rotate_half: pairs (i, i + D/2), not interleaved (2i, 2i+1)
  attention       eager_attention_forward + repeat_kv: query head h reads K/V head h // (H / K);
                  scores scaled by D^-0.5
  mlp             LlamaMLP: down(act(gate(x)) * up(x))
  qk norm         Qwen3Attention: q_norm / k_norm (RMSNorm over head_dim) on each head before rotation

`mutation` switches in one classic mistake at a time, so tests can show they would catch it:
  "interleaved"   rotate pairs (2i, 2i+1) (GPT-J / Meta's original layout) instead of rotate-half
  "modulo"        query head h reads K/V head h % K instead of h // (H / K)
  "weight_first"  RMSNorm of weight * x instead of weight * RMSNorm(x)

`kv_bf16 = True` rounds K (after rotation) and V to bfloat16, as kvscope's cache stores them under
--dtype bf16, so that run has an exact reference too.
"""
import json
import math
import os

import torch

from . import safetensors_io


def load_config(path):
    with open(path) as f:
        raw = json.load(f)
    cfg = {
        "vocab_size": raw["vocab_size"],
        "hidden_size": raw["hidden_size"],
        "intermediate_size": raw["intermediate_size"],
        "num_hidden_layers": raw["num_hidden_layers"],
        "num_attention_heads": raw["num_attention_heads"],
        "num_key_value_heads": raw.get("num_key_value_heads") or raw["num_attention_heads"],
        "rms_norm_eps": raw.get("rms_norm_eps", 1e-6),
        "rope_theta": raw.get("rope_theta", 10000.0),
        "rope_scaling": raw.get("rope_scaling"),
        "max_position_embeddings": raw.get("max_position_embeddings", 2048),
        "tie_word_embeddings": raw.get("tie_word_embeddings", False),
        # Qwen2 (Qwen2Attention): q, k, v biases always, o never; Llama: attention_bias for all four.
        "qkv_bias": raw.get("attention_bias", False) or raw.get("model_type") == "qwen2",
        "qk_norm": raw.get("model_type") == "qwen3",
        "o_bias": raw.get("attention_bias", False) and raw.get("model_type") != "qwen2",
        "mlp_bias": raw.get("mlp_bias", False),
        "hidden_act": raw.get("hidden_act", "silu"),
    }
    default_head_dim = 128 if raw.get("model_type") == "qwen3" else cfg["hidden_size"] // cfg["num_attention_heads"]
    cfg["head_dim"] = raw.get("head_dim") or default_head_dim
    return cfg


def rope_inv_freq(cfg):
    """[D/2] float64 inverse frequencies, after rope_scaling."""
    D, theta = cfg["head_dim"], float(cfg["rope_theta"])
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    rs = cfg["rope_scaling"]
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / rs["factor"]
    if kind == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    raise ValueError(f"rope_scaling type {kind!r} is not in this reference")


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x [H, T, D], cos/sin [T, D] (the D/2 angles repeated twice)."""
    return x * cos + rotate_half(x) * sin


def apply_rope_interleaved(x, cos, sin):
    """The mutant: pairs (2i, 2i+1) rotated by angle i."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out


def _act(name):
    if name == "silu":
        return torch.nn.functional.silu
    if name == "gelu_pytorch_tanh":
        return lambda x: torch.nn.functional.gelu(x, approximate="tanh")
    raise ValueError(f"hidden_act {name!r} is not in this reference")


class LlamaModel:
    def __init__(self, folder, dtype=torch.float64):
        self.folder, self.dtype = folder, dtype
        self.sinks = 0
        self.kv_bf16 = False
        self.mutation = None
        self.cfg = cfg = load_config(os.path.join(folder, "config.json"))
        raw, self.stored_dtypes, _ = safetensors_io.read_folder(folder)
        self.w = {n: t.to(dtype) for n, t in raw.items()}
        self.H, self.K, self.D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.act = _act(cfg["hidden_act"])
        self.inv_freq = rope_inv_freq(cfg).to(dtype)                                  # [D/2]

    def rms_norm(self, x, weight):
        # Upstream casts to float32 first; here everything already is float64.
        if self.mutation == "weight_first":
            x = weight * x
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        return weight * x

    def linear(self, x, name, bias):
        y = x @ self.w[name + ".weight"].T                                            # [out, in] layout
        return y + self.w[name + ".bias"] if bias else y

    def forward(self, ids, window=None):
        """ids [T] -> logits [T, V]."""
        cfg, w, H, K, D = self.cfg, self.w, self.H, self.K, self.D
        T = len(ids)
        x = w["model.embed_tokens.weight"][torch.tensor(ids)]                         # [T, C]
        pos = torch.arange(T, dtype=self.dtype)
        angles = pos[:, None] * self.inv_freq[None, :]                                # [T, D/2]
        emb = torch.cat((angles, angles), dim=-1)                                     # [T, D]
        cos, sin = emb.cos(), emb.sin()
        q_pos, k_pos = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = k_pos <= q_pos                                                      # [T, T]
        if window:
            allowed &= (q_pos - k_pos < window) | (k_pos < self.sinks)
        qkv_bias, o_bias = cfg["qkv_bias"], cfg["o_bias"]
        for il in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{il}."
            h = self.rms_norm(x, w[p + "input_layernorm.weight"])
            q = self.linear(h, p + "self_attn.q_proj", qkv_bias).view(T, H, D).transpose(0, 1)  # [H, T, D]
            k = self.linear(h, p + "self_attn.k_proj", qkv_bias).view(T, K, D).transpose(0, 1)  # [K, T, D]
            v = self.linear(h, p + "self_attn.v_proj", qkv_bias).view(T, K, D).transpose(0, 1)  # [K, T, D]
            if cfg["qk_norm"]:
                q = self.rms_norm(q, w[p + "self_attn.q_norm.weight"])
                k = self.rms_norm(k, w[p + "self_attn.k_norm.weight"])
            rope = apply_rope_interleaved if self.mutation == "interleaved" else apply_rope
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            if self.kv_bf16:
                k, v = k.to(torch.bfloat16).to(self.dtype), v.to(torch.bfloat16).to(self.dtype)
            group = H // K
            if self.mutation == "modulo":
                k, v = k.repeat(group, 1, 1), v.repeat(group, 1, 1)                   # head h -> h % K
            else:
                k = k.repeat_interleave(group, dim=0)                                 # [H, T, D]: repeat_kv
                v = v.repeat_interleave(group, dim=0)
            scores = (q @ k.transpose(1, 2)) * D ** -0.5                             # [H, T, T]
            scores = scores.masked_fill(~allowed, float("-inf"))
            att = torch.softmax(scores, dim=-1) @ v                                   # [H, T, D]
            att = att.transpose(0, 1).reshape(T, H * D)
            x = x + self.linear(att, p + "self_attn.o_proj", o_bias)
            h = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
            mb = cfg["mlp_bias"]
            gated = self.act(self.linear(h, p + "mlp.gate_proj", mb)) * self.linear(h, p + "mlp.up_proj", mb)
            x = x + self.linear(gated, p + "mlp.down_proj", mb)
        x = self.rms_norm(x, w["model.norm.weight"])
        head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
        return x @ head.T                                                             # [T, V]

    def forward_batch(self, rows, window=None):
        # Each row on its own: the batch semantics (right padding, no cross-row attention) by construction.
        return [self.forward(r, window) for r in rows]
