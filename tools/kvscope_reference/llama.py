"""A plain PyTorch forward pass for Llama-family folders (model_type llama, qwen2, qwen3, mistral, gemma3_text)
(Hugging Face config.json + model.safetensors with HF tensor names), written from the semantics of
transformers' modeling_llama.py, modeling_mistral.py, modeling_qwen2.py and modeling_gemma3.py. No cache:
every call recomputes the whole sequence with an explicit causal (optionally banded) mask.

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
  layer windows   masking_utils sliding_window_overlay: in a sliding layer with window W a query at i keeps
                  key j when j > i - W. Which layers slide: config layer_types when given, else
                  MistralModel (all layers when sliding_window is not null), Qwen2Config.__post_init__
                  (use_sliding_window and i >= max_window_layers), Gemma3TextConfig ((i + 1) % pattern != 0)
  gemma3          Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + weight); Gemma3TextScaledWordEmbedding:
                  embeddings times sqrt(hidden_size) cast to the embedding's dtype; Gemma3DecoderLayer: four
                  norms (input, post_attention on the attention output, pre_/post_feedforward around the
                  MLP); Gemma3Attention: scaling query_pre_attn_scalar^-0.5, q_norm / k_norm, no score
                  soft-cap (attn_logit_softcapping is not passed on); Gemma3TextModel.rotary_emb_local:
                  sliding layers use rope_local_base_freq with default frequencies; Gemma3ForCausalLM:
                  final_logit_softcapping as cap * tanh(logits / cap)

`mutation` switches in one classic mistake at a time, so tests can show they would catch it:
  "interleaved"   rotate pairs (2i, 2i+1) (GPT-J / Meta's original layout) instead of rotate-half
  "modulo"        query head h reads K/V head h % K instead of h // (H / K)
  "weight_first"  RMSNorm of weight * x instead of weight * RMSNorm(x)
  "no_plus_one"   Gemma's norms times weight instead of (1 + weight)
  "global_rope_everywhere"  Gemma's sliding layers rotated with rope_theta instead of rope_local_base_freq
  "window_plus_one"  a sliding layer's query at i also keeps key i - W (i - j <= W instead of < W)

`sink_positions = "cache"` (with a window and `sinks`) numbers positions inside the cache as StreamingLLM
does (its pos_shift attention): keys are kept before rotation; a query at i with window keys lo..i and
S' = min(sinks, lo) sinks rotates the sinks at 0..S'-1, the window keys at S'..S'+i-lo and itself at
S'+i-lo. "text" (the default) rotates every key and query at its own position.

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
    model_type = raw.get("model_type")
    default_head_dim = {"qwen3": 128, "gemma3_text": 256}.get(model_type, cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg["head_dim"] = raw.get("head_dim") or default_head_dim
    L = cfg["num_hidden_layers"]
    gemma = model_type == "gemma3_text"
    cfg["gemma"] = gemma
    if gemma:
        cfg["hidden_act"] = raw.get("hidden_activation", "gelu_pytorch_tanh")
        cfg["tie_word_embeddings"] = raw.get("tie_word_embeddings", True)
        cfg["qk_norm"] = True
        cfg["qkv_bias"] = cfg["o_bias"] = raw.get("attention_bias", False)
        cfg["query_pre_attn_scalar"] = raw.get("query_pre_attn_scalar", 256)
        cfg["rope_local_base_freq"] = raw.get("rope_local_base_freq", 10000.0)
        cfg["final_logit_softcapping"] = raw.get("final_logit_softcapping")
    # Per-layer windows: None = full attention.
    if model_type == "mistral":
        window = raw.get("sliding_window", 4096)
        default_types = ["sliding_attention" if window is not None else "full_attention"] * L
    elif model_type in ("qwen2", "qwen3"):
        window = raw.get("sliding_window", 4096) if raw.get("use_sliding_window", False) else None
        first = raw.get("max_window_layers", 28)
        default_types = ["sliding_attention" if window is not None and i >= first else "full_attention" for i in range(L)]
    elif gemma:
        window = raw.get("sliding_window", 4096)
        pattern = raw.get("sliding_window_pattern", 6)
        default_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(L)]
    else:
        window, default_types = None, ["full_attention"] * L
    types = raw.get("layer_types") or default_types
    cfg["layer_windows"] = [window if t == "sliding_attention" else None for t in types]
    return cfg


def rope_inv_freq(cfg, theta=None, scaling=True):
    """[D/2] float64 inverse frequencies, after rope_scaling (unless scaling=False)."""
    D, theta = cfg["head_dim"], float(theta if theta is not None else cfg["rope_theta"])
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    rs = cfg["rope_scaling"] if scaling else None
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
        self.sink_positions = "text"
        self.kv_bf16 = False
        self.mutation = None
        self.attention_record = None  # a list: forward appends each layer's softmax weights [H, T, T]
        self.residual_record = None   # a list: forward appends x [T, C] entering each layer, then leaving the last
        self.cfg = cfg = load_config(os.path.join(folder, "config.json"))
        raw, self.stored_dtypes, _ = safetensors_io.read_folder(folder)
        self.w = {n: t.to(dtype) for n, t in raw.items()}
        self.H, self.K, self.D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.act = _act(cfg["hidden_act"])
        self.inv_freq = rope_inv_freq(cfg).to(dtype)                                  # [D/2]
        if cfg["gemma"]:  # sliding layers: rope_local_base_freq, rope_type "default"
            self.local_inv_freq = rope_inv_freq(cfg, cfg["rope_local_base_freq"], scaling=False).to(dtype)
            # embed_scale = hidden_size ** 0.5 as a float32 tensor, cast to the embedding's dtype
            stored = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[
                self.stored_dtypes["model.embed_tokens.weight"]]
            self.embed_scale = float(torch.tensor(cfg["hidden_size"] ** 0.5, dtype=torch.float32).to(stored))

    def rms_norm(self, x, weight):
        # Upstream casts to float32 first; here everything already is float64.
        if self.cfg["gemma"] and self.mutation != "no_plus_one":
            weight = 1.0 + weight                                                     # Gemma3RMSNorm
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
        if cfg["gemma"]:
            x = x * self.embed_scale
        pos = torch.arange(T, dtype=self.dtype)

        def cos_sin(inv_freq, pos=pos):
            angles = pos[:, None] * inv_freq[None, :]                                 # [T, D/2]
            emb = torch.cat((angles, angles), dim=-1)                                 # [T, D]
            return emb.cos(), emb.sin()

        rot_global = cos_sin(self.inv_freq)
        rot_local = rot_global
        local_inv_freq = self.inv_freq
        if cfg["gemma"] and self.mutation != "global_rope_everywhere":
            rot_local = cos_sin(self.local_inv_freq)
            local_inv_freq = self.local_inv_freq
        cache_numbering = bool(window) and self.sinks > 0 and self.sink_positions == "cache"
        if cache_numbering and (self.kv_bf16 or any(lw is not None for lw in cfg["layer_windows"])):
            raise ValueError("sink_positions 'cache' with kv_bf16 or the model's own windows is not in this reference")
        q_pos, k_pos = torch.arange(T)[:, None], torch.arange(T)[None, :]
        causal = k_pos <= q_pos                                                       # [T, T]
        if window:
            causal &= (q_pos - k_pos < window) | (k_pos < self.sinks)
        qkv_bias, o_bias = cfg["qkv_bias"], cfg["o_bias"]
        for il in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{il}."
            if self.residual_record is not None:
                self.residual_record.append(x)
            layer_window = cfg["layer_windows"][il]
            allowed = causal
            if layer_window is not None:
                reach = layer_window + 1 if self.mutation == "window_plus_one" else layer_window
                allowed = causal & (q_pos - k_pos < reach)
            cos, sin = rot_local if layer_window is not None else rot_global
            h = self.rms_norm(x, w[p + "input_layernorm.weight"])
            q = self.linear(h, p + "self_attn.q_proj", qkv_bias).view(T, H, D).transpose(0, 1)  # [H, T, D]
            k = self.linear(h, p + "self_attn.k_proj", qkv_bias).view(T, K, D).transpose(0, 1)  # [K, T, D]
            v = self.linear(h, p + "self_attn.v_proj", qkv_bias).view(T, K, D).transpose(0, 1)  # [K, T, D]
            if cfg["qk_norm"]:
                q = self.rms_norm(q, w[p + "self_attn.q_norm.weight"])
                k = self.rms_norm(k, w[p + "self_attn.k_norm.weight"])
            rope = apply_rope_interleaved if self.mutation == "interleaved" else apply_rope
            if cache_numbering:
                inv_freq = local_inv_freq if layer_window is not None else self.inv_freq
                att = self.cache_numbered_attention(q, k, v, inv_freq, window, rope)  # [T, H*D]
            else:
                q, k = rope(q, cos, sin), rope(k, cos, sin)
                if self.kv_bf16:
                    k, v = k.to(torch.bfloat16).to(self.dtype), v.to(torch.bfloat16).to(self.dtype)
                group = H // K
                if self.mutation == "modulo":
                    k, v = k.repeat(group, 1, 1), v.repeat(group, 1, 1)                   # head h -> h % K
                else:
                    k = k.repeat_interleave(group, dim=0)                                 # [H, T, D]: repeat_kv
                    v = v.repeat_interleave(group, dim=0)
                scaling = cfg["query_pre_attn_scalar"] ** -0.5 if cfg["gemma"] else D ** -0.5
                scores = (q @ k.transpose(1, 2)) * scaling                                # [H, T, T]
                scores = scores.masked_fill(~allowed, float("-inf"))
                probs = torch.softmax(scores, dim=-1)                                     # [H, T, T]
                if self.attention_record is not None:
                    self.attention_record.append(probs)
                att = probs @ v                                                           # [H, T, D]
                att = att.transpose(0, 1).reshape(T, H * D)
            out = self.linear(att, p + "self_attn.o_proj", o_bias)                    # [T, C]
            if cfg["gemma"]:
                out = self.rms_norm(out, w[p + "post_attention_layernorm.weight"])
            x = x + out
            pre_mlp = "pre_feedforward_layernorm" if cfg["gemma"] else "post_attention_layernorm"
            h = self.rms_norm(x, w[p + pre_mlp + ".weight"])
            mb = cfg["mlp_bias"]
            gated = self.act(self.linear(h, p + "mlp.gate_proj", mb)) * self.linear(h, p + "mlp.up_proj", mb)
            out = self.linear(gated, p + "mlp.down_proj", mb)                         # [T, C]
            if cfg["gemma"]:
                out = self.rms_norm(out, w[p + "post_feedforward_layernorm.weight"])
            x = x + out
        if self.residual_record is not None:
            self.residual_record.append(x)
        x = self.rms_norm(x, w["model.norm.weight"])
        head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
        logits = x @ head.T                                                           # [T, V]
        cap = cfg.get("final_logit_softcapping")
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def cache_numbered_attention(self, q, k, v, inv_freq, window, rope):
        """StreamingLLM's numbering: q [H, T, D], k/v [K, T, D] before rotation -> [T, H*D]."""
        H, K, D = self.H, self.K, self.D
        T = q.shape[1]
        group = H // K
        scaling = self.cfg["query_pre_attn_scalar"] ** -0.5 if self.cfg["gemma"] else D ** -0.5
        out = torch.zeros(T, H, D, dtype=q.dtype)
        record = torch.zeros(H, T, T, dtype=q.dtype)                                  # [H, T, T] by text position
        for i in range(T):
            lo = max(0, i - window + 1)
            n_sink = min(self.sinks, lo)
            seen = list(range(n_sink)) + list(range(lo, i + 1))                       # text positions
            slots = torch.arange(len(seen), dtype=self.dtype)                         # cache positions
            angles = slots[:, None] * inv_freq[None, :]
            emb = torch.cat((angles, angles), dim=-1)                                 # [n, D]
            keys = rope(k[:, seen, :], emb.cos(), emb.sin())                          # [K, n, D]
            query = rope(q[:, i:i + 1, :], emb[-1:].cos(), emb[-1:].sin())            # [H, 1, D] at slot n-1
            keys = keys.repeat_interleave(group, dim=0)                               # [H, n, D]
            values = v[:, seen, :].repeat_interleave(group, dim=0)
            probs = torch.softmax((query @ keys.transpose(1, 2)) * scaling, dim=-1)  # [H, 1, n]
            out[i] = (probs @ values)[:, 0, :]
            record[:, i, seen] = probs[:, 0, :]
        if self.attention_record is not None:
            self.attention_record.append(record)
        return out.reshape(T, H * D)

    def forward_batch(self, rows, window=None):
        # Each row on its own: the batch semantics (right padding, no cross-row attention) by construction.
        return [self.forward(r, window) for r in rows]
