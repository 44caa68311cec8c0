#!/usr/bin/python3
"""High-DPI: the interactive window at UI scales 1, 1.5 and 2, under real input (xdotool).

Each scale S runs the window on a screen S times 1280x720 (1280x720, 1920x1080, 2560x1440), the scale
given two ways: `kvscope gui --ui-scale S`, and the screen's content scale, which GLFW on X11 reads from
Xft.dpi in the X resource database (set to 96*S on the Xvfb display before kvscope starts, as
`xrdb -merge` does; written here through libX11, xrdb is not always installed). At each:
  (a) text height: the dump's font size is 16*S pixels, and the ink of a panel title measured on a
      screenshot of the window is S times its height at scale 1 (to a pixel);
  (b) hover read-back: after Prefill and "head +", the pointer is moved over cells of the attention map
      (Step workspace) and of the KV cache panel's K map (Cache workspace), each cell's centre computed here from the map's rectangle in the
      layout dump and the map's size (tokens; cache capacity x head dim from the trace): the tooltip names
      that cell (query / key positions; slot and channel) and its value equals numpy's, read from the
      files `kvscope generate --trace` exports for the same prompt;
  (c) a runtime change: the script line `ui-scale 1.5` rebuilds the font between two frames of a scripted
      run, and 1.5 -> 2 -> 1.5 lays the window out exactly as 1.5 (the style is never scaled twice); at
      scale 2 the View menu in the bar is clicked to 150 %: the font follows and the attention map's hover read-back is checked again.
  (d) nothing clipped that is not clipped at 1: scripted runs at each scale (after Prefill and three
      decodes: each workspace, Step with its first and its Heads tab in front, Cache with K/V quant, Lab
      with Cache on vs off): no widget of the dump is less visible in its window than at scale 1, none missing.
Bad scales (--ui-scale 3.5, abc, ...; a script's `ui-scale 3.5`): one line, exit 2.
Screenshots are left in the work folder (dpi_*.png). Needs xvfb-run, xdotool and ImageMagick's import.
"""
import ctypes
import ctypes.util
import os
import re
import subprocess
import sys
import time

import numpy as np

from guitest import App, fail, input_main, read_json, read_png

PROMPT = "Tom saw the cookie at school. Tom saw the"
HEAD = 1  # "head +" once
SCALES = (1.0, 1.5, 2.0)
BASE = (1280, 720)
SCREEN = "2660x1540x24"  # room for 2560x1440


class XResources:
    """The X resource database of $DISPLAY (the root window's RESOURCE_MANAGER property, what `xrdb` writes;
    xrdb itself is not always installed). The connection stays open: Xvfb resets the server, and with it
    the root window's properties, when its last client disconnects (between two kvscope runs)."""

    def __init__(self):
        x = self.x = ctypes.CDLL(ctypes.util.find_library("X11"))
        x.XOpenDisplay.restype = ctypes.c_void_p
        x.XOpenDisplay.argtypes = [ctypes.c_char_p]
        x.XDefaultRootWindow.restype = ctypes.c_ulong
        x.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
        x.XChangeProperty.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_int,
                                      ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        x.XSync.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.d = x.XOpenDisplay(None)
        if not self.d:
            fail("cannot open the X display to set Xft.dpi")

    def set(self, text):
        XA_RESOURCE_MANAGER, XA_STRING, PROP_MODE_REPLACE = 23, 31, 0
        data = text.encode()
        self.x.XChangeProperty(self.d, self.x.XDefaultRootWindow(self.d), XA_RESOURCE_MANAGER, XA_STRING, 8,
                               PROP_MODE_REPLACE, data, len(data))
        self.x.XSync(self.d, 0)


def trace_of(a, work, model):
    trace = os.path.join(work, "trace")
    p = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "16",  # the window's default: the same cache capacity
                        "--trace", trace], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail("kvscope generate failed: %s" % p.stderr)
    step = os.path.join(trace, "step_0000")
    meta = read_json(os.path.join(step, "meta.json"))
    return {"weights": np.load(os.path.join(step, "l00_h%02d_weights.npy" % HEAD)),  # (T, T)
            "k": np.load(os.path.join(step, "k.npy")),  # (L, P, C)
            "cache": meta["cache_state"]}


