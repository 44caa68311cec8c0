#!/usr/bin/python3
"""Layout test: every panel reachable and legible at 1280x720 and at 1920x1080, in every workspace.

For each window size and each case, `kvscope gui --script` runs under Xvfb with --layout-dump, and the
dump of the final frame is checked. The cases: a decoder-only session shown in each of the five workspaces
(Step, Cache, Memory, Lab, Chat); paged batches of three and of six sequences (the Memory workspace, which
a paged batch opens by itself); the encoder-decoder model; a chat of three turns viewed at its first step
(where a reply's mark and the next message's share a position); the Cache lab tab after a measurement of
the default configurations; a Gemma 3 folder without a tokenizer (ids only) with the Model panel and the
Rotary tab in front; the help overlay.

  0. what each workspace shows is what the issue asked of it (and, with a lesson open, the Lesson panel) (WORKSPACES below, written here, not read from
     the layout code): the frame (Controls, Export, the timeline, the Model panel) and its panels, every
     declared panel in at least one workspace; the bar names the five workspaces and marks the one shown;
     in Step the attention map takes at least 45 % of the window's width;
  1. every top-level window (a panel, a window holding several panels as tabs, the menu bar) lies inside
     the viewport, and no two of them overlap;
  2. every panel the workspace shows is reachable: its own window, or a tab of a window;
  3. every named item (buttons, steppers, chips, notes) lies inside the visible part of its window
     (unless that window scrolls that way: then it can be scrolled to);
  4. what a case is about is wholly on screen, scrolling or not (issue 43, finding 11): the Memory panel's
     legend, figures and pool (three sequences), each "N adopted" beside its block table row; each row of the Cache lab's table;
     the Model panel's picker, "Open folder..." button, shape line (with "ids only") and key chips;
  5. nothing drawn over something else: the chat's turn labels never overlap one another, the timeline's
     colour notes never overlap its cache fill bar;
  6. the paged batch opens the Memory workspace by itself, `panel NAME` shows the first workspace holding
     the panel with its tab in front, and a cell selected in the attention map is also outlined in the Mask panel;
  7. the help overlay (script `help on`, as F1, ? or the Controls' "?" button) lists every shortcut
     declared in app/gui/widgets/shortcuts.cpp with its text, and every panel of app/gui/panels/panel_list.cpp
     with its line; the Controls' key hint is the table's hint words.

Screenshots go to WORK/<case>_<size>.png for a look. Needs xvfb-run and /usr/bin/python3. Usage:
  check_layout.py --kvscope BUILD/app/kvscope --assets SOURCE/assets --work DIR
"""
import os
import re
import sys

from guitest import arguments, fail, read_json, script

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))

SIZES = [(1280, 720), (1920, 1080)]

DECODER = """prompt Tom saw the cookie at school. Tom saw the
prefill
decode 4
layer 1
head 0
show-step 0
select 10 4
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
# Six sequences adopting 13 positions each: the block tables scroll (up and down), and every "13 adopted"
# stays whole beside its row.
PAGED6 = """options block=4 share=1 seqs=6 temperature=0.8 max-new=3
prompt Tom saw the cookie at school. Tom saw the cookie at
suffix 1  Why?
suffix 2  Who sat?
prefill
"""
CHAT = """options max-new=5
chat Hello there
chat What is a cat?
chat Thanks
show-step 0
"""
LAB = """prompt Tom saw the cookie at school. Tom saw the
lab
panel Cache lab
"""
MODEL = """prompt 5,17,250,3,9
prefill
decode 1
panel Rotary
"""
HELP = """help on
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
FRAME = ["Controls", "Export", "Token timeline", "Model"]
WORKSPACES = {"Step": ["Attention", "Mask", "Next token", "Cache on vs off", "Heads"],
              "Cache": ["KV cache", "Rotary", "K/V quant"],
              "Memory": ["Memory"],
              "Lab": ["Cache lab", "Cache edits", "Logit lens", "Cache on vs off"],
              "Chat": ["Attention", "Cache on vs off", "Next token"]}
