#!/usr/bin/python3
"""Write a llama.cpp GGUF file (architecture "gpt2", "llama" or "qwen2") from a kvscope model folder, so
llama.cpp can run the very weights kvscope runs (tools/bench_llama.sh times the two side by side).

    /usr/bin/python3 tools/gguf_from_folder.py MODEL_DIR OUT.gguf [--type f32|f16]
        [--gguf-py DIR] [--placeholder-vocab] [--verify]

MODEL_DIR     config.json + model.safetensors (F32, F16 or BF16) + vocab.json and merges.txt; a GPT-2
              folder, or a Llama / Qwen2 one (model_type "llama" / "qwen2")
--type        f32: every tensor F32 (general.file_type ALL_F32); f16: 2-D tensors F16, norms and
              biases F32 (MOSTLY_F16), as llama.cpp's own converter does
--gguf-py     llama.cpp's gguf-py folder (pure Python + numpy); default $GGUF_PY, then
              $LLAMA_CPP_DIR/gguf-py. Not part of kvscope: it comes with a llama.cpp source tree.
--placeholder-vocab
              for folders without vocab.json/merges.txt (e.g. `kvscope bench --gpt2-shape`'s random
              weights): the 256 byte tokens, one merge, then "<|kvscope_id_N|>" fillers. Enough for benchmarks
              that feed token ids; text through it means nothing.
--verify      read the file back with gguf-py's reader and compare every tensor with the folder

Only what llama.cpp's graph for the architecture computes is accepted — gpt2: pre-norm, learned
positions, gelu_new (tanh), q/k/v biases, a final layer norm, no lm_head bias, embedding_scale 1,
decoder-only; llama / qwen2: silu, no rope_scaling, no biases beyond Qwen2's q/k/v. Anything else is
refused with the config key that differs, not converted into a different model.

Layout (ggml lists dims inner first, numpy outer first; shapes below are numpy's):
  token_embd   (V, C)   wte                      position_embd (P, C)  wpe
  attn_qkv     (3C, C)  c_attn.weight transposed (Conv1D stores (in, out), llama.cpp wants (out, in))
  attn_output  (C, C)   c_proj.weight transposed ffn_up (F, C) c_fc.weight transposed
  ffn_down     (C, F)   mlp.c_proj.weight transposed
  output       (V, C)   lm_head.weight, or wte again when tied (llama.cpp's gpt2 loader requires it)
Llama / Qwen2 (nn.Linear weights are (out, in) already; Q = heads * head_dim, KV = kv_heads * head_dim):
  token_embd (V, C) embed_tokens   attn_norm (C) input_layernorm   ffn_norm (C) post_attention_layernorm
  attn_q (Q, C)  attn_k (KV, C)  attn_v (KV, C)  attn_output (C, Q)  (+ attn_q/k/v.bias for Qwen2)
  ffn_gate (F, C)  ffn_up (F, C)  ffn_down (C, F)  output_norm (C) model.norm  output (V, C) lm_head,
  absent when tied (llama.cpp then reads token_embd)
  llama.cpp's "llama" graph rotates adjacent pairs (2i, 2i+1) where Hugging Face rotates i with i + D/2,
  so the rows of every q and k head are reordered to match, as llama.cpp's own converter does; its
  "qwen2" graph rotates halves like Hugging Face, so Qwen2 rows stay as they are.
"""
import argparse
import json
import os
import struct
import sys
import types

import numpy as np


class ConvertError(Exception):
    pass


# --- the folder ------------------------------------------------------------------------------------

SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def read_safetensors(path):
    """-> {name: float32 ndarray}. F32 tensors are views of a read-only memory map (no copy)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ConvertError(f"{path}: shorter than a safetensors header")
        n = struct.unpack("<Q", head)[0]
        size = os.fstat(f.fileno()).st_size
        if n > size - 8:
            raise ConvertError(f"{path}: header length {n} runs past the end of the file ({size} bytes)")
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in SAFETENSORS_DTYPES:
            raise ConvertError(f"{path}: tensor {name} has dtype {dt}; kvscope folders hold F32, F16 or BF16")
        begin, end = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        raw = data[begin:end].view(SAFETENSORS_DTYPES[dt])
        if raw.size != int(np.prod(shape, dtype=np.int64)):
            raise ConvertError(f"{path}: tensor {name}: {end - begin} bytes do not hold shape {list(shape)} of {dt}")
        if dt == "BF16":  # bfloat16 is the top half of a float32
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.reshape(shape).astype(np.float32, copy=False)
    return out


def gpt2_config(path):
    """config.json -> dict of the sizes, after refusing what llama.cpp's gpt2 graph cannot compute."""
    with open(path, encoding="utf-8") as f:
        c = json.load(f)

    def need(key, allowed, default):
        v = c.get(key, default)
        if v not in allowed:
            raise ConvertError(f"{path}: {key} = {json.dumps(v)}; llama.cpp's gpt2 architecture computes "
                               f"only {' or '.join(json.dumps(a) for a in allowed)}")

    need("model_type", ["gpt2"], "gpt2")
    need("activation_function", ["gelu_new", "gelu_pytorch_tanh"], "gelu_new")
    need("qkv_bias", [True], True)
    need("lm_head_bias", [False], False)
    need("norm_position", ["pre"], "pre")
    need("position_embedding", ["learned"], "learned")
    need("embedding_scale", [1, 1.0], 1.0)
    need("final_layer_norm", [True], True)
    for key in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
        if not isinstance(c.get(key), int) or c[key] <= 0:
            raise ConvertError(f"{path}: {key} must be a positive whole number, found {json.dumps(c.get(key))}")
    if c["n_embd"] % c["n_head"]:
        raise ConvertError(f"{path}: n_embd ({c['n_embd']}) is not divisible by n_head ({c['n_head']})")
    return {
        "V": c["vocab_size"], "P": c["n_positions"], "C": c["n_embd"], "L": c["n_layer"], "H": c["n_head"],
        "F": c.get("n_inner") or 4 * c["n_embd"], "eps": float(c.get("layer_norm_epsilon", 1e-5)),
        "tied": bool(c.get("tie_word_embeddings", True)),
        "bos": c.get("bos_token_id"), "eos": c.get("eos_token_id"),
    }


def llama_config(path):
    """config.json of a Llama / Qwen2 folder -> dict of the sizes, after refusing what llama.cpp's graph
    for it would compute differently."""
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    arch = c.get("model_type")
    if arch not in ("llama", "qwen2"):
        raise ConvertError(f"{path}: model_type {json.dumps(arch)}; this converter writes gpt2, llama and qwen2")
    if c.get("hidden_act", "silu") != "silu":
        raise ConvertError(f"{path}: hidden_act = {json.dumps(c['hidden_act'])}; llama.cpp's {arch} graph computes silu")
    if c.get("rope_scaling"):
        raise ConvertError(f"{path}: rope_scaling is set; this converter writes unscaled rotary positions only")
    if c.get("use_sliding_window") or (arch == "llama" and (c.get("attention_bias") or c.get("mlp_bias"))):
        raise ConvertError(f"{path}: sliding windows and Llama biases are not converted")
    for key in ("vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads"):
        if not isinstance(c.get(key), int) or c[key] <= 0:
            raise ConvertError(f"{path}: {key} must be a positive whole number, found {json.dumps(c.get(key))}")
    H = c["num_attention_heads"]
    K = c.get("num_key_value_heads") or H
    D = c.get("head_dim") or c["hidden_size"] // H
    if H % K:
        raise ConvertError(f"{path}: num_attention_heads ({H}) is not divisible by num_key_value_heads ({K})")
    if arch == "qwen2" and H * D != c["hidden_size"]:
        raise ConvertError(f"{path}: heads x head_dim = {H * D} differs from hidden_size {c['hidden_size']}, "
                           "which llama.cpp's qwen2 graph assumes")
    return {
        "arch": arch, "V": c["vocab_size"], "P": c["max_position_embeddings"], "C": c["hidden_size"],
        "F": c["intermediate_size"], "L": c["num_hidden_layers"], "H": H, "K": K, "D": D,
        "eps": float(c.get("rms_norm_eps", 1e-6)), "theta": float(c.get("rope_theta", 10000.0)),
        "tied": bool(c.get("tie_word_embeddings", False)), "bias": arch == "qwen2",
        "bos": c.get("bos_token_id"), "eos": c.get("eos_token_id"),
    }


def folder_config(path):
    with open(path, encoding="utf-8") as f:
        model_type = json.load(f).get("model_type", "gpt2")
    if model_type in ("gpt2", None):
        cfg = gpt2_config(path)
        cfg["arch"] = "gpt2"
        return cfg
    return llama_config(path)


