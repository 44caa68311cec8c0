#!/usr/bin/python3
"""An independent GGUF writer and dequantizer (numpy only), written from the format's description:
GGUF v3 (magic, version, counts, metadata key/values, tensor infos, aligned data) and ggml's block
layouts (ggml-common.h's block structs). kvscope's C++ reader and dequantizers are checked against it.

  gguf_reference.py fixture OUT_DIR     OUT_DIR/fixture.gguf: metadata of every value type and one tensor of
                                        every type kvscope reads, with random block bytes; OUT_DIR/manifest.json
                                        (what the metadata holds) and OUT_DIR/<tensor>.f32 (each tensor
                                        dequantized by numpy, float32, row-major)
  gguf_reference.py convert FOLDER OUT.gguf TYPE [DEQUANTIZED_FOLDER]
                                        a Llama / Qwen2 / Qwen3 / Gemma 3 / GPT-2 model folder (config.json,
                                        model.safetensors) as llama.cpp's converter lays it out: its metadata
                                        keys, its tensor names, Q and K rows permuted for the "llama"
                                        architecture, Gemma's norm weights + 1, GPT-2's Conv1D matrices
                                        transposed and output.weight a copy of token_embd, Llama 3's
                                        rope_scaling as rope_freqs.weight; 2-D weights in TYPE
                                        (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K; K types need
                                        rows of 256). DEQUANTIZED_FOLDER: the same model with every weight
                                        as numpy dequantizes it, F32, in Hugging Face's layout; with
                                        FOLDER/tokenizer.json, its tokenizer.* keys too (as below)
  gguf_reference.py tokenizer FOLDER OUT.gguf
                                        only the tokenizer.* keys llama.cpp's converter writes for FOLDER's
                                        tokenizer.json + tokenizer_config.json: a byte-level BPE one as its gpt2
                                        path does, a SentencePiece one (Llama 2, Gemma 3) as its sentencepiece
                                        path does, with the scores rebuilt from the merges (spm_scores)
  gguf_reference.py seeds OUT_DIR       the fuzz targets' seeds (tools/fuzz.sh): OUT_DIR/model/*.gguf, tiny random
                                        models of every architecture, some with a tokenizer; OUT_DIR/tokenizer/*.gguf,
                                        tokenizer keys only, each byte-level pre-tokenizer and SentencePiece
"""
import json
import os
import struct
import sys

import numpy as np

# type: (ggml type number, weights per block, bytes per block)
TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
    "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210), "BF16": (30, 1, 2),
}
VALUE_TYPES = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7, "string": 8,
               "array": 9, "u64": 10, "i64": 11, "f64": 12}
SCALAR_FORMATS = {"u8": "<B", "i8": "<b", "u16": "<H", "i16": "<h", "u32": "<I", "i32": "<i", "f32": "<f",
                  "bool": "<?", "u64": "<Q", "i64": "<q", "f64": "<d"}


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, value):
    """kind: a scalar type name, "string", or ("array", item kind)."""
    if isinstance(kind, tuple):
        item = kind[1]
        out = struct.pack("<IIQ", VALUE_TYPES["array"], VALUE_TYPES[item], len(value))
        for v in value:
            out += gguf_string(v) if item == "string" else struct.pack(SCALAR_FORMATS[item], v)
        return out
    out = struct.pack("<I", VALUE_TYPES[kind])
    return out + (gguf_string(value) if kind == "string" else struct.pack(SCALAR_FORMATS[kind], value))


def write_gguf(path, metadata, tensors, alignment=32):
    """metadata: [(key, kind, value)]; tensors: [(name, type name, shape outer-to-inner, raw bytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        head += gguf_string(key) + gguf_value(kind, value)
    offsets, offset = [], 0
    for _, _, _, raw in tensors:
        offsets.append(offset)
        offset += (len(raw) + alignment - 1) // alignment * alignment
    for (name, tname, shape, _), off in zip(tensors, offsets):
        dims = list(reversed(shape))  # innermost first
        head += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", TYPES[tname][0], off)
    head += b"\0" * ((-len(head)) % alignment)
    with open(path, "wb") as f:
        f.write(head)
        for (_, _, _, raw), off in zip(tensors, offsets):
            f.write(raw + b"\0" * ((-len(raw)) % alignment))


def f16(blocks, at):
    """(n,) float32 from the float16 at byte `at` of each block."""
    return blocks[:, at:at + 2].copy().view("<f2").astype(np.float32).reshape(-1)


def nibbles(qs):
    """(n, 16) bytes -> (n, 32): low nibbles are weights 0..15, high nibbles 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def high_bits(blocks, at):
    """(n, 32) the 32 bits of a little-endian u32 at byte `at`, bit j for weight j."""
    qh = blocks[:, at:at + 4].copy().view("<u4").reshape(-1, 1)
    return ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)


