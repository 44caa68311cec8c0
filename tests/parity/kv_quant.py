#!/usr/bin/python3
"""Parity group: quantized K/V (generate --kv-quant int8|fp8) against the reference GPT-2 whose new K
and V rows go through tests/reference/kv_quant_reference.py (numpy, quantize then dequantize in float32) before
attention reads them. The engine must match that reference to TOL and the quantization must move the
logits by far more than TOL (so the match is not the float32 run's); --json reports the packed bytes.

    kv_quant.py --kvscope BIN --work DIR
"""
import os
import sys

import numpy as np
import torch

from common import TOL, Failure, generate, main, model_dir, prompt, first_mismatches, TOOLS

import kvscope_reference as ref  # noqa: E402  (common put tools/ on the path)
import kv_quant_reference as kvq  # noqa: E402


def rounder(fmt):
    # The engine quantizes its float32 rows: round the float64 reference's rows to float32 first.
    def f(t, kind):
        rows = t.to(torch.float32).numpy()
        return torch.from_numpy(kvq.dequantize_kv(rows, fmt)).to(t.dtype)
    return f


def check_quant(kvscope, model, p, n_new, fmt, window=None, no_cache=False, chunk=None):
    desc = (f"{os.path.basename(model)} {fmt} prompt={len(p)} new={n_new}{' no-cache' if no_cache else ''}"
            f"{f' window={window}' if window else ''}{f' chunk={chunk}' if chunk else ''}")
    m = ref.Model(model, torch.float64)
    _, plain = ref.greedy(m, p, 1, window)
    m.kv_round = rounder(fmt)
    want_ids, want = ref.greedy(m, p, n_new, window)
    if ref.margins(want).min().item() < 2 * TOL:
        raise Failure(f"{desc}: fragile case, reference top-2 gap below {2 * TOL}; pick another prompt")
    effect = float(torch.max(torch.abs(want[0] - plain[0])))
    if effect < 20 * TOL:
        raise Failure(f"{desc}: quantizing K/V moves the reference's logits by only {effect:.3g}: the case tells nothing")
    obj, logits, args = generate(kvscope, model, [p], n_new, window, chunk, no_cache, ["--kv-quant", fmt])
    got_ids = obj["generated_ids"]
    if got_ids != want_ids:
        raise Failure(f"{desc}: kvscope generated {got_ids}, the reference {want_ids}\n  reproduce: {kvscope} {' '.join(args)}")
    n_bad, lines = first_mismatches(logits.reshape(n_new, -1).astype(np.float64), want.numpy())
    if n_bad:
        raise Failure(f"{desc}: {n_bad} logits outside {TOL}:\n" + "\n".join(lines) + f"\n  reproduce: {kvscope} {' '.join(args)}")
    cfg = m.cfg
    D = cfg["n_embd"] // cfg["n_head"]
    want_bytes = 2 * cfg["n_layer"] * cfg["n_head"] * (D + 4)
    kv = obj.get("kv", {})
    if kv.get("format") != fmt or kv.get("bytes_per_token") != want_bytes:
        raise Failure(f"{desc}: --json kv reports format {kv.get('format')!r}, {kv.get('bytes_per_token')} bytes per "
                      f"token; expected {fmt!r}, {want_bytes}")
    return f"{desc} (quantization moves the logits by {effect:.3g})"


