#!/usr/bin/python3
"""Save figure (script `save-figure PANEL [NAME]`) against numbers computed independently.

On the default model the window prefills a prompt, selects layer 1 head 2 and saves the KV cache, mask,
K/V quantization (int8), heads, logit lens and cache on/off figures as PNG at scale 2 and as SVG into the Export
folder's figures/. Every SVG must parse as XML (xml.etree) and carry its title and axis names; every
heatmap cell's colour - the SVG rect's fill, and the PNG pixel at the same cell's centre (scale 2) - is
mapped back through the figure's own colour bar (the SVG gradient's 256 stops) to a value, which must
equal, within colormap quantisation, what numpy computes:
  - KV cache: K and V of the selected head per cache slot, from the rows `kvscope generate --trace`
    exports; empty slots hatched;
  - mask: causal, hatched above the diagonal; under h2o, the keys the trace's eviction events name for the
    shown head's K/V head at 0, the rest at 1;
  - K/V quantization: int8 reconstruction error of K and V and the score change q.k_hat - q.k, with
    tests/reference/kv_quant_reference.py;
  - heads: previous-token and induction scores from `kvscope heads --json`;
  - logit lens: each depth's top-5 probabilities from the `logit_lens.json` `generate --trace` writes, and
    each cell's token text (where the token is one of the prompt's) as the text in the cell.
The cache on/off figure must hold its two charts (4 polylines, one point per step), the cache lab's its
two charts of one line per configuration. Refusals: a file of
another kind in the way is left as it was, and nothing of that figure is written; a figure with nothing
to draw yet fails the script in one line with a non-zero exit.
"""
import json
import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
from PIL import Image

import guitest
from guitest import arguments, fail, run

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference")))
import kv_quant_reference as ref  # noqa: E402

PROMPT = "Tom saw the cat. Tom saw the dog. Tom saw the"
LAYER, HEAD = 1, 2
NS = "{http://www.w3.org/2000/svg}"


def script(kvscope, model, work, name, lines, size=(1280, 720), check=True):
    return guitest.script(kvscope, work, name, lines, size, model=model, expect_ok=check)


def read_svg(path):
    """(texts, cells, stops): every <text>, the cells' rects (x, y, w, h, fill) row by row, the bar's colours."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        fail("%s is not well-formed XML: %s" % (path, e))
    texts = [e.text or "" for e in root.iter(NS + "text")]
    title = root.find(NS + "title")
    cells = []
    for g in root.iter(NS + "g"):
        if g.get("id") == "cells":
            cells = [(float(r.get("x")), float(r.get("y")), float(r.get("width")), float(r.get("height")), r.get("fill"))
                     for r in g if r.tag == NS + "rect"]
    stops = []
    for grad in root.iter(NS + "linearGradient"):
        if grad.get("id") == "bar":
            stops = [tuple(int(s.get("stop-color")[i:i + 2], 16) for i in (1, 3, 5)) for s in grad]
    return (title.text if title is not None else ""), texts, cells, np.array(stops, dtype=float), root


def decode(rgb, stops, lo, hi):
    """The value a colour stands for on the bar from lo to hi; None for the masked hatch's greys."""
    rgb = tuple(int(c) for c in rgb)
    if rgb in ((64, 64, 64), (128, 128, 128)):
        return None
    d = ((stops - np.array(rgb, dtype=float)) ** 2).sum(axis=1)
    i = int(np.argmin(d))
    if d[i] > 12:  # not a colour of the bar at all
        return "not a bar colour %s" % (rgb,)
    return lo + (hi - lo) * i / 255.0