def scales_mins(s):
    """(n, 12) packed 6-bit pairs -> (n, 8) scales, (n, 8) mins."""
    s = s.astype(np.int32)
    sc = np.empty((s.shape[0], 8), np.int32)
    mn = np.empty((s.shape[0], 8), np.int32)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def dequantize(tname, raw, n):
    """float32 (n,) weights from a tensor's raw bytes, operation for operation as ggml's reference."""
    _, qk, size = TYPES[tname]
    b = np.frombuffer(raw, np.uint8).reshape(-1, size)
    if tname == "F32":
        return np.frombuffer(raw, "<f4").astype(np.float32)
    if tname == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float32)
    if tname == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    if tname == "Q8_0":
        return (b[:, 2:].view(np.int8).astype(np.float32) * f16(b, 0)[:, None]).reshape(-1)
    if tname == "Q4_0":
        return ((nibbles(b[:, 2:]) - 8).astype(np.float32) * f16(b, 0)[:, None]).reshape(-1)
    if tname == "Q4_1":
        return (nibbles(b[:, 4:]).astype(np.float32) * f16(b, 0)[:, None] + f16(b, 2)[:, None]).reshape(-1)
    if tname == "Q5_0":
        q = nibbles(b[:, 6:]) | (high_bits(b, 2) << 4)
        return ((q - 16).astype(np.float32) * f16(b, 0)[:, None]).reshape(-1)
    if tname == "Q5_1":
        q = nibbles(b[:, 8:]) | (high_bits(b, 4) << 4)
        return (q.astype(np.float32) * f16(b, 0)[:, None] + f16(b, 2)[:, None]).reshape(-1)
    if tname in ("Q4_K", "Q5_K"):
        d, dmin = f16(b, 0)[:, None], f16(b, 2)[:, None]
        sc, mn = scales_mins(b[:, 4:16])
        qs = b[:, 48:] if tname == "Q5_K" else b[:, 16:]
        qs = qs.reshape(-1, 4, 32).astype(np.int32)            # 4 runs of 32 bytes
        q = np.stack([qs & 0x0F, qs >> 4], axis=2)             # (n, run, half, 32): sub-block 2 run + half
        q = q.reshape(-1, 8, 32)
        if tname == "Q5_K":
            qh = b[:, 16:48].astype(np.int32)[:, None, :]      # bit j of byte l: sub-block j, weight l
            q = q + (((qh >> np.arange(8)[None, :, None]) & 1) << 4)
        dl = (d * sc)[:, :, None]
        ml = (dmin * mn)[:, :, None]
        return (dl * q.astype(np.float32) - ml).reshape(-1)
    if tname == "Q6_K":
        ql = b[:, :128].reshape(-1, 2, 64).astype(np.int32)    # per run of 128 weights: 64 bytes
        qh = b[:, 128:192].reshape(-1, 2, 32).astype(np.int32)
        sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(-1, 2, 8)
        d = f16(b, 208)[:, None, None]
        parts = []
        for k in range(4):                                      # weights 32k .. 32k+31 of the run
            low = ql[:, :, 32 * (k % 2):32 * (k % 2) + 32]
            nib = (low & 0x0F) if k < 2 else (low >> 4)
            q = (nib | (((qh >> (2 * k)) & 3) << 4)) - 32
            s = np.repeat(sc[:, :, 2 * k:2 * k + 2], 16, axis=2)  # weight l uses scale 2k + l // 16
            parts.append(d * s * q.astype(np.float32))
        return np.concatenate(parts, axis=2).reshape(-1)
    raise ValueError(tname)


def random_blocks(tname, n_blocks, rng):
    """Random block bytes whose float16 fields are finite (ordinary, tiny, zero and negative scales)."""
    _, qk, size = TYPES[tname]
    if tname == "F32":
        return rng.standard_normal(n_blocks).astype("<f4").tobytes()
    if tname == "F16":
        return rng.standard_normal(n_blocks).astype("<f2").tobytes()
    if tname == "BF16":
        return (rng.standard_normal(n_blocks).astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    scales = rng.standard_normal(n_blocks).astype(np.float32) * np.float32(0.05)
    scales[0] = 0.0
    if n_blocks > 2:
        scales[1] = -1.5
        scales[2] = 6e-6  # a float16 subnormal
    halves = scales.astype("<f2").view(np.uint8).reshape(-1, 2)
    fields = {"Q6_K": [208], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2]}.get(tname, [0])
    for at in fields:
        b[:, at:at + 2] = halves[::-1] if at else halves
    return b.tobytes()


def fixture(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    metadata = [
        ("general.architecture", "string", "test"),
        ("general.alignment", "u32", 64),
        ("test.u8", "u8", 200), ("test.i8", "i8", -100), ("test.u16", "u16", 60000), ("test.i16", "i16", -30000),
        ("test.u32", "u32", 4000000000), ("test.i32", "i32", -2000000000), ("test.f32", "f32", 0.1),
        ("test.bool", "bool", True), ("test.string", "string", "Grüße, 世界"),
        ("test.u64", "u64", 2**62 + 5), ("test.i64", "i64", -(2**62) - 7), ("test.f64", "f64", 1e-300),
        ("test.ints", ("array", "i32"), [3, -1, 4, 1, -5]),
        ("test.reals", ("array", "f32"), [0.5, -2.25, 1e-3]),
        ("test.strings", ("array", "string"), ["a", "", "Ġhello", "<|im_end|>"]),
        ("test.empty", ("array", "u8"), []),
    ]
    tensors, manifest = [], {"metadata": {}, "tensors": {}}
    for key, kind, value in metadata:
        k = kind[0] if isinstance(kind, tuple) else kind
        if k == "f32":
            value = float(np.float32(value))
        if isinstance(kind, tuple) and kind[1] == "f32":
            value = [float(np.float32(v)) for v in value]
        manifest["metadata"][key] = {"type": k, "value": value}
    for i, tname in enumerate(TYPES):
        _, qk, _ = TYPES[tname]
        rows, cols = 3, 512 if qk == 256 else 96
        raw = random_blocks(tname, rows * cols // qk, rng)
        name = "t%d.%s" % (i, tname.lower())
        tensors.append((name, tname, [rows, cols], raw))
        dequantize(tname, raw, rows * cols).astype("<f4").tofile(os.path.join(out, name + ".f32"))
        manifest["tensors"][name] = {"type": tname, "shape": [rows, cols], "bytes": len(raw)}
    write_gguf(os.path.join(out, "fixture.gguf"), metadata, tensors, alignment=64)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, ensure_ascii=False)


# --- quantizers: round to nearest, any valid encoding (the reader is checked by dequantizing, not by
# matching ggml's quantizer) ---

def as_f16(x):
    return np.asarray(x, np.float32).astype("<f2")


def pack_nibbles(q):
    """(n, 32) values 0..15 -> (n, 16) bytes: weight j low nibble, weight j + 16 high nibble."""
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def pack_high(q):
    """(n, 32) values 0..31 -> (n, 4) bytes of the 32 fifth bits, little-endian u32, bit j = weight j."""
    bits = ((q >> 4) & 1).astype(np.uint64)
    word = (bits << np.arange(32, dtype=np.uint64)).sum(axis=1).astype("<u4")
    return word.view(np.uint8).reshape(-1, 4)


def safe_div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, 0, a / np.where(b == 0, 1, b))


