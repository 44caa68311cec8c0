#!/usr/bin/python3
"""The Cache on vs off panel's charts and notes against numbers from the CLI.

On the default model the window runs a prefill and six decode steps with the comparison on, at 1280x720 and
1920x1080, and dumps what the panel draws (app/gui/widgets/chart.h). Then:
  1. both charts have value ticks (from 0 up to a round top at or above every plotted value that is not
     flagged off the scale) and step ticks (whole steps from 0), each label reading its value, and every
     plotted point where the ticks put it;
  2. the FLOPs plotted per step equal the `flops` of the steps `kvscope generate --trace` writes with the
     cache (ON) and with --no-cache (OFF);
  3. the prefill step did the same work both ways (same FLOPs, nothing reused): the time chart plots one
     value for both, the faster of the two medians the panel names for that step, and the panel says so
     (the rows: the prompt's tokens, `kvscope tokenize`);
  4. the viewed decode step's note is there exactly when its own plotted numbers disagree (OFF has 2x or more
     the FLOPs and less than half that ratio in time), with those ratios and the weight matrices' bytes of
     `kvscope inspect --json`.
No assertion is made on how fast anything runs: only that what is drawn and said agrees with the numbers.
"""
import json
import os
import re

from guitest import arguments, check_chart, fail, prompt_length, run, window

PROMPT = "Once upon a time there was a"
DECODE = 6
UNITS = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def count(label):  # "2.5M" -> 2.5e6
    return float(label[:-1]) * UNITS[label[-1]] if label[-1] in UNITS else float(label)


def trace_flops(kvscope, model, work, name, extra):
    trace = os.path.join(work, name)
    run([kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", str(DECODE + 1),
         "--trace", trace] + extra)
    steps = sorted(d for d in os.listdir(trace) if d.startswith("step_"))
    return [json.load(open(os.path.join(trace, s, "meta.json")))["flops"] for s in steps][:DECODE + 1]


def main():
    a = arguments()
    model = os.path.join(a.assets, "default")
    on, off = trace_flops(a.kvscope, model, a.work, "on", []), trace_flops(a.kvscope, model, a.work, "off", ["--no-cache"])
    n_prompt = prompt_length(a.kvscope, model, PROMPT)
    matrix_mib = json.loads(run([a.kvscope, "inspect", "--model", model, "--json"]).stdout)["matrix_bytes"] / 2 ** 20
    lines = ["prompt " + PROMPT, "prefill", "decode %d" % DECODE, "panel Cache on vs off"]
    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        d = window(a.kvscope, model, a.work, "compare_" + label, size, lines)
        t = d["texts"]
        flops = check_chart(d, "compare flops", count)
        time = check_chart(d, "compare time", lambda ms: float(ms) / 1e3)  # seconds, labelled in ms
        for name, c in (("flops", flops), ("time", time)):
            xs = [v for v, _, _ in c["x"]]
            if xs[0] != 0 or any(v != int(v) or v > DECODE for v in xs):
                fail("%s %s: step ticks %s, want whole steps from 0 to %d" % (label, name, xs, DECODE))
            ys = [v for v, _, _ in c["y"]]
            shown = [v for points in c["series"].values() for v, py in points if py > c["plot"][1] + 0.5]
            if ys[0] != 0 or ys[-1] < max(shown) or ys[-1] - (ys[-1] - ys[-2]) >= max(shown):
                fail("%s %s: value ticks %s do not run from 0 to the round top above %g" % (label, name, ys, max(shown)))
        got_on = [v for v, _ in flops["series"]["cache ON"]]
        got_off = [v for v, _ in flops["series"]["cache OFF"]]
        if got_on != on or got_off != off:
            fail("%s: FLOPs plotted ON %s OFF %s, the traces' %s and %s" % (label, got_on, got_off, on, off))
        t_on = [v for v, _ in time["series"]["cache ON"]]
        t_off = [v for v, _ in time["series"]["cache OFF"]]
        if t_on[0] != t_off[0]:
            fail("%s: the prefill did the same work both ways but plots ON %g and OFF %g" % (label, t_on[0], t_off[0]))
        if any(t_on[i] == t_off[i] for i in range(1, len(t_on))):
            fail("%s: a decode step plots one time for both ways: %s %s" % (label, t_on, t_off))
        # The viewed (last) step's note, from its own plotted numbers.
        f_ratio, t_ratio = off[-1] / on[-1], t_off[-1] / t_on[-1]
        note = t.get("compare step note", "")
        if f_ratio >= 2 and t_ratio * 2 <= f_ratio:
            m = re.match(r"([0-9.]+)x the FLOPs, ([0-9.]+)x the time: a step reads all weights \(([0-9.]+) MiB\)", note)
            if not m or abs(float(m.group(1)) - f_ratio) > 0.051 or abs(float(m.group(2)) - t_ratio) > 0.051 * t_ratio + 0.051 \
                    or abs(float(m.group(3)) - matrix_mib) > 0.006:
                fail("%s: want the reason line with %.1fx, %.1fx and %.2f MiB, got %r" % (label, f_ratio, t_ratio, matrix_mib, note))
        elif note:
            fail("%s: FLOPs %.1fx and time %.1fx agree, yet the panel says %r" % (label, f_ratio, t_ratio, note))
        print("  ok %s: ticks label both charts; FLOPs = the traces'; prefill one time %.3g ms; step %d: %.1fx FLOPs, "
              "%.1fx time, note %r" % (label, t_on[0] * 1e3, DECODE, f_ratio, t_ratio, note))

    # The prefill step viewed: the same-work note names the prompt's rows; the plotted time is the faster median.
    d = window(a.kvscope, model, a.work, "compare_prefill", (1920, 1080), lines + ["show-step 0"])
    t = d["texts"]
    note, details = t.get("compare step note", ""), t.get("compare step details", "")
    if not note.startswith("Same work both ways (%d rows, empty cache)" % n_prompt):
        fail("prefill: want the same-work note for %d rows, got %r" % (n_prompt, note))
    m = re.search(r"two times \(([0-9.]+) ms and ([0-9.]+) ms", details)
    plotted = check_chart(d, "compare time", lambda ms: float(ms) / 1e3)["series"]["cache ON"][0][0] * 1e3
    if not m or abs(plotted - min(float(m.group(1)), float(m.group(2)))) > 0.0051:
        fail("prefill: plotted %.4f ms, want the faster of the times in %r" % (plotted, details))
    print("  ok prefill: %r; plotted %.3f ms = the faster of %s" % (note, plotted, m.groups()))
    print("OK")


if __name__ == "__main__":
    main()
