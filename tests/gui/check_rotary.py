#!/usr/bin/env python3
"""The Rotary panel's numbers against numpy, from the rows `kvscope generate --trace` exports.

For assets/llama-gqa as it is and with llama3 rope_scaling added to its config: the window runs the same
prompt, selects a query and a key of layer 1 head 2, and writes what the panel shows (rotary-json). numpy
recomputes, from config.json and the exported q.npy / k.npy: each pair's inverse frequency (HF's default
and llama3 rules), the angles at both positions, the key and query turned back to before rotation, the
score as the model computed it, and the score of the same content at every distance. The panel's Save
figure (script `save-figure rotary`, SVG) must draw the same numbers: each chart's line is an affine image
of numpy's values (frequencies on a log axis), and the marker sits at the scored distance. The tab as drawn at
1280x720 and 1920x1080 (layout dumps of widgets/chart.h): all four charts inside the window, each with ticks
on both axes that label what is plotted (numpy's values), the key chart's "before" / "cached" legend above its
bars, and the score chart (tab and figure) over distances 0 .. max(32, 2 x the query's position), the scored
distance inside that range rather than on its border.
"""
import json
import os
import shutil
import xml.etree.ElementTree as ET

import numpy as np

from guitest import arguments, check_chart, fail, read_json, run, script, window

PROMPT = "The quick brown fox jumps over the lazy dog and the cat"
LAYER, HEAD, KEY = 1, 2, 4


