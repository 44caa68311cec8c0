#!/usr/bin/python3
"""Quantized K/V formats in numpy, written from README.md "Quantized K/V" (not from core/cache/kv_quant.cpp).

Every step is a float32 numpy operation with IEEE rounding (np.rint rounds half to even), the same
sequence of roundings the README states, so kvscope must match it bit for bit.

  python3 tests/reference/kv_quant_reference.py ROWS.f32 N D G OUT_DIR
      ROWS.f32: N rows of D float32 (N a multiple of G). Writes OUT_DIR/<name>.bytes (packed) and
      OUT_DIR/<name>.f32 (dequantized) for name in int8, fp8, int4_values, int4_keys (groups of G rows).
  python3 tests/reference/kv_quant_reference.py --selfcheck
      the fp8 table against torch.float8_e4m3fn (when torch is importable) and a few hand-worked values
"""
import os
import sys

import numpy as np

F32 = np.float32


def _finite_or_nan(x, scale):
    return scale if np.all(np.isfinite(x)) else F32(np.nan)


# ---- int8, per token: symmetric absmax ----------------------------------------------------------
def int8_quantize(x):
    """x: (D,) float32 -> D int8 codes + float32 scale (little-endian), D + 4 bytes."""
    x = x.astype(F32)
    scale = _finite_or_nan(x, F32(np.max(np.abs(x))) / F32(127.0) if x.size else F32(0))
    if np.isnan(scale) or scale == 0:
        q = np.zeros(x.shape, np.int8)
    else:
        q = np.clip(np.rint(x / scale), -127, 127).astype(np.int8)
    return q.tobytes() + np.array([scale], "<f4").tobytes()


def int8_dequantize(b, D):
    q = np.frombuffer(b[:D], np.int8).astype(F32)
    scale = np.frombuffer(b[D:D + 4], "<f4")[0]
    return q * scale


# ---- fp8 e4m3fn, per token: absmax scaled to 448 ------------------------------------------------
def _e4m3_values():
    """The 256 codes' values (NaN at 0x7F and 0xFF), from the format's definition."""
    v = np.empty(256, np.float64)
    for c in range(256):
        e, m = (c >> 3) & 15, c & 7
        mag = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        v[c] = np.nan if (e == 15 and m == 7) else (-mag if c & 0x80 else mag)
    return v


E4M3 = _e4m3_values()
_POS = np.array([E4M3[c] for c in range(0x7F)])  # codes 0x00..0x7E, increasing, 0 .. 448


def e4m3_encode(y):
    """One float32 -> code: nearest of the 127 non-negative values, ties to the even code; >= 448
    saturates; NaN -> 0x7F; the sign bit is kept (also for -0)."""
    y = float(y)
    if np.isnan(y):
        return 0x7F
    sign = 0x80 if np.signbit(y) else 0
    a = abs(y)
    if a >= 448:
        return sign | 0x7E
    i = int(np.searchsorted(_POS, a))          # _POS[i-1] < a <= _POS[i]
    if _POS[i] == a:
        return sign | i
    lo, hi = i - 1, i
    d_lo, d_hi = a - _POS[lo], _POS[hi] - a     # exact in float64: both on a coarse binary grid
    c = lo if d_lo < d_hi else hi if d_hi < d_lo else (lo if lo % 2 == 0 else hi)
    return sign | c


def fp8_quantize(x):
    x = x.astype(F32)
    scale = _finite_or_nan(x, F32(np.max(np.abs(x))) / F32(448.0) if x.size else F32(0))
    if np.isnan(scale) or scale == 0:
        codes = bytes(len(x))
    else:
        codes = bytes(e4m3_encode(v) for v in (x / scale))
    return codes + np.array([scale], "<f4").tobytes()


def fp8_dequantize(b, D):
    vals = E4M3[np.frombuffer(b[:D], np.uint8)].astype(F32)
    scale = np.frombuffer(b[D:D + 4], "<f4")[0]
    return vals * scale


# ---- int4 KIVI: asymmetric 4-bit, min and scale in float32 --------------------------------------
def _min_scale(group):
    """(n,) float32 -> (min, scale): min normalised to +0, scale = (max - min) / 15; NaN if any value
    or the range is not finite."""
    if not np.all(np.isfinite(group)):
        return F32(np.nan), F32(np.nan)
    lo, hi = F32(np.min(group)), F32(np.max(group))
    rng = F32(hi - lo)
    if not np.isfinite(rng):
        return F32(np.nan), F32(np.nan)
    return F32(lo + F32(0.0)), F32(rng / F32(15.0))


def _codes(group, lo, scale):
    if not scale > 0:
        return np.zeros(group.shape, np.uint8)
    return np.clip(np.rint((group - lo) / scale), 0, 15).astype(np.uint8)


def _pack_nibbles(codes):
    c = codes.reshape(-1)
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8).tobytes()


def _unpack_nibbles(b, n):
    a = np.frombuffer(b, np.uint8)
    out = np.empty(2 * a.size, np.uint8)
    out[0::2], out[1::2] = a & 15, a >> 4
    return out[:n]