def kivi_rounder(n_history, G, R):
    """int4 KIVI as the cache holds it while a step runs after n_history positions: positions below
    floor((n_history - R) / G) * G packed (keys per channel over each group of G positions, values per
    row in groups of G channels), the rest (and the step's own rows) float32."""
    boundary = max(0, (n_history - R) // G * G)

    def keys(t):  # [B, H, T, D], positions 0..T-1
        x = t.to(torch.float32).numpy().copy()
        for b in range(x.shape[0]):
            for h in range(x.shape[1]):
                for p0 in range(0, boundary, G):
                    g = x[b, h, p0:p0 + G]
                    x[b, h, p0:p0 + G] = kvq.int4_keys_dequantize(kvq.int4_keys_quantize(g), G, g.shape[1])
        return torch.from_numpy(x).to(t.dtype)

    def values(t):
        x = t.to(torch.float32).numpy().copy()
        D = x.shape[-1]
        for b in range(x.shape[0]):
            for h in range(x.shape[1]):
                for p in range(boundary):
                    x[b, h, p] = kvq.int4_values_dequantize(kvq.int4_values_quantize(x[b, h, p], G), D, G)
        return torch.from_numpy(x).to(t.dtype)
    return lambda t, kind: keys(t) if kind == "k" else values(t)


def check_kivi(kvscope, model, p, n_new, G, R):
    """Cached, whole-prompt prefill: the prompt's rows (and its prediction) are float32; each decode step
    then reads the cached rows with those below the boundary packed. KIVI packs rows after they were
    computed, so the reference keeps its own float32 cache (Model.run with pasts), not a full recompute:
    the prompt positions' deeper K/V were computed from float32 rows and stay so."""
    desc = f"{os.path.basename(model)} int4 G={G} R={R} prompt={len(p)} new={n_new}"
    m = ref.Model(model, torch.float64)
    with torch.no_grad():
        logits, pasts = m.run(torch.tensor([p]), torch.arange(len(p)), None, None)
        rows, seq = [logits[0, -1]], list(p) + [int(torch.argmax(logits[0, -1]).item())]
        for _ in range(n_new - 1):
            n = len(seq) - 1  # positions in the cache
            packed = kivi_rounder(n, G, R)
            read = [(packed(k, "k"), packed(v, "v"), kp) for k, v, kp in pasts]
            logits, new = m.run(torch.tensor([[seq[-1]]]), torch.tensor([n]), read, None)
            pasts = [(torch.cat([k, nk[:, :, -1:]], 2), torch.cat([v, nv[:, :, -1:]], 2), torch.cat([kp, nkp[-1:]]))
                     for (k, v, kp), (nk, nv, nkp) in zip(pasts, new)]
            rows.append(logits[0, -1])
            seq.append(int(torch.argmax(logits[0, -1]).item()))
    want = torch.stack(rows)
    want_ids = seq[len(p):]
    if ref.margins(want).min().item() < 2 * TOL:
        raise Failure(f"{desc}: fragile case, reference top-2 gap below {2 * TOL}; pick another prompt")
    plain = ref.Model(model, torch.float64).forward(seq[:-1])[-1]  # the same text, nothing packed
    effect = float(torch.max(torch.abs(want[-1] - plain)))
    if effect < 20 * TOL:
        raise Failure(f"{desc}: KIVI moves the reference's last logits by only {effect:.3g}: the case tells nothing")
    obj, logits, args = generate(kvscope, model, [p], n_new, extra=["--kv-quant", "int4", "--kv-group", str(G),
                                                                    "--kv-residual", str(R)])
    if obj["generated_ids"] != want_ids:
        raise Failure(f"{desc}: kvscope generated {obj['generated_ids']}, the reference {want_ids}\n"
                      f"  reproduce: {kvscope} {' '.join(args)}")
    n_bad, lines = first_mismatches(logits.reshape(n_new, -1).astype(np.float64), want.numpy())
    if n_bad:
        raise Failure(f"{desc}: {n_bad} logits outside {TOL}:\n" + "\n".join(lines) + f"\n  reproduce: {kvscope} {' '.join(args)}")
    return f"{desc} (last step: KIVI moves the logits by {effect:.3g} from the float32 run)"


def cases(kvscope, work):
    for i, name in enumerate(["base", "one_head_3_layers"]):
        m = model_dir(work, name)
        p = prompt(300 + i, 12)
        for fmt in ("int8", "fp8"):
            yield lambda m=m, p=p, fmt=fmt: check_quant(kvscope, m, p, 8, fmt)
            yield lambda m=m, p=p, fmt=fmt: check_quant(kvscope, m, p, 8, fmt, no_cache=True)
            yield lambda m=m, p=p, fmt=fmt: check_quant(kvscope, m, p, 8, fmt, window=5, chunk=4)
        yield lambda m=m, p=p: check_kivi(kvscope, m, p, 10, 4, 2)
        yield lambda m=m, p=p: check_kivi(kvscope, m, p, 10, 8, 0)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