LESSON = ["Lesson"]  # in every workspace while a lesson is open, in front of Export
LESSON_CASE = """lesson 1
lesson-do
"""
WORKSPACE_CASE = """prompt Tom saw the cookie at school. Tom saw the
prefill
decode 2
workspace {workspace}
"""


def panels_of(workspace):
    return FRAME + WORKSPACES[workspace]


def check_workspace(name, dump, size, workspace):
    """0. The bar and the workspace's main view."""
    if dump["state"].get("workspace") != workspace:
        fail("%s: the window shows workspace %r, expected %r" % (name, dump["state"].get("workspace"), workspace))
    widgets = dump["widgets"]
    bar = dump["windows"].get("menu bar")
    if not bar or bar[1] > 1:
        fail("%s: no menu bar at the top of the window (windows %s)" % (name, sorted(dump["windows"])))
    for w in WORKSPACES:
        item = widgets.get("workspace " + w)
        if not item or not (bar[0] - 1 <= item[0] and item[2] <= bar[2] + 1 and bar[1] - 1 <= item[1] and item[3] <= bar[3] + 1):
            fail("%s: the bar's '%s' %s is not inside the bar %s" % (name, w, item, bar))
    if workspace == "Step":
        att = dump["windows"]["Attention"]
        share = (att[2] - att[0]) / size[0]
        if share < 0.45:
            fail("%s: the attention map's window is %.0f%% of the width, expected at least 45%%" % (name, 100 * share))
        print("  %-26s the attention map takes %.0f%% of the width" % (name, 100 * share))


