#!/usr/bin/python3
"""GUI smoke test: drive `kvscope gui --script` under Xvfb like a user would (type a prompt, prefill,
decode, toggle the cache, step back, change layer/head, export), then check

  1. the screenshot is not blank and every panel of the first-start layout has content;
  2. the exported attention numbers equal an independent numpy recomputation from the exported q/k rows
     (scores = q.k/sqrt(D), causal mask, softmax over visible keys);
  3. the exported logits and chosen tokens equal `kvscope generate --json --dump-logits` for the same
     model and prompt (the CLI path, no GUI involved);
  4. a bad script line and a missing display each fail with one line and a non-zero exit.

Needs xvfb-run, /usr/bin/python3 with numpy and PIL (python3-pil). Usage:
  check_gui.py --kvscope BUILD/app/kvscope --work DIR
"""
import json
import os
import sys

import numpy as np

from guitest import arguments, error_lines, fail, read_png, run, script

PROMPT = "The cat sat on the mat because it was"
W, H = 1600, 1000
LAYER, HEAD = 1, 2


def check_screenshot(path):
    img = read_png(path)
    if img.shape != (H, W, 3):
        fail("screenshot is %s, expected %dx%d" % (img.shape, W, H))
    colours = np.unique(img.reshape(-1, 3), axis=0).shape[0]
    if colours < 1000:
        fail("screenshot has only %d distinct colours: blank or broken rendering" % colours)
    # The first-start layout (app/gui/panels/layout.cpp): fractions of the window per panel.
    left, top, bottom = 0.23 * W, 0.16 * H, 0.69 * H
    mid = left + (W - left) * 0.55
    b1, b2 = left + (W - left) * 0.30, left + (W - left) * 0.60
    panels = {
        "controls": (0, 0, left, 0.80 * H), "export": (0, 0.80 * H, left, H), "timeline": (left, 0, W, top),
        "attention": (left, top, mid, bottom), "kv cache": (mid, top, W, bottom), "mask": (left, bottom, b1, H),
        "next token": (b1, bottom, b2, H), "cache on vs off": (b2, bottom, W, H),
    }
    background = np.array([28, 28, 33])  # WindowBg 0.11, 0.11, 0.13
    for name, (x0, y0, x1, y1) in panels.items():
        region = img[int(y0) + 4:int(y1) - 4, int(x0) + 4:int(x1) - 4].reshape(-1, 3).astype(int)
        busy = np.mean(np.abs(region - background).sum(axis=1) > 24)
        n_col = np.unique(region, axis=0).shape[0]
        print("  panel %-16s %5.1f%% non-background, %5d colours" % (name, 100 * busy, n_col))
        if busy < 0.03 or n_col < 12:
            fail("panel '%s' looks empty (%.1f%% non-background, %d colours)" % (name, 100 * busy, n_col))
    # The attention and KV maps are drawn with viridis / the diverging table: many saturated colours.
    att = img[int(top):int(bottom), int(left):int(W)].reshape(-1, 3).astype(int)
    saturated = np.mean((att.max(axis=1) - att.min(axis=1)) > 60)
    print("  heatmap area: %.1f%% saturated pixels" % (100 * saturated))
    if saturated < 0.02:
        fail("no heatmap colours in the attention / KV area")


def load_session(folder):
    steps = sorted(d for d in os.listdir(folder) if d.startswith("step_"))
    out = []
    for d in steps:
        p = os.path.join(folder, d)
        with open(os.path.join(p, "meta.json")) as f:
            meta = json.load(f)
        out.append((p, meta))
    return out