def inv_freq(cfg, D):
    base = 1.0 / (np.float32(cfg["rope_theta"]) ** (np.arange(0, D, 2, dtype=np.float32) / np.float32(D))).astype(np.float64)
    rs = cfg.get("rope_scaling")
    if not rs:
        return base, base
    assert rs["rope_type"] == "llama3"
    old, factor = rs["original_max_position_embeddings"], rs["factor"]
    low, high = old / rs["low_freq_factor"], old / rs["high_freq_factor"]
    wavelen = 2 * np.pi / base
    smooth = (old / wavelen - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
    out = np.where(wavelen > low, base / factor, np.where(wavelen < high, base, (1 - smooth) * base / factor + smooth * base))
    return out.astype(np.float32).astype(np.float64), base


def turn(x, angles):  # rotate-half layout: pairs (i, i + D/2)
    h = len(angles)
    a, b = x[:h], x[h:]
    return np.concatenate([a * np.cos(angles) - b * np.sin(angles), b * np.cos(angles) + a * np.sin(angles)])


def check(kvscope, model, work, label):
    trace = os.path.join(work, "trace")
    shutil.rmtree(trace, ignore_errors=True)
    run([kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "3", "--trace", trace])
    steps = sorted(d for d in os.listdir(trace) if d.startswith("step_"))
    last = os.path.join(trace, steps[-1])
    meta = json.load(open(os.path.join(last, "meta.json")))
    qpos = meta["query_positions"][-1]
    out = os.path.join(work, "rotary.json")
    script(kvscope, work, "rotary", ["prompt " + PROMPT, "prefill", "decode %d" % (len(steps) - 1), "layer %d" % LAYER,
                                     "head %d" % HEAD, "select %d %d" % (qpos, KEY), "rotary-json " + out,
                                     "export-dir " + os.path.join(work, "export"), "export-format svg",
                                     "save-figure rotary fig"], (1600, 1000), model=model, dump=False)
    got = read_json(out)

    cfg = json.load(open(os.path.join(model, "config.json")))
    D = meta["model"]["head_dim"]
    group = meta["model"]["n_head"] // meta["model"]["n_kv_head"]
    kv = HEAD // group
    keys = {}
    for s in steps:
        m = json.load(open(os.path.join(trace, s, "meta.json")))
        k = np.load(os.path.join(trace, s, "k.npy"))  # (L, R, K*D)
        for r in range(k.shape[1]):
            keys[m["first_computed_position"] + r] = k[LAYER, r, kv * D:(kv + 1) * D].astype(np.float64)
    q = np.load(os.path.join(last, "q.npy"))[LAYER, -1, HEAD * D:(HEAD + 1) * D].astype(np.float64)
    k = keys[KEY]
    freq, unscaled = inv_freq(cfg, D)
    qa = np.float32(qpos) * freq.astype(np.float32)  # float32 products, as the model turns them
    ka = np.float32(KEY) * freq.astype(np.float32)
    q0, k0 = turn(q, -qa.astype(np.float64)), turn(k, -ka.astype(np.float64))
    scale = 1 / np.sqrt(D)
    by_distance = np.array([turn(q0, d * freq) @ k0 for d in range(len(got["score_by_distance"]))]) * scale

    pairs = got["pairs"]
    checks = [
        ("positions", abs(got["query_position"] - qpos) + abs(got["key_position"] - KEY), 0),
        ("inv_freq", np.max(np.abs(np.array([p["inv_freq"] for p in pairs]) / freq - 1)), 1e-6),
        ("inv_freq_unscaled", np.max(np.abs(np.array([p["inv_freq_unscaled"] for p in pairs]) / unscaled - 1)), 1e-6),
        ("query_angle", np.max(np.abs(np.array([p["query_angle"] for p in pairs]) - np.mod(qa.astype(np.float64), 2 * np.pi))), 1e-5),
        ("key_angle", np.max(np.abs(np.array([p["key_angle"] for p in pairs]) - np.mod(ka.astype(np.float64), 2 * np.pi))), 1e-5),
        ("key_rotated", np.max(np.abs(np.array(got["key_rotated"]) - k)), 0),
        ("query_rotated", np.max(np.abs(np.array(got["query_rotated"]) - q)), 0),
        # a frequency may differ in its last float32 bit (pow in C++ and in numpy): 1e-7 of an angle
        ("key_unrotated", np.max(np.abs(np.array(got["key_unrotated"]) - k0)), 1e-5),
        ("query_unrotated", np.max(np.abs(np.array(got["query_unrotated"]) - q0)), 1e-5),
        ("score", abs(got["score"] - q @ k * scale), 1e-6),
        ("score_by_distance", np.max(np.abs(np.array(got["score_by_distance"]) - by_distance)), 1e-5),
        ("score at own distance", abs(by_distance[qpos - KEY] - q @ k * scale), 1e-4),
    ]
    for name, err, bound in checks:
        print("  %-10s %-22s max |diff| %.2e (bound %.0e)" % (label, name, err, bound))
        if not err <= bound:
            fail("%s: %s differs from numpy by %g" % (label, name, err))
    last = min(len(by_distance) - 1, max(32, 2 * qpos, 2 * (qpos - KEY)))  # the distances the tab shows
    check_figure(os.path.join(work, "export", "figures", "fig.svg"), label, freq, unscaled,
                 np.mod(qa.astype(np.float64), 2 * np.pi), k0, k, by_distance[:last + 1], qpos - KEY)
    sizes = ((1280, 720), (1920, 1080)) if label == "default" else ((1280, 720),)
    for size in sizes:
        check_tab(kvscope, model, work, label, size, len(steps), qpos, freq, unscaled,
                  np.mod(qa.astype(np.float64), 2 * np.pi), k0, k, by_distance[:last + 1])
    return freq, unscaled


def check_tab(kvscope, model, work, label, size, n_steps, qpos, freq, unscaled, query_angle, key_before, key_cached,
              by_distance):
    """The tab as drawn (widgets/chart.h dumps): every chart ticked on both axes with its data where the ticks say,
    numpy's values plotted, all four charts inside the window, the key's legend above its bars, the score chart's
    distances 0 .. max(32, 2 x query position) with the scored distance inside."""
    name = "%s %dx%d" % (label, size[0], size[1])
    d = window(kvscope, model, work, "tab_%dx%d" % size, size,
               ["prompt " + PROMPT, "prefill", "decode %d" % (n_steps - 1), "layer %d" % LAYER, "head %d" % HEAD,
                "select %d %d" % (qpos, KEY), "panel Rotary"])
    charts = {
        "rotary frequencies": (lambda t: np.log10(float(t)),
                               {"frequency": np.log10(freq)} | ({"unscaled": np.log10(unscaled)} if np.any(freq != unscaled) else {})),
        "rotary angles": (float, {"angle": query_angle}),
        "rotary key": (float, {"before": key_before, "cached": key_cached}),
        "rotary score by distance": (float, {"score": by_distance}),
    }
    vx, vy = d["viewport"]
    for chart, (reads, want) in charts.items():
        c = check_chart(d, chart, reads)
        if sorted(c["series"]) != sorted(want):
            fail("%s %s: series %s, want %s" % (name, chart, sorted(c["series"]), sorted(want)))
        for series, values in want.items():
            got = np.array([v for v, _ in c["series"][series]])
            if len(got) != len(values) or np.max(np.abs(got - values)) > 1e-5:
                fail("%s %s: %s plotted %s, numpy %s" % (name, chart, series, got[:8], values[:8]))
        x0, y0, x1, y1 = d["widgets"][chart]
        cx0, cy0, cx1, cy1 = d["clips"][chart]
        if x0 < cx0 - 1 or y0 < cy0 - 1 or x1 > cx1 + 1 or y1 > cy1 + 1 or x1 > vx or y1 > vy:
            fail("%s: %s at %s is cut by its window %s: not all four charts show" % (name, chart, d["widgets"][chart],
                                                                                      d["clips"][chart]))
    key = check_chart(d, "rotary key")
    for item in ("before", "cached"):
        box = key["legend"].get(item)
        if box is None or box[3] > key["plot"][1]:
            fail("%s: the key chart's %r label %s is not above its bars %s" % (name, item, box, key["plot"]))
    last, distance = len(by_distance) - 1, qpos - KEY
    xs = [v for v, _, _ in check_chart(d, "rotary score by distance")["x"]]
    if d["texts"].get("rotary distances") != "0..%d" % last or xs[0] != 0 or xs[-1] > last or not 0 < distance < last:
        fail("%s: score chart over %r with ticks %s; want 0..%d around distance %d" % (
            name, d["texts"].get("rotary distances"), xs, last, distance))
    print("  %-10s tab %dx%d: four charts ticked and in view, numpy's values plotted, legend above the key's bars, "
          "distances 0..%d around %d" % (label, size[0], size[1], last, distance))


def check_figure(path, label, freq, unscaled, query_angle, key_before, key_cached, by_distance, distance):
    """The saved figure's polylines, in drawing order, against numpy's arrays."""
    root = ET.parse(path).getroot()
    lines = [np.array([[float(c) for c in p.split(",")] for p in pl.get("points").split()])
             for pl in root.iter("{http://www.w3.org/2000/svg}polyline")]
    want = ([np.log10(unscaled)] if np.any(freq != unscaled) else []) + [np.log10(freq), query_angle, key_before,
                                                                          key_cached, by_distance]
    if len(lines) != len(want) + 1:
        fail("%s figure: %d polylines, want %d (the series and the marker)" % (label, len(lines), len(want) + 1))
    for i, (pts, values) in enumerate(zip(lines, want)):
        if len(pts) != len(values):
            fail("%s figure: line %d has %d points, want %d" % (label, i, len(pts), len(values)))
        if np.ptp(values) == 0:
            continue
        # y is an affine image of the value, going up the page, and x of the index: both to the SVG's 6 digits
        for coord, of in ((pts[:, 1], values), (pts[:, 0], np.arange(len(values), dtype=np.float64))):
            slope, icpt = np.polyfit(of, coord, 1)
            resid = np.max(np.abs(coord - (slope * of + icpt)))
            if resid > 0.05 + 1e-5 * np.max(np.abs(coord)):
                fail("%s figure: line %d is not numpy's values (off by %.3g units)" % (label, i, resid))
        if not np.polyfit(values, pts[:, 1], 1)[0] < 0:
            fail("%s figure: line %d runs upside down" % (label, i))
    # The marker: a vertical line at the scored distance of the score chart.
    curve, marker = lines[-2], lines[-1]
    x_at = np.polyval(np.polyfit(np.arange(len(curve)), curve[:, 0], 1), distance)
    if len(marker) != 2 or np.max(np.abs(marker[:, 0] - x_at)) > 0.05:
        fail("%s figure: the marker is not at distance %d (x %s, want %.2f)" % (label, distance, marker[:, 0], x_at))
    print("  %-10s figure: %d lines match numpy, marker at distance %d" % (label, len(want), distance))


def main():
    a = arguments()
    plain = os.path.join(a.assets, "llama-gqa")
    os.makedirs(os.path.join(a.work, "plain"), exist_ok=True)
    check(a.kvscope, plain, os.path.join(a.work, "plain"), "default")
    # The same weights with llama3 scaling: the slow pairs stretched by the factor, the fast ones kept.
    scaled_dir = os.path.join(a.work, "llama3")
    shutil.rmtree(scaled_dir, ignore_errors=True)
    shutil.copytree(plain, scaled_dir)
    cfg = json.load(open(os.path.join(scaled_dir, "config.json")))
    cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 64}
    json.dump(cfg, open(os.path.join(scaled_dir, "config.json"), "w"), indent=2)
    freq, unscaled = check(a.kvscope, scaled_dir, scaled_dir, "llama3")
    if not (freq[0] == unscaled[0] and abs(freq[-1] * 8 / unscaled[-1] - 1) < 1e-6 and np.any((freq < unscaled) & (freq > unscaled / 8))):
        fail("the llama3 case does not exercise kept, stretched and interpolated pairs")
    print("PASS")


if __name__ == "__main__":
    main()
