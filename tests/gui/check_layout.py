#!/usr/bin/python3
"""Layout test: every panel reachable and legible at 1280x720 and at 1920x1080.

For each window size and each case (a decoder-only session with the cache comparison, a paged batch of
three sequences with the Memory panel, the encoder-decoder model), `kvscope gui --script` runs under Xvfb
with --layout-dump, and the dump of the final frame is checked:

  1. every top-level window (a panel, or a window holding several panels as tabs) lies inside the
     viewport, and no two of them overlap;
  2. every panel the case needs is reachable: its own window, or a tab of a window;
  3. every named item (buttons, steppers, chips, notes) lies inside the visible part of its window
     (unless that window scrolls that way: then it can be scrolled to);
  4. the paged batch opens the Memory tab by itself, `panel NAME` brings a tab to the front, and a cell
     selected in the attention map is also outlined in the Mask panel.

Screenshots go to WORK/<case>_<size>.png for a look. Needs xvfb-run and /usr/bin/python3. Usage:
  check_layout.py --kvscope BUILD/app/kvscope --assets SOURCE/assets --work DIR
"""
import os
import sys

from guitest import arguments, fail, read_json, script

SIZES = [(1280, 720), (1920, 1080)]

DECODER = """prompt Tom saw the cookie at school. Tom saw the
prefill
decode 4
layer 1
head 0
show-step 0
select 10 4
panel Cache on vs off
"""
PAGED = """options block=4 share=1 seqs=3 temperature=0.8 max-new=3
prompt Be kind and brief.
suffix 1  Why?
suffix 2  Who sat?
prefill
decode 2
sequence 1
show-step 0
"""
ENCODER_DECODER = """model {assets}/encoder-decoder
source the cat sat on the mat
prompt le chat est assis
run 8
layer 1
head 2
attention cross
rownorm on
show-step 0
"""
BASE_PANELS = ["Controls", "Heads", "Export", "Token timeline", "Model", "Attention", "KV cache", "Mask",
               "Next token", "Cache on vs off"]


def overlap(a, b):
    """Area of the intersection of two [x0, y0, x1, y1] rectangles (shared edges do not count)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 1 and h > 1 else 0


def check(name, dump, size, panels):
    W, H = size
    widgets = dump["widgets"]
    # An older dump (before windows, clips and scrolls were recorded) still names each panel's rectangle.
    windows = dump.get("windows") or {p: widgets[p] for p in panels if p in widgets}
    clips, scrolls = dump.get("clips", {}), dump.get("scrolls", {})
    if dump.get("viewport", [W, H]) != [W, H]:
        fail("%s: viewport %s, expected %dx%d" % (name, dump["viewport"], W, H))
    # 1. inside the viewport, no overlap
    for w, r in windows.items():
        if r[0] < -1 or r[1] < -1 or r[2] > W + 1 or r[3] > H + 1:
            fail("%s: window '%s' %s leaves the %dx%d viewport" % (name, w, r, W, H))
    names = sorted(windows)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if overlap(windows[a], windows[b]):
                fail("%s: windows '%s' %s and '%s' %s overlap" % (name, a, windows[a], b, windows[b]))
    # 2. every panel: its own window, or a tab inside a window
    for p in panels:
        if p in windows:
            continue
        tab = "tab " + p
        if tab not in widgets:
            fail("%s: panel '%s' is neither a window nor a tab (windows %s)" % (name, p, names))
        host = [w for w in names if " | " in w and p in w.split(" | ")]
        if not host:
            fail("%s: the tab of '%s' has no window of tabs" % (name, p))
        t, h = widgets[tab], windows[host[0]]
        if not (h[0] - 1 <= t[0] and t[2] <= h[2] + 1 and h[1] - 1 <= t[1] and t[3] <= h[3] + 1):
            fail("%s: tab '%s' %s is outside its window %s" % (name, p, t, h))
    # 3. items inside what their window shows
    n = 0
    for item, r in widgets.items():
        c = clips.get(item)
        if c is None or r[2] <= r[0]:
            continue
        n += 1
        scroll_x, scroll_y = scrolls.get(item, [False, False])
        if not scroll_x and (r[0] < c[0] - 1 or r[2] > c[2] + 1):
            fail("%s: '%s' %s is cut off at the side of its window (visible %s)" % (name, item, r, c))
        if not scroll_y and (r[1] < c[1] - 1 or r[3] > c[3] + 1):
            fail("%s: '%s' %s is cut off at the top or bottom of its window (visible %s), which does not scroll" % (
                name, item, r, c))
    print("  %-26s %2d windows, %2d panels reachable, %3d items inside their windows" % (name, len(windows), len(panels), n))


def main():
    a = arguments()
    cases = [("decoder", DECODER, BASE_PANELS), ("paged", PAGED, BASE_PANELS + ["Memory"]),
             ("encoder_decoder", ENCODER_DECODER.format(assets=os.path.abspath(a.assets)), BASE_PANELS)]
    for case, text, panels in cases:
        for W, H in SIZES:
            name = "%s_%dx%d" % (case, W, H)
            env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(a.work, "config"))
            script(a.kvscope, a.work, name, text.splitlines(), (W, H), env=env, timeout=280)
            dump = read_json(os.path.join(a.work, name + ".json"))
            check(name, dump, (W, H), panels)
            widgets = dump["widgets"]
            # 4. what the case is about is on screen
            if case == "paged" and "Memory" not in widgets:
                fail("%s: the Memory tab was not opened when the batch became paged" % name)
            if case == "decoder" and "mask selected cell" not in widgets:
                fail("%s: the cell selected in the attention map (query 10, key 4) is not outlined in the Mask panel" % name)
            if case == "decoder" and "Cache on vs off" not in widgets:
                fail("%s: 'panel Cache on vs off' did not bring the comparison to the front" % name)
            if case == "decoder":
                m, cell = widgets["mask map"], widgets["mask selected cell"]
                if not (m[0] <= cell[0] and cell[2] <= m[2] + 1 and m[1] <= cell[1] and cell[3] <= m[3] + 1):
                    fail("%s: the selected cell %s lies outside the mask map %s" % (name, cell, m))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
