#!/usr/bin/python3
"""Checks the reference and the harness themselves (no kvscope binary needed).

1. safetensors writer/reader round trip for F32, F16, BF16 (bit patterns equal torch's casts).
2. The reference's pieces equal torch.nn.functional's (layer_norm, both GELUs) and the
   sinusoidal table equals the formula evaluated with Python's math module.
3. For every model in the matrix: a naive NumPy forward (loops over positions and heads, no
   masks) equals Model.forward; the cached runner (chunks 1/3/all, windows none/1/3/8) equals the
   full recompute; the padded batch equals single runs.
4. The harness accepts the reference's own cached float32 path (fake_kvscope.py) and rejects it
   when its logits are moved by 2e-4.

    selfcheck.py --work DIR
"""
import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from common import MODELS, Failure, check_case, model_dir, prompt, ref

HERE = os.path.dirname(os.path.abspath(__file__))


def check(cond, what):
    if not cond:
        raise Failure(what)


def safetensors_round_trip(work):
    g = torch.Generator().manual_seed(1)
    t = torch.randn(7, 5, generator=g) * 3
    t[0, 0], t[0, 1] = 65504.0, 1e-8   # fp16 max, an fp16 subnormal-range value
    for dt, cast in (("F32", torch.float32), ("F16", torch.float16), ("BF16", torch.bfloat16)):
        path = os.path.join(work, f"rt_{dt}.safetensors")
        ref.safetensors_io.write(path, [("a", t), ("s", torch.tensor(2.5))], dt, {"k": "v"})
        back, dtypes, meta = ref.safetensors_io.read(path)
        check(torch.equal(back["a"], t.to(cast).to(torch.float32)), f"{dt} round trip changed values")
        check(back["s"].shape == () and back["s"].item() == 2.5, f"{dt} scalar tensor")
        check(dtypes["a"] == dt and meta == {"k": "v"}, f"{dt} dtype/metadata")
        raw = open(path, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        check(n % 8 == 0 and raw[8 + n - 1:8 + n] in (b" ", b"}"), f"{dt} header not padded to 8")
    return "safetensors round trip F32/F16/BF16, scalar, metadata, padding"


def pieces(work):
    m = ref.Model(model_dir(work, "base"), torch.float64)
    x = torch.randn(5, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 3
    w, b = m.layers[0]["ln_1"]
    check(torch.allclose(m.layer_norm(x, (w, b)), F.layer_norm(x, (64,), w, b, m.eps), atol=1e-12), "layer_norm")
    check(torch.allclose(ref.model._activation("gelu_new")(x), F.gelu(x, approximate="tanh"), atol=1e-12), "gelu_new")
    check(torch.allclose(ref.model._activation("gelu")(x), F.gelu(x), atol=1e-12), "gelu")
    check(torch.equal(ref.model._activation("relu")(x), F.relu(x)), "relu")
    pe = ref.sinusoidal_table(9, 6)
    for t in range(9):
        for i in range(3):
            angle = t / 10000 ** (2 * i / 6)
            check(abs(pe[t, 2 * i].item() - math.sin(angle)) < 1e-12 and abs(pe[t, 2 * i + 1].item() - math.cos(angle)) < 1e-12,
                  f"sinusoidal table at t={t} i={i}")
    return "layer_norm, gelu_new, gelu, relu vs torch.nn.functional; sinusoidal table vs math"


def naive_forward(m, ids, window=None):
    """NumPy, one position and one head at a time: an implementation with no masks or batching."""
    cfg, H, D = m.cfg, m.n_head, m.head_dim
    A = lambda t: t.numpy()                                    # noqa: E731
    act = {"gelu_new": lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))),
           "gelu": lambda v: np.array([0.5 * e * (1 + math.erf(e / math.sqrt(2))) for e in v]),
           "relu": lambda v: np.maximum(v, 0)}[cfg["activation_function"]]

    def ln(v, wb):
        mu = v.mean()
        return (v - mu) / math.sqrt(((v - mu) ** 2).mean() + cfg["layer_norm_epsilon"]) * A(wb[0]) + A(wb[1])

    xs = [A(m.wte[t]) * cfg["embedding_scale"] + A(m.pos_table[p]) for p, t in enumerate(ids)]
    for L in m.layers:
        ks, vs, outs = [], [], []
        hs = [ln(x, L["ln_1"]) if cfg["norm_position"] == "pre" else x for x in xs]
        for h in hs:
            qkv = h @ A(L["c_attn_w"]) + (A(L["c_attn_b"]) if L["c_attn_b"] is not None else 0)
            C = len(h)
            ks.append(qkv[C:2 * C]); vs.append(qkv[2 * C:])
            outs.append(qkv[:C])
        new = []
        for i, x in enumerate(xs):
            att = np.zeros(len(x))
            lo = 0 if window is None else max(0, i - window + 1)
            for hd in range(H):
                sl = slice(hd * D, (hd + 1) * D)
                s = np.array([outs[i][sl] @ ks[j][sl] / math.sqrt(D) for j in range(lo, i + 1)])
                e = np.exp(s - s.max())
                att[sl] = sum(wj * vs[j][sl] for wj, j in zip(e / e.sum(), range(lo, i + 1)))
            a = att @ A(L["attn_proj_w"]) + A(L["attn_proj_b"])
            mlp = lambda v: act(v @ A(L["c_fc_w"]) + A(L["c_fc_b"])) @ A(L["mlp_proj_w"]) + A(L["mlp_proj_b"])  # noqa: E731
            if cfg["norm_position"] == "pre":
                x = x + a
                x = x + mlp(ln(x, L["ln_2"]))
            else:
                x = ln(x + a, L["ln_1"])
                x = ln(x + mlp(x), L["ln_2"])
            new.append(x)
        xs = new
    if m.ln_f is not None:
        xs = [ln(x, m.ln_f) for x in xs]
    logits = np.stack(xs) @ A(m.lm_head).T
    return logits + (A(m.lm_head_bias) if m.lm_head_bias is not None else 0)


