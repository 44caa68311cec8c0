"""The encoder-decoder transformer (reference document 002) for kvscope model folders, in plain PyTorch.

Written from the document's description, not from kvscope's code or the decoder-only reference
(model.py): the layer order, the masks, the shared table and the start token follow the folder format
in assets/README.md ("Encoder-decoder folders").

Shapes: S = source tokens, T = decoder tokens this call, P = decoder positions so far, C = n_embd,
H = n_head, D = C / H, F = n_inner, V = vocab_size, L = decoder layers, E = encoder layers.

    EncoderDecoder(folder, dtype)        float64 / float32: weights widened exactly, computed at that
                                         precision; bfloat16: every tensor and op in bfloat16, the
                                         document's "bfloat16 throughout" as torch's CPU kernels do it
    .encode(source)              -> [S, C]   encoder stack over the source, no mask
    .cross_cache(enc)            -> [(K, V) [H, S, D] per decoder layer]: computed once per source
    .decode(ids, pos0, cross, past) -> (logits [T, V], past, probes): decoder tokens at positions
                                         pos0..pos0+T-1 over a self-attention cache `past`
    .forward(source, dec_ids)    -> logits [T, V], recomputing everything (no cache)
    greedy(model, source, prompt, n_new, cached, chunk) -> (ids [n_new], logits [n_new, V])

The decoder input is [decoder_start_token_id] + prompt + generated tokens; logits row j is what
generated token j was chosen from (row 0: after the start token and the prompt).

CLI (prints one JSON object):
    /usr/bin/python3 tools/kvscope_reference/encoder_decoder.py --model DIR
        (--source-ids 1,2,3 | --source TEXT) [--prompt-ids 4,5 | --prompt TEXT] [--max-new-tokens 8]
        [--dtype float64|float32|bfloat16] [--no-cache] [--prefill-chunk K]
        [--dump-logits OUT.npy] [--dump-cross-attention OUT.npy] [--dump-self-attention OUT.npy]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

if __package__ in (None, ""):  # run as a file: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from kvscope_reference import safetensors_io
    from kvscope_reference.model import CONFIG_DEFAULTS
else:
    from . import safetensors_io
    from .model import CONFIG_DEFAULTS

# The decoder-only defaults (one config parser for both kinds): an encoder-decoder folder states
# post-LN, sinusoidal positions, relu and its embedding_scale explicitly.
DEFAULTS = CONFIG_DEFAULTS
REQUIRED = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_encoder_layer", "n_head",
            "decoder_start_token_id")


def load_config(path):
    with open(path) as f:
        raw = json.load(f)
    if raw.get("model_type") != "encoder_decoder":
        raise ValueError(f"{path}: model_type is {raw.get('model_type')!r}, expected \"encoder_decoder\"")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise ValueError(f"{path}: missing {missing}")
    cfg = dict(DEFAULTS)
    cfg.update({k: raw[k] for k in list(DEFAULTS) + list(REQUIRED) if k in raw})
    if cfg["n_inner"] is None:
        cfg["n_inner"] = 4 * cfg["n_embd"]
    if cfg["n_embd"] % cfg["n_head"]:
        raise ValueError(f"{path}: n_embd is not a multiple of n_head")
    return cfg


def positional_encoding(n_positions, n_embd):
    """[P, C] float64: PE[pos, 2i] = sin(pos / 10000^(2i/C)), PE[pos, 2i+1] = cos(pos / 10000^(2i/C))."""
    pe = torch.zeros(n_positions, n_embd, dtype=torch.float64)
    for i in range(0, n_embd, 2):
        freq = 10000.0 ** (i / n_embd)                       # i is 2i of the formula
        angle = torch.arange(n_positions, dtype=torch.float64) / freq
        pe[:, i] = torch.sin(angle)
        if i + 1 < n_embd:
            pe[:, i + 1] = torch.cos(angle)
    return pe


def tensor_names(cfg):
    """Every tensor the folder must hold -> expected shape, in file order (the spec, as code)."""
    V, P, C, F = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_inner"]
    names = {"wte.weight": (V, C)}
    if cfg["position_embedding"] == "learned":
        names["wpe.weight"] = (P, C)

    def attn(prefix):
        names[prefix + "c_attn.weight"] = (C, 3 * C)
        if cfg["qkv_bias"]:
            names[prefix + "c_attn.bias"] = (3 * C,)
        names[prefix + "c_proj.weight"] = (C, C)
        names[prefix + "c_proj.bias"] = (C,)

    def mlp(prefix):
        names.update({prefix + "c_fc.weight": (C, F), prefix + "c_fc.bias": (F,),
                      prefix + "c_proj.weight": (F, C), prefix + "c_proj.bias": (C,)})

    def norm(prefix):
        names.update({prefix + "weight": (C,), prefix + "bias": (C,)})

    for il in range(cfg["n_encoder_layer"]):
        p = f"encoder.h.{il}."
        norm(p + "ln_1.")
        attn(p + "attn.")
        norm(p + "ln_2.")
        mlp(p + "mlp.")
    if cfg["final_layer_norm"]:
        norm("encoder.ln_f.")
    for il in range(cfg["n_layer"]):
        p = f"h.{il}."
        norm(p + "ln_1.")
        attn(p + "attn.")
        norm(p + "ln_cross_attn.")
        x = p + "crossattention."
        names[x + "q_attn.weight"] = (C, C)
        if cfg["qkv_bias"]:
            names[x + "q_attn.bias"] = (C,)
        names[x + "c_attn.weight"] = (C, 2 * C)
        if cfg["qkv_bias"]:
            names[x + "c_attn.bias"] = (2 * C,)
        names[x + "c_proj.weight"] = (C, C)
        names[x + "c_proj.bias"] = (C,)
        norm(p + "ln_2.")
        mlp(p + "mlp.")
    if cfg["final_layer_norm"]:
        norm("ln_f.")
    if not cfg["tie_word_embeddings"]:
        names["lm_head.weight"] = (V, C)
    if cfg["lm_head_bias"]:
        names["lm_head.bias"] = (V,)
    return names


class EncoderDecoder:
    def __init__(self, folder, dtype=torch.float32):
        self.folder, self.dtype = folder, dtype
        self.cfg = cfg = load_config(os.path.join(folder, "config.json"))
        raw, self.stored_dtypes, _ = safetensors_io.read(os.path.join(folder, "model.safetensors"))
        want = tensor_names(cfg)
        missing = [n for n in want if n not in raw]
        extra = [n for n in raw if n not in want]
        if missing or extra:
            raise ValueError(f"{folder}: tensors missing {missing[:5]}, unexpected {extra[:5]}")
        for n, shape in want.items():
            if tuple(raw[n].shape) != shape:
                raise ValueError(f"{folder}: {n} has shape {list(raw[n].shape)}, expected {list(shape)}")
        self.w = {n: t.to(dtype) for n, t in raw.items()}  # BF16/F32 -> float32/64 is exact
        C = cfg["n_embd"]
        self.H, self.D = cfg["n_head"], C // cfg["n_head"]
        if cfg["position_embedding"] == "sinusoidal":
            self.pe = positional_encoding(cfg["n_positions"], C).to(dtype)   # [P, C]
        else:
            self.pe = self.w["wpe.weight"]                                   # [P, C]
        self.out_w = self.w["wte.weight"] if cfg["tie_word_embeddings"] else self.w["lm_head.weight"]  # [V, C]
        self.out_b = self.w.get("lm_head.bias")                              # [V] or None
        self.scale = torch.tensor(cfg["embedding_scale"], dtype=torch.float64).to(dtype)
        self.post = cfg["norm_position"] == "post"
        act = cfg["activation_function"]
        if act == "relu":
            self.act = torch.relu
        elif act == "gelu":
            self.act = lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
        elif act in ("gelu_new", "gelu_pytorch_tanh"):
            self.act = lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        else:
            raise ValueError(f"unknown activation_function {act!r}")

    # -- pieces ---------------------------------------------------------------------------------
    def _get(self, name):
        return self.w.get(name)

    def norm(self, x, prefix):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)              # biased variance
        return (x - mean) / torch.sqrt(var + self.cfg["layer_norm_epsilon"]) * self.w[prefix + "weight"] \
            + self.w[prefix + "bias"]

    def linear(self, x, prefix):
        """GPT-2 Conv1D: x [T, in] @ W [in, out] (+ b [out])."""
        y = x @ self.w[prefix + "weight"]
        b = self._get(prefix + "bias")
        return y + b if b is not None else y

    def heads(self, x):  # [T, C] -> [H, T, D]
        return x.view(x.shape[0], self.H, self.D).transpose(0, 1)

    def attend(self, q, k, v, allowed):
        """q [H, T, D], k/v [H, S, D], allowed [T, S] bool or None -> (out [T, C], weights [H, T, S])."""
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.D)            # [H, T, S]
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(0, 1).reshape(q.shape[1], -1)     # [T, C]
        return out, weights

    def sublayer(self, x, prefix, fn):
        """Post-LN: norm(x + fn(x)). Pre-LN: x + fn(norm(x)). -> (x, probe of fn)."""
        if self.post:
            y, probe = fn(x)
            return self.norm(x + y, prefix), probe
        y, probe = fn(self.norm(x, prefix))
        return x + y, probe

    def mlp(self, x, prefix):
        return self.linear(self.act(self.linear(x, prefix + "c_fc.")), prefix + "c_proj."), None

    def embed(self, ids, pos0):
        ids = torch.as_tensor(ids, dtype=torch.long)
        P = self.cfg["n_positions"]
        if pos0 + len(ids) > P:
            raise ValueError(f"positions up to {pos0 + len(ids) - 1} do not fit n_positions {P}")
        return self.w["wte.weight"][ids] * self.scale + self.pe[pos0:pos0 + len(ids)]   # [T, C]

    # -- the two stacks -------------------------------------------------------------------------
    def encode(self, source):
        """source ids -> encoder output [S, C] (after encoder.ln_f when final_layer_norm)."""
        if len(source) == 0:
            raise ValueError("the source is empty")
        x = self.embed(source, 0)
        self.encoder_attention = []
        for il in range(self.cfg["n_encoder_layer"]):
            p = f"encoder.h.{il}."

            def self_attn(h, p=p):
                q, k, v = self.linear(h, p + "attn.c_attn.").split(h.shape[1], dim=-1)
                out, wts = self.attend(self.heads(q), self.heads(k), self.heads(v), None)   # no mask
                return self.linear(out, p + "attn.c_proj."), wts

            x, wts = self.sublayer(x, p + "ln_1.", self_attn)
            self.encoder_attention.append(wts)
            x, _ = self.sublayer(x, p + "ln_2.", lambda h, p=p: self.mlp(h, p + "mlp."))
        if self.cfg["final_layer_norm"]:
            x = self.norm(x, "encoder.ln_f.")
        return x

    def cross_cache(self, enc):
        """enc [S, C] -> per decoder layer (K, V), each [H, S, D]: fixed once the encoder ran."""
        out = []
        for il in range(self.cfg["n_layer"]):
            k, v = self.linear(enc, f"h.{il}.crossattention.c_attn.").split(enc.shape[1], dim=-1)
            out.append((self.heads(k), self.heads(v)))
        return out

    def decode(self, ids, pos0, cross, past=None):
        """ids [T] at positions pos0.. -> (logits [T, V], past [(K, V) [H, P, D] per layer],
        probes {"self": [weights [H, T, P]], "cross": [weights [H, T, S]]} per layer)."""
        x = self.embed(ids, pos0)
        T = x.shape[0]
        q_pos = torch.arange(pos0, pos0 + T)
        new_past, probes = [], {"self": [], "cross": []}
        for il in range(self.cfg["n_layer"]):
            p = f"h.{il}."

            def self_attn(h, p=p, il=il):
                q, k, v = self.linear(h, p + "attn.c_attn.").split(h.shape[1], dim=-1)
                k, v = self.heads(k), self.heads(v)
                if past is not None:
                    k = torch.cat([past[il][0], k], dim=1)              # [H, P, D]
                    v = torch.cat([past[il][1], v], dim=1)
                new_past.append((k, v))
                allowed = torch.arange(k.shape[1])[None, :] <= q_pos[:, None]     # [T, P] causal
                out, wts = self.attend(self.heads(q), k, v, allowed)
                return self.linear(out, p + "attn.c_proj."), wts

            def cross_attn(h, p=p, il=il):
                q = self.linear(h, p + "crossattention.q_attn.")        # queries from the decoder
                out, wts = self.attend(self.heads(q), cross[il][0], cross[il][1], None)   # every source token
                return self.linear(out, p + "crossattention.c_proj."), wts

            x, wts = self.sublayer(x, p + "ln_1.", self_attn)
            probes["self"].append(wts)
            x, wts = self.sublayer(x, p + "ln_cross_attn.", cross_attn)
            probes["cross"].append(wts)
            x, _ = self.sublayer(x, p + "ln_2.", lambda h, p=p: self.mlp(h, p + "mlp."))
        if self.cfg["final_layer_norm"]:
            x = self.norm(x, "ln_f.")
        logits = x @ self.out_w.T                                       # [T, V]
        if self.out_b is not None:
            logits = logits + self.out_b
        return logits, new_past, probes

    @torch.no_grad()
    def forward(self, source, dec_ids):
        """Everything from scratch: -> (logits [T, V], probes of the whole decoder input)."""
        enc = self.encode(source)
        logits, _, probes = self.decode(dec_ids, 0, self.cross_cache(enc), None)
        return logits, probes


def _pick(row):
    return int(torch.argmax(row.to(torch.float64)).item())   # first maximum on ties


@torch.no_grad()
def greedy(model, source, prompt, n_new, cached=True, chunk=None):
    """-> (generated ids [n_new], logits [n_new, V] float64). Never stops early (eos is a token too)."""
    dec = [model.cfg["decoder_start_token_id"]] + list(prompt)
    gen, rows = [], []
    if not cached:
        for _ in range(n_new):
            row = model.forward(source, dec + gen)[0][-1]
            rows.append(row)
            gen.append(_pick(row))
        return gen, torch.stack(rows).to(torch.float64)
    cross = model.cross_cache(model.encode(source))
    past, pos = None, 0
    chunk = chunk or len(dec)
    for start in range(0, len(dec), chunk):
        logits, past, _ = model.decode(dec[start:start + chunk], pos, cross, past)
        pos += len(dec[start:start + chunk])
    for j in range(n_new):
        row = logits[-1]
        rows.append(row)
        gen.append(_pick(row))
        if j + 1 < n_new:
            logits, past, _ = model.decode([gen[-1]], pos, cross, past)
            pos += 1
    return gen, torch.stack(rows).to(torch.float64)


def _ids(text):
    try:
        return [int(s) for s in text.replace(" ", "").split(",") if s != ""]
    except ValueError:
        raise SystemExit(f"expected comma-separated ids, got {text!r}")


def _encode_text(folder, text):
    from kvscope_reference import bpe  # noqa: E402  (only for text prompts)
    with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(folder, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().splitlines()[1:] if line.strip()]
    return bpe.encode(text, merges, vocab)


def main(argv):
    ap = argparse.ArgumentParser(description="Greedy generation with the encoder-decoder reference; prints JSON.")
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--source-ids")
    src.add_argument("--source", help="source text (the folder's vocab.json/merges.txt, ASCII only)")
    pr = ap.add_mutually_exclusive_group()
    pr.add_argument("--prompt-ids", default="", help="decoder prefix after the start token (default none)")
    pr.add_argument("--prompt")
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--dtype", choices=["float64", "float32", "bfloat16"], default="float64")
    ap.add_argument("--no-cache", action="store_true", help="recompute encoder and decoder every step")
    ap.add_argument("--prefill-chunk", type=int, help="feed the decoder input in chunks of K")
    ap.add_argument("--dump-logits", metavar="OUT.npy", help="float32 [n_new, V]")
    ap.add_argument("--dump-cross-attention", metavar="OUT.npy",
                    help="float32 [L, H, T, S]: cross-attention weights of the whole final decoder input")
    ap.add_argument("--dump-self-attention", metavar="OUT.npy",
                    help="float32 [L, H, T, T]: masked self-attention weights of the whole final decoder input")
    a = ap.parse_args(argv)
    model = EncoderDecoder(a.model, getattr(torch, a.dtype))
    source = _ids(a.source_ids) if a.source_ids is not None else _encode_text(a.model, a.source)
    prompt = _encode_text(a.model, a.prompt) if a.prompt is not None else _ids(a.prompt_ids)
    gen, logits = greedy(model, source, prompt, a.max_new_tokens, cached=not a.no_cache, chunk=a.prefill_chunk)
    dec = [model.cfg["decoder_start_token_id"]] + prompt + gen
    fed = dec[:-1] if gen else dec
    if a.dump_logits:
        np.save(a.dump_logits, logits.to(torch.float32).numpy())
    if a.dump_cross_attention or a.dump_self_attention:
        _, probes = model.forward(source, fed)
        for path, key in ((a.dump_cross_attention, "cross"), (a.dump_self_attention, "self")):
            if path:
                np.save(path, torch.stack(probes[key]).to(torch.float32).numpy())
    C, L, S = model.cfg["n_embd"], model.cfg["n_layer"], len(source)
    print(json.dumps({
        "model": a.model, "dtype": a.dtype, "cached": not a.no_cache,
        "source_ids": source, "prompt_ids": prompt, "decoder_input_ids": fed,   # start + prompt + generated[:-1]: every token the decoder read
        "generated_ids": gen,
        "cross_cache_floats": 2 * L * S * C,          # K and V of every decoder layer over the source
        "self_cache_floats_per_token": 2 * L * C,
        "logits": [[round(float(x), 7) for x in row] for row in logits],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
