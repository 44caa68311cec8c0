#!/usr/bin/python3
"""What the window says about the user's own actions, at 1280x720 through the scripted mode:

  1. pending options (issue 13, item 4): option boxes changed but not applied ('edit chunk=4 window=6')
     are shown as pending beside the step buttons, and a step still runs on the applied options; Apply
     ends the pending state; editing back to the applied values leaves nothing pending;
  2. errors where the action was taken (item 6): a model folder that does not exist is reported in the
     Model panel in the window's words (no command-line option names), a failed export in the Export
     panel, which then no longer shows the previous export as its result; 'dismiss' closes the box.

  3. words (item 10), and the default number of new tokens equals `kvscope generate`'s: on a decode step the panels say '1 query', '1 new query', '1 row', the status line
     names the position and the token id, and the step browser on the last of 2 steps reads '1 (0..1)',
     not '1 of 2'.

Each case is a script whose final frame's --layout-dump is read. Needs xvfb-run. Usage:
  check_feedback.py --kvscope BUILD/app/kvscope --work DIR
"""
import os
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

from guitest import arguments, fail, read_json, script

W, H = 1280, 720
PROMPT = "The cat sat on the mat because"


def run(work, name, lines):
    """The final frame's layout dump of `lines` (scripts neither read nor write the remembered settings)."""
    env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(work, "config"))
    script(KVSCOPE, work, name, lines, (W, H), env=env, timeout=280)
    return read_json(os.path.join(work, name + ".json"))


def inside(item, box):
    return box[0] - 1 <= item[0] and item[2] <= box[2] + 1 and box[1] - 1 <= item[1] and item[3] <= box[3] + 1


def panel_box(d, panel):
    """The panel's own window, or the window of tabs that holds it."""
    for name, r in d["windows"].items():
        if name == panel or panel in name.split(" | "):
            return r
    fail("no window holds panel %s (windows %s)" % (panel, sorted(d["windows"])))


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    return struct.unpack(">II", head[16:24])


