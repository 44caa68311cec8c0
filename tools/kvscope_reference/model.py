"""A plain PyTorch GPT-2 forward pass for kvscope model folders: the independent baseline.

Shapes: B = batch, T = query tokens, S = key positions, C = n_embd, H = n_head, D = head dim,
F = n_inner, V = vocab.

Two ways to compute the same logits, so the reference can check itself:
  Model.forward(ids, window)          full sequence, explicit banded causal mask, no cache
  Model.forward_batch(rows, window)   ragged rows right-padded into one [B, T] batch
  CachedRunner(model, window)         concatenating K/V cache, fed in chunks, trimmed to the window
"""
import json
import math
import os

import torch

from . import safetensors_io

CONFIG_DEFAULTS = {
    "n_inner": None,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
    "qkv_bias": True,
    "lm_head_bias": False,
    "norm_position": "pre",
    "position_embedding": "learned",
    "embedding_scale": 1.0,
    "final_layer_norm": True,
}


def load_config(path):
    with open(path) as f:
        raw = json.load(f)
    cfg = dict(CONFIG_DEFAULTS)
    cfg.update({k: v for k, v in raw.items() if k in CONFIG_DEFAULTS or k in
                ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")})
    if cfg["n_inner"] is None:
        cfg["n_inner"] = 4 * cfg["n_embd"]
    return cfg


def sinusoidal_table(n_positions, n_embd, dtype=torch.float64):
    """[P, C]: PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(same angle) (interleaved)."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]            # [P, 1]
    two_i = torch.arange(0, n_embd, 2, dtype=torch.float64)[None, :]       # [1, C/2]
    angle = t / torch.pow(torch.tensor(10000.0, dtype=torch.float64), two_i / n_embd)
    pe = torch.zeros(n_positions, n_embd, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : n_embd // 2])
    return pe.to(dtype)


def _activation(name):
    if name == "gelu_new":
        c = math.sqrt(2.0 / math.pi)
        return lambda x: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x)))
    if name == "gelu":
        return lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name == "relu":
        return lambda x: torch.clamp(x, min=0.0)
    raise ValueError(f"unknown activation_function {name!r}")


class Model:
    def __init__(self, folder, dtype=torch.float32):
        self.folder = folder
        self.dtype = dtype
        self.sinks = 0  # attention sinks beside a window (StreamingLLM); set by tests
        # What a quantized KV cache keeps of the K/V rows: a function (rows [B, H, T, D], "k" | "v") -> rows,
        # e.g. quantize then dequantize (tests/reference/kv_quant_reference.py); None = the rows as computed. Set by tests.
        self.kv_round = None
        self.cfg = cfg = load_config(os.path.join(folder, "config.json"))
        raw, self.stored_dtypes, _ = safetensors_io.read_folder(folder)
        w = {}
        for name, t in raw.items():
            if name.startswith("transformer."):
                name = name[len("transformer."):]
            w[name] = t.to(dtype)  # F16/BF16 -> fp32 is exact; fp32 -> fp64 too
        self.w = w
        C, V, P, F = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_inner"]
        self.n_head = cfg["n_head"]
        self.head_dim = C // self.n_head
        self.act = _activation(cfg["activation_function"])
        self.eps = cfg["layer_norm_epsilon"]
        self.wte = w["wte.weight"]                                          # [V, C]
        assert tuple(self.wte.shape) == (V, C)
        if cfg["position_embedding"] == "sinusoidal":
            self.pos_table = sinusoidal_table(P, C, dtype)                  # [P, C]
        else:
            self.pos_table = w["wpe.weight"]                                # [P, C]
            assert tuple(self.pos_table.shape) == (P, C)
        if cfg["tie_word_embeddings"]:
            self.lm_head = self.wte                                         # [V, C]
        else:
            self.lm_head = w["lm_head.weight"]
        self.lm_head_bias = w["lm_head.bias"] if cfg["lm_head_bias"] else None  # [V]
        self.layers = []
        for il in range(cfg["n_layer"]):
            p = f"h.{il}."
            layer = {
                "ln_1": (w[p + "ln_1.weight"], w[p + "ln_1.bias"]),
                "ln_2": (w[p + "ln_2.weight"], w[p + "ln_2.bias"]),
                "c_attn_w": w[p + "attn.c_attn.weight"],                    # [C, 3C]
                "c_attn_b": w.get(p + "attn.c_attn.bias") if cfg["qkv_bias"] else None,
                "attn_proj_w": w[p + "attn.c_proj.weight"],                 # [C, C]
                "attn_proj_b": w[p + "attn.c_proj.bias"],
                "c_fc_w": w[p + "mlp.c_fc.weight"],                         # [C, F]
                "c_fc_b": w[p + "mlp.c_fc.bias"],
                "mlp_proj_w": w[p + "mlp.c_proj.weight"],                   # [F, C]
                "mlp_proj_b": w[p + "mlp.c_proj.bias"],
            }
            assert tuple(layer["c_attn_w"].shape) == (C, 3 * C)
            assert tuple(layer["c_fc_w"].shape) == (C, F)
            self.layers.append(layer)
        self.ln_f = (w["ln_f.weight"], w["ln_f.bias"]) if cfg["final_layer_norm"] else None

    # -- pieces -------------------------------------------------------------------------------
    def layer_norm(self, x, wb):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)   # biased, as in GPT-2
        return (x - mean) / torch.sqrt(var + self.eps) * wb[0] + wb[1]

    def embed(self, ids, positions):
        """ids, positions: long [B, T] -> [B, T, C]."""
        return self.wte[ids] * self.cfg["embedding_scale"] + self.pos_table[positions]

    def attention(self, layer, h, q_pos, past, window):
        """h [B, T, C] (already normed when pre-LN); q_pos long [T]; past (k, v, k_pos) or None.

        Returns (out [B, T, C], (k_all, v_all, k_pos_all)) where k_all, v_all are [B, H, S, D].
        """
        B, T, C = h.shape
        H, D = self.n_head, self.head_dim
        qkv = h @ layer["c_attn_w"]                                         # [B, T, 3C]
        if layer["c_attn_b"] is not None:
            qkv = qkv + layer["c_attn_b"]
        q, k, v = qkv.split(C, dim=-1)                                      # [B, T, C] each
        q = q.view(B, T, H, D).transpose(1, 2)                              # [B, H, T, D]
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if self.kv_round is not None:
            k, v = self.kv_round(k, "k"), self.kv_round(v, "v")
        k_pos = q_pos
        if past is not None:
            k = torch.cat([past[0], k], dim=2)                              # [B, H, S, D]
            v = torch.cat([past[1], v], dim=2)
            k_pos = torch.cat([past[2], q_pos])                             # [S]
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)                     # [B, H, T, S]
        qp, kp = q_pos[:, None], k_pos[None, :]
        allowed = kp <= qp                                                  # [T, S] causal
        if window is not None:
            # banded; attention sinks (self.sinks > 0) keep the first positions visible beside the band
            allowed = allowed & ((kp > qp - window) | (kp < self.sinks))
        scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, T, C)                # [B, T, C]
        out = out @ layer["attn_proj_w"] + layer["attn_proj_b"]
        return out, (k, v, k_pos)

    def mlp(self, layer, h):
        a = self.act(h @ layer["c_fc_w"] + layer["c_fc_b"])                 # [B, T, F]
        return a @ layer["mlp_proj_w"] + layer["mlp_proj_b"]                # [B, T, C]

    def run(self, ids, positions, pasts=None, window=None):
        """ids long [B, T], positions long [T] (absolute) -> (logits [B, T, V], new pasts)."""
        x = self.embed(ids, positions[None, :].expand_as(ids))
        new_pasts = []
        for il, layer in enumerate(self.layers):
            past = pasts[il] if pasts else None
            if self.cfg["norm_position"] == "pre":
                a, kv = self.attention(layer, self.layer_norm(x, layer["ln_1"]), positions, past, window)
                x = x + a
                x = x + self.mlp(layer, self.layer_norm(x, layer["ln_2"]))
            else:
                a, kv = self.attention(layer, x, positions, past, window)
                x = self.layer_norm(x + a, layer["ln_1"])
                x = self.layer_norm(x + self.mlp(layer, x), layer["ln_2"])
            new_pasts.append(kv)
        if self.ln_f is not None:
            x = self.layer_norm(x, self.ln_f)
        logits = x @ self.lm_head.T                                         # [B, T, V]
        if self.lm_head_bias is not None:
            logits = logits + self.lm_head_bias
        return logits, new_pasts

    # -- whole sequences ----------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, ids, window=None):
        """ids: list of ints -> logits [T, V] for every position (full recompute)."""
        t = torch.tensor([list(ids)], dtype=torch.long)
        logits, _ = self.run(t, torch.arange(t.shape[1]), None, window)
        return logits[0]

    @torch.no_grad()
    def forward_batch(self, rows, window=None):
        """rows: ragged lists of ids -> list of logits [T_b, V].

        Rows are right-padded with id 0: a real query never sees a pad key, because pads sit at
        later positions and the mask is causal, so padding cannot change a real row's logits.
        """
        T = max(len(r) for r in rows)
        t = torch.zeros(len(rows), T, dtype=torch.long)
        for b, r in enumerate(rows):
            t[b, : len(r)] = torch.tensor(r, dtype=torch.long)
        logits, _ = self.run(t, torch.arange(T), None, window)
        return [logits[b, : len(r)] for b, r in enumerate(rows)]


class CachedRunner:
    """Incremental decoding with a concatenating K/V cache (the second, cross-check implementation).

    After each call the cache keeps only what a later query can still attend to: with window W, a
    query at position q >= p_next sees keys j > q - W >= p_next - W, so of the past only the last
    W - 1 positions.
    """

    def __init__(self, model, window=None):
        self.model, self.window = model, window
        self.pasts = None
        self.n_past = 0

    @torch.no_grad()
    def feed(self, ids):
        """Append ids (list) at the next positions -> logits [len(ids), V]."""
        t = torch.tensor([list(ids)], dtype=torch.long)
        positions = torch.arange(self.n_past, self.n_past + len(ids))
        logits, pasts = self.model.run(t, positions, self.pasts, self.window)
        if self.window is not None:
            keep = self.window - 1
            pasts = [(k[:, :, max(0, k.shape[2] - keep):], v[:, :, max(0, v.shape[2] - keep):],
                      p[max(0, p.shape[0] - keep):]) for k, v, p in pasts]
        self.pasts = pasts
        self.n_past += len(ids)
        return logits[0]