def check_map(label, svg_path, png_path, want, lo, hi, texts_wanted, steps=2.0, texts_in_cells=False):
    """want: (rows, cols) values, NaN = masked. Checks the SVG's rects and the scale-2 PNG's cell centres
    (texts_in_cells: 3 px inside each cell's top-left corner, clear of the text at the centre)."""
    title, texts, cells, stops, _ = read_svg(svg_path)
    if len(stops) != 256:
        fail("%s: the colour bar has %d stops, not 256" % (label, len(stops)))
    for t in texts_wanted:
        if not any(t in x for x in texts + [title]):
            fail("%s: no text %r in the SVG (title %r)" % (label, t, title))
    rows, cols = want.shape
    if len(cells) != rows * cols:
        fail("%s: %d cell rects, want %d x %d" % (label, len(cells), rows, cols))
    png = guitest.read_png(png_path)
    tol = steps * (hi - lo) / 255.0 + 1e-7
    worst = 0.0
    for i in range(rows):
        for j in range(cols):
            x, y, w, h, fill = cells[i * cols + j]
            w_ij = want[i, j]
            from_svg = None if fill == "url(#masked)" else decode([int(fill[k:k + 2], 16) for k in (1, 3, 5)], stops, lo, hi)
            px = png[int(2 * (y + 3)), int(2 * (x + 3))] if texts_in_cells else png[int(2 * (y + h / 2)), int(2 * (x + w / 2))]
            from_png = decode(px, stops, lo, hi)
            for src, got in (("SVG", from_svg), ("PNG", from_png)):
                if isinstance(got, str):
                    fail("%s %s cell (%d, %d): %s" % (label, src, i, j, got))
                if np.isnan(w_ij):
                    if got is not None:
                        fail("%s %s cell (%d, %d): want masked (hatched), got %.6g" % (label, src, i, j, got))
                    continue
                if got is None:
                    fail("%s %s cell (%d, %d): hatched, want %.6g" % (label, src, i, j, w_ij))
                if abs(got - w_ij) > tol:
                    fail("%s %s cell (%d, %d): %.6g from the colour, numpy %.6g (tolerance %.3g)"
                         % (label, src, i, j, got, w_ij, tol))
                worst = max(worst, abs(got - w_ij))
    print("%s: %d x %d cells within %.3g of numpy (tolerance %.3g)" % (label, rows, cols, worst, tol))


