#!/usr/bin/python3
"""The Cache lab tab on the session's own tokens, against `kvscope lab --json` on the same text.

The window sets a prompt on the default model, presses the tab's Measure (script `lab`) with four
configurations and shows the tab at both sizes: each row's bytes per token, mean loss, mean KL and top-1
rate must be the CLI's for the same text (core/cache_lab is checked against PyTorch and numpy by
parity.cache_lab; this checks the window measures the shown sequence's tokens and shows what the core
returns). After decoding, the tab must say the sequence has changed; a configuration the grammar refuses
must fail in the tab with one line and leave the last measurement and the session as they were.
"""
import json
import os

from guitest import arguments, fail, run, window

PROMPT = "Tom saw the cat. Tom saw the dog. Tom saw the cat. Tom saw the dog."
CONFIGS = ["full", "window=8", "window=8,sinks=2", "int8"]


def main():
    a = arguments()
    model = os.path.join(a.assets, "default")
    text = os.path.join(a.work, "text.txt")
    with open(text, "w") as f:
        f.write(PROMPT)
    cli = ["--config=" + c for c in CONFIGS]
    want = json.loads(run([a.kvscope, "lab", "--model", model, "--text", text, "--json"] + cli).stdout)["configs"]
    lab_line = "lab " + "; ".join(CONFIGS)

    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        d = window(a.kvscope, model, a.work, "lab_" + label, size, ["prompt " + PROMPT, lab_line, "panel Cache lab"])
        t = d["texts"]
        if "this sequence's tokens" not in t.get("lab header", ""):
            fail("%s: the tab's header %r" % (label, t.get("lab header")))
        for i, w in enumerate(want):
            row = t.get("lab row %d" % i, "").split()
            if len(row) != 5 or row[0] != w["name"]:
                fail("%s: row %d is %r, the CLI's is %s" % (label, i, t.get("lab row %d" % i), w["name"]))
            got = [float(x) for x in row[1:]]
            exp = [w["bytes_per_token"], w["loss_mean"], w["kl_mean"], w["top1_agree_percent"] / 100]
            for name, g, e in zip(("bytes/token", "loss", "KL", "top-1"), got, exp):
                if abs(g - e) > 1e-7 * max(1.0, abs(e)):
                    fail("%s: %s %s = %.9g, the CLI says %.9g" % (label, w["name"], name, g, e))
        if "lab row %d" % len(want) in t:
            fail("%s: the tab shows more rows than configurations" % label)
        print("  ok %s: %s = kvscope lab --json" % (label, ", ".join(CONFIGS)))

    # The sequence moves on: the tab says the measurement is of older tokens. A refused configuration: one
    # line in the tab, the measurement kept.
    d = window(a.kvscope, model, a.work, "lab_changed", (1280, 720),
               ["prompt " + PROMPT, lab_line, "panel Cache lab", "prefill", "expect-error lab window=0"])
    t = d["texts"]
    if "changed" not in t.get("lab header", ""):
        fail("after a prefill the tab's header %r does not say the sequence changed" % t.get("lab header"))
    if not t.get("lab row 3", "").startswith("int8 "):
        fail("a refused configuration dropped the last measurement: %r" % t.get("lab row 3"))
    print("  ok: a changed sequence is named; window=0 refused, the measurement kept")
    print("ok: the Cache lab tab shows kvscope lab's numbers for the session's tokens")


if __name__ == "__main__":
    main()
