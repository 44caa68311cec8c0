"""Every guided lesson (assets/lessons/*.json) run end to end in script mode, its checks' values against
independent computations, and lessons made to fail on purpose.

  1. Every lesson in one window, in order (so each must start afresh whatever the last one left): `lesson N`,
     then per step `lesson-do`, `lesson-json`, `lesson-next` (which fails the script unless the step's check
     passes on the engine's record). The values each check compared are then recomputed here:
       prefill vs decode   cache rows = `kvscope tokenize`'s count after the prefill, + 4 after four decodes
       cache saves work    FLOPs with and without the cache = the `flops` of `kvscope generate --trace` with
                           and without --no-cache; rows recomputed without it = every position
       mask                keys the last query sees = positions k <= q with k > q - W or k < S
       induction           the weight = numpy's causal softmax(q k^T / sqrt(D)) of layer 1 head 1 from the
                           q/k rows `generate --trace` exports, at the token after the earlier " the"
       GQA                 bytes per token = 2 L K D 4 from assets/llama-gqa/config.json
       rotary              the engine's score = numpy's q.k / sqrt(D) from the exported (rotated) rows
       paged blocks        shared blocks = floor(prompt tokens / 4) = the Memory dump's shared_blocks
       lab                 bytes and KL = `kvscope lab --json` over the same text and configurations
  2. A screenshot of each lesson's first step at 1280x720: the Lesson tab is drawn, with its check line.
  3. Broken on purpose: lesson 4 on assets/llama-gqa (random weights) fails `lesson-next` with the lesson's
     message ("expected an induction head ... the strongest is ..."), one line; `lesson-next` before the
     step's action fails (nothing to check yet); a bad lesson file (KVSCOPE_LESSONS) is refused in one line
     naming the file and the field, by `gui --lesson` and by the script's `lesson`; `--lesson 99` is refused.
"""
import glob
import json
import os
import shutil

import numpy as np

from guitest import arguments, error_lines, fail, prompt_length, read_json, run, script

PROMPT = "Tom saw the cookie at school. Tom saw the"
LAB_TEXT = "Tom saw the cookie at school. Tom saw the cookie at home. Tom saw the dog at school. Tom saw the"
SIZE = (1280, 720)


def run_lessons(a, extra):
    """Every lesson end to end in one window, in order (each must start afresh whatever the one before left:
    a window, the cache off, a batch); returns {n: the lesson-json state of each step, after its action}."""
    files = sorted(glob.glob(os.path.join(a.assets, "lessons", "*.json")))
    lines, n_steps = [], {}
    for n in range(1, len(files) + 1):
        n_steps[n] = len(json.load(open(files[n - 1]))["steps"])
        lines.append("lesson %d" % n)
        for k in range(1, n_steps[n] + 1):
            lines += ["lesson-do"] + [l % k for l in extra.get(n, [])] + [
                "lesson-json " + os.path.join(a.work, "l%d_s%d.json" % (n, k)), "lesson-next"]
        lines.append("lesson-json " + os.path.join(a.work, "l%d_end.json" % n))
    script(a.kvscope, a.work, "lessons", lines, SIZE, dump=False, shot=False, timeout=600)
    out = {}
    for n in n_steps:
        end = read_json(os.path.join(a.work, "l%d_end.json" % n))
        if not end["finished"]:
            fail("lesson %d: not finished after every step's Next: %s" % (n, end))
        out[n] = [read_json(os.path.join(a.work, "l%d_s%d.json" % (n, k))) for k in range(1, n_steps[n] + 1)]
        for k, s in enumerate(out[n], 1):
            if s["state"] != "passed" or s["step"] != k or s["lesson"] != n:
                fail("lesson %d step %d: %s" % (n, k, s))
    return out


def value(state, name, index=0):
    vals = [v for v in state["values"] if v["name"] == name]
    if len(vals) <= index:
        fail("no value %r in %s" % (name, state))
    return vals[index]["actual"]


def near(label, got, want, rel=1e-4):
    if abs(got - want) > rel * max(1.0, abs(want)):
        fail("%s: the lesson compared %r, the independent computation gives %r" % (label, got, want))


def trace(a, model, name, prompt, new_tokens, extra=()):
    out = os.path.join(a.work, name)
    run([a.kvscope, "generate", "--model", model, "--prompt", prompt, "--max-new-tokens", str(new_tokens),
         "--trace", out] + list(extra))
    steps = sorted(d for d in os.listdir(out) if d.startswith("step_"))
    return [(json.load(open(os.path.join(out, s, "meta.json"))), os.path.join(out, s)) for s in steps]


def token_ids(a, model, text):
    return [int(t) for t in run([a.kvscope, "tokenize", "--model", model, "--text", text], timeout=60).stdout.split()]