def main():
    a = arguments()
    model = os.path.join(a.assets, "default")
    trace = os.path.join(a.work, "trace")
    run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "16", "--trace", trace])
    step = os.path.join(trace, "step_0000")
    q, k, v = (np.load(os.path.join(step, n + ".npy")) for n in ("q", "k", "v"))  # (L, R, C)
    cfg = json.load(open(os.path.join(model, "config.json")))
    n_head = cfg["n_head"]
    # The cache as the prefill left it (the window's default max-new is 16 too, so the same capacity).
    slots = json.load(open(os.path.join(step, "meta.json")))["cache_state"]["slot_positions"]
    L, P, C = k.shape
    D = C // n_head
    sl = slice(HEAD * D, (HEAD + 1) * D)
    q, k, v = q[LAYER, :, sl], k[LAYER, :, sl], v[LAYER, :, sl]
    heads = json.loads(run([a.kvscope, "heads", "--model", model, "--json"]).stdout)["heads"]

    out = os.path.join(a.work, "out")
    figs = os.path.join(out, "figures")
    names = ["kv-cache", "mask", "kv-quant", "heads", "logit-lens"]
    lines = ["export-dir " + out, "prompt " + PROMPT, "prefill", "layer %d" % LAYER, "head %d" % HEAD, "heads"]
    for fmt in ("png 2", "svg"):
        lines.append("export-format " + fmt)
        lines += ["save-figure " + n for n in names]
    lines += ["decode 2", "export-format svg", "save-figure compare", "export-format png 2", "save-figure compare",
              "lab full; window=4", "save-figure lab", "export-format svg", "save-figure lab", "panel KV cache"]
    script(a.kvscope, model, a.work, "figures", lines)
    d = json.load(open(os.path.join(a.work, "figures.json")))
    if "save figure kv-cache" not in d.get("widgets", {}):
        fail("the KV cache panel has no Save figure button in the layout dump")

    def pair(base):
        s, p = os.path.join(figs, base + ".svg"), os.path.join(figs, base + ".png")
        for f in (s, p):
            if not os.path.isfile(f):
                fail("no figure %s (folder holds %s)" % (f, sorted(os.listdir(figs)) if os.path.isdir(figs) else "nothing"))
        return s, p

    # KV cache: one row per slot, holding its position's K or V; empty slots hatched.
    for part, x in (("K", k), ("V", v)):
        want = np.full((len(slots), D), np.nan)
        for slot, pos in enumerate(slots):
            if pos >= 0:
                want[slot] = x[pos]
        r = float(np.abs(x).max())
        s, p = pair("kv_cache_step0_l%d_h%d_%s" % (LAYER, HEAD, part))
        check_map("kv-cache " + part, s, p, want, -r, r,
                  ["step 0, layer %d, head %d: %s cache" % (LAYER, HEAD, part), "head dimension", "cache slot", "0 T", "empty slot"])

    # Mask: causal over the prefill.
    want = np.where(np.tril(np.ones((P, P), bool)), 1.0, np.nan)
    s, p = pair("mask_step0_l%d" % LAYER)
    check_map("mask", s, p, want, 0.0, 1.0, ["attention mask", "query position", "key position", "0 T"])

    # K/V quantization, int8 (the tab's default format).
    k_hat, v_hat = ref.dequantize_kv(k, "int8"), ref.dequantize_kv(v, "int8")
    mask = np.tril(np.ones((P, P), bool))
    sc = 1.0 / np.sqrt(D)
    change = (q.astype(np.float64) @ k_hat.astype(np.float64).T - q.astype(np.float64) @ k.astype(np.float64).T) * sc
    change = np.where(mask, change, np.nan)
    for part, want in (("K_error", k_hat - k), ("V_error", v_hat - v), ("score_change", change)):
        r = float(np.nanmax(np.abs(want)))
        s, p = pair("kv_quant_step0_l%d_h%d_%s" % (LAYER, HEAD, part))
        check_map("kv-quant " + part, s, p, want.astype(np.float64), -r, r,
                  ["int8", "layer %d, head %d" % (LAYER, HEAD)] + (["not seen"] if part == "score_change" else []),
                  steps=2.5)

    # Heads: layers x heads, scores in [0, 1] on viridis; --json rounds, so half a step more.
    for part, key in (("previous_token", "previous_token"), ("induction", "induction")):
        want = np.zeros((L, n_head))
        for h in heads:
            want[h["layer"], h["head"]] = h[key]
        s, p = pair("heads_" + part)
        check_map("heads " + part, s, p, want, 0.0, 1.0, ["layer", "head", "score of every head"], steps=2.5)

    # Logit lens at the prefill's last position: depth x rank, probability on viridis, each cell's token as text.
    meta = json.load(open(os.path.join(step, "meta.json")))
    lens = json.load(open(os.path.join(step, "logit_lens.json")))
    text_of = dict(zip(meta["tokens"]["ids"], meta["tokens"]["text"]))
    want = np.array([[t["probability"] for t in d["top"][:5]] for d in lens["depths"]])  # the tab's top 5
    s, p = pair("logit_lens_step0_pos%d" % lens["position"])
    check_map("logit lens", s, p, want, 0.0, 1.0, ["logit lens at position %d" % lens["position"], "depth", "rank",
                                                   "embeddings", "after L%d" % (L - 1)], texts_in_cells=True)
    _, _, _, _, root = read_svg(s)
    cell_texts = [[t.text or "" for t in g] for g in root.iter(NS + "g") if g.get("id") == "cell_texts"]
    if not cell_texts or len(cell_texts[0]) != want.size:
        fail("logit lens: want a text in each of the %d cells" % want.size)
    ids = [t["id"] for d in lens["depths"] for t in d["top"][:5]]
    checked = 0
    for cell, (i, shown) in enumerate(zip(ids, cell_texts[0])):
        if i in text_of and text_of[i].strip():  # a token of the prompt: its text is known here
            want_text = text_of[i] if len(text_of[i]) <= 12 else text_of[i][:12] + ".."
            if shown != want_text:
                fail("logit lens cell %d: token %d shown as %r, want %r" % (cell, i, shown, want_text))
            checked += 1
    if checked == 0:
        fail("logit lens: no cell's token could be checked")

    # Cache on vs off: two charts of two series, one point per step (prefill + 2 decode steps).
    s, p = pair("compare_steps3")
    _, texts, _, _, root = read_svg(s)
    lines_ = [pl for pl in root.iter(NS + "polyline")]
    if len(lines_) != 4 or any(len(pl.get("points").split()) != 3 for pl in lines_):
        fail("compare: want 4 polylines of 3 points, got %s" % [len(pl.get("points").split()) for pl in lines_])
    for t in ("FLOPs per step", "compute time per step", "cache on", "cache off", "step"):
        if not any(t in x for x in texts):
            fail("compare: no text %r in the SVG" % t)
    Image.open(p).verify()

    # Cache lab: loss added and KL per position, one line per configuration in each chart.
    s, p = pair("cache_lab")
    _, texts, _, _, root = read_svg(s)
    counts = [len(pl.get("points").split()) for pl in root.iter(NS + "polyline")]
    if len(counts) != 4 or len(set(counts)) != 1 or counts[0] < P - 1:
        fail("lab: want 4 polylines of the same length >= %d, got %s" % (P - 1, counts))
    for t in ("loss added", "KL to the full cache", "full", "window=4", "position"):
        if not any(t in x for x in texts):
            fail("lab: no text %r in the SVG" % t)
    Image.open(p).verify()

    # Refusals. A file of another kind where the K figure would go: refused, left as it was, V not written.
    bad = os.path.join(a.work, "bad")
    os.makedirs(os.path.join(bad, "figures"))
    mine = os.path.join(bad, "figures", "kv_cache_step0_l0_h0_K.svg")
    with open(mine, "w") as f:
        f.write("my notes, not a figure\n")
    p = script(a.kvscope, model, a.work, "refused", ["export-dir " + bad, "export-format svg", "prompt " + PROMPT,
                                                      "prefill", "save-figure kv-cache"], check=False)
    err = [x for x in p.stderr.splitlines() if x.startswith("error")]
    if p.returncode == 0 or len(err) != 1 or "cannot write" not in err[0] or "kv_cache_step0_l0_h0_K.svg" not in err[0]:
        fail("a file in the way: want one error line naming it and a non-zero exit, got %d %r" % (p.returncode, p.stderr))
    if open(mine).read() != "my notes, not a figure\n":
        fail("the file in the way was changed")
    if sorted(os.listdir(os.path.join(bad, "figures"))) != ["kv_cache_step0_l0_h0_K.svg"]:
        fail("a refused figure wrote files: %s" % os.listdir(os.path.join(bad, "figures")))
    # Nothing to draw yet: before any step.
    empty = os.path.join(a.work, "empty")
    p = script(a.kvscope, model, a.work, "nothing", ["export-dir " + empty, "save-figure kv-cache"], check=False)
    err = [x for x in p.stderr.splitlines() if x.startswith("error")]
    if p.returncode == 0 or len(err) != 1 or "nothing to draw yet" not in err[0]:
        fail("before any step: want one error line 'nothing to draw yet' and a non-zero exit, got %d %r"
             % (p.returncode, p.stderr))
    if os.path.exists(empty):
        fail("a figure with nothing to draw created %s" % empty)
    check_evicted_mask(a, model)
    print("OK: figures equal numpy; refusals change nothing")