def quantize_small(tname, x):
    blocks = x.reshape(-1, 32).astype(np.float32)
    if tname == "Q8_0":
        d = as_f16(np.abs(blocks).max(axis=1) / 127)
        q = np.clip(np.rint(safe_div(blocks, d.astype(np.float32)[:, None])), -127, 127).astype(np.int8)
        return np.concatenate([d.view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1)
    with_min = tname in ("Q4_1", "Q5_1")
    levels = 15 if tname.startswith("Q4") else 31
    if with_min:
        lo, hi = blocks.min(axis=1), blocks.max(axis=1)
        d, m = as_f16((hi - lo) / levels), as_f16(lo)
        q = np.rint(safe_div(blocks - m.astype(np.float32)[:, None], d.astype(np.float32)[:, None]))
        q = np.clip(q, 0, levels).astype(np.int64)
        head = [d.view(np.uint8).reshape(-1, 2), m.view(np.uint8).reshape(-1, 2)]
    else:
        offset = (levels + 1) // 2
        d = as_f16(np.abs(blocks).max(axis=1) / offset)
        q = np.clip(np.rint(safe_div(blocks, d.astype(np.float32)[:, None])) + offset, 0, levels).astype(np.int64)
        head = [d.view(np.uint8).reshape(-1, 2)]
    if levels == 31:
        head.append(pack_high(q))
    return np.concatenate(head + [pack_nibbles(q & 0x0F)], axis=1)


def pack_scales_mins(sc, mn):
    """(n, 8) 6-bit scales and mins -> (n, 12) bytes, the inverse of scales_mins."""
    out = np.zeros((sc.shape[0], 12), np.int64)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((mn[:, 4:8] & 0x0F) << 4)
    return out.astype(np.uint8)


def quantize_k(tname, x):
    blocks = x.reshape(-1, 8, 32).astype(np.float32)
    if tname == "Q6_K":
        sub = x.reshape(-1, 16, 16).astype(np.float32)
        s = np.abs(sub).max(axis=2) / 31                      # per 16 weights
        d = as_f16(np.abs(s).max(axis=1) / 127)
        sc = np.clip(np.rint(safe_div(s, d.astype(np.float32)[:, None])), -128, 127).astype(np.int64)
        step = d.astype(np.float32)[:, None] * sc.astype(np.float32)
        q = np.clip(np.rint(safe_div(sub, step[:, :, None])) + 32, 0, 63).astype(np.int64).reshape(-1, 2, 4, 32)
        # run r, part k (weights 32k..32k+31 of the run): low nibble into ql[64r + 32(k%2) + l], (k>=2: high)
        ql = np.zeros((q.shape[0], 2, 64), np.int64)
        qh = np.zeros((q.shape[0], 2, 32), np.int64)
        for k in range(4):
            lo = q[:, :, k, :] & 0x0F
            ql[:, :, 32 * (k % 2):32 * (k % 2) + 32] |= lo if k < 2 else lo << 4
            qh |= ((q[:, :, k, :] >> 4) & 3) << (2 * k)
        return np.concatenate([ql.reshape(-1, 128).astype(np.uint8), qh.reshape(-1, 64).astype(np.uint8),
                               sc.astype(np.int8).view(np.uint8), d.view(np.uint8).reshape(-1, 2)], axis=1)
    levels = 15 if tname == "Q4_K" else 31
    lo = np.minimum(blocks.min(axis=2), 0)                    # w = step * q - min, min >= 0
    scale = (blocks.max(axis=2) - lo) / levels
    d, dmin = as_f16(scale.max(axis=1) / 63), as_f16((-lo).max(axis=1) / 63)
    sc = np.clip(np.rint(safe_div(scale, d.astype(np.float32)[:, None])), 0, 63).astype(np.int64)
    mn = np.clip(np.rint(safe_div(-lo, dmin.astype(np.float32)[:, None])), 0, 63).astype(np.int64)
    step = d.astype(np.float32)[:, None] * sc.astype(np.float32)
    base = dmin.astype(np.float32)[:, None] * mn.astype(np.float32)
    q = np.clip(np.rint(safe_div(blocks + base[:, :, None], step[:, :, None])), 0, levels).astype(np.int64)
    q4 = q.reshape(-1, 4, 2, 32)                                # run, half, weight
    qs = ((q4[:, :, 0, :] & 0x0F) | ((q4[:, :, 1, :] & 0x0F) << 4)).reshape(-1, 128).astype(np.uint8)
    parts = [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), pack_scales_mins(sc, mn)]
    if levels == 31:
        qh = np.zeros((q.shape[0], 32), np.int64)
        for j in range(8):
            qh |= ((q[:, j, :] >> 4) & 1) << j
        parts.append(qh.astype(np.uint8))
    return np.concatenate(parts + [qs], axis=1)


def quantize(tname, x):
    """raw bytes of float32 array x (row-major, rows a multiple of the block) in type tname."""
    x = np.ascontiguousarray(x, np.float32)
    if x.shape[-1] % TYPES[tname][1]:
        sys.exit("convert: rows of %d values do not fill %s blocks of %d" % (x.shape[-1], tname, TYPES[tname][1]))
    if tname == "F32":
        return x.astype("<f4").tobytes()
    if tname == "F16":
        return x.astype("<f2").tobytes()
    if tname == "BF16":  # round to nearest even
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
    if tname.endswith("_K"):
        return quantize_k(tname, x).tobytes()
    return quantize_small(tname, x).tobytes()


# --- a Hugging Face folder as llama.cpp's converter writes it ---