def lessons_end_to_end(a):
    default, gqa = os.path.join(a.assets, "default"), os.path.join(a.assets, "llama-gqa")
    P = prompt_length(a.kvscope, default, PROMPT)
    runs = run_lessons(a, {7: ["memory-json " + os.path.join(a.work, "memory_%d.json")]})

    s = runs[1]
    near("lesson 1 cache rows after the prefill", value(s[0], "cache_rows"), P)
    near("lesson 1 cache rows after four decodes", value(s[2], "cache_rows"), P + 4)
    near("lesson 1 rows a decode computes", value(s[2], "rows_computed"), 1)

    s = runs[2]
    on = trace(a, default, "on", PROMPT, 2)
    off = trace(a, default, "off", PROMPT, 2, ["--no-cache"])
    near("lesson 2 FLOPs with the cache", value(s[1], "flops_saved.flops_on"), on[1][0]["flops"])
    near("lesson 2 FLOPs without it", value(s[1], "flops_saved.flops_off"), off[1][0]["flops"])
    near("lesson 2 rows without the cache", value(s[1], "flops_saved.rows_off"), P + 1)
    near("lesson 2 rows with the cache off", value(s[2], "rows_computed"), P + 2)

    s = runs[3]
    q = P - 1
    for k, (W, S) in enumerate(((0, 0), (4, 0), (4, 1))):
        want = sum(1 for key in range(q + 1) if W == 0 or key > q - W or key < S)
        near("lesson 3 step %d keys seen (W %d, S %d)" % (k + 1, W, S), value(s[k], "visible_keys"), want)

    s = runs[4]
    steps = trace(a, default, "induction", PROMPT, 1)
    meta, d = steps[0]
    D = meta["model"]["head_dim"]
    qr, kr = np.load(os.path.join(d, "q.npy")), np.load(os.path.join(d, "k.npy"))
    ids = token_ids(a, default, PROMPT)
    last = len(ids) - 1
    key = max(j for j in range(last) if ids[j] == ids[last]) + 1
    L, H = 1, 1
    qv = qr[L, last, H * D:(H + 1) * D].astype(np.float64)
    ks = kr[L, :last + 1, H * D:(H + 1) * D].astype(np.float64)
    sc = ks @ qv / np.sqrt(D)
    w = np.exp(sc - sc.max())
    w /= w.sum()
    near("lesson 4 key position", value(s[0], "induction.key_position"), key)
    near("lesson 4 induction weight", value(s[0], "induction.weight"), w[key])
    if w[key] < 0.5:
        fail("lesson 4: numpy's weight %.3f is under the lesson's 0.5: the lesson claims too much" % w[key])
    near("lesson 4 predicted token", value(s[1], "copies.token"), ids[key])

    s = runs[5]
    cfg = json.load(open(os.path.join(gqa, "config.json")))
    Dg = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    near("lesson 5 bytes per token", value(s[0], "kv_bytes_per_token.bytes_per_token"),
         2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * Dg * 4)
    near("lesson 5 bytes with a K/V head per query head", value(s[0], "kv_bytes_per_token.every_head"),
         2 * cfg["num_hidden_layers"] * cfg["num_attention_heads"] * Dg * 4)

    s = runs[6]
    steps = trace(a, gqa, "rotary", PROMPT, 2)
    keys, queries = {}, {}
    group = cfg["num_attention_heads"] // cfg["num_key_value_heads"]
    for meta, d in steps:
        first = meta["first_computed_position"]
        qr, kr = np.load(os.path.join(d, "q.npy")), np.load(os.path.join(d, "k.npy"))
        for r in range(qr.shape[1]):
            queries[first + r], keys[first + r] = qr[:, r].astype(np.float64), kr[:, r].astype(np.float64)
    Pg = prompt_length(a.kvscope, gqa, PROMPT)
    checks = [(0, Pg - 1, 0, 0, 0), (1, Pg, 0, 0, 0), (1, Pg, 1, 3, 1)]  # (step, query position, layer, head, value index)
    for k, qpos, layer, head, index in checks:
        kv = head // group
        want = queries[qpos][layer, head * Dg:(head + 1) * Dg] @ keys[0][layer, kv * Dg:(kv + 1) * Dg] / np.sqrt(Dg)
        near("lesson 6 step %d layer %d head %d score" % (k + 1, layer, head), value(s[k], "rotary_score.score", index), want)
        near("lesson 6 step %d score by distance" % (k + 1), [v for v in s[k]["values"] if v["name"] == "rotary_score.score"][index]["expected"], want)

    s = runs[7]
    for k in (1, 2):
        mem = read_json(os.path.join(a.work, "memory_%d.json" % k))
        near("lesson 7 step %d shared blocks (Memory dump)" % k, value(s[k - 1], "blocks_shared.blocks_shared"), mem["shared_blocks"])
        near("lesson 7 step %d shared blocks (prompt / 4)" % k, value(s[k - 1], "blocks_shared.blocks_shared"), P // 4)

    s = runs[8]
    # The window's lab reads the shown sequence's tokens so far: the prompt and the token its prefill chose.
    meta = trace(a, default, "lab_text", LAB_TEXT, 1)[0][0]
    ids = meta["tokens"]["ids"] + [meta["chosen"]["id"] if isinstance(meta["chosen"], dict) else meta["chosen"]]
    lab = json.loads(run([a.kvscope, "lab", "--model", default, "--text-ids", ",".join(map(str, ids)), "--config", "full",
                          "--config", "int8", "--config", "window=8", "--json"]).stdout)
    by = {c["name"]: c for c in lab["configs"]}
    for k, name in ((0, "int8"), (1, "window=8")):
        near("lesson 8 %s bytes" % name, value(s[k], "lab_tradeoff.bytes"), by[name]["bytes_total"])
        near("lesson 8 full bytes", [v for v in s[k]["values"] if v["name"] == "lab_tradeoff.bytes"][0]["expected"],
             by["full"]["bytes_total"])
        near("lesson 8 %s KL" % name, value(s[k], "lab_tradeoff.kl_mean"), by[name]["kl_mean"], rel=1e-6)
    print("  ok every lesson end to end; values = tokenize, generate --trace + numpy, config.json, lab --json")


def screenshots(a):
    files = sorted(glob.glob(os.path.join(a.assets, "lessons", "*.json")))
    for n in range(1, len(files) + 1):
        name = "first_step_%d" % n
        script(a.kvscope, a.work, name, ["lesson %d" % n, "lesson-do"], SIZE)
        d = read_json(os.path.join(a.work, name + ".json"))
        w = d.get("widgets", {})
        for item in ("lesson title", "lesson text", "lesson check"):
            if item not in w:
                fail("lesson %d's first step: no %r drawn (widgets: %s)" % (n, item, sorted(k for k in w if "lesson" in k)))
        x0, y0, x1, y1 = w["lesson title"]
        if x0 < 0 or y0 < 0 or x1 > SIZE[0] or y1 > SIZE[1]:
            fail("lesson %d: its title %s is off the %dx%d window" % (n, w["lesson title"], *SIZE))
        shutil.copy(os.path.join(a.work, name + ".png"), os.path.join(a.work, "lesson_%d_1280x720.png" % n))
    print("  ok a screenshot of each lesson's first step, Lesson tab drawn (%s)" % a.work)


def broken_on_purpose(a):
    gqa = os.path.join(a.assets, "llama-gqa")
    p = script(a.kvscope, a.work, "random", ["lesson 4", "model " + gqa, "lesson-do", "lesson-next"], SIZE,
               dump=False, shot=False, expect_ok=False)
    errs = error_lines(p)
    if p.returncode == 0 or len(errs) != 1:
        fail("lesson 4 on random weights: exit %d, stderr %r; want one error line" % (p.returncode, errs))
    want = "lesson-next: expected an induction head (layer 1 head 1) with weight >= 0.5 on the earlier"
    if want not in errs[0] or "the strongest is" not in errs[0]:
        fail("lesson 4 on random weights: %r, want %r ... the strongest is ..." % (errs[0], want))

    p = script(a.kvscope, a.work, "early", ["lesson 1", "lesson-next"], SIZE, dump=False, shot=False, expect_ok=False)
    errs = error_lines(p)
    if p.returncode == 0 or len(errs) != 1 or "lesson-next: no step yet" not in errs[0]:
        fail("lesson-next before the step's action: exit %d, %r" % (p.returncode, errs))

    bad = os.path.join(a.work, "bad_lessons")
    shutil.copytree(os.path.join(a.assets, "lessons"), bad)
    with open(os.path.join(bad, "09-broken.json"), "w") as f:
        f.write('{"title": "broken", "steps": [{"text": "a", "check": [{"is": "induction", "layer": 1, "head": 1}]}]}')
    env = dict(os.environ, KVSCOPE_LESSONS=bad)
    for how, lines, args in (("gui --lesson 1", ["frames 1"], ["--lesson", "1"]), ("script lesson 1", ["lesson 1"], [])):
        p = script(a.kvscope, a.work, "bad", lines, SIZE, dump=False, shot=False, args=args, env=env, expect_ok=False)
        errs = error_lines(p)
        if p.returncode == 0 or len(errs) != 1 or "09-broken.json: steps[0].check[0].min: missing" not in errs[0]:
            fail("a bad lesson file (%s): exit %d, %r" % (how, p.returncode, errs))
    p = script(a.kvscope, a.work, "range", ["frames 1"], SIZE, dump=False, shot=False, args=["--lesson", "99"],
               expect_ok=False)
    errs = error_lines(p)
    if p.returncode == 0 or len(errs) != 1 or "--lesson" not in errs[0]:
        fail("--lesson 99: exit %d, %r" % (p.returncode, errs))
    print("  ok lesson 4 fails on random weights with its message; early Next, a bad file and --lesson 99 refused in one line")


def main():
    a = arguments()
    broken_on_purpose(a)
    lessons_end_to_end(a)
    screenshots(a)
    print("OK")


if __name__ == "__main__":
    main()