def check_evicted_mask(a, model):
    """Under h2o (budget 8) the mask figure of layer 1 head 2 shows the keys evicted from that head's K/V head
    as 0 and the rest of what the rule lets the query see as 1: the same keys the trace's eviction events
    (meta.json of `kvscope generate --evict h2o --trace`) name for (layer 1, K/V head 2) before the shown step."""
    trace = os.path.join(a.work, "evict_trace")
    run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--evict", "h2o", "--kv-budget", "8",
         "--max-new-tokens", "5", "--trace", trace])
    shown = 4
    gone = set()
    for st in range(shown):
        for e in json.load(open(os.path.join(trace, "step_%04d" % st, "meta.json")))["eviction"]["events"]:
            if e["layer"] == LAYER and e["kv_head"] == HEAD:
                (gone.discard if e["restored"] else gone.add)(e["position"])
    meta = json.load(open(os.path.join(trace, "step_%04d" % shown, "meta.json")))
    n_key = len(meta["key_positions"])
    out = os.path.join(a.work, "evict_out")
    script(a.kvscope, model, a.work, "evict_mask", ["options evict=2 kv-budget=8", "export-dir " + out, "prompt " + PROMPT,
                                                     "prefill", "decode %d" % shown, "layer %d" % LAYER, "head %d" % HEAD,
                                                     "export-format svg", "save-figure mask"])
    path = os.path.join(out, "figures", "mask_step%d_l%d_h%d.svg" % (shown, LAYER, HEAD))
    _, texts, cells, stops, _ = read_svg(path)
    if len(cells) != n_key:
        fail("evicted mask: %d cells, want one row of %d keys" % (len(cells), n_key))
    got = set()
    for j, (x, y, w, h, fill) in enumerate(cells):
        v = decode(np.array([int(fill[1:3], 16), int(fill[3:5], 16), int(fill[5:7], 16)]), stops, 0.0, 1.0)
        if v is None or min(abs(v), abs(v - 1)) > 0.01:
            fail("evicted mask: cell %d is %r, want 0 (evicted) or 1 (visible)" % (j, v))
        if v < 0.5:
            got.add(meta["key_positions"][j])
    if not gone or got != gone:
        fail("evicted mask: cells at 0 %s, the trace evicted %s from layer %d K/V head %d" % (sorted(got), sorted(gone), LAYER, HEAD))
    if not any("evicted" in t for t in texts):
        fail("evicted mask: the title does not say what 0 means")
    print("evicted mask: %d of %d keys at 0, as the trace's eviction events" % (len(got), n_key))


if __name__ == "__main__":
    main()
