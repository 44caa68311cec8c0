#!/usr/bin/python3
"""Real-input test of the 8,192-token attention map: the interactive window at 1280x720 driven by xdotool.

The random rotary model and ids of check_long_context.py (the scripted test of the same map). The ids are
typed into the prompt box (about 30,000 characters; xdotool types them in seconds), Prefill and "head +"
are clicked (query head 1), then over the attention map (found in --layout-dump):
  - the mouse wheel zooms in, a few notches at a time, up to the window's largest zoom (256x: 32 x 32
    cells on a map of about 100 px): the zoom the window reports is 1.25 per notch (clamped at 256), and
    the key/query under the mouse stays under the mouse;
  - zoomed in, the drawn texture is exact (the tooltip has no "this pixel: the strongest of ..." line), and
    for a few pointer positions the tooltip's query and key are the cell geometrically under the pointer
    (map rectangle, zoom and pan centre from the dump) and its weight equals numpy's exact weight (layer 0
    recomputed in float64 as Hugging Face's LlamaModel does; rtol 1e-4, atol 2e-6 as the scripted test);
  - the wheel zooms back out to the whole map: the hovered pixel is again a pooled block, its value (the
    tooltip's "strongest of A x B cells (queries .., keys ..) = V") equals numpy's maximum of that block,
    and the block holds the hovered cell, which is the one under the pointer (to a pixel's worth of cells).
Screenshots of each stage are left in the work folder (shot_*.png; "log" is clicked so weights near 1/8192
show as distinct colours); the zoomed one must show cells of several pixels in the map's top-left quarter.
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import re
import sys
import time

import numpy as np

from guitest import App, input_main, TIMEOUT, fail, read_png
from check_long_context import ATOL, HEAD, N, RTOL, layer0_qk, long_context_model, weights

SIZE = "1280x720"
NOTCH, MAX_ZOOM = 1.25, 256.0  # app/gui/widgets/heatmap.cpp: each wheel notch zooms 1.25x, up to 256x
AT = (0.3, 0.7)  # the wheel turns over the cell 30% across (key) and 70% down (query)


def wait_for(app, what, pred):
    """The first layout dump of a frame drawn after this call (two frames on) with pred(dump)."""
    def shown(d):
        return {"zoom": d["state"].get("zoom"), "centre": d["state"].get("zoom_center"), "texts": d["texts"]}
    return app.wait_dump(what, pred, frames=2, shown=shown)


def view(d):
    """(map rectangle, zoom, centre) as the window reports them."""
    return d["widgets"]["attention map"], d["state"]["zoom"], d["state"]["zoom_center"]


def uv_at(d, x, y):
    """The map position (u across = key, v down = query, 0..1) under pixel (x, y), as heatmap() maps it."""
    (x0, y0, x1, y1), z, (cx, cy) = view(d)
    return cx + ((x - x0) / (x1 - x0) - 0.5) / z, cy + ((y - y0) / (y1 - y0) - 0.5) / z


def pointer_for(d, fx, fy):
    """A pixel near (fx, fy) of the map whose cell is unambiguous: the pointer lies in the middle of a
    cell (the dump's rectangle is rounded to whole pixels). Returns (x, y, query, key)."""
    x0, y0, x1, y1 = d["widgets"]["attention map"]
    bx, by = int(x0 + fx * (x1 - x0)), int(y0 + fy * (y1 - y0))
    for dx in range(0, 8):
        for dy in range(0, 8):
            x, y = bx + dx, by + dy
            u, v = uv_at(d, x, y)
            if 0.3 < (u * N) % 1 < 0.7 and 0.3 < (v * N) % 1 < 0.7:
                return x, y, int(v * N), int(u * N)
    fail("no pixel near %.2f, %.2f of the map lies in the middle of a cell" % (fx, fy))


def tooltip(app, x, y):
    """Move the pointer to (x, y) and read the tooltip once the window has computed the cell under it:
    (dump, query, key, weight text)."""
    app.xdo(["mousemove", "--window", app.wid, str(x), str(y)])
    d = wait_for(app, "the tooltip at %d, %d" % (x, y), lambda d: "attention weight" in d["texts"])
    t = d["texts"]
    q = re.search(r"position (\d+)", t.get("attention query", ""))
    k = re.search(r"position (\d+)", t.get("attention key", ""))
    if not q or not k:
        fail("the tooltip at %d, %d names no query / key position: %s" % (x, y, t))
    return d, int(q.group(1)), int(k.group(1)), t["attention weight"]


def wheel(app, button, notches, want_zoom, x, y):
    """Turn the wheel `notches` times over (x, y) (button 4 = in, 5 = out); the window's zoom must become want_zoom."""
    app.xdo(["mousemove", "--window", app.wid, str(x), str(y)])
    time.sleep(0.2)
    app.xdo(["click", "--repeat", str(notches), "--delay", "40", str(button)])
    return wait_for(app, "zoom %.4g after %d wheel notches" % (want_zoom, notches),
                    lambda d: abs(d["state"]["zoom"] - want_zoom) <= 1e-4 * want_zoom)


def inner(a):
    work = a.work
    model, ids = long_context_model(work)
    text = ",".join(map(str, ids))
    q_all, k_all, D = layer0_qk(model, ids)
    q, k = q_all[HEAD], k_all[HEAD]
    t_start = time.time()
    app = App(a.kvscope, work, ["--model", model], size=SIZE)
    try:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.click("prompt")
        app.key("ctrl+a")
        app.xdo(["type", "--delay", "0", text], timeout=300)
        t0 = time.time()
        while (app.state() or {"state": {}})["state"].get("prompt") != text:
            if time.time() - t0 > TIMEOUT:
                got = app.state()["state"]["prompt"]
                first = next((i for i, (x, y) in enumerate(zip(got, text)) if x != y), min(len(got), len(text)))
                fail("the prompt box holds %d characters, typed %d; first difference at %d: %r" % (
                    len(got), len(text), first, got[max(0, first - 20):first + 20]))
            time.sleep(0.1)
        app.wait("8192 ids typed", lambda s: "8192 tokens" in s["status"])
        app.click_empty()
        app.click("Prefill step")
        app.wait("prefill of 8192 tokens", lambda s: s["steps"] == 1 and "8192 tokens at positions 0..8191" in s["status"])
        app.click("head +")
        app.wait("head %d" % HEAD, lambda s: s["head"] == HEAD)
        app.click("log scale")  # weights near 1/8192 are one dark colour on a linear scale; the screenshots show cells
        d = wait_for(app, "the attention map drawn", lambda d: "attention map" in d["widgets"])
        x0, y0, x1, y1 = d["widgets"]["attention map"]
        if d["state"]["zoom"] != 1:
            fail("the map starts zoomed %s" % d["state"]["zoom"])
        app.screenshot("overview")
        print("  map %dx%d px at (%d, %d)" % (x1 - x0, y1 - y0, x0, y0))

        # Zoom in: 8 + 8 + 8 notches (1.25^24 = 212x), then 4 more that stop at 256x.
        wx, wy = int(x0 + AT[0] * (x1 - x0)), int(y0 + AT[1] * (y1 - y0))
        notches = 0
        for n in (8, 8, 8, 4):
            before = uv_at(app.state(), wx, wy)
            z_before = app.state()["state"]["zoom"]
            notches += n
            want = min(MAX_ZOOM, NOTCH ** notches)
            d = wheel(app, 4, n, want, wx, wy)
            if d["widgets"]["attention map"] != [x0, y0, x1, y1]:
                fail("the wheel over the map moved it from %s to %s (it scrolled the panel)" % (
                    [x0, y0, x1, y1], d["widgets"]["attention map"]))
            after = uv_at(d, wx, wy)
            tol = 1.0 / ((x1 - x0) * z_before)  # the rectangle is rounded: half a pixel each side
            if abs(after[0] - before[0]) > tol or abs(after[1] - before[1]) > tol:
                fail("zooming %d notches moved the cell under the mouse: uv %s -> %s" % (n, before, after))
            print("  ok: %2d wheel notches in: zoom %.4g (1.25^%d%s), key %d / query %d stays under the mouse" % (
                notches, d["state"]["zoom"], notches, ", clamped" if want == MAX_ZOOM else "", after[0] * N, after[1] * N))
        shown = N / MAX_ZOOM
        if shown > (x1 - x0) or shown > (y1 - y0):
            fail("at %gx, %g cells on a %d px map: cells still smaller than a pixel" % (MAX_ZOOM, shown, x1 - x0))
        # The drawn texture under the mouse is exact once the finer tile is ready (then no "this pixel" line).
        wait_for(app, "the zoomed map drawn with exact cells", lambda d: "attention pixel" not in d["texts"]
                 and "attention weight" in d["texts"])
        shot = app.screenshot("zoomed")
        # The picture: the map's top-left quarter (no tooltip there) shows cells of several pixels, not one colour.
        img = read_png(shot).astype(np.int32)
        quarter = img[y0 + 2:(y0 + y1) // 2, x0 + 2:(x0 + x1) // 2]
        colours = len(np.unique(quarter.reshape(-1, 3), axis=0))
        # Runs of one colour at least 3 px long: cells of 7 px or more get a 1 px darker border
        # (shaders/heatmap.frag), which is not a cell.
        def runs_of(row):
            cuts = np.flatnonzero(np.abs(np.diff(row, axis=0)).sum(1) > 0) + 1
            lengths = np.diff(np.concatenate(([0], cuts, [len(row)])))
            return np.count_nonzero(lengths >= 3)
        runs = np.mean([runs_of(row) for row in quarter])
        if colours < 20 or not (shown / 8 <= runs <= shown / 2 + 1):  # half the cells across are in the quarter
            fail("the zoomed screenshot's map: %d colours, %.1f colour runs a row (%g cells across): %s" % (
                colours, runs, shown, shot))
        print("  ok: zoomed screenshot: %d colours, %.1f colour runs a row over %g cells" % (
            colours, runs, shown / 2))

        # Hover: the tooltip names the cell under the pointer and its exact weight.
        worst = 0.0
        for fx, fy in ((0.2, 0.3), (0.55, 0.5), (0.85, 0.8), (AT[0], AT[1])):
            x, y, want_q, want_k = pointer_for(app.state(), fx, fy)
            d, got_q, got_k, wtext = tooltip(app, x, y)
            if (got_q, got_k) != (want_q, want_k):
                fail("pointer at %d, %d (zoom %g, centre %s, map %s): the tooltip says query %d key %d, the cell "
                     "under the pointer is query %d key %d" % (x, y, d["state"]["zoom"], d["state"]["zoom_center"],
                                                              d["widgets"]["attention map"], got_q, got_k, want_q, want_k))
            if "attention pixel" in d["texts"]:
                fail("zoomed %gx, the pixel under the pointer is still a pooled block: %s" % (MAX_ZOOM, d["texts"]["attention pixel"]))
            m = re.fullmatch(r"weight (\S+)", wtext)
            if not m:
                fail("query %d key %d: the tooltip shows %r, expected a weight (a causal cell)" % (got_q, got_k, wtext))
            got, want = float(m.group(1)), float(weights(q, k, D, got_q, got_q + 1)[0, got_k])
            if abs(got - want) > ATOL + RTOL * abs(want):
                fail("query %d key %d: the tooltip's weight %s, numpy %.8g" % (got_q, got_k, m.group(1), want))
            worst = max(worst, abs(got - want))
            print("  ok: pointer at %d, %d is query %d key %d; weight %s, numpy %.8g" % (x, y, got_q, got_k, m.group(1), want))

        # Zoom back out: the whole map again, each pixel the strongest of its block.
        d = wheel(app, 5, notches, 1.0, wx, wy)
        if d["widgets"]["attention map"] != [x0, y0, x1, y1]:
            fail("zooming out moved the map from %s to %s" % ([x0, y0, x1, y1], d["widgets"]["attention map"]))
        if d["state"]["zoom_center"] != [0.5, 0.5]:
            fail("zoomed out to 1x, the map is centred at %s" % d["state"]["zoom_center"])
        app.screenshot("zoomed_out")
        x, y = int(x0 + 0.4 * (x1 - x0)), int(y0 + 0.8 * (y1 - y0))
        d, got_q, got_k, _ = tooltip(app, x, y)
        d = wait_for(app, "the pooled pixel in the tooltip", lambda d: "attention pixel" in d["texts"])
        pixel = d["texts"]["attention pixel"]
        m = re.search(r"strongest of (\d+) x (\d+) cells \(queries (\d+)\.\.(\d+), keys (\d+)\.\.(\d+)\) = (\S+)", pixel)
        if not m:
            fail("zoomed out, the tooltip's pixel line reads %r" % pixel)
        r0, r1, c0, c1 = (int(m.group(i)) for i in (3, 4, 5, 6))
        block = weights(q, k, D, r0, r1 + 1)[:, c0:c1 + 1].max()
        got = float(m.group(7))
        if abs(got - block) > ATOL + RTOL * block:
            fail("zoomed out, the pixel at %d, %d (queries %d..%d, keys %d..%d) shows %s, numpy's block maximum %.8g" % (
                x, y, r0, r1, c0, c1, m.group(7), block))
        u, v = uv_at(d, x, y)
        per_px = N / (x1 - x0)
        if not (r0 <= got_q <= r1 and c0 <= got_k <= c1):
            fail("the hovered cell (query %d key %d) is not in the pixel's block %s" % (got_q, got_k, m.groups()[2:6]))
        if abs(got_q - v * N) > per_px or abs(got_k - u * N) > per_px:
            fail("zoomed out, the pointer at %d, %d is near query %.0f key %.0f, the tooltip says query %d key %d" % (
                x, y, v * N, u * N, got_q, got_k))
        print("  ok: zoomed out (1x): pixel at %d, %d = queries %d..%d x keys %d..%d, strongest %s, numpy %.8g" % (
            x, y, r0, r1, c0, c1, m.group(7), block))
    finally:
        app.close()
    print("zoomed screenshot: %s; largest weight difference %.2g; %.1f s in the window" % (shot, worst, time.time() - t_start))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
