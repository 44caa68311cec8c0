#!/usr/bin/python3
"""Nothing lost (issue 41): kvscope touches only files it can prove it wrote (core/io/ownership.h).

For every command with an output path, a foreign file or folder with kvscope-like names is planted where
the output goes (trace.json, step_0001/, config.json, model.safetensors, shards, a .npy, a PNG, a JSON
dump). Each run must be refused in one 'error: ...' line with exit 2 before any work — a second, fresh
output of the same run is never written — and every planted byte must still be there afterwards.
Then the positive side: kvscope replaces and removes what it wrote itself (a shorter trace over a
longer one removes the stale step folders), and nothing else.

    check_ownership.py --kvscope BIN --work DIR [--no-gui]
"""
import argparse
import os
import shutil
import subprocess
import sys


def snapshot(root):
    """Every file and folder under root: relative path -> bytes (None for a folder, the target for a link)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else open(p, "rb").read()
    return out


def put(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-gui", action="store_true")
    a = ap.parse_args()
    w = os.path.abspath(a.work)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    env = dict(os.environ)
    env["XDG_STATE_HOME"] = os.path.join(w, "state")  # this test's ledger of the files kvscope wrote
    env.pop("WAYLAND_DISPLAY", None)
    env.pop("DISPLAY", None)  # gui refusals come before the window would open
    user = os.path.join(w, "user")  # everything the user owns: must be byte for byte the same at the end

    # The issue's own example: a profiler's folder with a trace.json and a step folder holding a file.
    prof = os.path.join(user, "prof")
    put(os.path.join(prof, "trace.json"), "{}\n")
    put(os.path.join(prof, "step_0007", "mine.txt"), "precious\n")
    # Only step_NNNN folders, with files in them.
    steps_only = os.path.join(user, "steps_only")
    put(os.path.join(steps_only, "step_0001", "meta.json"), '{"mine": true}\n')
    put(os.path.join(steps_only, "step_0000", "q.npy"), b"\x93NUMPY not kvscope's")
    # A downloaded model folder: config.json, weights and tokenizer (all named as kvscope writes them).
    model = os.path.join(user, "SomeLlama")
    put(os.path.join(model, "config.json"), '{"model_type": "llama"}\n')
    put(os.path.join(model, "model.safetensors"), b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    put(os.path.join(model, "tokenizer.json"), '{"model": {}}\n')
    # A sharded checkpoint: no model.safetensors, but config.json and shards.
    sharded = os.path.join(user, "Sharded")
    put(os.path.join(sharded, "config.json"), '{"model_type": "gpt2"}\n')
    put(os.path.join(sharded, "model-00001-of-00002.safetensors"), b"shard one")
    put(os.path.join(sharded, "model-00002-of-00002.safetensors"), b"shard two")
    put(os.path.join(sharded, "model.safetensors.index.json"), '{"weight_map": {}}\n')
    # Files of the kinds kvscope writes, made by the user.
    npy = os.path.join(user, "data.npy")
    put(npy, b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }" + b" " * 53 + b"\n\x00\x00\x80?")
    png = os.path.join(user, "figure.png")
    put(png, b"\x89PNG\r\n\x1a\n" + b"user's picture")
    svg = os.path.join(user, "figure.svg")
    put(svg, '<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"></svg>\n')
    dump = os.path.join(user, "layout.json")
    put(dump, '{"mine": 1}\n')
    symlink = os.path.join(user, "link.npy")  # a symlink in the output's place, to a file of the user's
    os.symlink(npy, symlink)
    # The train output's --save-at folder, taken by the user.
    trained = os.path.join(w, "trained")
    save_at = trained + "-step1"
    put(os.path.join(save_at, "config.json"), '{"mine": true}\n')
    scripts = os.path.join(w, "scripts")
    put(os.path.join(scripts, "export.txt"), "prompt The cat\nprefill\nexport %s\n" % prof)
    put(os.path.join(scripts, "plain.txt"), "prompt The cat\nprefill\n")
    before = snapshot(user)
    before_save_at = snapshot(save_at)

    fresh = os.path.join(w, "fresh")  # a fresh second output of each run: must not appear
    os.makedirs(fresh)
    gen = ["generate", "--prompt-ids", "1,2,3", "--max-new-tokens", "2"]
    # (what, arguments, text the error line must contain)
    cases = [
        ("generate --trace into a profiler's folder", gen + ["--trace", prof, "--dump-logits", fresh + "/a.npy"], prof),
        ("generate --trace into step_NNNN folders", gen + ["--trace", steps_only, "--dump-logits", fresh + "/b.npy"], steps_only),
        ("generate --trace into a model folder", gen + ["--trace", model, "--dump-logits", fresh + "/c.npy"], model),
        ("generate --dump-logits over the user's .npy", gen + ["--dump-logits", npy, "--trace", fresh + "/t1"], npy),
        ("generate --dump-logits over a symlink", gen + ["--dump-logits", symlink, "--trace", fresh + "/t2"], symlink),
        ("generate --prompt-cache over the user's .npy", gen + ["--prompt-cache", npy, "--trace", fresh + "/t3"], npy),
        ("generate --dump-logits and --prompt-cache on one path",
         gen + ["--dump-logits", fresh + "/same", "--prompt-cache", fresh + "/same"], "both write"),
        ("generate --dump-logits inside --trace",
         gen + ["--trace", fresh + "/t4", "--dump-logits", fresh + "/t4/logits.npy"], "inside --trace"),
        ("train --out over a downloaded model", ["train", "--out", model, "--steps", "1", "--loss-png", fresh + "/l.png"], model),
        ("train --out over a sharded model", ["train", "--out", sharded, "--steps", "1"], sharded),
        ("train --save-at into the user's folder",
         ["train", "--out", trained, "--steps", "3", "--save-at", "1"], save_at),
        ("train --loss-png over the user's PNG", ["train", "--out", fresh + "/m", "--steps", "1", "--loss-png", png], png),
        ("bench --shape --work over a sharded model", ["bench", "--quick", "--shape", "gpt2", "--work", sharded], sharded),
        ("bench --shape --work over a downloaded model",
         ["bench", "--quick", "--shape", "smollm2-135m", "--work", model, "--chart", fresh + "/b.png"], model),
        ("bench --chart over the user's PNG", ["bench", "--quick", "--chart", png], png),
        ("bench --sharing --chart over the user's SVG", ["bench", "--sharing", "--quick", "--chart", svg], svg),
        ("lab --work over a model folder", ["lab", "--shape", "gpt2", "--work", model, "--chart", fresh + "/lab.png"], model),
        ("lab --chart over the user's PNG", ["lab", "--chart", png], png),
        ("gui --screenshot over the user's PNG", ["gui", "--script", scripts + "/plain.txt", "--screenshot", png], png),
        ("gui --layout-dump over the user's JSON", ["gui", "--script", scripts + "/plain.txt", "--layout-dump", dump], dump),
        ("gui script export into a profiler's folder", ["gui", "--script", scripts + "/export.txt"], prof),
        ("gui --screenshot and --layout-dump on one path",
         ["gui", "--script", scripts + "/plain.txt", "--screenshot", fresh + "/s", "--layout-dump", fresh + "/s"], "both write"),
    ]
    if a.no_gui:
        cases = [c for c in cases if c[1][0] != "gui"]
    failures = []
    for what, args, needle in cases:
        p = subprocess.run([a.kvscope] + args, capture_output=True, text=True, env=env, timeout=600)
        lines = p.stderr.splitlines()
        problems = []
        if p.returncode != 2:
            problems.append(f"exit {p.returncode}, expected 2")
        if len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(f"stderr is not one 'error: ...' line: {p.stderr[:400]!r}")
        elif needle not in lines[0]:
            problems.append(f"the line does not name {needle!r}")
        print(("FAIL: " if problems else "ok:   ") + what + ": " + (lines[0] if lines else "(no stderr)"))
        failures += [f"{what}: {pr}" for pr in problems]
        if os.listdir(fresh):  # the run's other output: refused before any work means never written
            failures.append(f"{what}: wrote {sorted(os.listdir(fresh))} before refusing")
            shutil.rmtree(fresh)
            os.makedirs(fresh)
    after = snapshot(user)
    for rel in sorted(set(before) | set(after)):
        if before.get(rel, "missing") != after.get(rel, "missing"):
            failures.append(f"user's {rel} changed: {str(before.get(rel, 'missing'))[:60]} -> {str(after.get(rel, 'missing'))[:60]}")
    if snapshot(save_at) != before_save_at:
        failures.append(f"{save_at} changed")
    if os.path.exists(trained):
        failures.append(f"{trained} was made although --save-at was refused")

    # What kvscope wrote, it replaces and removes: a longer trace, then a shorter one over it.
    t = os.path.join(w, "mine")
    for n, expect in ((6, 6), (2, 2)):  # a step folder per generated token: the prefill, then each decode
        p = subprocess.run([a.kvscope, "generate", "--prompt-ids", "1,2,3", "--max-new-tokens", str(n), "--trace", t,
                            "--dump-logits", os.path.join(w, "mine.npy")], capture_output=True, text=True, env=env, timeout=600)
        steps = sorted(d for d in os.listdir(t) if d.startswith("step_")) if os.path.isdir(t) else []
        if p.returncode != 0 or len(steps) != expect or (n == 2 and "removed 4 step folders" not in p.stderr):
            failures.append(f"kvscope's own trace of {n} tokens: exit {p.returncode}, {len(steps)} step folders "
                            f"(expected {expect}): {p.stderr[-300:]!r}")
    # A file the user adds to kvscope's trace makes the next run refuse, and stays.
    put(os.path.join(t, "step_0001", "notes.txt"), "my notes\n")
    p = subprocess.run([a.kvscope] + gen + ["--trace", t], capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 2 or "step_0001/notes.txt" not in p.stderr:
        failures.append(f"a user's file inside kvscope's trace: exit {p.returncode}, {p.stderr.strip()!r}")
    if open(os.path.join(t, "step_0001", "notes.txt")).read() != "my notes\n":
        failures.append("the user's notes inside kvscope's trace changed")
    # --force makes a folder kvscope's: the documented way to write over assets/default's reproduction.
    forced = os.path.join(w, "forced")
    put(os.path.join(forced, "config.json"), '{"old": true}\n')
    put(os.path.join(forced, "README.md"), "kept\n")
    p = subprocess.run([a.kvscope, "train", "--out", forced, "--force", "--steps", "1", "--n-layer", "1", "--n-embd", "16",
                        "--n-head", "2", "--seq", "16", "--batch", "1"], capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0 or '"old"' in open(os.path.join(forced, "config.json")).read():
        failures.append(f"train --force: exit {p.returncode}, {p.stderr[-300:]!r}")
    if open(os.path.join(forced, "README.md")).read() != "kept\n":
        failures.append("train --force changed a file it does not write")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