def overlap(a, b):
    """Area of the intersection of two [x0, y0, x1, y1] rectangles (shared edges do not count)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 1 and h > 1 else 0


def check(name, dump, size, panels):
    """1-3 for one final frame."""
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


def matching(widgets, pattern):
    """The dumped names equal to pattern, or starting with it when it ends in '*'."""
    if pattern.endswith("*"):
        return sorted(n for n in widgets if n.startswith(pattern[:-1]))
    return [pattern] if pattern in widgets else []


def wholly_visible(name, dump, patterns, horizontal_only=()):
    """4. Each item named by patterns exists and lies inside what its window shows, scrolling or not
    (horizontal_only: only its sides are checked; the rows of a list may scroll)."""
    widgets, clips = dump["widgets"], dump.get("clips", {})
    for pattern in patterns:  # what is there first (a cut item says more than a missing one)
        for item in matching(widgets, pattern):
            r, c = widgets[item], clips.get(item)
            if c is None:
                fail("%s: '%s' has no visible area recorded" % (name, item))
            side = r[0] < c[0] - 1 or r[2] > c[2] + 1
            end = not pattern in horizontal_only and (r[1] < c[1] - 1 or r[3] > c[3] + 1)
            if side or end:
                fail("%s: '%s' %s is not wholly on screen: its window shows %s" % (name, item, r, c))
    for pattern in patterns:
        if not matching(widgets, pattern):
            fail("%s: no '%s' in the layout dump (have %s)" % (name, pattern, sorted(widgets)))


def apart(name, dump, pattern_a, pattern_b=None, least=1):
    """5. No item named by pattern_a overlaps another of them (or, given pattern_b, one named by it)."""
    widgets = dump["widgets"]
    a = matching(widgets, pattern_a)
    if len(a) < least:
        fail("%s: %d '%s' in the layout dump, expected at least %d" % (name, len(a), pattern_a, least))
    pairs = [(x, y) for i, x in enumerate(a) for y in a[i + 1:]] if pattern_b is None else [
        (x, y) for x in a for y in matching(widgets, pattern_b)]
    for x, y in pairs:
        if overlap(widgets[x], widgets[y]):
            fail("%s: '%s' %s is drawn over '%s' %s" % (name, x, widgets[x], y, widgets[y]))
    return len(a)


def declared_shortcuts():
    """(keys, what, hint) of each entry of the table in app/gui/widgets/shortcuts.cpp, read from the source."""
    text = open(os.path.join(SOURCE, "app", "gui", "widgets", "shortcuts.cpp"), encoding="utf-8").read()
    out = []
    for m in re.finditer(r'\{"([^"]*)",\s*"([^"]*)",\s*ShortcutAction::\w+([^}]*)\}', text):
        hint = re.search(r'"([^"]*)"\s*$', m.group(3))
        out.append((m.group(1), m.group(2), hint.group(1) if hint else None))
    if len(out) < 3:
        fail("found %d shortcuts in app/gui/widgets/shortcuts.cpp; has its table changed shape?" % len(out))
    return out


def declared_panels():
    """(title, what it shows) of each panel in app/gui/panels/panel_list.cpp, read from the source."""
    text = open(os.path.join(SOURCE, "app", "gui", "panels", "panel_list.cpp"), encoding="utf-8").read()
    out = re.findall(r'\{Panel::\w+, "([^"]+)",\s*"([^"]+)",', text)
    if len(out) < 10:
        fail("found %d panels in app/gui/panels/panel_list.cpp; has its list changed shape?" % len(out))
    return out


def declared_workspaces():
    """(name, what it is for) of each workspace in app/gui/logic/workspace.cpp, read from the source."""
    text = open(os.path.join(SOURCE, "app", "gui", "logic", "workspace.cpp"), encoding="utf-8").read()
    out = re.findall(r'\{Workspace::\w+, "([^"]+)",\s*"([^"]+)"\}', text)
    if [w for w, _ in out] != list(WORKSPACES):
        fail("app/gui/logic/workspace.cpp declares the workspaces %s, expected %s" % ([w for w, _ in out], list(WORKSPACES)))
    return out


def check_help(name, dump, size):
    """7. The overlay lists the declared shortcuts and panels; the Controls' hint is the table's."""
    t = dump["texts"]
    keys = declared_shortcuts()
    want = "\n".join("%s: %s" % (k, w) for k, w, _ in keys)
    if t.get("help shortcuts") != want:
        fail("%s: the help lists the shortcuts\n%s\nexpected (app/gui/widgets/shortcuts.cpp)\n%s" % (
            name, t.get("help shortcuts"), want))
    want = "\n".join("%d %s: %s" % (i + 1, w, d) for i, (w, d) in enumerate(declared_workspaces()))
    if t.get("help workspaces") != want:
        fail("%s: the help lists the workspaces\n%s\nexpected (app/gui/logic/workspace.cpp)\n%s" % (
            name, t.get("help workspaces"), want))
    want = "\n".join("%s: %s" % p for p in declared_panels())
    if t.get("help panels") != want:
        fail("%s: the help lists the panels\n%s\nexpected (app/gui/panels/panel_list.cpp)\n%s" % (name, t.get("help panels"), want))
    hint = "  ".join("%s = %s" % (k, h) for k, _, h in keys if h)
    if t.get("key hint") != hint:
        fail("%s: the Controls' key hint %r, expected the table's %r" % (name, t.get("key hint"), hint))
    h = dump["widgets"].get("help")
    W, H = size
    if not h or h[0] < 0 or h[1] < 0 or h[2] > W or h[3] > H:
        fail("%s: the help window %s is not inside the %dx%d window" % (name, h, W, H))


def main():
    a = arguments()
    sys.path.insert(0, os.path.join(SOURCE, "tests", "cli"))
    sys.path.insert(0, os.path.join(SOURCE, "tools"))
    from check_chat import make_chat_folder  # noqa: E402 (tests/cli: a Llama 3 chat folder)
    import make_llama_model  # noqa: E402
    chat_model = make_chat_folder(a.work, "llama3")
    ids_model = os.path.join(a.work, "gemma3-ids")  # no tokenizer files: the Model panel says "ids only"
    make_llama_model.write(ids_model, **dict(make_llama_model.SHAPES["gemma3-tiny"], vocab=768, seed=31))
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        if os.path.exists(os.path.join(ids_model, f)):
            os.remove(os.path.join(ids_model, f))
    declared = {t for t, _ in declared_panels()}
    shown = set(FRAME).union(*WORKSPACES.values()).union(LESSON)
    if declared != shown:
        fail("panels in no workspace: %s; in a workspace but not declared: %s" % (
            sorted(declared - shown), sorted(shown - declared)))
    # (case, script, the workspace its last frame shows, model folder)
    cases = [("ws_" + w.lower(), WORKSPACE_CASE.format(workspace=w), w, None) for w in WORKSPACES]
    # `panel NAME` from a workspace without it: the first workspace that has it, its tab in front.
    cases += [("panel_switch", WORKSPACE_CASE.format(workspace="Step") + "panel Logit lens\n", "Lab", None),
              ("panel_here", WORKSPACE_CASE.format(workspace="Step") + "panel Cache on vs off\n", "Step", None)]
    cases += [("decoder", DECODER, "Step", None), ("paged", PAGED, "Memory", None), ("paged6", PAGED6, "Memory", None),
              ("encoder_decoder", ENCODER_DECODER.format(assets=os.path.abspath(a.assets)), "Step", None),
              ("chat", CHAT + "workspace Chat\n", "Chat", chat_model), ("lab", LAB, "Lab", None),
              ("model", MODEL, "Cache", ids_model), ("help", HELP, "Step", None)]
    only = os.environ.get("KVSCOPE_LAYOUT_CASES")  # a comma-separated subset, for a quick look
    # A lesson open: its panel beside Controls, in the workspace of its first step's panel (KV cache).
    cases += [("lesson", LESSON_CASE, "Cache", None)]
    for case, text, workspace, model in cases:
        panels = panels_of(workspace) + (LESSON if case == "lesson" else [])
        if only and case not in only.split(","):
            continue
        for W, H in SIZES:
            name = "%s_%dx%d" % (case, W, H)
            env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(a.work, "config"))
            script(a.kvscope, a.work, name, text.splitlines(), (W, H), model=model, env=env, timeout=280)
            dump = read_json(os.path.join(a.work, name + ".json"))
            check(name, dump, (W, H), panels)
            check_workspace(name, dump, (W, H), workspace)
            widgets = dump["widgets"]
            # 4, 5. what the case is about is wholly on screen, and nothing is drawn over anything else
            if case == "paged":
                wholly_visible(name, dump, ["memory legend", "memory header", "memory pool", "memory adopted *"],
                               horizontal_only=["memory adopted *"])
                apart(name, dump, "timeline fill bar", "timeline fill note *")
                if not matching(widgets, "timeline fill note *"):
                    fail("%s: the timeline names no colour beside its fill bar (teal: K/V mapped from another sequence)" % name)
            if case == "paged6":
                wholly_visible(name, dump, ["memory legend", "memory header", "memory adopted *"],
                               horizontal_only=["memory adopted *"])
            if case == "chat":
                n = apart(name, dump, "timeline turn label *")
                print("  %-26s %d turn labels, none overlapping" % (name, n))
            if case == "lab":
                rows = [k for k in dump["texts"] if k.startswith("lab row ")]
                if len(rows) < 6:
                    fail("%s: %d rows measured, expected the 6 default configurations" % (name, len(rows)))
                wholly_visible(name, dump, ["Measure lab", "lab configurations", "lab header"] + rows)
            if case == "model":
                wholly_visible(name, dump, ["Model picker", "Open folder", "Model shape", "Model keys"])
            if case == "lesson":
                wholly_visible(name, dump, ["lesson title", "lesson check", "lesson do", "lesson next", "lesson close"])
            if case == "help":
                check_help(name, dump, (W, H))
            # 6. what the case is about is on screen
            if case == "paged" and "Memory" not in widgets:
                fail("%s: the Memory tab was not opened when the batch became paged" % name)
            if case == "decoder" and "mask selected cell" not in widgets:
                fail("%s: the cell selected in the attention map (query 10, key 4) is not outlined in the Mask panel" % name)
            if case == "panel_switch" and "Logit lens" not in widgets:
                fail("%s: 'panel Logit lens' did not bring the lens to the front" % name)
            if case == "panel_here" and "Cache on vs off" not in widgets:
                fail("%s: 'panel Cache on vs off' did not bring the comparison to the front" % name)
            if case == "decoder":
                m, cell = widgets["mask map"], widgets["mask selected cell"]
                if not (m[0] <= cell[0] and cell[2] <= m[2] + 1 and m[1] <= cell[1] and cell[3] <= m[3] + 1):
                    fail("%s: the selected cell %s lies outside the mask map %s" % (name, cell, m))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
