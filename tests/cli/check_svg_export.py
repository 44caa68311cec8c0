#!/usr/bin/python3
"""Figures for papers (issue 17, part 6) from the command line, read back with Python's XML parser and
numpy only:

- `generate --trace DIR --format svg` writes l.._h.._weights.svg / scores.svg instead of the PNGs; each is
  well-formed XML whose viewBox is the [height, width] meta.json states, with one <rect> per cell (R x P
  from weights.npy), filled with the hatch pattern exactly where mask.npy is 0 and with a colour
  elsewhere, the title and axis labels as text, each prefill row labelled with its position and token
  text (meta.json's tokens); meta.json names the file with dtype "svg"; exported again as PNG into the
  same folder, no SVG map is left behind;
- `--scale 2` PNGs are exactly twice the size of `--scale 1` ones, and meta.json's cell rectangle doubles;
- a chart's format follows its file name: `train --loss-png F.svg` draws both loss curves as polylines of
  one point per step, `F.png --scale 2` is twice the chart's 900 x 520.

    check_svg_export.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np

NS = "{http://www.w3.org/2000/svg}"
PROMPT = ["--prompt", "The cat sat on the", "--max-new-tokens", "3", "--prefill-chunk", "3", "--window", "4"]


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])  # width, height


def generate(a, folder, *extra):
    p = subprocess.run([a.kvscope, "generate", *PROMPT, "--trace", folder, *extra], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: generate {' '.join(extra)} exited {p.returncode}: {p.stderr}")


def step_folders(trace):
    return sorted(os.path.join(trace, d) for d in os.listdir(trace) if d.startswith("step_"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    failures = []

    svg_trace = os.path.join(a.work, "svg")
    generate(a, svg_trace, "--format", "svg")
    n_svg = 0
    n_labelled = 0
    for folder in step_folders(svg_trace):
        meta = json.load(open(os.path.join(folder, "meta.json")))
        names = os.listdir(folder)
        if any(n.endswith(".png") for n in names):
            failures.append(f"{folder}: PNG heatmaps written with --format svg")
        for entry in meta["files"]:
            if not entry["name"].endswith(".svg"):
                continue
            n_svg += 1
            path = os.path.join(folder, entry["name"])
            where = os.path.relpath(path, a.work)
            if entry["dtype"] != "svg":
                failures.append(f"{where}: meta.json dtype {entry['dtype']!r}, expected 'svg'")
            try:
                root = ET.parse(path).getroot()
            except ET.ParseError as e:
                failures.append(f"{where}: not well-formed XML: {e}")
                continue
            h, w = entry["shape"]
            if root.tag != NS + "svg" or root.get("viewBox") != f"0 0 {w} {h}":
                failures.append(f"{where}: root {root.tag} viewBox {root.get('viewBox')!r}, meta.json says {w} x {h}")
            base = entry["name"][: -len("weights.svg")] if entry["name"].endswith("weights.svg") else entry["name"][: -len("scores.svg")]
            mask = np.load(os.path.join(folder, base + "mask.npy"))
            cells = [g for g in root.iter(NS + "g") if g.get("id") == "cells"]
            if len(cells) != 1:
                failures.append(f"{where}: {len(cells)} groups with id 'cells'")
                continue
            fills = [r.get("fill") for r in cells[0] if r.tag == NS + "rect"]
            if len(fills) != mask.size:
                failures.append(f"{where}: {len(fills)} cell rects, mask.npy has {mask.shape}")
                continue
            masked = np.array([f == "url(#masked)" for f in fills]).reshape(mask.shape)
            coloured = np.array([re.fullmatch(r"#[0-9a-f]{6}", f or "") is not None for f in fills]).reshape(mask.shape)
            if not np.array_equal(masked, mask == 0) or not np.array_equal(coloured, mask == 1):
                failures.append(f"{where}: hatched cells differ from mask.npy == 0")
            texts = ["".join(t.itertext()) for t in root.iter(NS + "text")]
            kind = "softmax weights" if "weights" in entry["name"] else "scores"
            for want in ("query position", "key position", "masked"):
                if want not in texts:
                    failures.append(f"{where}: no label {want!r}")
            if not any(kind in t for t in texts):
                failures.append(f"{where}: no title naming {kind!r}")
            # Each row of a prefill chunk is ticked (rows >= 18 px) and labelled "position token".
            if meta["phase"] == "prefill" and not base.startswith(("cross_", "encoder_")):
                for pos, text in zip(meta["query_positions"], meta["tokens"]["text"]):
                    if isinstance(text, str) and len(text) <= 12 and text.isprintable() and f"{pos} {text}" not in texts:
                        failures.append(f"{where}: no row label {f'{pos} {text}'!r} in {texts}")
                n_labelled += 1
    if n_svg == 0:
        failures.append("no SVG heatmap was written")
    if n_labelled == 0:
        failures.append("no prefill heatmap's token labels were checked")

    # Exported again as PNG into the same folder: the SVG maps of the earlier export go, so the folder
    # holds what meta.json lists.
    generate(a, svg_trace)
    for folder in step_folders(svg_trace):
        listed = {e["name"] for e in json.load(open(os.path.join(folder, "meta.json")))["files"]}
        left = sorted(n for n in os.listdir(folder) if n.endswith((".svg", ".png")) and n not in listed)
        if left:
            failures.append(f"{folder}: maps of the earlier export left beside the new ones: {left[:4]}")

    sizes = {}
    for scale in ("1", "2"):
        trace = os.path.join(a.work, "png" + scale)
        generate(a, trace, "--scale", scale)
        for folder in step_folders(trace):
            meta = json.load(open(os.path.join(folder, "meta.json")))
            for entry in meta["files"]:
                if entry["name"].endswith(".png"):
                    key = (os.path.basename(folder), entry["name"])
                    sizes.setdefault(key, {})[scale] = (png_size(os.path.join(folder, entry["name"])), entry)
    if not sizes:
        failures.append("no PNG heatmap was written")
    for key, by_scale in sizes.items():
        (w1, h1), e1 = by_scale["1"]
        (w2, h2), e2 = by_scale["2"]
        if (w2, h2) != (2 * w1, 2 * h1):
            failures.append(f"{key}: scale 2 is {w2} x {h2}, scale 1 is {w1} x {h1}")
        if e2["shape"] != [h2, w2, 3] or e2["scale"] != 2:
            failures.append(f"{key}: meta.json shape {e2['shape']} scale {e2['scale']} for a {w2} x {h2} PNG")
        if {k: 2 * v for k, v in e1["cells"].items()} != e2["cells"]:
            failures.append(f"{key}: cells {e2['cells']} at scale 2, {e1['cells']} at scale 1")

    # A chart takes its format from its name: train --loss-png F.svg is an SVG with the two curves as
    # polylines; F.png with --scale 2 is twice the 900 x 520 chart.
    tiny = ["train", "--steps", "12", "--warmup", "2", "--batch", "2", "--seq", "16", "--n-positions", "16",
            "--n-embd", "32", "--threads", "1"]
    for name, extra in (("loss.svg", []), ("loss.png", ["--scale", "2"])):
        out = os.path.join(a.work, "train_" + name.replace(".", "_"))
        chart = os.path.join(a.work, name)
        p = subprocess.run([a.kvscope, *tiny, "--out", out, "--loss-png", chart, *extra], capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:
            failures.append(f"train --loss-png {name} {' '.join(extra)} exited {p.returncode}: {p.stderr}")
            continue
        if name.endswith(".png"):
            if png_size(chart) != (1800, 1040):
                failures.append(f"{name} at --scale 2 is {png_size(chart)}, not 1800 x 1040")
            continue
        root = ET.parse(chart).getroot()
        lines = list(root.iter(NS + "polyline"))
        texts = ["".join(t.itertext()) for t in root.iter(NS + "text")]
        if root.get("viewBox") != "0 0 900 520" or len(lines) != 2 or "kvscope train: cross-entropy loss" not in texts:
            failures.append(f"{name}: viewBox {root.get('viewBox')}, {len(lines)} polylines, texts {texts[:3]}")
        elif any(len(l.get("points").split()) != 12 for l in lines):
            failures.append(f"{name}: a curve does not have the 12 steps' points")

    print(f"{n_svg} SVG heatmaps, {len(sizes)} PNG pairs checked")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