def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], kinds[info["dtype"]])
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.astype(np.float32).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def permute_rows(w, n_heads):
    """llama.cpp's Q/K row order for the "llama" architecture: each head's two halves interleaved."""
    d = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rows(w, n_heads):
    d = w.shape[0] // n_heads
    return w.reshape(n_heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")


def pre_name(pre):
    """llama.cpp's tokenizer.ggml.pre for a tokenizer.json pre_tokenizer (its converter hashes a tokenization;
    this maps the structures the families kvscope reads use)."""
    steps = pre["pretokenizers"] if pre and pre["type"] == "Sequence" else [pre]
    kinds = [p["type"] for p in steps if p]
    if kinds == ["ByteLevel"]:
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"]:
        return "smollm"
    if kinds == ["Split", "ByteLevel"]:
        regex = steps[0]["pattern"].get("Regex")
        return {LLAMA3_REGEX: "llama-bpe", QWEN2_REGEX: "qwen2"}.get(regex, "unknown")
    return "unknown"


def read_tokenizer(folder):
    tok = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    config_path = os.path.join(folder, "tokenizer_config.json")
    config = json.load(open(config_path, encoding="utf-8")) if os.path.exists(config_path) else {}
    return tok, config


def is_sentencepiece(tok):
    """gguf-py's LlamaHfVocab test: a BPE tokenizer.json with byte_fallback and a decoder Sequence is a
    SentencePiece model that Hugging Face converted (Llama 2, Mistral, Gemma)."""
    model = tok["model"]
    return model["type"] == "BPE" and model.get("byte_fallback", False) and (tok.get("decoder") or {}).get("type") == "Sequence"


def tokenizer_metadata(folder, vocab_size=0):
    tok, config = read_tokenizer(folder)
    if is_sentencepiece(tok):
        return spm_tokenizer_metadata(tok, config, vocab_size)
    return bpe_tokenizer_metadata(tok, config, vocab_size)


def token_of(value):
    return value["content"] if isinstance(value, dict) else value


def special_metadata(config, ids, names=("bos", "eos")):
    """tokenizer.ggml.<name>_token_id from tokenizer_config.json (gguf-py's SpecialVocab)."""
    out = []
    for name in names:
        if config.get(name + "_token") is not None:
            out.append(("tokenizer.ggml.%s_token_id" % name, "u32", ids[token_of(config[name + "_token"])]))
    return out


def chat_template_metadata(config):
    template = config.get("chat_template")
    if isinstance(template, list):
        template = {t["name"]: t["template"] for t in template}.get("default")
    return [] if template is None else [("tokenizer.chat_template", "string", template)]


def bpe_tokenizer_metadata(tok, config, vocab_size):
    """The tokenizer.* keys llama.cpp's converter writes for a byte-level BPE tokenizer.json (its gpt2 path):
    every id below vocab_size, added tokens CONTROL (special) or USER_DEFINED, missing ids "[PAD<id>]" UNUSED."""
    model = tok["model"]
    ids = dict(model["vocab"])
    special = {}
    for a in tok.get("added_tokens", []):
        ids[a["content"]] = a["id"]
        special[a["id"]] = a.get("special", False)
    by_id = {i: t for t, i in ids.items()}
    n = max(vocab_size, max(by_id) + 1)
    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            tokens.append("[PAD%d]" % i)
            types.append(5)
        else:
            tokens.append(by_id[i])
            types.append((3 if special[i] else 4) if i in special else 1)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    single = (tok.get("post_processor") or {}).get("single") or []
    add_bos = config.get("add_bos_token", bool(single) and "SpecialToken" in single[0])
    meta = [("tokenizer.ggml.model", "string", "gpt2"),
            ("tokenizer.ggml.pre", "string", pre_name(tok.get("pre_tokenizer"))),
            ("tokenizer.ggml.tokens", ("array", "string"), tokens),
            ("tokenizer.ggml.token_type", ("array", "i32"), types),
            ("tokenizer.ggml.merges", ("array", "string"), merges)]
    meta += special_metadata(config, ids)
    meta.append(("tokenizer.ggml.add_bos_token", "bool", bool(add_bos)))
    return meta + chat_template_metadata(config)


def spm_scores(vocab, merges):
    """SentencePiece scores for the pieces of a converted tokenizer.json, which keeps the merges but not the
    scores they were made from. Hugging Face's converter (convert_slow_tokenizer.generate_merges) lists every
    split of every piece into two pieces, ordered by the piece's score (highest first), then the left and
    right lengths (longest first), then piece id and the sides' ids. Walking the merges in order, a merge
    stays on the score of the one before it while that order holds, and starts a lower score where it
    breaks. Pieces no merge makes get scores below every merged piece (SentencePiece's BPE lists single
    characters last)."""
    score, level, prev = {}, 0, None
    for left, right in merges:
        piece = left + right
        key = (-len(left), -len(right), vocab[piece], vocab[left], vocab[right])
        if prev is not None and key <= prev:
            level += 1
        prev = key
        score.setdefault(piece, -float(level))
    return [score.get(p, -float(level + 1 + i)) for p, i in sorted(vocab.items(), key=lambda kv: kv[1])]


def does_token_look_special(text):
    """llama.cpp's converter types these CONTROL although Gemma's tokenizer_config.json says not special."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def spm_tokenizer_metadata(tok, config, vocab_size):
    """The tokenizer.* keys llama.cpp's converter writes for a SentencePiece model (_create_vocab_sentencepiece),
    from the tokenizer.json Hugging Face made of it: the pieces by id with their scores (see spm_scores) and
    types (UNKNOWN for model.unk_token, CONTROL for special added tokens, BYTE for <0xNN>, NORMAL), then
    tokenizer_config.json's added_tokens_decoder as llama.cpp applies it: special (or looking special) ->
    CONTROL, otherwise USER_DEFINED with "\u2581" written as a space; both score -1000."""
    model = tok["model"]
    vocab = dict(model["vocab"])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    n = max([vocab_size, len(vocab)] + [a["id"] + 1 for a in tok.get("added_tokens", [])])
    tokens = ["[PAD%d]" % i for i in range(n)]
    scores = [-10000.0] * n
    types = [5] * n
    special = {a["content"] for a in tok.get("added_tokens", []) if a.get("special")}
    for i, (piece, s) in enumerate(zip(sorted(vocab, key=vocab.get), spm_scores(vocab, merges))):
        tokens[i], scores[i] = piece, s
        types[i] = (2 if piece == model.get("unk_token") else 3 if piece in special
                    else 6 if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">") else 1)
    for key, data in config.get("added_tokens_decoder", {}).items():
        i, text = int(key), data["content"]
        if i >= n:
            continue
        if data.get("special") or does_token_look_special(text):
            types[i] = 3
        else:
            types[i] = 4
            text = text.replace("\u2581", " ")
        tokens[i], scores[i] = text, -1000.0
    meta = [("tokenizer.ggml.model", "string", "llama"), ("tokenizer.ggml.pre", "string", "default"),
            ("tokenizer.ggml.tokens", ("array", "string"), tokens),
            ("tokenizer.ggml.scores", ("array", "f32"), scores),
            ("tokenizer.ggml.token_type", ("array", "i32"), types)]
    meta += special_metadata(config, {**vocab, **{a["content"]: a["id"] for a in tok.get("added_tokens", [])}},
                             ("bos", "eos", "unk", "pad"))
    for key in ("add_bos_token", "add_eos_token"):
        if key in config:
            meta.append(("tokenizer.ggml." + key, "bool", bool(config[key])))
    # Gemma's converter writes add_space_prefix false; Llama's only when tokenizer_config.json says
    # add_prefix_space. A tokenizer.json without a Prepend normalizer is Gemma's.
    normalizers = (tok.get("normalizer") or {}).get("normalizers") or [tok.get("normalizer") or {}]
    if "add_prefix_space" in config:
        meta.append(("tokenizer.ggml.add_space_prefix", "bool", bool(config["add_prefix_space"])))
    elif not any(step.get("type") == "Prepend" for step in normalizers):
        meta.append(("tokenizer.ggml.add_space_prefix", "bool", False))
    return meta + chat_template_metadata(config)


def convert_tokenizer(folder, out):
    write_gguf(out, [("general.architecture", "string", "llama")] + tokenizer_metadata(folder), [])


GEMMA3_LAYER_NAMES = dict(LAYER_NAMES, **{
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight"})

GPT2_LAYER_NAMES = {
    "ln_1.weight": "attn_norm.weight", "ln_1.bias": "attn_norm.bias",
    "attn.c_attn.weight": "attn_qkv.weight", "attn.c_attn.bias": "attn_qkv.bias",
    "attn.c_proj.weight": "attn_output.weight", "attn.c_proj.bias": "attn_output.bias",
    "ln_2.weight": "ffn_norm.weight", "ln_2.bias": "ffn_norm.bias",
    "mlp.c_fc.weight": "ffn_up.weight", "mlp.c_fc.bias": "ffn_up.bias",
    "mlp.c_proj.weight": "ffn_down.weight", "mlp.c_proj.bias": "ffn_down.bias",
}


def llama_metadata(arch, cfg, name):
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    gemma3 = arch == "gemma3"
    meta = [
        ("general.architecture", "string", arch),
        ("general.name", "string", name),
        (arch + ".context_length", "u32", cfg["max_position_embeddings"]),
        (arch + ".embedding_length", "u32", cfg["hidden_size"]),
        (arch + ".block_count", "u32", cfg["num_hidden_layers"]),
        (arch + ".feed_forward_length", "u32", cfg["intermediate_size"]),
        (arch + ".attention.head_count", "u32", n_head),
        (arch + ".attention.head_count_kv", "u32", n_kv),
        (arch + ".attention.key_length", "u32", head_dim),
        (arch + ".attention.value_length", "u32", head_dim),
        (arch + ".attention.layer_norm_rms_epsilon", "f32", cfg.get("rms_norm_eps", 1e-6)),
        (arch + ".rope.freq_base", "f32", cfg.get("rope_theta", 1000000.0 if gemma3 else 10000.0)),
    ]
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":  # LlamaModel / Gemma3Model
        meta += [(arch + ".rope.scaling.type", "string", "linear"),
                 (arch + ".rope.scaling.factor", "f32", scaling["factor"])]
    if not gemma3:
        meta.append((arch + ".rope.dimension_count", "u32", head_dim))
        return meta
    # Gemma3Model writes the window; llama.cpp's loader assumes the rest (five sliding layers in six, local
    # base 10000, queries scaled by 1 / sqrt(head_dim)). Where the folder differs, the keys kvscope reads
    # say so: attention.sliding_window_pattern (a count, or a bool per layer from layer_types),
    # rope.freq_base_swa, attention.scale, final_logit_softcapping.
    meta.append(("gemma3.attention.sliding_window", "u32", cfg.get("sliding_window") or 4096))
    if cfg.get("layer_types"):
        meta.append(("gemma3.attention.sliding_window_pattern", ("array", "bool"),
                     [t == "sliding_attention" for t in cfg["layer_types"]]))
    elif cfg.get("sliding_window_pattern", 6) != 6:
        meta.append(("gemma3.attention.sliding_window_pattern", "u32", cfg["sliding_window_pattern"]))
    if cfg.get("rope_local_base_freq", 10000.0) != 10000.0:
        meta.append(("gemma3.rope.freq_base_swa", "f32", cfg["rope_local_base_freq"]))
    scalar = cfg.get("query_pre_attn_scalar", 256)
    if scalar != head_dim:
        meta.append(("gemma3.attention.scale", "f32", float(np.float32(scalar ** -0.5))))
    if cfg.get("final_logit_softcapping") is not None:
        meta.append(("gemma3.final_logit_softcapping", "f32", cfg["final_logit_softcapping"]))
    return meta


def llama3_rope_freqs(cfg, head_dim):
    """Llama 3's rope_scaling as the tensor LlamaModel.generate_extra_tensors writes (rope_freqs.weight, F32):
    per frequency a divisor, 1 for wavelengths under original / high_freq_factor, factor over original /
    low_freq_factor, 1 / ((1 - smooth) / factor + smooth) between. float32 throughout as the converter's
    torch tensors are. original_max_position_embeddings comes from rope_scaling, as Hugging Face reads it (the
    converter looks for it at the top level and falls back to 8192, which every released Llama 3.x has)."""
    scaling = cfg["rope_scaling"]
    f32 = np.float32
    base, factor = f32(cfg.get("rope_theta", 10000.0)), f32(scaling.get("factor", 8.0))
    low, high = f32(scaling.get("low_freq_factor", 1.0)), f32(scaling.get("high_freq_factor", 4.0))
    old = f32(scaling.get("original_max_position_embeddings", 8192))
    freqs = f32(1) / base ** (np.arange(0, head_dim, 2, dtype=np.float32) / f32(head_dim))
    wavelen = f32(2 * np.pi) / freqs
    smooth = (old / wavelen - low) / f32(float(high) - float(low))
    between = f32(1) / ((f32(1) - smooth) / factor + smooth)
    divisors = np.where(wavelen < old / high, f32(1), np.where(wavelen > old / low, factor, between))
    return divisors.astype(np.float32)


def gpt2_metadata(cfg, name):
    n_embd = cfg["n_embd"]
    return [
        ("general.architecture", "string", "gpt2"),
        ("general.name", "string", name),
        ("gpt2.block_count", "u32", cfg["n_layer"]),
        ("gpt2.context_length", "u32", cfg.get("n_ctx", cfg["n_positions"])),
        ("gpt2.embedding_length", "u32", n_embd),
        ("gpt2.feed_forward_length", "u32", cfg.get("n_inner") or 4 * n_embd),
        ("gpt2.attention.head_count", "u32", cfg["n_head"]),
        ("gpt2.attention.layer_norm_epsilon", "f32", cfg.get("layer_norm_epsilon", 1e-5)),
    ]


def convert(folder, out, tname, dequantized_folder=None):
    """What llama.cpp's converter does to each tensor, and back: the dequantized folder holds what a reader
    that undoes it all (Q/K permutation, Gemma's norm + 1, GPT-2's transposes) must find."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    weights = read_safetensors(os.path.join(folder, "model.safetensors"))
    name = os.path.basename(os.path.normpath(folder))
    tokenizer = tokenizer_metadata(folder, cfg["vocab_size"]) if os.path.exists(os.path.join(folder, "tokenizer.json")) else []
    metadata, tensors, deq = convert_weights(cfg, weights, tname, name, tokenizer)
    write_gguf(out, metadata, tensors)
    if dequantized_folder:
        os.makedirs(dequantized_folder, exist_ok=True)
        write_safetensors(os.path.join(dequantized_folder, "model.safetensors"), deq)
        with open(os.path.join(dequantized_folder, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)


def convert_weights(cfg, weights, tname, name, tokenizer):
    """convert's work on a config.json dict and its {Hugging Face name: float32 array}: -> (metadata, tensors
    as write_gguf takes them, {Hugging Face name: the weight as numpy dequantizes it})."""
    model_type = cfg.get("model_type", "gpt2")
    arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3",
            "gpt2": "gpt2"}.get(model_type)
    if arch is None:
        sys.exit("convert: model_type %r is not one this writer converts" % model_type)
    metadata = gpt2_metadata(cfg, name) if arch == "gpt2" else llama_metadata(arch, cfg, name)
    n_head = cfg.get("num_attention_heads", cfg.get("n_head"))
    n_kv = cfg.get("num_key_value_heads", n_head)
    metadata += tokenizer
    tensors, deq = [], {}

    def add(gguf_name, hf_name, w, quantized):
        permuted = arch == "llama" and gguf_name.endswith(("attn_q.weight", "attn_k.weight"))
        transposed = arch == "gpt2" and gguf_name.endswith(("attn_qkv.weight", "attn_output.weight", "ffn_up.weight",
                                                            "ffn_down.weight"))
        shifted = arch == "gemma3" and gguf_name.endswith("norm.weight")
        if permuted:
            w = permute_rows(w, n_head if "attn_q" in gguf_name else n_kv)
        if transposed:
            w = np.ascontiguousarray(w.T)
        if shifted:
            w = (w + np.float32(1)).astype(np.float32)
        t = tname if quantized and w.ndim == 2 else "F32"
        raw = quantize(t, w)
        tensors.append((gguf_name, t, list(w.shape), raw))
        back = dequantize(t, raw, w.size).reshape(w.shape)
        if permuted:
            back = unpermute_rows(back, n_head if "attn_q" in gguf_name else n_kv)
        if transposed:
            back = np.ascontiguousarray(back.T)
        if shifted:
            back = (back - np.float32(1)).astype(np.float32)
        if hf_name is not None:
            deq[hf_name] = back
        return raw

    if arch == "gpt2":
        raw = add("token_embd.weight", "wte.weight", weights["wte.weight"], True)
        add("position_embd.weight", "wpe.weight", weights["wpe.weight"], True)
        for i in range(cfg["n_layer"]):
            for hf, gg in GPT2_LAYER_NAMES.items():
                if "h.%d.%s" % (i, hf) in weights:
                    add("blk.%d.%s" % (i, gg), "h.%d.%s" % (i, hf), weights["h.%d.%s" % (i, hf)], True)
        add("output_norm.weight", "ln_f.weight", weights["ln_f.weight"], False)
        add("output_norm.bias", "ln_f.bias", weights["ln_f.bias"], False)
        # GPT2Model: "output is tied to (same as) wte": the embedding's bytes again, as output.weight
        tensors.append(("output.weight",) + tensors[0][1:3] + (raw,))
    else:
        scaling = cfg.get("rope_scaling") or {}
        if scaling.get("rope_type", scaling.get("type")) == "llama3":  # no metadata keys: one tensor, first
            if arch != "llama":
                sys.exit("convert: llama3 rope_scaling is written for the llama architecture only")
            head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
            factors = llama3_rope_freqs(cfg, head_dim)
            tensors.append(("rope_freqs.weight", "F32", list(factors.shape), factors.astype("<f4").tobytes()))
        names = GEMMA3_LAYER_NAMES if arch == "gemma3" else LAYER_NAMES
        add("token_embd.weight", "model.embed_tokens.weight", weights["model.embed_tokens.weight"], True)
        for i in range(cfg["num_hidden_layers"]):
            for hf, gg in names.items():
                if "model.layers.%d.%s" % (i, hf) in weights:
                    add("blk.%d.%s" % (i, gg), "model.layers.%d.%s" % (i, hf), weights["model.layers.%d.%s" % (i, hf)], True)
        add("output_norm.weight", "model.norm.weight", weights["model.norm.weight"], False)
        # Gemma3Model skips lm_head (tied)
        if "lm_head.weight" in weights and not cfg.get("tie_word_embeddings", False) and arch != "gemma3":
            add("output.weight", "lm_head.weight", weights["lm_head.weight"], True)
    return metadata, tensors, deq


# --- fuzz seeds: tiny valid files of every architecture and tokenizer kind (tests/fuzz/, tools/fuzz.sh) ---

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
BOS_TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}{{ eos_token }}{% endfor %}"