def byte_symbols():
    """GPT-2's byte -> printable character table (byte-level BPE writes every byte as one symbol)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def read_vocab(folder, cfg, placeholder):
    """-> (tokens by id, token types, merges "a b"). Ids missing from vocab.json become fillers."""
    V = cfg["V"]
    vocab_path, merges_path = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if not (os.path.exists(vocab_path) and os.path.exists(merges_path)):
        if not placeholder:
            raise ConvertError(f"{folder}: no vocab.json/merges.txt; llama.cpp needs a tokenizer "
                               "(pass --placeholder-vocab for a model that is only fed token ids)")
        if V < 257:
            raise ConvertError(f"{folder}: --placeholder-vocab needs vocab_size > 256, found {V}")
        # llama.cpp refuses a BPE vocabulary without merges: one merge, whose result is token 256.
        sp = byte_symbols()[ord(" ")]
        tokens = byte_symbols() + [sp + sp] + [f"<|kvscope_id_{i}|>" for i in range(257, V)]
        return tokens, [1] * 257 + [5] * (V - 257), [f"{sp} {sp}"]  # 1 = NORMAL, 5 = UNUSED
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    tokens = [None] * V
    for text, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < V:
            raise ConvertError(f"{vocab_path}: token {json.dumps(text)} has id {i}, outside [0, {V})")
        if tokens[i] is not None:
            raise ConvertError(f"{vocab_path}: id {i} is given to both {json.dumps(tokens[i])} and {json.dumps(text)}")
        tokens[i] = text
    types_ = []
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"<|kvscope_id_{i}|>"
            types_.append(5)  # UNUSED: an embedding row with no text
        elif i in (cfg["bos"], cfg["eos"]) or (t.startswith("<|") and t.endswith("|>")):
            types_.append(3)  # CONTROL, like GPT-2's <|endoftext|>
        else:
            types_.append(1)  # NORMAL
    with open(merges_path, encoding="utf-8") as f:
        merges = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")]
    for m in merges:
        if len(m.split(" ")) != 2:
            raise ConvertError(f"{merges_path}: merge line {json.dumps(m)} is not two symbols and a space")
    return tokens, types_, merges


class TensorTaker:
    """Hands out a checkpoint's tensors by name, each checked against the shape config.json implies, and
    remembers which were taken, so that a tensor no graph reads is refused rather than dropped."""

    def __init__(self, path, tensors):
        self.path, self.tensors, self.used = path, tensors, set()

    def __call__(self, name, shape):
        if name not in self.tensors:
            raise ConvertError(f"{self.path}: tensor {name} is missing")
        t = self.tensors[name]
        if tuple(t.shape) != shape:
            raise ConvertError(f"{self.path}: tensor {name} has shape {list(t.shape)}, config.json says {list(shape)}")
        self.used.add(name)
        return t

    def refuse_leftovers(self, arch):
        left = sorted(set(self.tensors) - self.used)
        if left:
            raise ConvertError(f"{self.path}: tensors {left[:5]} are not part of a {arch} model; refusing to drop them")


def gguf_tensors(folder, cfg):
    """-> [(gguf name, float32 ndarray in llama.cpp's layout)], checking every shape against config.json."""
    path = os.path.join(folder, "model.safetensors")
    raw = read_safetensors(path)
    # Hugging Face checkpoints may prefix "transformer." and carry attention-mask buffers.
    st = {}
    for name, t in raw.items():
        base = name[len("transformer."):] if name.startswith("transformer.") else name
        if base.endswith(".attn.bias") and t.ndim == 4 or base.endswith(".attn.masked_bias"):
            continue
        st[base] = t
    V, P, C, L, F = cfg["V"], cfg["P"], cfg["C"], cfg["L"], cfg["F"]
    take = TensorTaker(path, st)

    out = [("token_embd.weight", take("wte.weight", (V, C))),                      # (V, C)
           ("position_embd.weight", take("wpe.weight", (P, C)))]                   # (P, C)
    for il in range(L):
        h, b = f"h.{il}.", f"blk.{il}."
        out += [
            (b + "attn_norm.weight", take(h + "ln_1.weight", (C,))),
            (b + "attn_norm.bias", take(h + "ln_1.bias", (C,))),
            (b + "attn_qkv.weight", take(h + "attn.c_attn.weight", (C, 3 * C)).T),  # (3C, C)
            (b + "attn_qkv.bias", take(h + "attn.c_attn.bias", (3 * C,))),
            (b + "attn_output.weight", take(h + "attn.c_proj.weight", (C, C)).T),   # (C, C)
            (b + "attn_output.bias", take(h + "attn.c_proj.bias", (C,))),
            (b + "ffn_norm.weight", take(h + "ln_2.weight", (C,))),
            (b + "ffn_norm.bias", take(h + "ln_2.bias", (C,))),
            (b + "ffn_up.weight", take(h + "mlp.c_fc.weight", (C, F)).T),           # (F, C)
            (b + "ffn_up.bias", take(h + "mlp.c_fc.bias", (F,))),
            (b + "ffn_down.weight", take(h + "mlp.c_proj.weight", (F, C)).T),       # (C, F)
            (b + "ffn_down.bias", take(h + "mlp.c_proj.bias", (C,))),
        ]
    out += [("output_norm.weight", take("ln_f.weight", (C,))), ("output_norm.bias", take("ln_f.bias", (C,)))]
    if "lm_head.weight" in st and not cfg["tied"]:
        out.append(("output.weight", take("lm_head.weight", (V, C))))              # (V, C)
    elif cfg["tied"]:
        st.pop("lm_head.weight", None)  # a tied checkpoint may store the copy; wte is the one used
        out.append(("output.weight", out[0][1]))
    else:
        raise ConvertError(f"{path}: tie_word_embeddings is false but there is no lm_head.weight")
    take.refuse_leftovers("GPT-2")
    return out


def pairs_from_halves(w, heads):
    """Rows of each head reordered from Hugging Face's rotate-half layout (first half, second half) to
    adjacent pairs: row i of the first half goes to 2i, row i of the second half to 2i + 1. (heads * D, ...)"""
    D = w.shape[0] // heads
    return w.reshape(heads, 2, D // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_tensors(folder, cfg):
    """-> [(gguf name, float32 ndarray)] of a Llama / Qwen2 folder, every shape checked against config.json."""
    path = os.path.join(folder, "model.safetensors")
    st = read_safetensors(path)
    V, C, F, L, H, K, D = cfg["V"], cfg["C"], cfg["F"], cfg["L"], cfg["H"], cfg["K"], cfg["D"]
    Q, KV = H * D, K * D
    take = TensorTaker(path, st)

    rope_pairs = cfg["arch"] == "llama"
    q_rows = (lambda w: pairs_from_halves(w, H)) if rope_pairs else (lambda w: w)
    k_rows = (lambda w: pairs_from_halves(w, K)) if rope_pairs else (lambda w: w)
    out = [("token_embd.weight", take("model.embed_tokens.weight", (V, C)))]
    for il in range(L):
        h, b = f"model.layers.{il}.", f"blk.{il}."
        out += [
            (b + "attn_norm.weight", take(h + "input_layernorm.weight", (C,))),
            (b + "attn_q.weight", q_rows(take(h + "self_attn.q_proj.weight", (Q, C)))),
            (b + "attn_k.weight", k_rows(take(h + "self_attn.k_proj.weight", (KV, C)))),
            (b + "attn_v.weight", take(h + "self_attn.v_proj.weight", (KV, C))),
            (b + "attn_output.weight", take(h + "self_attn.o_proj.weight", (C, Q))),
            (b + "ffn_norm.weight", take(h + "post_attention_layernorm.weight", (C,))),
            (b + "ffn_gate.weight", take(h + "mlp.gate_proj.weight", (F, C))),
            (b + "ffn_up.weight", take(h + "mlp.up_proj.weight", (F, C))),
            (b + "ffn_down.weight", take(h + "mlp.down_proj.weight", (C, F))),
        ]
        if cfg["bias"]:
            out += [(b + "attn_q.bias", take(h + "self_attn.q_proj.bias", (Q,))),
                    (b + "attn_k.bias", take(h + "self_attn.k_proj.bias", (KV,))),
                    (b + "attn_v.bias", take(h + "self_attn.v_proj.bias", (KV,)))]
    out.append(("output_norm.weight", take("model.norm.weight", (C,))))
    if not cfg["tied"]:
        out.append(("output.weight", take("lm_head.weight", (V, C))))
    elif "lm_head.weight" in st:
        take.used.add("lm_head.weight")  # a tied checkpoint may store the copy; embed_tokens is the one used
    take.refuse_leftovers(cfg["arch"])
    return out


# --- gguf-py ---------------------------------------------------------------------------------------

def import_gguf(gguf_py):
    where = gguf_py or os.environ.get("GGUF_PY") or (
        os.path.join(os.environ["LLAMA_CPP_DIR"], "gguf-py") if os.environ.get("LLAMA_CPP_DIR") else None)
    if not where or not os.path.isdir(os.path.join(where, "gguf")):
        raise ConvertError("gguf-py not found: pass --gguf-py DIR (llama.cpp's gguf-py folder) or set "
                           "GGUF_PY or LLAMA_CPP_DIR")
    sys.path.insert(0, where)
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        # gguf-py imports it at package load for Llama-style vocabularies; a GPT-2 file never uses it.
        sys.modules["sentencepiece"] = types.SimpleNamespace(SentencePieceProcessor=None)
    import gguf
    return gguf


def write(gguf, out_path, folder, cfg, tensors, vocab, f16):
    tokens, token_types, merges = vocab
    arch = {"gpt2": gguf.MODEL_ARCH.GPT2, "llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}[cfg["arch"]]
    w = gguf.GGUFWriter(out_path, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(os.path.basename(os.path.normpath(folder)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(cfg["P"])
    w.add_embedding_length(cfg["C"])
    w.add_feed_forward_length(cfg["F"])
    w.add_block_count(cfg["L"])
    w.add_head_count(cfg["H"])
    if cfg["arch"] == "gpt2":
        w.add_layer_norm_eps(cfg["eps"])
    else:
        w.add_head_count_kv(cfg["K"])
        w.add_key_length(cfg["D"])
        w.add_value_length(cfg["D"])
        w.add_rope_dimension_count(cfg["D"])
        w.add_rope_freq_base(cfg["theta"])
        w.add_layer_norm_rms_eps(cfg["eps"])
        w.add_vocab_size(cfg["V"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(merges)
    # kvscope feeds the prompt as given; llama.cpp must not put a BOS in front of it.
    w.add_add_bos_token(False)
    if cfg["bos"] is not None:
        w.add_bos_token_id(int(cfg["bos"]))
    if cfg["eos"] is not None:
        w.add_eos_token_id(int(cfg["eos"]))
    for name, t in tensors:
        t = np.ascontiguousarray(t, dtype=np.float16 if f16 and t.ndim == 2 else np.float32)
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def verify(gguf, out_path, tensors, f16, expected_arch):
    """Every tensor read back equals the folder's (rounded to F16 where it was written as F16)."""
    r = gguf.GGUFReader(out_path)
    got = {t.name: t for t in r.tensors}
    if set(got) != {n for n, _ in tensors}:
        raise ConvertError(f"{out_path}: tensors read back differ from those written")
    worst = 0.0
    for name, want in tensors:
        t = got[name]
        data = np.asarray(t.data).reshape(want.shape)  # gguf-py gives numpy order (outer first)
        expect = want.astype(np.float16).astype(np.float32) if f16 and want.ndim == 2 else want
        diff = float(np.max(np.abs(data.astype(np.float32) - expect)))
        worst = max(worst, diff)
        if diff != 0.0:
            raise ConvertError(f"{out_path}: tensor {name} differs from the folder by up to {diff:g}")
    arch = r.fields["general.architecture"]
    if bytes(arch.parts[arch.data[0]]).decode() != expected_arch:
        raise ConvertError(f"{out_path}: general.architecture is not {expected_arch}")
    return len(tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "f16"], default="f32")
    ap.add_argument("--gguf-py")
    ap.add_argument("--placeholder-vocab", action="store_true")
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args()
    try:
        gguf = import_gguf(a.gguf_py)
        cfg = folder_config(os.path.join(a.model_dir, "config.json"))
        tensors = gguf_tensors(a.model_dir, cfg) if cfg["arch"] == "gpt2" else llama_tensors(a.model_dir, cfg)
        vocab = read_vocab(a.model_dir, cfg, a.placeholder_vocab)
        tmp = a.out + ".part"
        write(gguf, tmp, a.model_dir, cfg, tensors, vocab, a.type == "f16")
        if a.verify:
            n = verify(gguf, tmp, tensors, a.type == "f16", cfg["arch"])
            print(f"verified: {n} tensors read back equal to the folder's", file=sys.stderr)
        os.replace(tmp, a.out)
    except (ConvertError, OSError, ValueError) as e:
        print(f"gguf_from_folder: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e6:.1f} MB, {a.type}, {len(tensors)} tensors)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