def check_attention(session):
    """Recompute every exported step's scores/mask/weights for (LAYER, HEAD) from exported q and k rows."""
    keys = {}  # position -> (L, C) key row, from the newest step that computed it
    for path, meta in session:
        q = np.load(os.path.join(path, "q.npy"))  # (L, R, C)
        k = np.load(os.path.join(path, "k.npy"))
        first = meta["first_computed_position"]
        for r in range(k.shape[1]):
            keys[first + r] = k[:, r, :]
        D = meta["model"]["head_dim"]
        qh = q[LAYER, :, HEAD * D:(HEAD + 1) * D].astype(np.float64)  # (R, D)
        kp = meta["key_positions"]
        K = np.stack([keys[p][LAYER, HEAD * D:(HEAD + 1) * D] for p in kp]).astype(np.float64)  # (P, D)
        scores = qh @ K.T / np.sqrt(D)
        qpos = np.array(meta["query_positions"])[:, None]
        window = meta["window"] if "window" in meta else meta["mask"]["window"]
        lo = qpos - window + 1 if window else np.zeros_like(qpos)
        vis = (np.array(kp)[None, :] <= qpos) & (np.array(kp)[None, :] >= lo)
        e = np.where(vis, np.exp(scores - np.where(vis, scores, -np.inf).max(axis=1, keepdims=True)), 0.0)
        weights = e / e.sum(axis=1, keepdims=True)
        tag = "l%02d_h%02d" % (LAYER, HEAD)
        got_s = np.load(os.path.join(path, tag + "_scores.npy"))
        got_m = np.load(os.path.join(path, tag + "_mask.npy"))
        got_w = np.load(os.path.join(path, tag + "_weights.npy"))
        if not np.array_equal(got_m.astype(bool), vis):
            fail("%s: mask differs from the causal rule" % path)
        if not np.all(np.isneginf(got_s[~vis])):  # masked scores are -inf (docs/cli.md "Trace and export files")
            fail("%s: masked cells of scores.npy are not -inf" % path)
        ds, dw = np.abs(got_s[vis] - scores[vis]).max(), np.abs(got_w - weights).max()
        print("  step %d (%s, cache %s): %dx%d  max|d scores| %.2e  max|d weights| %.2e" % (
            meta["step"], meta["phase"], "on" if meta["cache_on"] else "off", scores.shape[0], scores.shape[1], ds, dw))
        if ds > 1e-4 or dw > 1e-5:
            i = np.unravel_index(np.argmax(np.abs(got_w - weights)), weights.shape)
            fail("%s: exported attention differs from numpy (first bad cell %s: %g vs %g)" % (path, i, got_w[i], weights[i]))


def main():
    a = arguments(assets=False)
    snap, sess = os.path.join(a.work, "snapshot"), os.path.join(a.work, "session")
    script(a.kvscope, a.work, "smoke", [
        "# typed prompt, prefill, decode, cache toggles, a step back, layer/head, export",
        "prompt " + PROMPT, "prefill", "decode 3", "cache off", "decode 1", "back", "decode 1", "cache on",
        "decode 1", "layer %d" % LAYER, "head %d" % HEAD, "select 12 3",
        "export " + snap, "export-session " + sess, "view all-heads", "values scores"], (W, H), dump=False)
    shot = os.path.join(a.work, "smoke.png")
    print("screenshot %s" % shot)
    check_screenshot(shot)

    print("exported attention vs numpy (layer %d, head %d):" % (LAYER, HEAD))
    session = load_session(sess)
    if len(session) != 6:
        fail("expected 6 steps in the session export, found %d" % len(session))
    if [m["cache_on"] for _, m in session] != [True, True, True, True, False, True]:
        fail("cache switch not reflected in the steps: %s" % [m["cache_on"] for _, m in session])
    check_attention(session)
    snaps = [d for d in os.listdir(snap) if d.startswith("step_")]
    if snaps != ["step_0005"]:
        fail("snapshot export wrote %s, expected step_0005" % snaps)
    for name in ("l01_h02_weights.npy", "l01_h02_scores.npy", "logits.npy"):
        if not np.array_equal(np.load(os.path.join(snap, "step_0005", name)), np.load(os.path.join(sess, "step_0005", name))):
            fail("snapshot %s differs from the session export" % name)

    # Logits and chosen tokens against the CLI on the same model and prompt.
    dump = os.path.join(a.work, "generate_logits.npy")
    out = run([a.kvscope, "generate", "--prompt", PROMPT, "--max-new-tokens", "6", "--json", "--dump-logits", dump])
    gen = json.loads(out.stdout)
    ref = np.load(dump)  # (6, V)
    worst = 0.0
    for i, (path, meta) in enumerate(session):
        got = np.load(os.path.join(path, "logits.npy"))
        worst = max(worst, float(np.abs(got - ref[i]).max()))
        if meta["chosen"]["id"] != gen["generated_ids"][i]:
            fail("step %d chose %d, kvscope generate chose %d" % (i, meta["chosen"]["id"], gen["generated_ids"][i]))
    print("logits vs kvscope generate --dump-logits: 6 steps, max |d| %.2e, same tokens %s" % (worst, gen["generated_ids"]))
    if worst > 1e-4:
        fail("GUI logits differ from kvscope generate by %g" % worst)

    # Errors: a bad script line, and no display at all.
    p = script(a.kvscope, a.work, "bad", ["prompt hi", "prefil"], (W, H), dump=False, expect_ok=False)
    lines = error_lines(p)
    if p.returncode == 0 or len(lines) != 1 or "bad.txt:2" not in lines[0]:
        fail("bad script line: expected one error line naming bad.txt:2 and a non-zero exit, got %d %r" % (p.returncode, p.stderr))
    print("bad script line -> exit %d: %s" % (p.returncode, lines[0]))
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    p = run([a.kvscope, "gui"], env=env, expect_ok=False)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    if p.returncode == 0 or len(lines) != 1 or "no display" not in lines[0] or "--script" not in lines[0]:
        fail("no display: expected one line naming the scripted mode, got %d %r" % (p.returncode, p.stderr))
    print("no display -> exit %d: %s" % (p.returncode, lines[0]))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
