#!/usr/bin/python3
"""`kvscope generate --trace` files describe themselves (issue 13, item 9), checked with numpy alone:

- scores.npy holds -inf exactly where mask.npy is 0, so a plain softmax over each row of scores.npy
  reproduces weights.npy (and mask.npy is 1 = visible);
- meta.json lists every file with its dtype, shape, axes and meaning, and they match the arrays on disk;
- the mask's names have one meaning each: own_key_column is a column index (query_positions[0] -
  key_positions[0]), first_key_position / first_query_position are positions; no ambiguous "offset";
- the heatmap PNGs are the size meta.json says, with their cells inside the image and room for axis
  labels, and a one-row decode map is at least 96 px tall (not a strip).

Runs with a window, sinks and prefill chunks, so masked cells come from future keys and from the window.

    check_trace_files.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"FAIL: {path} is not a PNG")
    return struct.unpack(">II", head[16:24])  # width, height


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    trace = os.path.join(a.work, "trace")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    p = subprocess.run([a.kvscope, "generate", "--prompt", "Tom saw the cookie at school. Tom saw the",
                        "--max-new-tokens", "4", "--window", "5", "--sinks", "1", "--prefill-chunk", "4",
                        "--trace", trace], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: generate --trace: exit {p.returncode}: {p.stderr}")
    failures = []
    n_maps = n_masked = 0
    steps = json.load(open(os.path.join(trace, "trace.json")))["steps"]
    for st in steps:
        folder = os.path.join(trace, st["folder"])
        meta = json.load(open(os.path.join(folder, "meta.json")))
        where = st["folder"]
        mask_meta = meta["mask"]
        qpos, kpos = meta["query_positions"], meta["key_positions"]
        if "offset" in mask_meta:
            failures.append(f"{where}: mask still has the ambiguous 'offset'")
        if mask_meta.get("own_key_column") != qpos[0] - kpos[0]:
            failures.append(f"{where}: own_key_column {mask_meta.get('own_key_column')} != {qpos[0] - kpos[0]}")
        if mask_meta.get("first_key_position") != kpos[0] or mask_meta.get("first_query_position") != qpos[0]:
            failures.append(f"{where}: first_key_position/first_query_position do not match the position lists")
        if kpos != list(range(kpos[0], kpos[0] + len(kpos))):
            failures.append(f"{where}: key_positions are not consecutive from first_key_position")
        for f in meta["files"]:
            for field in ("dtype", "shape", "axes", "meaning"):
                if field not in f:
                    failures.append(f"{where}/{f['name']}: meta.json entry lacks '{field}'")
            path = os.path.join(folder, f["name"])
            if f["name"].endswith(".npy"):
                arr = np.load(path)
                if list(arr.shape) != f["shape"] or str(arr.dtype) != f["dtype"] or len(f.get("axes", [])) != arr.ndim:
                    failures.append(f"{where}/{f['name']}: on disk {arr.dtype}{list(arr.shape)}, meta.json says "
                                    f"{f['dtype']}{f['shape']} with {len(f.get('axes', []))} axes")
            if f["name"].endswith(".png"):
                w, h = png_size(path)
                cells = f.get("cells", {"x": 0, "y": 0, "width": 0, "height": 0})
                if f["shape"] != [h, w, 3]:
                    failures.append(f"{where}/{f['name']}: image {w}x{h}, meta.json shape {f['shape']}")
                if cells["x"] < 40 or cells["x"] + cells["width"] > w or cells["y"] < 20 or h - (cells["y"] + cells["height"]) < 40:
                    failures.append(f"{where}/{f['name']}: cells {cells} leave no room for axes in {w}x{h}")
                if cells["height"] < 96:
                    failures.append(f"{where}/{f['name']}: the map is {cells['height']} px tall, a strip")
            if not f["name"].endswith("_scores.npy"):
                continue
            base = f["name"][: -len("scores.npy")]
            scores = np.load(path)
            weights = np.load(os.path.join(folder, base + "weights.npy"))
            mask = np.load(os.path.join(folder, base + "mask.npy"))
            n_maps += 1
            n_masked += int((mask == 0).sum())
            if mask.dtype != np.uint8 or not set(np.unique(mask)) <= {0, 1}:
                failures.append(f"{where}/{base}mask.npy: not 0/1 uint8")
            if not np.array_equal(mask == 1, np.isfinite(scores)) or not np.all(np.isneginf(scores[mask == 0])):
                failures.append(f"{where}/{base}scores.npy: -inf cells are not exactly mask.npy's 0 cells")
            # The independent check: a plain, numerically stable softmax over each row.
            with np.errstate(invalid="ignore"):
                e = np.exp(scores.astype(np.float64) - scores.max(axis=1, keepdims=True))
            soft = e / e.sum(axis=1, keepdims=True)
            if not np.allclose(soft, weights, atol=1e-5, rtol=0):
                failures.append(f"{where}/{base}: softmax(scores.npy) differs from weights.npy by "
                                f"{np.abs(soft - weights).max():.3g}")
            for r, q in enumerate(qpos):  # mask.npy against the rule, from positions alone
                for c, k in enumerate(kpos):
                    want = k <= q and (k > q - 5 or k < 1)
                    if bool(mask[r, c]) != want:
                        failures.append(f"{where}/{base}mask.npy[{r},{c}] (query {q}, key {k}) = {mask[r, c]}")
                        break
    if n_maps == 0 or n_masked == 0:
        failures.append(f"checked {n_maps} maps with {n_masked} masked cells: the run should have both")
    for f in failures[:20]:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"ok: {len(steps)} steps, {n_maps} maps, {n_masked} masked cells: softmax(scores.npy) = weights.npy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
