#!/usr/bin/python3
"""Real-input test of the Cache lab tab: the interactive window on the default model driven by xdotool.

Type a prompt, click the Cache lab tab, type three configurations into its box (`;`-separated, one an
eviction policy) and click Measure: every row the tab shows (bytes per token, loss, KL, top-1) must equal
`kvscope lab --json` on the same text with the same configurations (the CLI: the same core measured in
another process, checked against PyTorch and numpy by parity.cache_lab), the header must say it measured
this sequence's tokens, and after Prefill it must say the sequence changed; the prediction, a newline as
the CLI says, must be shown in the Next token header as a return arrow.
Needs what guitest.App needs (xvfb-run, xdotool, ImageMagick's import).
"""
import json
import os
import subprocess
import sys

from guitest import App, input_main, fail

PROMPT = "Tom saw the cat. Tom saw the dog. Tom saw the cat. Tom saw the dog."
CONFIGS = ["full", "window=8,sinks=2", "h2o,budget=8"]


def inner(a):
    work = a.work
    model = os.path.join(a.assets, "default")
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        f.write(PROMPT)
    p = subprocess.run([a.kvscope, "lab", "--model", model, "--text", text, "--json"] + ["--config=" + c for c in CONFIGS],
                       capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        fail("kvscope lab failed: %s" % p.stderr)
    want = json.loads(p.stdout)["configs"]

    with App(a.kvscope, work, ["--model", model]) as app:
        app.wait("first frames", lambda s: s["frames"] > 3)
        app.type_prompt(PROMPT)
        app.workspace("Lab")
        app.wait_dump("the lab tab", lambda d: "Measure lab" in d["widgets"])
        app.type_into("lab configurations", " ; ".join(CONFIGS))
        app.click_empty()
        app.click("Measure lab")
        d = app.wait_dump("the measurement", lambda d: d["state"]["idle"] and "lab row %d" % (len(want) - 1) in d["texts"],
                          timeout=120, shown=lambda d: (d["texts"], d["state"]["problem"]))
        app.screenshot("measured")
        t = d["texts"]
        if "this sequence's tokens" not in t.get("lab header", ""):
            fail("the tab's header %r" % t.get("lab header"))
        for i, w in enumerate(want):
            row = t.get("lab row %d" % i, "").split()
            if len(row) != 5 or row[0] != w["name"]:
                fail("row %d is %r, the CLI's is %s" % (i, t.get("lab row %d" % i), w["name"]))
            got = [float(x) for x in row[1:]]
            exp = [w["bytes_per_token"], w["loss_mean"], w["kl_mean"], w["top1_agree_percent"] / 100]
            for name, g, e in zip(("bytes/token", "loss", "KL", "top-1"), got, exp):
                if abs(g - e) > 1e-7 * max(1.0, abs(e)):
                    fail("%s %s = %.9g in the tab, the CLI says %.9g" % (w["name"], name, g, e))
        if "lab row %d" % len(want) in t:
            fail("the tab shows more rows than configurations")
        if not any(w["kl_mean"] > 0 for w in want[1:]):
            fail("no configuration differs from the full cache: the check would teach nothing")
        print("  ok: typed %r, Measure clicked: every row = kvscope lab --json (KL %s)"
              % ("; ".join(CONFIGS), ", ".join("%.5f" % w["kl_mean"] for w in want)))

        app.click("Prefill step")
        app.wait("prefill", lambda s: s["steps"] == 1)
        app.wait_dump("the tab names the change", lambda d: "changed" in d["texts"].get("lab header", ""),
                      shown=lambda d: d["texts"].get("lab header"))
        app.screenshot("sequence changed")
        print("  ok: after a prefill the tab says the sequence changed")
        # The prompt's prediction is a newline (greedy; the CLI's choice and the tokenizer's id for "\n"):
        # the Next token header shows it as the chips do, a return arrow, not an escape.
        gen = json.loads(subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "1",
                                         "--json"], capture_output=True, text=True, timeout=120).stdout)["generated_ids"][0]
        newline = int(subprocess.run([a.kvscope, "tokenize", "--model", model, "--text", "\n"], capture_output=True,
                                     text=True, timeout=60).stdout.split()[0])
        if gen != newline:
            fail("the CLI predicts %d after the prompt, not the newline %d: pick a prompt that ends a line" % (gen, newline))
        app.workspace("Step")
        shown = app.state()["texts"].get("next token chosen")
        if shown != "chosen: %d '\u21b5'" % newline:
            fail("the Next token header for a newline reads %r" % shown)
        print("  ok: the Next token header shows the newline as %r" % shown)


if __name__ == "__main__":
    sys.exit(input_main(__file__, inner))