def byte_level_chars():
    """GPT-2's bytes_to_unicode: the character each byte is written as in a byte-level vocabulary."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, n = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def seed_bpe_tokenizer(pre):
    """A byte-level BPE tokenizer.json (as a dict) and its tokenizer_config.json for tokenizer.ggml.pre `pre`:
    the 256 byte characters, four merges, two special added tokens and one that is not."""
    vocab = {c: i for i, c in enumerate(byte_level_chars())}
    space = byte_level_chars()[ord(" ")]
    merges = [("a", "b"), (space, "a"), ("ab", "c"), (space + "a", "b"), ("1", "2")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    n = len(vocab)
    added = [{"id": n, "content": "<|bos|>", "special": True}, {"id": n + 1, "content": "<|im_end|>", "special": True},
             {"id": n + 2, "content": "<t>", "special": False}]
    split = {"Regex": {"llama-bpe": LLAMA3_REGEX, "qwen2": QWEN2_REGEX}.get(pre, "")}
    steps = {"llama-bpe": [{"type": "Split", "pattern": split}, {"type": "ByteLevel"}],
             "qwen2": [{"type": "Split", "pattern": split}, {"type": "ByteLevel"}],
             "smollm": [{"type": "Digits"}, {"type": "ByteLevel"}], "gpt-2": [{"type": "ByteLevel"}]}[pre]
    bos = pre == "llama-bpe"
    tok = {"added_tokens": added, "pre_tokenizer": {"type": "Sequence", "pretokenizers": steps},
           "post_processor": {"single": [{"SpecialToken": {"id": "<|bos|>"}}, {"Sequence": {"id": "A"}}]} if bos else None,
           "model": {"type": "BPE", "vocab": vocab, "merges": [" ".join(m) for m in merges]}}
    config = {"eos_token": "<|im_end|>", "chat_template": CHATML}
    if bos:
        config["bos_token"] = "<|bos|>"
    return tok, config


def seed_spm_tokenizer(prefix):
    """A SentencePiece tokenizer.json (as Hugging Face converts one) and its tokenizer_config.json: <unk> <s> </s>,
    the 256 byte pieces, six merged pieces; prefix: Llama 2's Prepend normalizer, else Gemma's none, with a
    user-defined "▁▁" (llama.cpp's converter writes it as two spaces)."""
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + ["\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"]
    vocab = {p: i for i, p in enumerate(pieces)}
    added = [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True},
             {"id": 2, "content": "</s>", "special": True}]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace]} if prefix else replace
    config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "chat_template": BOS_TEMPLATE}
    if not prefix:
        added.append({"id": len(vocab), "content": "\u2581\u2581", "special": False})
        config["added_tokens_decoder"] = {str(len(vocab)): {"content": "\u2581\u2581", "special": False}}
    tok = {"added_tokens": added, "normalizer": normalizer, "decoder": {"type": "Sequence"},
           "model": {"type": "BPE", "vocab": vocab, "merges": ["\u2581 a", "a b", "\u2581a b"], "byte_fallback": True,
                     "unk_token": "<unk>"}}
    return tok, config


