#!/usr/bin/python3
"""What kvscope says of a Gemma 3 folder is so (issue 43, findings 1, 3 and 5), checked with numpy alone.

A Gemma 3 folder of tools/make_llama_model.py's gemma3-tiny shape (6 layers, sliding window 4, every third
layer full; assets/llama-gqa's tokenizer) runs `generate --trace` in prefill chunks of 5. For every step
and layer, from config.json and the positions alone:
  - meta.json's mask.layers[il] gives the layer's rule: "window 4" for a sliding layer, "causal" (or the
    session's window) for a full one, and its window;
  - the layer's mask.npy equals that rule applied to query_positions x key_positions: k <= q, and k > q - W
    in a sliding layer.

`inspect` and `inspect --json` read head_dim, the K/V head count and the norm form from config.json's
values: head_dim 16 (not hidden_size / heads = 8), "1 K/V head", RMSNorm times (1 + weight).

int4 (KIVI, G = 8, R = 4) bytes are said apart: `lab --json`'s residual positions and bytes equal KIVI's rule
(positions below floor((n - R) / G) * G are packed, the rest float32: 2 * L * K/V heads * D * 4 bytes each),
the packed rest is `generate --json`'s bytes per token for each packed position, and the lab's table and
generate's kv line name the float32 residual; `generate --json` kv.int4 splits kv.bytes into packed + residual.

    check_gemma_views.py --kvscope BIN --assets DIR --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gui")))
from guitest import gemma3_folder  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog"


def want_mask(qpos, kpos, layer_window, session_window, sinks):
    q = np.array(qpos)[:, None]
    k = np.array(kpos)[None, :]
    ok = k <= q
    for w in (layer_window, session_window):
        if w:
            ok &= k > q - w
    if session_window and sinks:  # the session keeps its sinks where its own window drops them
        ok |= (k < sinks) & (k <= q - session_window)
    return ok.astype(np.uint8)


def int4_bytes(a, model, cfg, failures):
    L, K, D, G, R = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"], 8, 4
    text = os.path.join(a.work, "text.txt")
    with open(text, "w") as f:
        f.write(" ".join([PROMPT] * 3))
    cmd = [a.kvscope, "lab", "--model", model, "--text", text, "--config", "full", "--config", "int4,g=%d,r=%d" % (G, R)]
    p = subprocess.run(cmd + ["--json"], capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"lab --json: exit {p.returncode}: {p.stderr}")
        return
    runs = {c["name"]: c for c in json.loads(p.stdout)["configs"]}
    n = runs["full"]["positions_held"]
    int4 = runs["int4,g=%d,r=%d" % (G, R)]
    res = n - max(0, (n - R) // G * G)
    want = (res, res * 2 * L * K * D * 4)
    got = (int4.get("residual_positions"), int4.get("bytes_residual"))
    if got != want or runs["full"].get("bytes_residual") != 0:
        failures.append(f"lab --json: int4 residual (positions, bytes) {got}, KIVI's rule at n = {n} gives {want}; "
                        f"full's bytes_residual {runs['full'].get('bytes_residual')}")
    g = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "2",
                        "--kv-quant", "int4", "--kv-group", str(G), "--kv-residual", str(R), "--json"],
                       capture_output=True, text=True)
    kv = json.loads(g.stdout).get("kv", {}) if g.returncode == 0 else {}
    packed = int4["bytes_total"] - want[1]
    if not kv or packed != (n - res) * kv["bytes_per_token"]:
        failures.append(f"lab: int4 packed bytes {packed} for {n - res} packed positions, generate's bytes per token "
                        f"{kv.get('bytes_per_token')} ({g.stderr.strip()})")
    split = (kv.get("int4") or {})
    slots = split.get("residual_slots", 0)
    if (not slots or slots < R or split.get("bytes_residual") != slots * 2 * L * K * D * 4
            or split.get("bytes_packed") != kv.get("bytes", 0) - split.get("bytes_residual")):
        failures.append(f"generate --json: kv.int4 {split} does not split kv.bytes {kv.get('bytes')} into packed + "
                        f"{R}+ float32 residual slots")
    lines = subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()
    if not any("float32 residual" in x and str(want[1]) in x for x in lines):
        failures.append(f"lab: no table line names the int4 residual's {want[1]} bytes: {lines[-3:]}")
    g = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "2",
                        "--kv-quant", "int4", "--kv-group", str(G), "--kv-residual", str(R)], capture_output=True, text=True)
    if not any(x.startswith("kv: int4 rows") and "float32 residual of %d positions" % slots in x for x in g.stderr.splitlines()):
        failures.append(f"generate: the kv line does not name the float32 residual: {g.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    model = gemma3_folder(a.assets, a.work)
    cfg = json.load(open(os.path.join(model, "config.json")))
    L, W, pattern = cfg["num_hidden_layers"], cfg["sliding_window"], cfg["sliding_window_pattern"]
    layer_windows = [W if (i + 1) % pattern != 0 else 0 for i in range(L)]  # Gemma3TextConfig's layer pattern
    failures = []
    D, K = cfg["head_dim"], cfg["num_key_value_heads"]
    if D == cfg["hidden_size"] // cfg["num_attention_heads"] or K != 1:
        raise SystemExit("FAIL: the folder should have head_dim apart from hidden_size / heads and one K/V head")
    p = subprocess.run([a.kvscope, "inspect", "--model", model], capture_output=True, text=True)
    want = f"(head_dim {D}, 1 K/V head)"
    if p.returncode != 0 or want not in p.stdout:
        failures.append(f"inspect: exit {p.returncode}, no {want!r} in: {p.stdout[:400]}{p.stderr}")
    p = subprocess.run([a.kvscope, "inspect", "--model", model, "--json"], capture_output=True, text=True)
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    got = (j.get("head_dim"), j.get("kv_heads"), j.get("norm"))
    if got != (D, K, "RMSNorm times (1 + weight)"):
        failures.append(f"inspect --json: head_dim, kv_heads, norm = {got}, expected {D}, {K}, RMSNorm times (1 + weight)")
    int4_bytes(a, model, cfg, failures)
    n_maps = n_sliding_masked = 0
    # A session window cannot be combined with the model's own (refused in one line): the model's alone.
    for name, session_window, sinks in (("model", 0, 0),):
        trace = os.path.join(a.work, name)
        cmd = [a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "3",
               "--prefill-chunk", "5", "--trace", trace]
        if session_window:
            cmd += ["--window", str(session_window), "--sinks", str(sinks)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}: {p.stderr}")
        for st in json.load(open(os.path.join(trace, "trace.json")))["steps"]:
            folder = os.path.join(trace, st["folder"])
            meta = json.load(open(os.path.join(folder, "meta.json")))
            qpos, kpos = meta["query_positions"], meta["key_positions"]
            rules = meta["mask"].get("layers", [])
            where = f"{name}/{st['folder']}"
            if len(rules) != L:
                failures.append(f"{where}: mask.layers has {len(rules)} entries, expected {L}")
                continue
            for il in range(L):
                lw = layer_windows[il]
                w = min(x for x in (lw, session_window) if x) if (lw or session_window) else 0
                want_name = "causal" if w == 0 else f"window {w}" + (f" with sinks 0..{sinks - 1}" if sinks else "")
                got = rules[il]
                if got.get("rule_name") != want_name or got.get("window") != w or got.get("layer_window") != lw:
                    failures.append(f"{where} layer {il}: rule {got.get('rule_name')!r} window {got.get('window')} "
                                    f"layer_window {got.get('layer_window')}, expected {want_name!r} {w} {lw}")
                want = want_mask(qpos, kpos, lw, session_window, sinks)
                for h in (0, cfg["num_attention_heads"] - 1):
                    mask = np.load(os.path.join(folder, f"l{il:02d}_h{h:02d}_mask.npy"))
                    n_maps += 1
                    if not np.array_equal(mask, want):
                        r, c = np.argwhere(mask != want)[0]
                        failures.append(f"{where} layer {il} head {h}: mask.npy[{r},{c}] (query {qpos[r]}, key "
                                        f"{kpos[c]}) = {mask[r, c]}, the rule gives {want[r, c]}")
                    elif lw and (np.tril(np.ones_like(mask), np.array(qpos)[0] - np.array(kpos)[0]) > mask).any():
                        n_sliding_masked += 1
    if n_sliding_masked == 0:
        failures.append("no sliding layer's mask hid a past key: the prompt is too short for the window")
    for f in failures[:20]:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"ok: {n_maps} masks equal each layer's rule; {n_sliding_masked} sliding-layer maps hide past keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