def int4_values_quantize(x, G):
    """x: (D,) one token's values -> D/2 nibble bytes (channel 2j low, 2j+1 high), then per group of G
    channels (min, scale) float32."""
    x = x.astype(F32)
    D = x.size
    codes, stats = np.zeros(D, np.uint8), []
    for g in range(D // G):
        lo, scale = _min_scale(x[g * G:(g + 1) * G])
        codes[g * G:(g + 1) * G] = _codes(x[g * G:(g + 1) * G], lo, scale)
        stats += [lo, scale]
    return _pack_nibbles(codes) + np.array(stats, "<f4").tobytes()


def int4_values_dequantize(b, D, G):
    codes = _unpack_nibbles(b[:D // 2], D).astype(F32)
    stats = np.frombuffer(b[D // 2:], "<f4").reshape(D // G, 2)
    out = np.empty(D, F32)
    for g in range(D // G):
        out[g * G:(g + 1) * G] = codes[g * G:(g + 1) * G] * stats[g, 1] + stats[g, 0]
    return out


def int4_keys_quantize(x):
    """x: (G, D) keys of G consecutive positions -> G*D/2 nibble bytes (position-major, channel 2j low),
    then per channel (min, scale) float32 over the G positions."""
    x = x.astype(F32)
    G, D = x.shape
    codes, stats = np.zeros((G, D), np.uint8), []
    for d in range(D):
        lo, scale = _min_scale(x[:, d])
        codes[:, d] = _codes(x[:, d], lo, scale)
        stats += [lo, scale]
    return _pack_nibbles(codes) + np.array(stats, "<f4").tobytes()


def int4_keys_dequantize(b, G, D):
    codes = _unpack_nibbles(b[:G * D // 2], G * D).reshape(G, D).astype(F32)
    stats = np.frombuffer(b[G * D // 2:], "<f4").reshape(D, 2)
    return codes * stats[:, 1] + stats[:, 0]


def dequantize_kv(x, fmt, G=32):
    """A (..., D) float32 array through quantize -> dequantize per row (int8, fp8, int4 values)."""
    rows = np.asarray(x, F32).reshape(-1, x.shape[-1])
    D = rows.shape[1]
    if fmt == "int8":
        out = [int8_dequantize(int8_quantize(r), D) for r in rows]
    elif fmt == "fp8":
        out = [fp8_dequantize(fp8_quantize(r), D) for r in rows]
    else:
        raise ValueError(fmt)
    return np.stack(out).reshape(x.shape)


def selfcheck():
    assert e4m3_encode(448) == 0x7E and e4m3_encode(1e9) == 0x7E and e4m3_encode(-500) == 0xFE
    assert e4m3_encode(2.0 ** -9) == 0x01 and e4m3_encode(2.0 ** -10) == 0x00  # tie to even: 0
    assert e4m3_encode(3 * 2.0 ** -10) == 0x02 and e4m3_encode(-0.0) == 0x80 and e4m3_encode(1.0) == 0x38
    assert E4M3[0x7E] == 448 and np.isnan(E4M3[0x7F])
    try:
        import torch
        torch.float8_e4m3fn
    except (ImportError, AttributeError):
        print("selfcheck: hand-worked fp8 values ok (no torch.float8_e4m3fn here: encodings not cross-checked)")
        return
    ys = np.random.default_rng(0).standard_normal(20000).astype(F32) * F32(40)
    ys = np.concatenate([ys, (E4M3[:0x7F][:-1] + E4M3[1:0x7F]) / 2])  # every midpoint: ties
    ys = ys[np.abs(ys) < 448].astype(F32)
    ref = torch.from_numpy(ys).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    ours = np.array([e4m3_encode(y) for y in ys], np.uint8)
    bad = np.nonzero(ours != ref)[0]
    assert bad.size == 0, f"e4m3 differs from torch at {ys[bad[:5]]}: {ours[bad[:5]]} vs {ref[bad[:5]]}"
    print(f"selfcheck: {ys.size} fp8 encodings equal torch.float8_e4m3fn's")


def main(argv):
    if argv[1:] == ["--selfcheck"]:
        selfcheck()
        return 0
    path, N, D, G, out = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
    x = np.fromfile(path, "<f4").reshape(N, D)
    os.makedirs(out, exist_ok=True)

    def save(name, packed, deq):
        with open(os.path.join(out, name + ".bytes"), "wb") as f:
            f.write(b"".join(packed))
        np.concatenate([np.asarray(d, F32).reshape(-1) for d in deq]).astype("<f4").tofile(os.path.join(out, name + ".f32"))

    for name, q, dq in (("int8", int8_quantize, int8_dequantize), ("fp8", fp8_quantize, fp8_dequantize)):
        packed = [q(r) for r in x]
        save(name, packed, [dq(b, D) for b in packed])
    packed = [int4_values_quantize(r, G) for r in x]
    save("int4_values", packed, [int4_values_dequantize(b, D, G) for b in packed])
    packed = [int4_keys_quantize(x[i:i + G]) for i in range(0, N, G)]
    save("int4_keys", packed, [int4_keys_dequantize(b, G, D) for b in packed])
    return 0


if __name__ == "__main__":
    with np.errstate(all="ignore"):
        sys.exit(main(sys.argv))
