#!/usr/bin/env python3
"""An 8,192-token context in the window: the attention overview keeps each block's strongest cell, zooming
in reaches exact cells, and the overview holds no more texels than the map has pixels; all against numpy.

A random rotary model (tools/make_llama_model.py: 1 layer, 2 query heads reading 1 K/V head, head_dim 16,
max_position_embeddings 8256) prefills 8,192 random token ids in one step at 1280x720, then the window
writes the Attention panel's textures for query head 1 (attention-json "tiles"): first the whole
8192 x 8192 map pooled to the pixels it is drawn on, then, zoomed 128x around a point (64 x 64 cells in
view, on a map of about 100 px at this size), the cells in view.

numpy recomputes layer 0 from the weights alone, as Hugging Face's LlamaModel does (RMSNorm, q/k
projections, rotate-half rotary embedding, repeat_kv, causal softmax of q.k/sqrt(D)), in float64, a
block of rows at a time (the 8192 x 8192 map is never held), and:
  - every overview texel equals the maximum of the softmax weights of its block (blocks of
    block_rows x block_cols cells), and is marked visible exactly when its block holds a causal cell;
  - the overview has no more texels than the map has pixels (--layout-dump's "attention map" box);
  - the zoomed texture has 1 x 1 blocks, covers the cells in view, and each of its cells equals the
    exact weight.
"""
import json
import os
import sys

import numpy as np

from guitest import arguments, fail, window

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402
from kvscope_reference import safetensors_io  # noqa: E402

N, HEAD, ZOOM, AT = 8192, 1, 128, (0.3, 0.7)  # zoom centre: key 30%, query 70% of the way
ATOL, RTOL = 2e-6, 1e-4