def model_paths(work, name):
    m = ref.Model(model_dir(work, name), torch.float64)
    p = prompt(7, 10)
    for w in (None, 3):
        got, want = m.forward(p, w).numpy(), naive_forward(m, p, w)
        check(np.abs(got - want).max() < 1e-9, f"{name}: naive forward differs by {np.abs(got - want).max():.3g} (window {w})")
    for w in (None, 1, 3, 8):
        full_ids, full_rows = ref.greedy(m, p, 6, w)
        for c in (1, 3, None):
            ids, rows = ref.greedy_cached(m, p, 6, w, c)
            check(ids == full_ids and torch.allclose(rows, full_rows, atol=1e-10),
                  f"{name}: cached (window {w}, chunk {c}) differs from full recompute")
    ps = [prompt(8, 5), prompt(9, 1), prompt(10, 8)]
    batch = ref.greedy_batch(m, ps, 4, 3)
    for pr, (ids, rows) in zip(ps, batch):
        sids, srows = ref.greedy(m, pr, 4, 3)
        check(ids == sids and torch.allclose(rows, srows, atol=1e-10), f"{name}: padded batch differs from single runs")
    return f"{name}: naive NumPy == forward; cached (4 windows x 3 chunkings) == full; batch == single"


def harness(work):
    fake = os.path.join(HERE, "fake_kvscope.py")
    m = model_dir(work, "original_transformer")
    check_case(fake, m, [prompt(1, 6)], 5, window=3, chunk=2)
    check_case(fake, m, [prompt(1, 6), prompt(2, 2), prompt(3, 4)], 4)
    os.environ["KVSCOPE_FAKE_PERTURB"] = "2e-4"
    try:
        check_case(fake, m, [prompt(1, 6)], 5)
    except Failure as e:
        check("logits outside" in str(e) and "reproduce:" in str(e), f"unexpected failure text: {e}")
    else:
        raise Failure("harness accepted logits moved by 2e-4")
    finally:
        del os.environ["KVSCOPE_FAKE_PERTURB"]
    return "harness passes the reference's cached fp32 path and rejects a 2e-4 shift"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    work = os.path.abspath(ap.parse_args().work)
    os.makedirs(work, exist_ok=True)
    t0, failures, n = time.time(), 0, 0
    steps = [safetensors_round_trip, pieces] + [lambda w, n=n: model_paths(w, n) for n in MODELS] + [harness]
    for step in steps:
        n += 1
        try:
            print("ok  ", step(work), flush=True)
        except Failure as e:
            failures += 1
            print("FAIL", e, flush=True)
    print(f"{n - failures}/{n} checks passed in {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