def shoot(app, name):
    """The window alone as PNG (import -window), two frames after the current state."""
    f0 = app.frames()
    t0 = time.time()
    while app.frames() < f0 + 2 and time.time() - t0 < 10:
        time.sleep(0.05)
    path = os.path.join(app.work, name + ".png")
    p = subprocess.run(["import", "-window", app.wid, path], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        fail("import failed: %s" % p.stderr.strip())
    return path


def title_ink(img, rect, font_px):
    """Rows of text ink (near-white pixels) in the title bar of a panel at rect: their count, first to last."""
    x0, y0, x1, _ = (int(round(v)) for v in rect)
    band = img[y0 + 1:y0 + int(font_px * 1.6), x0 + 2:x1 - 2].astype(np.int32)
    rows = np.nonzero((band.min(axis=2) > 200).any(axis=1))[0]
    if len(rows) == 0:
        fail("no text in the title bar at %s" % (rect,))
    return int(rows[-1] - rows[0] + 1)


def hover(app, x, y, key):
    app.xdo(["mousemove", "--window", app.wid, str(int(x)), str(int(y))])
    return app.wait_dump("a tooltip (%s) at %d,%d" % (key, x, y), lambda d: key in d["texts"], frames=2,
                         shown=lambda d: d["texts"])["texts"]


def check_attention(app, want, label):
    """Cells of the attention map (zoom 1: the whole T x T map of the prefill)."""
    d = app.state()
    if d["state"]["zoom"] != 1:
        fail("%s: the attention map is zoomed (%s)" % (label, d["state"]["zoom"]))
    x0, y0, x1, y1 = d["widgets"]["attention map"]
    T = want.shape[0]
    cw, ch = (x1 - x0) / T, (y1 - y0) / T
    for q, k in ((T - 1, 0), (T // 2, T // 3), (T - 1, T - 1), (3, 2), (T - 2, T // 2 + 1)):
        t = hover(app, x0 + (k + 0.5) * cw, y0 + (q + 0.5) * ch, "attention weight")
        mq = re.search(r"position (\d+)", t.get("attention query", ""))
        mk = re.search(r"position (\d+)", t.get("attention key", ""))
        if not mq or not mk or (int(mq.group(1)), int(mk.group(1))) != (q, k):
            fail("%s: the pointer over query %d, key %d (cell %.1f x %.1f px) shows %r / %r" % (
                label, q, k, cw, ch, t.get("attention query"), t.get("attention key")))
        got = float(t["attention weight"].split()[-1])
        if abs(got - want[q, k]) > 6e-6 * abs(want[q, k]) + 1e-9:  # the tooltip prints 6 significant digits
            fail("%s: query %d key %d: the tooltip's weight %.7g, numpy's %.7g" % (label, q, k, got, want[q, k]))
    return "%d attention cells (%.1f px each)" % (5, cw)


def check_kv(app, k_rows, cache, label):
    """Cells of the KV cache panel's K map: rows are slots (capacity), columns channels of the head."""
    d = app.state()
    x0, y0, x1, y1 = d["widgets"]["kv K map"]
    S, D = cache["capacity"], k_rows.shape[1]
    slots = cache["slot_positions"]
    rh, cw = (y1 - y0) / S, (x1 - x0) / D
    if rh < 2 or cw < 2:
        fail("%s: K map cells of %.2f x %.2f px: too small to hover one" % (label, cw, rh))
    used = [s for s in range(S) if slots[s] >= 0]
    n = 0
    for s, c in ((used[0], 0), (used[len(used) // 2], D // 3), (used[-1], D - 1), (used[3], D - 5)):
        t = hover(app, x0 + (c + 0.5) * cw, y0 + (s + 0.5) * rh, "kv tooltip value")
        head = t.get("kv tooltip", "").split()
        if head[:4] != ["slot", str(s), "position", str(slots[s])]:
            fail("%s: the pointer over slot %d channel %d shows %r (position %d there)" % (label, s, c, t.get("kv tooltip"), slots[s]))
        m = re.fullmatch(r"k channel (\d+) = (\S+)", t["kv tooltip value"])
        if not m or int(m.group(1)) != c:
            fail("%s: the pointer over slot %d channel %d shows %r" % (label, s, c, t["kv tooltip value"]))
        want = float(k_rows[slots[s], c])
        if abs(float(m.group(2)) - want) > 1e-6 * abs(want) + 1e-9:
            fail("%s: slot %d channel %d: the tooltip's k %s, numpy's %.9g" % (label, s, c, m.group(2), want))
        n += 1
    return "%d K cells (%.1f x %.1f px)" % (n, cw, rh)


def run_scale(a, scale, how, tr, n_head):
    size = "%dx%d" % (BASE[0] * scale, BASE[1] * scale)
    label = "scale %g (%s)" % (scale, how)
    a.xres.set("Xft.dpi:\t%d\n" % round(96 * scale) if how == "Xft.dpi" else "")
    args = ["--model", os.path.join(a.assets, "default")] + (["--ui-scale", "%g" % scale] if how == "--ui-scale" else [])
    with App(a.kvscope, a.work, args, size=size) as app:
        s = app.wait("first frames", lambda s: s["frames"] > 3)["state"]
        if abs(s["ui_scale"] - scale) > 1e-6 or s["font_px"] != round(16 * scale):
            fail("%s: the window runs at UI scale %s with a %s px font, want %g and %d px" % (
                label, s["ui_scale"], s["font_px"], scale, round(16 * scale)))
        app.prefill(PROMPT)
        app.click("head +")
        app.wait("head %d" % HEAD, lambda s: s["head"] == HEAD)
        app.wait_dump("the attention map", lambda d: "attention map" in d["widgets"], frames=2)
        d = app.state()
        img = read_png(shoot(app, "dpi_%g_%s" % (scale, "option" if how == "--ui-scale" else "xft")))
        ink = title_ink(img, d["windows"]["Attention"], s["font_px"])
        D = tr["k"].shape[2] // n_head
        k_rows = tr["k"][0, :, HEAD * D:(HEAD + 1) * D]
        att = check_attention(app, tr["weights"], label)
        app.workspace("Cache")  # the KV cache panel's K map
        app.wait_dump("the K map", lambda d: "kv K map" in d["widgets"], frames=2)
        kv = check_kv(app, k_rows, tr["cache"], label)
        app.workspace("Step")
        menu = None
        if how == "--ui-scale" and scale == 2:
            app.click("menu View")
            app.wait_dump("the View menu open", lambda d: "view scale 150" in d["widgets"])
            app.click("view scale 150")
            app.wait_dump("the font at 150 %", lambda d: d["state"]["font_px"] == 24 and d["state"]["ui_scale"] == 1.5,
                          frames=2)
            app.wait_dump("the maps at 150 %", lambda d: "attention map" in d["widgets"], frames=3)
            menu = "View menu 150 %%: font 24 px, %s" % check_attention(app, tr["weights"], label + " -> View 150 %")
        print("  ok %-24s font %2d px, title ink %2d px; %s; %s%s" % (
            label, s["font_px"], ink, att, kv, "; " + menu if menu else ""))
        return ink, menu


def runtime_script(a):
    """`ui-scale 1.5` between two frames of one scripted run: the font rebuilt, the style scaled once."""
    path = os.path.join(a.work, "runtime.txt")
    dumps = []
    for name, lines in (("before", ["frames 2"]), ("after", ["frames 2", "ui-scale 1.5", "frames 2"]),
                        ("twice", ["frames 2", "ui-scale 1.5", "ui-scale 2", "ui-scale 1.5", "frames 2"])):
        with open(path, "w") as f:
            f.write("".join(l + "\n" for l in lines))
        dump = os.path.join(a.work, "runtime_%s.json" % name)
        p = subprocess.run([a.kvscope, "gui", "--model", os.path.join(a.assets, "default"), "--script", path,
                            "--size", "1920x1080", "--layout-dump", dump], capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            fail("the scripted run (%s) failed: %s" % (name, p.stderr.strip()))
        dumps.append(read_json(dump))
    before, after, twice = dumps
    if before["state"]["font_px"] != 16 or after["state"]["font_px"] != 24 or after["state"]["ui_scale"] != 1.5:
        fail("ui-scale 1.5 at run time: font %s -> %s px (ui_scale %s), want 16 -> 24" % (
            before["state"]["font_px"], after["state"]["font_px"], after["state"]["ui_scale"]))
    # The layout after 1.5 -> 2 -> 1.5 equals the layout after one change to 1.5: nothing scaled twice.
    if twice["widgets"] != after["widgets"]:
        moved = [k for k in after["widgets"] if twice["widgets"].get(k) != after["widgets"][k]]
        fail("after ui-scale 1.5, 2, 1.5 the widgets differ from after ui-scale 1.5: %s" % moved[:5])
    h0 = before["widgets"]["Prefill step"][3] - before["widgets"]["Prefill step"][1]
    h1 = after["widgets"]["Prefill step"][3] - after["widgets"]["Prefill step"][1]
    if abs(h1 - 1.5 * h0) > 1.01:
        fail("the Prefill step button is %g px tall at 1.5, %g at 1: not 1.5 times" % (h1, h0))
    print("  ok runtime: ui-scale 1.5 rebuilt the font (16 -> 24 px), button %g -> %g px; 1.5, 2, 1.5 gives the same layout"
          % (h0, h1))


def bad_inputs(a):
    """A bad scale: one line on stderr naming the option (or script line), exit 2, before any window."""
    bad = os.path.join(a.work, "bad.txt")
    with open(bad, "w") as f:
        f.write("ui-scale 3.5\n")
    cases = [(["--ui-scale", v], "--ui-scale") for v in ("0.5", "3.01", "abc", "", "nan", "1e400", "500%")]
    cases += [(["--ui-scale"], "--ui-scale"), (["--script", bad], "bad.txt:1: ui-scale")]
    for args, want in cases:
        p = subprocess.run([a.kvscope, "gui"] + args, capture_output=True, text=True, timeout=60)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        if p.returncode != 2 or len(lines) != 1 or want not in lines[0]:
            fail("kvscope gui %s: exit %d, stderr %r; want exit 2 and one line naming %s" % (" ".join(args), p.returncode, p.stderr, want))
    print("  ok %d bad scales refused in one line each (exit 2)" % len(cases))


def clipping(a):
    """Scripted runs on screens S times 1280x720 at UI scale S, in every workspace and with other tabs in front:
    no widget is less visible in its window (clips) than at scale 1."""
    def visible(d):
        out = {}
        for k, (x0, y0, x1, y1) in d["widgets"].items():
            if k not in d["clips"] or x1 <= x0 or y1 <= y0:
                continue
            c = d["clips"][k]
            w, h = max(0, min(x1, c[2]) - max(x0, c[0])), max(0, min(y1, c[3]) - max(y0, c[1]))
            out[k] = w * h / ((x1 - x0) * (y1 - y0))
        return out
    steps = ["prompt " + PROMPT, "prefill", "decode 3"]
    cases = (("first tabs", []), ("heads tab", ["panel Heads"]), ("cache tabs", ["panel K/V quant"]),
             ("lab tabs", ["workspace Lab", "panel Cache on vs off"]), ("memory", ["workspace Memory"]),
             ("chat", ["workspace Chat"]))
    for name, extra in cases:
        seen = {}
        for scale in SCALES:
            path = os.path.join(a.work, "clip.txt")
            with open(path, "w") as f:
                f.write("".join(l + "\n" for l in steps + extra))
            dump = os.path.join(a.work, "clip_%s_%g.json" % (name.split()[0], scale))
            shot = os.path.join(a.work, "dpi_shot_%s_%g.png" % (name.split()[0], scale))
            p = subprocess.run([a.kvscope, "gui", "--model", os.path.join(a.assets, "default"), "--script", path,
                                "--size", "%dx%d" % (BASE[0] * scale, BASE[1] * scale), "--ui-scale", "%g" % scale,
                                "--layout-dump", dump, "--screenshot", shot], capture_output=True, text=True, timeout=240)
            if p.returncode != 0:
                fail("the scripted run at scale %g failed: %s" % (scale, p.stderr.strip()))
            seen[scale] = visible(read_json(dump))
        base = seen[SCALES[0]]
        for scale in SCALES[1:]:
            worse = {k: "%.2f -> %.2f" % (base[k], v) for k, v in seen[scale].items() if k in base and v < base[k] - 0.02}
            missing = sorted(set(base) - set(seen[scale]))
            if worse or missing:
                fail("%s at scale %g on %dx%d: less visible than at 1: %s; not drawn: %s" % (
                    name, scale, BASE[0] * scale, BASE[1] * scale, worse, missing))
        print("  ok %s: %d widgets, none less visible at 1.5 and 2 than at 1" % (name, len(base)))


def inner(a):
    os.makedirs(a.work, exist_ok=True)
    a.xres = XResources()
    model = os.path.join(a.assets, "default")
    n_head = read_json(os.path.join(model, "config.json"))["n_head"]
    tr = trace_of(a, a.work, model)
    bad_inputs(a)
    runtime_script(a)
    clipping(a)
    inks = {}
    for how in ("--ui-scale", "Xft.dpi"):
        for scale in SCALES:
            if how == "Xft.dpi" and scale == 1:
                continue  # 96 dpi is the --ui-scale 1 run's screen
            inks[(scale, how)], _ = run_scale(a, scale, how, tr, n_head)
    base = inks[(1.0, "--ui-scale")]
    for (scale, how), ink in inks.items():
        if abs(ink - scale * base) > 1.5:
            fail("scale %g (%s): title ink %d px, %g x the %d px at scale 1 is %.1f" % (scale, how, ink, scale, base, scale * base))
    print("  ok text height: title ink %s px" % ", ".join("%d at %g (%s)" % (i, s, h) for (s, h), i in inks.items()))


def main():
    return input_main(__file__, inner, screen=SCREEN, timeout=1100)



if __name__ == "__main__":
    sys.exit(main())