def layer0_qk(folder, ids):
    """(H, T, D) rotated queries and keys (K/V heads repeated) of layer 0, float64."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = {k: v.double().numpy() for k, v in safetensors_io.read_folder(folder)[0].items()}
    H, K = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg["hidden_size"] // H
    x = w["model.embed_tokens.weight"][np.asarray(ids)]                                 # (T, C)
    h = x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg["rms_norm_eps"]) * w["model.layers.0.input_layernorm.weight"]
    q = (h @ w["model.layers.0.self_attn.q_proj.weight"].T).reshape(len(ids), H, D).transpose(1, 0, 2)
    k = (h @ w["model.layers.0.self_attn.k_proj.weight"].T).reshape(len(ids), K, D).transpose(1, 0, 2)
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, D, 2) / D)                    # (D/2)
    angles = np.arange(len(ids))[:, None] * inv_freq[None, :]
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))

    def rope(t):  # rotate_half
        half = t.shape[-1] // 2
        return t * cos + np.concatenate([-t[..., half:], t[..., :half]], -1) * sin

    return rope(q), np.repeat(rope(k), H // K, axis=0), D


def weights(q, k, D, r0, r1):
    """(r1 - r0, T) causal softmax weights of rows r0..r1-1 of one head."""
    s = q[r0:r1] @ k.T / np.sqrt(D)
    s[np.arange(r0, r1)[:, None] < np.arange(k.shape[0])[None, :]] = -np.inf
    s = np.exp(s - s.max(-1, keepdims=True))
    return s / s.sum(-1, keepdims=True)


def check_tile(name, tile, q, k, D):
    r0, c0, nr, nc = tile["row0"], tile["col0"], tile["n_rows"], tile["n_cols"]
    br, bc, out_r, out_c = tile["block_rows"], tile["block_cols"], tile["out_rows"], tile["out_cols"]
    got, vis = np.asarray(tile["values"], dtype=np.float64), np.asarray(tile["visible"])
    if got.shape != (out_r, out_c) or out_r != -(-nr // br) or out_c != -(-nc // bc):
        fail("%s: %dx%d texels for %dx%d cells in blocks of %dx%d" % (name, got.shape[0], got.shape[1], nr, nc, br, bc))
    worst = 0.0
    for tr in range(out_r):
        a, b = r0 + tr * br, min(r0 + (tr + 1) * br, r0 + nr)
        wts = weights(q, k, D, a, b)[:, c0:c0 + nc]                                     # (rows, cols of the window)
        pad = out_c * bc - nc
        blocks = np.pad(wts.max(0), (0, pad)).reshape(out_c, bc).max(1)                # max over each block
        want_vis = np.arange(out_c) * bc + c0 <= b - 1                                  # a causal cell in the block
        if not np.array_equal(vis[tr].astype(bool), want_vis):
            fail("%s: texel row %d (rows %d..%d) visible flags differ from the causal mask" % (name, tr, a, b - 1))
        err = np.abs(got[tr] - blocks)
        bad = np.nonzero(err > ATOL + RTOL * np.abs(blocks))[0]
        if len(bad):
            tc = bad[0]
            fail("%s: texel (%d, %d) = rows %d..%d x keys %d..%d: window %.8g, numpy max %.8g" %
                 (name, tr, tc, a, b - 1, c0 + tc * bc, min(c0 + (tc + 1) * bc, c0 + nc) - 1, got[tr, tc], blocks[tc]))
        worst = max(worst, float(err.max()))
    return worst


def long_context_model(work):
    """The random rotary model (written to WORK/rotary_8k) and the N token ids both 8k tests prefill."""
    model = os.path.join(work, "rotary_8k")
    make_llama_model.write(model, vocab=300, hidden=32, inner=64, layers=1, heads=2, kv_heads=1, positions=N + 64, seed=3)
    rng = np.random.default_rng(5)
    return model, [int(x) for x in rng.integers(3, 300, N)]


def main():
    a = arguments()
    model, ids = long_context_model(a.work)
    whole_json, zoom_json = os.path.join(a.work, "whole.json"), os.path.join(a.work, "zoom.json")
    d = window(a.kvscope, model, a.work, "long_context", (1280, 720),
               ["compare off", "prompt " + ",".join(map(str, ids)), "prefill", "layer 0", "head %d" % HEAD,
                "attention-json " + whole_json, "zoom %d %g %g" % (ZOOM, AT[0], AT[1]), "attention-json " + zoom_json])
    whole, zoom = json.load(open(whole_json)), json.load(open(zoom_json))
    if (whole["n_query"], whole["n_key"]) != (N, N):
        fail("the map is %dx%d, expected %dx%d" % (whole["n_query"], whole["n_key"], N, N))
    if "weights" in whole:
        fail("attention-json wrote every cell of an %dx%d map" % (N, N))
    q, k, D = layer0_qk(model, ids)
    q, k = q[HEAD], k[HEAD]

    base = whole["tiles"][0]
    if base["n_rows"] != N or base["n_cols"] != N or base["block_rows"] < 2:
        fail("the overview is not the whole map pooled: %s" % {x: base[x] for x in ("n_rows", "n_cols", "block_rows")})
    box = d["widgets"].get("attention map")
    if box is None:
        fail("no attention map in the layout dump")
    px_w, px_h = box[2] - box[0], box[3] - box[1]
    if base["out_cols"] > np.ceil(px_w) + 1 or base["out_rows"] > np.ceil(px_h) + 1:
        fail("the overview has %dx%d texels for a %.0fx%.0f px map" % (base["out_rows"], base["out_cols"], px_h, px_w))
    worst = check_tile("overview", base, q, k, D)
    print("  ok overview: %dx%d cells as %dx%d texels (blocks of %dx%d) on %.0fx%.0f px, each the numpy max of its "
          "block (largest difference %.2g)" % (N, N, base["out_rows"], base["out_cols"], base["block_rows"],
                                              base["block_cols"], px_h, px_w, worst))

    if len(zoom["tiles"]) != 2:
        fail("zoomed %dx: expected the overview and a finer texture, got %d textures" % (ZOOM, len(zoom["tiles"])))
    fine = zoom["tiles"][1]
    if (fine["block_rows"], fine["block_cols"]) != (1, 1):
        fail("zoomed %dx: blocks of %dx%d, expected exact cells" % (ZOOM, fine["block_rows"], fine["block_cols"]))
    shown = N / ZOOM
    rows_in_view = (int(AT[1] * N - shown / 2), int(AT[1] * N + shown / 2))
    cols_in_view = (int(AT[0] * N - shown / 2), int(AT[0] * N + shown / 2))
    if not (fine["row0"] <= rows_in_view[0] and rows_in_view[1] <= fine["row0"] + fine["n_rows"] and
            fine["col0"] <= cols_in_view[0] and cols_in_view[1] <= fine["col0"] + fine["n_cols"]):
        fail("zoomed texture rows %d+%d, cols %d+%d does not cover the view rows %s, cols %s" %
             (fine["row0"], fine["n_rows"], fine["col0"], fine["n_cols"], rows_in_view, cols_in_view))
    worst = check_tile("zoomed", fine, q, k, D)
    print("  ok zoomed %dx: queries %d..%d x keys %d..%d as exact cells equal to numpy's weights (largest difference "
          "%.2g)" % (ZOOM, fine["row0"], fine["row0"] + fine["n_rows"] - 1, fine["col0"], fine["col0"] + fine["n_cols"] - 1,
                     worst))
    print("ok: the 8192-token overview keeps each block's strongest weight and zooms to exact cells")


if __name__ == "__main__":
    main()