def main():
    global KVSCOPE
    a = arguments(assets=False)
    KVSCOPE, work = a.kvscope, a.work
    start = ["prompt " + PROMPT, "prefill"]

    # 1. pending options
    d = run(work, "pending", start + ["edit chunk=4 window=6", "step"])
    s = d["state"]
    print("pending:", s["pending_options"], "| applied chunk", s["chunk"], "window", s["window"], "| status:", s["status"])
    for want in ("prefill chunk 0 \u2192 4", "window 0 \u2192 6"):
        if want not in s["pending_options"]:
            fail("pending options '%s' lack '%s'" % (s["pending_options"], want))
    if s["chunk"] != 0 or s["window"] != 0 or s["steps"] != 2:
        fail("the step after an unapplied edit should run on the applied options (chunk 0, window 0): %s" % s)
    note = d["widgets"].get("options pending")
    if not note or not inside(note, d["clips"]["options pending"]) or not inside(note, panel_box(d, "Controls")):
        fail("the pending note is missing or not visible in Controls: %s" % note)
    if d["widgets"]["options pending"][1] > d["widgets"]["Prefill step"][3] + 200:
        fail("the pending note is far from the step buttons: %s vs %s" % (note, d["widgets"]["Prefill step"]))

    d = run(work, "applied", start + ["edit chunk=4 window=6", "options chunk=4 window=6", "step"])
    s = d["state"]
    if s["pending_options"] or "options pending" in d["widgets"] or s["chunk"] != 4 or s["window"] != 6:
        fail("after applying, nothing should be pending and the options should be in force: %s" % s)
    d = run(work, "reverted", start + ["edit chunk=4 window=6", "edit chunk=0 window=0"])
    if d["state"]["pending_options"] or "options pending" in d["widgets"]:
        fail("editing back to the applied values should leave nothing pending: %s" % d["state"])
    print("  ok: pending options shown, steps use the applied ones, Apply and editing back clear it")

    # 2. errors where the action was taken
    ok_dir = os.path.join(work, "exported")
    missing = os.path.join(work, "no_such_model")
    d = run(work, "bad_model", start + ["export " + ok_dir, "expect-error model " + missing])
    p = d["state"]["problem"]
    print("model error:", p)
    if p["place"] != "model" or not p["shown"]:
        fail("a failed model load should show in the Model panel: %s" % p)
    if "--" in p["text"] or missing not in p["text"]:
        fail("the model error should name the folder in the window's words, without command-line options: %s" % p["text"])
    box = d["widgets"].get("problem model")
    if not box or not inside(box, panel_box(d, "Model")):
        fail("the model error box %s is not inside the Model panel %s" % (box, panel_box(d, "Model")))
    if "problem controls" in d["widgets"]:
        fail("the model error also shows in Controls")
    if not d["state"]["last_export"].startswith(ok_dir) or "export last" not in d["widgets"]:
        fail("a failed model load should not touch the Export panel: %s" % d["state"]["last_export"])

    bad_dir = "/proc/kvscope_cannot_write_here"
    d = run(work, "bad_export", start + ["export " + ok_dir, "expect-error export " + bad_dir])
    p = d["state"]["problem"]
    print("export error:", p)
    if p["place"] != "export" or not p["shown"] or bad_dir not in p["text"]:
        fail("a failed export should show in the Export panel and name the folder: %s" % p)
    box = d["widgets"].get("problem export")
    if not box or not inside(box, panel_box(d, "Export")) or not inside(box, d["clips"]["problem export"]):
        fail("the export error box %s is not visible inside the Export panel %s" % (box, panel_box(d, "Export")))
    if d["state"]["last_export"] or "export last" in d["widgets"]:
        fail("after a failed export the panel still shows the previous one: %s" % d["state"]["last_export"])

    d = run(work, "dismissed", start + ["expect-error export " + bad_dir, "dismiss"])
    if d["state"]["problem"]["shown"] or "problem export" in d["widgets"]:
        fail("dismiss should close the error box: %s" % d["state"]["problem"])
    print("  ok: errors shown in the Model / Export panels in the window's words, the old export cleared, dismissed")

    # 2b. the Export panel's figure format (issue 17, part 6): PNG at a scale, or SVG, the same files as
    # `generate --trace --format/--scale`.
    dirs = {k: os.path.join(work, "export_" + k) for k in ("png1", "png2", "svg")}
    d = run(work, "export_formats", start + ["export " + dirs["png1"], "export-format png 2", "export " + dirs["png2"],
                                             "export-format svg", "export " + dirs["svg"]])
    if "export format" not in d["widgets"]:
        fail("the Export panel shows no PNG/SVG choice")
    def heatmaps(folder, ext):
        return sorted(os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs if f.endswith(ext))
    png1, png2, svgs = heatmaps(dirs["png1"], ".png"), heatmaps(dirs["png2"], ".png"), heatmaps(dirs["svg"], ".svg")
    if not png1 or len(png1) != len(png2) or len(svgs) != len(png1) or heatmaps(dirs["svg"], ".png"):
        fail("exports: %d PNGs at scale 1, %d at scale 2, %d SVGs (+%d PNGs) with svg" %
             (len(png1), len(png2), len(svgs), len(heatmaps(dirs["svg"], ".png"))))
    for one, two in zip(png1, png2):
        w1, h1 = png_size(one)
        w2, h2 = png_size(two)
        if (w2, h2) != (2 * w1, 2 * h1):
            fail("%s is %dx%d at scale 2, %dx%d at scale 1" % (two, w2, h2, w1, h1))
    for path in svgs:
        root = ET.parse(path).getroot()
        if root.tag != "{http://www.w3.org/2000/svg}svg":
            fail("%s is not an SVG" % path)
    print("  ok: the Export panel writes PNGs at scale 1 and 2 (twice the size) and well-formed SVGs")

    # 3. words on a one-token step
    d = run(work, "words", start + ["step"])
    t, s = d["texts"], d["state"]
    # The KV cache panel's line, from the Cache workspace (every other text here is in Step).
    t = dict(run(work, "words_cache", start + ["step", "workspace Cache"])["texts"], **t)
    print("words:", {k: t[k] for k in ("attention header", "mask header", "kv written", "step range", "status") if k in t})
    want = {
        "attention header": "1 query (rows, position ",
        "mask header": "1 new query x ",
        "kv written": "written this step: 1 row,",
        "step range": "1 (0..1)",
    }
    for name, text in want.items():
        if text not in t.get(name, ""):
            fail("%s reads %r, expected it to contain %r" % (name, t.get(name), text))
    for name, text in t.items():
        for bad in ("1 queries", "1 rows", "1 tokens", "1 keys", "1 steps", "(s)"):
            if bad in text:
                fail("%s reads %r (%r)" % (name, text, bad))
    if "1 token at position " not in t["status"] or "(token id " not in t["status"]:
        fail("the status line should name the position and the token id: %r" % t["status"])
    print("  ok: singular counts, the step range, positions and token ids named")

    # The window generates as many tokens by default as `kvscope generate` does.
    p = subprocess.run([KVSCOPE, "generate", "--help"], capture_output=True, text=True, timeout=60)
    m = re.search(r"--max-new-tokens[^\n]*\(default (\d+)\)", p.stdout + p.stderr)
    if not m:
        fail("kvscope generate --help does not state the default of --max-new-tokens")
    if s["max_new_tokens"] != int(m.group(1)):
        fail("the window's default max new tokens is %d, kvscope generate's %s" % (s["max_new_tokens"], m.group(1)))
    print("  ok: max new tokens %d, as kvscope generate" % s["max_new_tokens"])
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