def seed_tokenizer_metadata(kind):
    """kind: a byte-level tokenizer.ggml.pre name, "spm" (Llama 2) or "spm-gemma"."""
    if kind.startswith("spm"):
        tok, config = seed_spm_tokenizer(kind == "spm")
        return spm_tokenizer_metadata(tok, config, 0)
    tok, config = seed_bpe_tokenizer(kind)
    return bpe_tokenizer_metadata(tok, config, 0)


def seed_config(model_type, hidden, layers, vocab, **extra):
    """A config.json dict of tiny shapes: 2 heads (1 K/V head), head_dim hidden / 2, 16 positions."""
    if model_type == "gpt2":
        cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 16, "n_embd": hidden, "n_layer": layers,
               "n_head": 2, "layer_norm_epsilon": 1e-5}
    else:
        cfg = {"model_type": model_type, "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": hidden,
               "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": hidden // 2,
               "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "tie_word_embeddings": model_type == "gemma3_text"}
    cfg.update(extra)
    return cfg


def seed_weights(cfg, rng):
    """Random weights of every tensor the config's model has, by Hugging Face name."""
    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    vocab = cfg["vocab_size"]
    if cfg["model_type"] == "gpt2":
        c = cfg["n_embd"]
        out = {"wte.weight": w(vocab, c), "wpe.weight": w(cfg["n_positions"], c), "ln_f.weight": norm(c), "ln_f.bias": w(c)}
        for i in range(cfg["n_layer"]):
            shapes = {"ln_1.weight": None, "ln_1.bias": (c,), "attn.c_attn.weight": (c, 3 * c), "attn.c_attn.bias": (3 * c,),
                      "attn.c_proj.weight": (c, c), "attn.c_proj.bias": (c,), "ln_2.weight": None, "ln_2.bias": (c,),
                      "mlp.c_fc.weight": (c, 4 * c), "mlp.c_fc.bias": (4 * c,), "mlp.c_proj.weight": (4 * c, c),
                      "mlp.c_proj.bias": (c,)}
            for name, shape in shapes.items():
                out["h.%d.%s" % (i, name)] = norm(c) if shape is None else w(*shape)
        return out
    c, f, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    out = {"model.embed_tokens.weight": w(vocab, c), "model.norm.weight": norm(c)}
    if not cfg["tie_word_embeddings"]:
        out["lm_head.weight"] = w(vocab, c)
    for i in range(cfg["num_hidden_layers"]):
        shapes = {"input_layernorm.weight": None, "post_attention_layernorm.weight": None,
                  "self_attn.q_proj.weight": (q, c), "self_attn.k_proj.weight": (kv, c), "self_attn.v_proj.weight": (kv, c),
                  "self_attn.o_proj.weight": (c, q), "mlp.gate_proj.weight": (f, c), "mlp.up_proj.weight": (f, c),
                  "mlp.down_proj.weight": (c, f)}
        if cfg["model_type"] == "qwen2":
            shapes.update({"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,)})
        if cfg["model_type"] in ("qwen3", "gemma3_text"):
            shapes.update({"self_attn.q_norm.weight": (d,), "self_attn.k_norm.weight": (d,)})
        if cfg["model_type"] == "gemma3_text":
            shapes.update({"pre_feedforward_layernorm.weight": None, "post_feedforward_layernorm.weight": None})
        for name, shape in shapes.items():
            out["model.layers.%d.%s" % (i, name)] = norm(c) if shape is None else w(*shape)
    return out


def seeds(out):
    """OUT/model/*.gguf: every architecture (Llama also with Llama 3's rope_freqs and with linear scaling), in
    F32/F16/BF16 at width 8 and in the 32-weight block types at width 32, and three with a tokenizer;
    OUT/tokenizer/*.gguf: tokenizer keys only, byte-level BPE with each pre-tokenizer kvscope knows and
    SentencePiece with and without the space prefix. Each file is a few kilobytes."""
    rng = np.random.default_rng(11)
    gemma = dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=8)
    models = [
        ("llama_F32", "F32", seed_config("llama", 8, 2, 8), None),
        ("llama_rope_freqs_F32", "F32", seed_config("llama", 8, 1, 8, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8}), None),
        ("llama_linear_BF16", "BF16", seed_config("llama", 8, 1, 8, tie_word_embeddings=True,
                                                  rope_scaling={"rope_type": "linear", "factor": 2.0}), None),
        ("qwen2_F16", "F16", seed_config("qwen2", 8, 1, 8), None),
        ("qwen3_F32", "F32", seed_config("qwen3", 8, 1, 8), None),
        ("gemma3_F32", "F32", seed_config("gemma3_text", 8, 2, 8, **gemma), None),
        ("gpt2_F32", "F32", seed_config("gpt2", 8, 1, 8), None),
        ("llama_Q8_0", "Q8_0", seed_config("llama", 32, 1, 8), None),
        ("qwen2_Q4_0", "Q4_0", seed_config("qwen2", 32, 1, 8), None),
        ("qwen3_Q5_0", "Q5_0", seed_config("qwen3", 32, 1, 8), None),
        ("gemma3_Q5_1", "Q5_1", seed_config("gemma3_text", 32, 1, 8, sliding_window=4), None),
        ("gpt2_Q4_1", "Q4_1", seed_config("gpt2", 32, 1, 8), None),
        ("llama_llama-bpe_F16", "F16", seed_config("llama", 8, 1, 0), "llama-bpe"),
        ("qwen2_qwen2_F16", "F16", seed_config("qwen2", 8, 1, 0), "qwen2"),
        ("gemma3_spm_F16", "F16", seed_config("gemma3_text", 8, 1, 0, **dict(gemma, layer_types=["sliding_attention"])),
         "spm-gemma"),
    ]
    os.makedirs(os.path.join(out, "model"), exist_ok=True)
    for name, tname, cfg, tokenizer in models:
        meta = seed_tokenizer_metadata(tokenizer) if tokenizer else []
        if tokenizer:
            cfg["vocab_size"] = len(meta[2][2])  # one embedding row per token
        metadata, tensors, _ = convert_weights(cfg, seed_weights(cfg, rng), tname, name, meta)
        write_gguf(os.path.join(out, "model", name + ".gguf"), metadata, tensors)
    os.makedirs(os.path.join(out, "tokenizer"), exist_ok=True)
    for kind in ("llama-bpe", "qwen2", "smollm", "gpt-2", "spm", "spm-gemma"):
        write_gguf(os.path.join(out, "tokenizer", kind + ".gguf"),
                   [("general.architecture", "string", "llama")] + seed_tokenizer_metadata(kind), [])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "fixture":
        fixture(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "seeds":
        seeds(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "tokenizer":
        convert_tokenizer(*sys.argv[2:])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "convert":
        convert(*sys.argv[2:])
    else:
        sys.exit("usage: gguf_reference.py fixture OUT_DIR | convert FOLDER OUT.gguf TYPE [DEQUANTIZED_FOLDER]"
                 " | tokenizer FOLDER OUT.gguf | seeds OUT_DIR")
