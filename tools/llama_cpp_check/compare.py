#!/usr/bin/python3
"""The rows of tools/llama_cpp_check.sh's table: kvscope and llama.cpp on the same GGUF file and prompt.

    compare.py row NAME TYPE FILE.gguf KVSCOPE.json KVSCOPE.npy LLAMA.json LLAMA.npy
               [--folder FOLDER.json FOLDER.npy] [--dequantized DEQ.json DEQ.npy]
    compare.py table ROWS.jsonl VERSION CPU N          the rows as one markdown table

KVSCOPE.json / .npy: kvscope generate --json / --dump-logits (greedy). LLAMA.json / .npy: llama_logits run
with --follow on kvscope's generated ids, so row j of both holds the logits after the same tokens.
FOLDER: kvscope on the Hugging Face folder the file was converted from (same prompt). DEQ: llama_logits
(--follow as well) on the float32 copy of the file that gguf-py's dequantizers make (dequantize_gguf.py).
`row` prints one JSON line: prompt ids equal; greedy ids equal for the first `greedy_equal` of `n` tokens
(llama.cpp's own greedy run is identical up to there); top-1 agreement over the n rows; max |Δlogit| and
the largest |logit| (for scale) over all rows; vs the dequantized copy greedy ids and the same max; vs the
folder, how far
the file moved kvscope's own logits: max |Δlogit| over the rows up to the first token the two runs chose
differently.
"""
import argparse
import json
import os
import sys

import numpy as np


def row(a):
    k, ll = json.load(open(a.kvscope_json)), json.load(open(a.llama_json))
    klog, llog = np.load(a.kvscope_npy), np.load(a.llama_npy)
    if klog.shape[1] != llog.shape[1]:
        sys.exit(f"compare.py: {a.file}: kvscope has {klog.shape[1]} logits per row, llama.cpp {llog.shape[1]}")
    n = min(len(k["generated_ids"]), len(ll["ids"]), klog.shape[0], llog.shape[0])
    klog, llog = klog[:n].astype(np.float64), llog[:n].astype(np.float64)
    kid, lid = list(k["generated_ids"][:n]), list(ll["ids"][:n])
    r = {
        "model": a.name, "type": a.type, "file_mib": round(os.path.getsize(a.file) / 2**20, 1),
        "prompt_ids_equal": k["prompt_ids"] == ll["prompt_ids"], "prompt_len": len(ll["prompt_ids"]), "n": n,
        "greedy_equal": next((j for j in range(n) if kid[j] != lid[j]), n),
        "top1_agree": int(np.sum(np.argmax(klog, axis=1) == np.argmax(llog, axis=1))),
        "max_abs_dlogit": float(np.abs(klog - llog).max()), "mean_abs_dlogit": float(np.abs(klog - llog).mean()),
        "max_abs_logit": float(np.abs(llog).max()),
    }
    flips = np.nonzero(np.argmax(klog, axis=1) != np.argmax(llog, axis=1))[0]
    if len(flips):  # the widest gap between kvscope's best and second-best logit where the choice flipped
        top2 = np.sort(klog[flips], axis=1)[:, -2:]
        r["flipped_margin"] = float(np.max(top2[:, 1] - top2[:, 0]))
    if a.dequantized:
        did, dlog = json.load(open(a.dequantized[0]))["ids"], np.load(a.dequantized[1])[:n].astype(np.float64)
        r["dequantized_greedy_equal"] = next((j for j in range(n) if kid[j] != did[j]), n)
        r["max_abs_dlogit_vs_dequantized"] = float(np.abs(klog - dlog).max())
    if a.folder:
        fid, flog = json.load(open(a.folder[0]))["generated_ids"], np.load(a.folder[1]).astype(np.float64)
        m = min(n, len(fid), flog.shape[0])
        equal = next((j for j in range(m) if fid[j] != kid[j]), m)
        rows = min(equal + 1, m)  # row `equal` still saw the same tokens
        r["folder_greedy_equal"] = equal
        r["max_abs_dlogit_vs_folder"] = float(np.abs(klog[:rows] - flog[:rows]).max())
    print(json.dumps(r))


def table(a):
    rows = [json.loads(line) for line in open(a.rows) if line.strip()]
    print(f"kvscope vs {a.version} on the same GGUF files ({a.cpu}), greedy, {a.n} new tokens after the prompt.\n"
          "Δ: max |kvscope - llama.cpp| over all logits of the rows; greedy deq and Δ deq: the same against\n"
          "llama.cpp on the float32 copy gguf-py dequantized; folder Δ: kvscope on the file against kvscope on\n"
          "the Hugging Face folder it came from (rows until their greedy ids part, which `folder` counts).\n")
    print("| model | type | MiB | prompt ids | greedy equal | top-1 | Δ | greedy deq | Δ deq | largest logit | folder "
          "| folder Δ |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def g(x):
        return "—" if x is None else f"{x:.2g}"

    def count(r, key):
        return "—" if key not in r else f"{r[key]}/{r['n']}"
    for r in rows:
        print(f"| {r['model']} | {r['type']} | {r['file_mib']} | {'equal' if r['prompt_ids_equal'] else 'DIFFER'} "
              f"({r['prompt_len']}) | {r['greedy_equal']}/{r['n']} | {r['top1_agree']}/{r['n']} | "
              f"{g(r['max_abs_dlogit'])} | {count(r, 'dequantized_greedy_equal')} | "
              f"{g(r.get('max_abs_dlogit_vs_dequantized'))} | {r['max_abs_logit']:.3g} | "
              f"{count(r, 'folder_greedy_equal')} | {g(r.get('max_abs_dlogit_vs_folder'))} |")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("row")
    for name in ("name", "type", "file", "kvscope_json", "kvscope_npy", "llama_json", "llama_npy"):
        p.add_argument(name)
    p.add_argument("--folder", nargs=2, metavar=("JSON", "NPY"))
    p.add_argument("--dequantized", nargs=2, metavar=("JSON", "NPY"))
    p.set_defaults(func=row)
    t = sub.add_parser("table")
    for name in ("rows", "version", "cpu", "n"):
        t.add_argument(name)
    t.set_defaults(func=table)
    a = ap.parse_args(argv)
    a.func(a)


if __name__ == "__main__":
    main(sys.argv[1:])
