#!/usr/bin/python3
"""Real-input test of the eviction controls: the interactive window on assets/llama-gqa driven by xdotool.

With the mouse: open Session options' "eviction" combo and pick h2o, type a KV budget of 4, press Apply;
then type a prompt, click "Prefill step" and press Space twice (two decode steps), choose "all heads" in
the Export panel and click "Export session" (to its default folder). Checks, with numbers computed outside
the window:

  1. the applied options are h2o with budget 4 (the combo and the box reached the session);
  2. every step's evictions in the export equal numpy replaying h2o (recent = budget / 2, heavy hitters by
     attention summed in float64 over queries and the group's heads) from the exported weights alone
     (tests/cli/check_eviction_trace.py's replay, written from docs/engine.md "Eviction under a budget"), and an
     evicted key gets weight 0 from every later query;
  3. hovering each row of the KV cache panel's K map (layer 0, head 0 = K/V head 0): the tooltip names the
     slot and position under the pointer, says "evicted" exactly for the positions numpy evicted from that
     K/V head by the last step, with numpy's deciding score;
  4. the token timeline marks exactly the steps that evicted, and hovering the last one's mark gives the
     positions evicted per layer and K/V head and the range of deciding scores of the checked events;
  5. the Mask panel counts "N visible, M evicted" as numpy's evictions give, and the Cache on vs off panel
     says in one line why it cannot compare under h2o.
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from guitest import App, input_main, fail  # noqa: E402
import check_eviction_trace as evict_ref  # noqa: E402

PROMPT = "The cat sat on the mat"
BUDGET = 4


def reveal(app, name):
    """Scroll the window holding `name` with the wheel until the item is inside what the window shows."""
    for _ in range(40):
        d = app.state()
        r, c = d["widgets"].get(name), d["clips"].get(name)
        if r and c and r[1] >= c[1] and r[3] <= c[3]:
            return
        if not c:
            fail("'%s' is not in the layout dump" % name)
        app.xdo(["mousemove", "--window", app.wid, str(int((c[0] + c[2]) / 2)), str(int((c[1] + c[3]) / 2))])
        app.xdo(["click", "5" if not r or r[3] > c[3] else "4"])
        f0 = app.frames()
        while app.frames() < f0 + 3:
            time.sleep(0.05)
    fail("could not scroll '%s' into view" % name)


def click_left(app, name):
    """Click the left end of an item (an InputInt's text box, not its -/+ buttons)."""
    x0, y0, x1, y1 = app.state()["widgets"][name]
    f0 = app.frames()
    app.xdo(["mousemove", "--window", app.wid, str(int(x0 + 12)), str(int((y0 + y1) / 2))])
    while app.frames() < f0 + 2:
        time.sleep(0.05)
    time.sleep(0.15)
    app.press_release()


def hover(app, x, y):
    """Move the pointer to (x, y); return the KV cache tooltip shown two frames later or more."""
    app.xdo(["mousemove", "--window", app.wid, str(int(x)), str(int(y))])
    d = app.wait_dump("the KV cache tooltip at %d,%d" % (x, y), lambda d: "kv tooltip" in d["texts"], frames=2,
                      shown=lambda d: d["texts"])
    return d["texts"]["kv tooltip"]


def parse_tip(tip):
    """'slot S position P[ evicted score X]' -> (S, P, X or None)."""
    w = tip.split()
    if len(w) < 4 or w[0] != "slot" or w[2] != "position":
        fail("unexpected KV cache tooltip %r" % tip)
    return int(w[1]), int(w[3]), float(w[6]) if len(w) >= 7 and w[4] == "evicted" else None


def inner(a):
    work = a.work
    model = os.path.join(a.assets, "llama-gqa")
    out = os.path.join(work, "kvscope_export")
    with App(a.kvscope, work, ["--model", model]) as app:
        app.wait("first frames", lambda s: s["frames"] > 3)
        reveal(app, "eviction")
        app.click("eviction")
        # A popup's first frame only measures it (drawn hidden, elsewhere): click where a later frame put it.
        app.wait_dump("the eviction combo open", lambda d: "eviction h2o" in d["widgets"], frames=3)
        app.click("eviction h2o")
        app.wait("h2o chosen, nothing else", lambda s: s["pending_options"] == "eviction oracle-off → h2o")
        # Clicked at once where the box first shows: an option made pending must not move the boxes (the
        # pending note used to push them down a few lines, and this click toggled the checkbox above).
        app.wait_dump("the budget box", lambda d: "KV budget" in d["widgets"])
        reveal(app, "KV budget")
        click_left(app, "KV budget")
        app.key("ctrl+a")
        app.xdo(["type", "--delay", "30", str(BUDGET)])
        app.click_empty()
        app.wait("h2o and budget pending", lambda s: "h2o" in s["pending_options"] and "%d" % BUDGET in s["pending_options"])
        reveal(app, "apply options")
        app.click("apply options")
        app.wait("options applied", lambda s: s["eviction"] == "h2o" and s["kv_budget"] == BUDGET and not s["pending_options"])
        app.screenshot("h2o applied")

        app.prefill(PROMPT)
        app.key("space")
        app.wait("decode", lambda s: s["steps"] == 2)
        app.key("space")
        app.wait("decode", lambda s: s["steps"] == 3)
        app.screenshot("three steps under h2o")

        app.click("export all heads")
        app.click("Export session")  # to the Export panel's default folder, kvscope_export in the window's cwd
        app.wait("export session", lambda s: s["last_export"] != "" and s["problem"]["text"] == "")

        # 2. the export against numpy's replay of h2o from the exported weights.
        failures, n = evict_ref.replay(out, "h2o", budget=BUDGET, recent=BUDGET // 2, obs=0, pool=1, pool_kind="max")
        if failures:
            fail("%d mismatches between the window's evictions and numpy's replay (above)" % failures)
        if n == 0:
            fail("nothing was evicted: the check would teach nothing")
        print("  ok: %d evictions of the exported session = numpy's h2o replay from the exported weights" % n)

        # What numpy evicted from layer 0, K/V head 0 by the last step (the replay matched every event).
        doc = json.load(open(os.path.join(out, "trace.json")))
        gone = {}
        for s in doc["steps"]:
            for e in json.load(open(os.path.join(out, s["folder"], "meta.json")))["eviction"]["events"]:
                if e["layer"] == 0 and e["kv_head"] == 0 and not e.get("restored"):
                    gone[e["position"]] = e["score"]
        n_pos = sum(len(s["tokens"]) for s in doc["steps"])
        if len(gone) != n_pos - BUDGET:
            fail("layer 0 K/V head 0 evicted %d of %d positions, a budget of %d leaves %d"
                 % (len(gone), n_pos, BUDGET, n_pos - BUDGET))

        # 3. hover every row of the K map that holds a position (slots as the export's cache_state lists them).
        app.workspace("Cache")
        cache = json.load(open(os.path.join(out, doc["steps"][-1]["folder"], "meta.json")))["cache_state"]
        S, slots = cache["capacity"], cache["slot_positions"]
        x0, y0, x1, y1 = app.state()["widgets"]["kv K map"]
        xm, row_h = (x0 + x1) / 2, (y1 - y0) / S
        evicted_shown = {}
        for slot in (k for k in range(S) if slots[k] >= 0):
            sl, pos, score = parse_tip(hover(app, xm, y0 + (slot + 0.5) * row_h))
            if (sl, pos) != (slot, slots[slot]):
                fail("row %d of the K map reads slot %d position %d; the export has position %d there" % (slot, sl, pos, slots[slot]))
            if pos < 0:
                continue
            if (score is not None) != (pos in gone):
                fail("slot %d, position %d: the tooltip says %s, numpy says %s" % (
                    slot, pos, "evicted" if score is not None else "kept", "evicted" if pos in gone else "kept"))
            if score is not None:
                if abs(score - gone[pos]) > 1e-6 * max(1.0, abs(gone[pos])):
                    fail("position %d: the tooltip's deciding score %.9g, numpy's %.9g" % (pos, score, gone[pos]))
                evicted_shown[pos] = score
        if sorted(evicted_shown) != sorted(gone):
            fail("the K map shows %s evicted, numpy %s" % (sorted(evicted_shown), sorted(gone)))
        app.screenshot("evicted row hovered")
        print("  ok: the KV cache panel's %d rows holding positions (of %d): evicted exactly %s with numpy's scores"
              % (sum(p >= 0 for p in slots), S, ", ".join("%d (%.4g)" % (p, s) for p, s in sorted(evicted_shown.items()))))

        # 4. the timeline marks the steps that evicted; hovering the last one's mark says how many positions
        # per layer and K/V head and the range of deciding scores, as the (numpy-checked) events say.
        events = [json.load(open(os.path.join(out, s["folder"], "meta.json")))["eviction"]["events"] for s in doc["steps"]]
        marks = " ".join("%d:e" % i for i, ev in enumerate(events) if ev)
        texts = app.state()["texts"]
        if texts.get("timeline step marks") != marks:
            fail("the timeline marks %r, the evictions were at %r" % (texts.get("timeline step marks"), marks))
        last = len(events) - 1
        x0, y0, x1, y1 = app.state()["widgets"]["timeline step mark %d" % last]
        app.xdo(["mousemove", "--window", app.wid, str(int((x0 + x1) / 2)), str(int((y0 + y1) / 2))])
        tip = app.wait_dump("the mark's tooltip", lambda d: "timeline step tooltip" in d["texts"], frames=2,
                            shown=lambda d: d["texts"])["texts"]["timeline step tooltip"]
        L, K = doc["model"]["n_layer"], doc["model"]["n_kv_head"]
        want = ["step %d ended here: h2o evicted after this step's queries attended:" % last]
        for l in range(L):
            per = [sum(1 for e in events[last] if e["layer"] == l and e["kv_head"] == k) for k in range(K)]
            want.append("  layer %d: %d position%s (per K/V head %s)" % (l, sum(per), "" if sum(per) == 1 else "s",
                                                                          ", ".join(map(str, per))))
        scores = [e["score"] for e in events[last]]
        want.append("deciding scores %.4g .. %.4g" % (min(scores), max(scores)))
        if tip.split("\n") != want:
            fail("the mark of step %d says %r, expected %r" % (last, tip.split("\n"), want))
        app.screenshot("timeline mark hovered")
        print("  ok: timeline marks %s; step %d's mark: %s" % (marks, last, " | ".join(want[1:])))

        # 5. the Mask panel (layer 0, head 0) counts the evicted keys apart; the cache comparison says why it is off.
        # The last step's query saw every position so far, itself included, less what the steps before it evicted.
        n_keys = n_pos
        before = sum(1 for ev in events[:-1] for e in ev if e["layer"] == 0 and e["kv_head"] == 0)
        app.workspace("Step")
        count = app.state()["texts"].get("mask count", "")
        want_count = "%d of %d cells: %d visible, %d evicted" % (n_keys, n_keys, n_keys - before, before)
        if not count.startswith(want_count):
            fail("the Mask panel says %r, expected %r" % (count, want_count))
        app.workspace("Chat")  # it has the Cache on vs off panel in its own window
        note = app.state()["texts"].get("compare note", "")
        if not note.startswith("No comparison under h2o:") or "\n" in note:
            fail("the Cache on vs off panel under h2o says %r" % note)
        print("  ok: Mask %r; Cache on vs off: %r" % (want_count, note))


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
