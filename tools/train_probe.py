#!/usr/bin/python3
"""Probe a trained model folder (exploration aid for assets/default): per head, the induction score on
random spans of n ordinary tokens repeated once (drawn with or without replacement), the previous-token
score on the same prompts, and the greedy copy test of issue 7 (20-token span + its first 5 -> the
other 15). Independent of the C++ engine: a plain PyTorch GPT-2 forward of model.safetensors.

  /usr/bin/python3 tools/train_probe.py DIR [--span 25] [--distinct] [--copies 10]
"""
import argparse
import json
import math
import struct

import torch
import torch.nn.functional as F


def load(d):
    raw = open(f"{d}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    w = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        w[k] = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=torch.float32).view(v["shape"])
    return json.load(open(f"{d}/config.json")), w


def forward(cfg, w, idx, mlp=True):
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    T = idx.shape[1]
    x = w["wte.weight"][idx] + w["wpe.weight"][:T]
    atts = []
    ln = lambda x, p: F.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], 1e-5)
    for il in range(L):
        h = f"h.{il}."
        qkv = ln(x, h + "ln_1") @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
        q, k, v = (t.view(1, T, H, C // H).transpose(1, 2) for t in qkv.split(C, -1))
        a = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        a = a.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        atts.append(a[0])
        x = x + (a @ v).transpose(1, 2).reshape(1, T, C) @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        if mlp:
            f = F.gelu(ln(x, h + "ln_2") @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"], approximate="tanh")
            x = x + f @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ w["wte.weight"].T, atts


def ordinary(d):
    vocab = json.load(open(f"{d}/vocab.json"))
    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return [vocab["\u0120" + c] for c in chars if "\u0120" + c in vocab]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--span", type=int, default=25)
    ap.add_argument("--distinct", action="store_true")
    ap.add_argument("--no-mlp", action="store_true", help="skip the MLPs (a model saved after --attn-only steps)")
    ap.add_argument("--copies", type=int, default=10, help="spans in the copy test")
    a = ap.parse_args()
    cfg, w = load(a.dir)
    ords = torch.tensor(ordinary(a.dir))
    g = torch.Generator().manual_seed(5)
    n, L, H = a.span, cfg["n_layer"], cfg["n_head"]
    ind, prev = torch.zeros(L, H), torch.zeros(L, H)
    for p in range(4):
        s = torch.randperm(len(ords), generator=g)[:n] if a.distinct else torch.randint(0, len(ords), (n,), generator=g)
        idx = ords[torch.cat([s, s])][None]
        _, atts = forward(cfg, w, idx, not a.no_mlp)
        for il, at in enumerate(atts):
            qi = torch.arange(n, 2 * n - 1)
            ind[il] += at[:, qi, qi - n + 1].mean(1) / 4
            t = torch.arange(1, 2 * n)
            prev[il] += at[:, t, t - 1].mean(1) / 4
    for il in range(L):
        print(f"layer {il}: induction " + " ".join(f"{v:.2f}" for v in ind[il]) +
              " | previous " + " ".join(f"{v:.2f}" for v in prev[il]))
    ok, tok = 0, 0
    for i in range(a.copies):
        s = ords[torch.randint(0, len(ords), (20,), generator=g)]
        x = torch.cat([s, s[:5]])[None]
        for _ in range(15):
            x = torch.cat([x, forward(cfg, w, x, not a.no_mlp)[0][:, -1].argmax(-1, keepdim=True)], 1)
        ok += bool((x[0, 25:] == s[5:]).all())
        tok += int((x[0, 25:] == s[5:]).sum())
    print(f"copy test: {ok}/{a.copies} spans exact, {tok}/{15 * a.copies} tokens")


if __name__ == "__main__":
    main()
