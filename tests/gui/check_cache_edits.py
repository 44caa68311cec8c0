#!/usr/bin/python3
"""The Cache edits tab (script lines evict / restore / back) against numpy.

On assets/llama-gqa, at 1280x720 and 1920x1080: the window prefills a prompt, evicts one position in
every layer and shows the tab. The KL, top-1 before / after and the five movers it shows must be those
numpy computes in float64 from two exported logits: the next step's logits of a window that never
edited (unedited) and of the window that did (edited, exported after that next step). The exported
step lists the edit with the same numbers. Then back, back (undo the step, undo the edit) and the next
step's logits are bit for bit the unedited ones. A bad edit (a position past the cache, a layer that
does not exist) fails in one line (exit non-zero) or, under expect-error, shows in the tab's problem
box with the session unchanged.
"""
import json
import os

import numpy as np

from guitest import arguments, error_lines, fail, script, window

PROMPT = "The cat sat on the mat"
POS = 2


def softmax(logits):
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    return p / p.sum()


def main():
    a = arguments()
    model = os.path.join(a.assets, "llama-gqa")
    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        plain = os.path.join(a.work, "plain_" + label)
        edited = os.path.join(a.work, "edited_" + label)
        undone = os.path.join(a.work, "undone_" + label)
        window(a.kvscope, model, a.work, "plain_" + label, size,
               ["prompt " + PROMPT, "step", "step", "export-session " + plain])
        shown = window(a.kvscope, model, a.work, "shown_" + label, size,
                       ["prompt " + PROMPT, "step", "evict %d" % POS, "panel Cache edits"])
        d = window(a.kvscope, model, a.work, "edited_" + label, size,
                   ["prompt " + PROMPT, "step", "evict %d" % POS, "step", "export-session " + edited,
                    "back", "back", "step", "export-session " + undone, "panel Cache edits"])
        before = np.load(os.path.join(plain, "step_0001", "logits.npy"))
        after = np.load(os.path.join(edited, "step_0001", "logits.npy"))
        pb, pa = softmax(before), softmax(after)
        kl = float(np.sum(pb * (np.log(pb) - np.log(pa))))
        if not kl > 0:
            fail("%s: evicting position %d did not change the next prediction (KL %r)" % (label, POS, kl))
        t = shown["texts"]
        if t.get("edits pending") != "1":
            fail("%s: the tab shows %r pending edits, expected 1" % (label, t.get("edits pending")))
        text = t.get("edits kl", "")
        try:
            shown_kl = float(text.split("=")[1].split()[0])
        except (IndexError, ValueError):
            fail("%s: no KL in %r" % (label, text))
        if abs(shown_kl - kl) > 1e-5 * kl + 1e-12:
            fail("%s: the tab shows KL %r, numpy %r" % (label, shown_kl, kl))
        top1 = [int(x) for x in t.get("edits top1", "").split()]
        if top1 != [int(np.argmax(before)), int(np.argmax(after))]:
            fail("%s: top-1 %r, numpy %r" % (label, top1, [int(np.argmax(before)), int(np.argmax(after))]))
        movers = [w.split(":") for w in t.get("edits movers", "").split()]
        want = np.argsort(-np.abs(pa - pb), kind="stable")[:5]
        if [int(m[0]) for m in movers] != [int(i) for i in want]:
            fail("%s: movers %r, numpy %r" % (label, [m[0] for m in movers], list(want)))
        for m in movers:
            i = int(m[0])
            if abs(float(m[1]) - pb[i]) > 1e-5 * pb[i] + 1e-9 or abs(float(m[2]) - pa[i]) > 1e-5 * pa[i] + 1e-9:
                fail("%s: mover %d shows %s -> %s, numpy %r -> %r" % (label, i, m[1], m[2], pb[i], pa[i]))
        meta = json.load(open(os.path.join(edited, "step_0001", "meta.json")))
        edits = meta.get("edits", [])
        if len(edits) != 1 or edits[0]["kind"] != "evict" or edits[0]["position"] != POS or edits[0]["layer"] != "all":
            fail("%s: the exported step lists edits %r" % (label, edits))
        if abs(edits[0]["kl"] - kl) > 1e-9 * kl:
            fail("%s: exported KL %r, numpy %r" % (label, edits[0]["kl"], kl))
        if json.load(open(os.path.join(plain, "step_0001", "meta.json"))).get("edits") != []:
            fail("%s: the unedited step lists edits" % label)
        # back, back: the step, then the edit, undone; the next step is bit for bit the unedited one
        again = np.load(os.path.join(undone, "step_0001", "logits.npy"))
        if again.tobytes() != before.tobytes():
            fail("%s: after step back twice the next step's logits differ from the unedited ones" % label)
        if d["texts"].get("edits pending") != "0":
            fail("%s: after back, back the tab shows %r pending edits" % (label, d["texts"].get("edits pending")))

    # Bad edits. Without expect-error: one line, non-zero exit.
    for bad, words in (("evict 99", "position 99"), ("evict 1 7", "layer 7"), ("restore 1", "not evicted")):
        p = script(a.kvscope, a.work, "bad", ["prompt " + PROMPT, "step", bad], (1280, 720), model=model, dump=False, shot=False,
                   expect_ok=False)
        lines = error_lines(p)
        if p.returncode == 0 or len(lines) != 1 or words not in lines[0]:
            fail("%r: exit %d, stderr %r (expected one line naming %r)" % (bad, p.returncode, p.stderr, words))
    # Under expect-error: the tab's problem box says why, the next step is the unedited one.
    bad_dir = os.path.join(a.work, "bad_export")
    d = window(a.kvscope, model, a.work, "bad_box", (1280, 720),
               ["prompt " + PROMPT, "step", "expect-error evict 99", "panel Cache edits", "step",
                "export-session " + bad_dir])
    box = [k for k in d["widgets"] if k == "problem edits"]
    if not box:
        fail("the refused edit left no problem box in the Cache edits tab (widgets %s)" % sorted(d["widgets"]))
    if np.load(os.path.join(bad_dir, "step_0001", "logits.npy")).tobytes() != \
            np.load(os.path.join(a.work, "plain_1280x720", "step_0001", "logits.npy")).tobytes():
        fail("a refused edit changed the session")
    print("ok")


if __name__ == "__main__":
    main()
