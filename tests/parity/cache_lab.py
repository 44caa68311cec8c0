#!/usr/bin/python3
"""Parity group: `kvscope lab --json` against the PyTorch reference. The reference computes every
position's logits by a full recompute (float64): full attention, a banded mask with sinks for
window=W,sinks=S, K/V rows through tests/reference/kv_quant_reference.py (numpy) for int8 / fp8, and for int4
KIVI a step-by-step run whose older rows are packed as the cache packs them. From them
numpy recomputes, per position, the next-token loss, KL(full || config) and top-1 agreement, and the
bytes the cache holds from the model's shape; kvscope's per-position arrays and totals must match.
A GQA Llama folder: full and windows against the Llama reference. Also: full against full is KL 0
and top-1 100 % exactly, the chart is a PNG / an SVG, and bad
configurations are refused with one line and exit 2 before anything is written.

    cache_lab.py --kvscope BIN --work DIR
"""
import json
import os
import sys

import numpy as np
import torch

from common import TOL, Failure, main, model_dir, prompt, run_cli

import kvscope_reference as ref  # noqa: E402  (common put tools/ on the path)
import kv_quant_reference as kvq  # noqa: E402
from kv_quant import kivi_rounder, rounder  # noqa: E402


def log_softmax(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def lab(kvscope, model, text, configs, extra=()):
    args = ["lab", "--model", model, "--text-ids", ",".join(map(str, text)), "--json"]
    for c in configs:
        args += ["--config", c]
    args += list(extra)
    rc, out, err = run_cli(kvscope, args, timeout=240)
    if rc != 0:
        raise Failure(f"kvscope {' '.join(args)}: exit {rc}\n{err.strip()}")
    try:
        return json.loads(out), args
    except json.JSONDecodeError as e:
        raise Failure(f"lab --json is not one JSON object ({e}):\n{out[:300]}")


def expected(m, text, window=None, sinks=0, fmt=None):
    """-> (log p [N, V] float64, top-2 margins [N]) for positions 0..N-1 reading text[:i+1]."""
    m.sinks, m.kv_round = sinks, (rounder(fmt) if fmt else None)
    try:
        logits = m.forward(text[:-1], window)
    finally:
        m.sinks, m.kv_round = 0, None
    return log_softmax(logits.numpy()), ref.margins(logits).numpy()


# KL is compared absolutely: the engine's float32 logits are within ~1e-6 of the float64 reference's, and
# so are the KLs computed from them (measured: at most 1.1e-6 on these cases).
KL_TOL = 1e-5


def expected_kivi(m, text, G, R):
    """int4 KIVI teacher-forced as the cache runs it (tests/parity/kv_quant.py check_kivi): position 0 alone,
    then one token a step; a step after n positions reads those below floor((n - R) / G) * G packed."""
    with torch.no_grad():
        logits, pasts = m.run(torch.tensor([text[:1]]), torch.arange(1), None, None)
        rows = [logits[0, -1]]
        for n in range(1, len(text) - 1):
            packed = kivi_rounder(n, G, R)
            read = [(packed(k, "k"), packed(v, "v"), kp) for k, v, kp in pasts]
            logits, new = m.run(torch.tensor([[text[n]]]), torch.tensor([n]), read, None)
            pasts = [(torch.cat([k, nk[:, :, -1:]], 2), torch.cat([v, nv[:, :, -1:]], 2), torch.cat([kp, nkp[-1:]]))
                     for (k, v, kp), (nk, nv, nkp) in zip(pasts, new)]
            rows.append(logits[0, -1])
    logits = torch.stack(rows)
    return log_softmax(logits.numpy()), ref.margins(logits).numpy()


def close(got, want, tol, what, desc, relative=True):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise Failure(f"{desc}: {what} has shape {got.shape}, expected {want.shape}")
    bad = np.argwhere(np.abs(got - want) > tol * (np.maximum(1.0, np.abs(want)) if relative else 1.0))
    if len(bad):
        i = int(bad[0][0])
        raise Failure(f"{desc}: {what} differs at {len(bad)} positions, first {i}: kvscope {got[i]:.7g}, "
                      f"reference {want[i]:.7g}")


def check_figures(kvscope, name):
    def run(work):
        model = model_dir(work, name)
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        L, H, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
        D = C // H
        W, S = 6, 2
        text = prompt(700, 48)
        N = len(text) - 1
        G, R = 4, 2
        specs = ["full", f"window={W},sinks={S}", "int8", "fp8", f"window={W}", "full,name=again", f"int4,g={G},r={R}"]
        obj, args = lab(kvscope, model, text, specs)
        desc = f"{name} lab {' '.join(args[1:3])} ..."
        runs = obj["configs"]
        if [r["spec"] for r in runs] != specs or obj["reference"] != 0 or obj["added_reference"]:
            raise Failure(f"{desc}: configs {[r['spec'] for r in runs]}, reference {obj['reference']}")
        if obj["text"]["tokens"] != text or obj["n_positions_scored"] != N:
            raise Failure(f"{desc}: the text echoed is not the one given")
        m = ref.Model(model, torch.float64)
        full, full_margin = expected(m, text)
        cases = {1: expected(m, text, W, S), 2: expected(m, text, fmt="int8"), 3: expected(m, text, fmt="fp8"),
                 4: expected(m, text, W, 0), 5: (full, full_margin), 6: expected_kivi(m, text, G, R)}
        target = np.array(text[1:])
        f32_row, q_row = D * 4, D + 4  # bytes of one K or V row: float32, or int8 / fp8 codes + a float32 scale
        for k, (got_logp, margin) in cases.items():
            r, pp = runs[k], runs[k]["per_position"]
            what = f"{desc} [{r['spec']}]"
            loss = -got_logp[np.arange(N), target]
            kl = (np.exp(full) * (full - got_logp)).sum(1)
            close(pp["loss"], loss, TOL, "loss", what)
            close(pp["kl"], kl, KL_TOL, "kl", what, relative=False)
            agree = (full.argmax(1) == got_logp.argmax(1)).astype(int)
            firm = (margin > 2 * TOL) & (full_margin > 2 * TOL)  # near ties may fall either way
            if not np.array_equal(np.array(pp["top1"])[firm], agree[firm]):
                raise Failure(f"{what}: top1 {pp['top1']} vs reference {agree.tolist()}")
            close([r["loss_mean"]], [loss.mean()], TOL, "loss_mean", what)
            close([r["kl_mean"]], [kl.mean()], KL_TOL, "kl_mean", what, relative=False)
            close([r["loss_delta"]], [loss.mean() + full[np.arange(N), target].mean()], TOL, "loss_delta", what)
            if abs(r["top1_agree_percent"] - 100 * np.mean(pp["top1"])) > 1e-9:
                raise Failure(f"{what}: top1_agree_percent {r['top1_agree_percent']} is not the mean of top1")
            held = np.arange(1, N + 1)
            if r["window"]:
                held = np.minimum(held, r["window"] - 1 + r["sinks"])
            row = q_row if r["kv_quant"] in ("int8", "fp8") else f32_row
            want_bytes = held * 2 * L * H * row
            if r["kv_quant"] == "int4":  # packed value rows below the boundary (keys: a group's bytes / G each), float32 above
                row = len(kvq.int4_values_quantize(np.zeros(D, np.float32), G))
                packed = np.maximum(0, (held - R) // G * G)
                want_bytes = 2 * L * H * (packed * row + (held - packed) * f32_row)
                row = float(want_bytes[-1]) / (2 * L * H * held[-1])
            if pp["cache_bytes"] != want_bytes.tolist() or r["bytes_total"] != int(want_bytes[-1]) \
                    or abs(r["bytes_per_token"] - 2 * L * H * row) > 1e-9 * row:
                raise Failure(f"{what}: cache bytes {pp['cache_bytes'][-3:]} (total {r['bytes_total']}, per token "
                              f"{r['bytes_per_token']}), expected {want_bytes[-3:].tolist()} of {2 * L * H * row} per token")
        again = runs[5]
        if any(x != 0 for x in again["per_position"]["kl"]) or again["top1_agree_percent"] != 100 \
                or again["per_position"]["loss"] != runs[0]["per_position"]["loss"]:
            raise Failure(f"{desc}: full against full is not KL 0, top-1 100 %, the same losses")
        for k, effect in ((1, "window"), (2, "int8"), (3, "fp8"), (6, "int4")):  # the cases must tell something
            pp = runs[k]["per_position"]
            moved = np.abs(np.array(pp["loss"]) - np.array(runs[0]["per_position"]["loss"])).max()
            if max(pp["kl"]) < 20 * KL_TOL or moved < 20 * TOL:
                raise Failure(f"{desc}: {effect} moves the distribution by KL {max(pp['kl']):.3g}, a loss by {moved:.3g} "
                              f"at most: the case tells nothing")
        return (f"{desc}: {N} positions; loss full {runs[0]['loss_mean']:.4f}, window+sinks KL "
                f"{runs[1]['kl_mean']:.4f}, int8 KL {runs[2]['kl_mean']:.2e}, fp8 KL {runs[3]['kl_mean']:.2e}, "
                f"int4 KL {runs[6]['kl_mean']:.2e}")
    return run


def check_llama(kvscope, work):
    """A GQA Llama folder (rotary positions, 4 query heads on 2 K/V heads): full, window with and without
    sinks against the Llama reference; bytes count the K/V heads, not the query heads."""
    import make_llama_model  # noqa: E402  (tools/, on the path)
    model = os.path.join(work, "models", "llama_gqa")
    make_llama_model.write(model, heads=4, kv_heads=2)
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    L, K = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    W, S = 6, 2
    text = prompt(702, 40, vocab=cfg["vocab_size"])
    N = len(text) - 1
    specs = ["full", f"window={W},sinks={S}", f"window={W}", "full,name=again"]
    obj, args = lab(kvscope, model, text, specs)
    desc = f"llama_gqa lab {' '.join(args[1:3])} ..."
    m = ref.LlamaModel(model, torch.float64)

    def logp(window=None, sinks=0):
        m.sinks = sinks
        try:
            logits = m.forward(text[:-1], window)
        finally:
            m.sinks = 0
        return log_softmax(logits.numpy()), ref.margins(logits).numpy()

    full, full_margin = logp()
    target = np.array(text[1:])
    for k, (got, margin) in {1: logp(W, S), 2: logp(W), 3: (full, full_margin)}.items():
        r, pp = obj["configs"][k], obj["configs"][k]["per_position"]
        what = f"{desc} [{r['spec']}]"
        close(pp["loss"], -got[np.arange(N), target], TOL, "loss", what)
        close(pp["kl"], (np.exp(full) * (full - got)).sum(1), KL_TOL, "kl", what, relative=False)
        firm = (margin > 2 * TOL) & (full_margin > 2 * TOL)
        agree = (full.argmax(1) == got.argmax(1)).astype(int)
        if not np.array_equal(np.array(pp["top1"])[firm], agree[firm]):
            raise Failure(f"{what}: top1 {pp['top1']} vs reference {agree.tolist()}")
        held = np.arange(1, N + 1)
        if r["window"]:
            held = np.minimum(held, r["window"] - 1 + r["sinks"])
        if pp["cache_bytes"] != (held * 2 * L * K * D * 4).tolist():
            raise Failure(f"{what}: cache bytes {pp['cache_bytes'][-3:]}, expected {(held * 2 * L * K * D * 4)[-3:].tolist()}")
    if any(x != 0 for x in obj["configs"][3]["per_position"]["kl"]):
        raise Failure(f"{desc}: full against full is not KL 0")
    return f"{desc}: {N} positions; window+sinks KL {obj['configs'][1]['kl_mean']:.4f}, window KL {obj['configs'][2]['kl_mean']:.4f}"


def check_charts(kvscope, work):
    model = model_dir(work, "base")
    text = prompt(701, 20)
    for ext, magic in ((".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<?xml")):
        path = os.path.join(work, "lab_chart" + ext)
        if os.path.exists(path):
            os.remove(path)
        lab(kvscope, model, text, ["full", "window=4", "int8"], ["--chart", path])
        with open(path, "rb") as f:
            head = f.read(64)
        if not head.startswith(magic) and not (ext == ".svg" and b"<svg" in head):
            raise Failure(f"lab --chart {path}: not a {ext} file (starts {head[:16]!r})")
    return "lab --chart: .png is a PNG, .svg an SVG"


def check_refusals(kvscope, work):
    model = model_dir(work, "base")  # head_dim 16
    chart = os.path.join(work, "refused.png")
    cases = [
        (["--config", "policy=lru,budget=8"], "unknown policy 'lru'"),
        (["--config", "quant=int3"], "unknown format 'int3'"),
        (["--config", "int4,g=5"], "'int4,g=5'"),
        (["--config", "window=0"], "budget must be >= 1"),
        (["--config", "policy=window,budget=-4"], "budget must be >= 1"),
        (["--config", "int4,window=8"], "only with policy full"),
        (["--config", "full,colour=red"], "unknown key 'colour'"),
    ]
    for extra, says in cases:
        if os.path.exists(chart):
            os.remove(chart)
        args = ["lab", "--model", model, "--chart", chart] + (["--text-ids", "1,2,3"] if "--text-ids" not in extra else []) + extra
        rc, out, err = run_cli(kvscope, args)
        lines = err.strip().splitlines()
        if rc != 2 or len(lines) != 1 or says not in lines[0] or out or os.path.exists(chart):
            raise Failure(f"kvscope {' '.join(args)}: expected exit 2, one line with {says!r}, no output or chart; got "
                          f"exit {rc}, stderr {err!r}, stdout {out[:100]!r}")
    # A text longer than n_positions (128) is cut to it, with a note.
    rc, out, err = run_cli(kvscope, ["lab", "--model", model, "--config", "full", "--json",
                                     "--text-ids", ",".join(["1"] * 130)])
    if rc != 0 or "note: the text has 130 tokens; the lab reads the first 128" not in err:
        raise Failure(f"lab on 130 tokens: exit {rc}, stderr {err!r}; expected exit 0 and a note")
    text = json.loads(out)["text"]
    if text["n_tokens"] != 128 or text["n_tokens_before_cut"] != 130:
        raise Failure(f"lab on 130 tokens: --json text says {text['n_tokens']} of {text['n_tokens_before_cut']}")
    return f"lab refuses {len(cases)} bad inputs: exit 2, one line, no chart; cuts a long text to n_positions"


def cases(kvscope, work):
    yield lambda: check_figures(kvscope, "base")(work)
    yield lambda: check_figures(kvscope, "one_head_3_layers")(work)
    yield lambda: check_llama(kvscope, work)
    yield lambda: check_charts(kvscope, work)
    yield lambda: check_refusals(kvscope, work)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
