#!/usr/bin/python3
"""`kvscope train --family llama|qwen3` end to end, against the parity reference.

    check_train_llama.py KVSCOPE WORK

For a tiny llama (grouped-query, explicit head_dim, untied) and a tiny qwen3 (QK-norm, one sliding layer):
a few training steps lower the loss; `inspect --json` reports the shape asked for; a second run on one
thread writes byte-identical files; and `generate --dump-logits` on the folder equals the plain PyTorch
forward of tools/kvscope_reference/llama.py (written from Hugging Face's modeling code, sharing nothing
with the C++) within 1e-4. Bad combinations of the family options exit 2 with one line, before any folder
is made.
"""
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from kvscope_reference.llama import LlamaModel  # noqa: E402

TOL = 1e-4
RUN = ["--steps", "12", "--warmup", "2", "--lr", "0.01", "--batch", "2", "--seq", "16", "--n-positions", "32",
       "--log-every", "1", "--n-layer", "2", "--n-embd", "32", "--n-head", "4"]
CASES = {  # name: (options, what inspect --json must say)
    "llama": (["--family", "llama", "--n-kv-head", "2", "--head-dim", "12", "--intermediate", "40",
               "--rope-theta", "500", "--untied"],
              {"model_type": "llama", "kv_heads": 2, "head_dim": 12, "layer_windows": [0, 0],
               "config": {"intermediate_size": 40, "rope_theta": 500.0, "tie_word_embeddings": False}}),
    "qwen3": (["--family", "qwen3", "--n-kv-head", "1", "--sliding-window", "4", "--sliding-layers", "0"],
              {"model_type": "qwen3", "kv_heads": 1, "head_dim": 8, "layer_windows": [4, 0],
               "config": {"intermediate_size": 128, "tie_word_embeddings": True}}),
}
BAD = [  # options, a word the one line must hold
    (["--family", "llama", "--sliding-window", "4"], "sliding window on llama"),
    (["--family", "mistral", "--sliding-window", "4", "--sliding-layers", "1"], "differ by layer on mistral"),
    (["--family", "llama", "--n-kv-head", "3"], "num_key_value_heads"),
    (["--family", "qwen3", "--head-dim", "7"], "head_dim even"),
    (["--n-kv-head", "2"], "--n-kv-head need --family"),
    (["--untied"], "tied embeddings"),
    (["--family", "llama", "--tied", "--untied"], "--tied or --untied"),
    (["--family", "bert"], "--family"),
    (["--family", "qwen3", "--sliding-layers", "0"], "--sliding-layers needs --sliding-window"),
    (["--family", "qwen3", "--sliding-window", "4", "--sliding-layers", "2"], "--sliding-layers"),
    (["--family", "llama", "--circuit-init", "1"], "GPT-2's only"),
]


def run(kvscope, args):
    p = subprocess.run([kvscope] + args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def train(kvscope, out, options, extra=()):
    rc, _, err = run(kvscope, ["train", "--out", out] + RUN + options + list(extra))
    if rc != 0:
        sys.exit(f"FAIL train {' '.join(options)}: exit {rc}\n{err}")
    return [float(x) for x in re.findall(r"^step \d+/\d+  loss (\S+)", err, re.M)]


def check_case(kvscope, work, name, options, expect):
    a, b = os.path.join(work, name + "-a"), os.path.join(work, name + "-b")
    losses = train(kvscope, a, options)
    train(kvscope, b, options, ["--threads", "1"])
    if len(losses) != 12 or not np.mean(losses[-3:]) < losses[0] - 0.1:
        sys.exit(f"FAIL {name}: the loss does not go down: {losses}")
    for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False):
            sys.exit(f"FAIL {name}: {f} differs between a run on the default threads and one on one thread")
    with open(os.path.join(a, "config.json")) as f:
        config = json.load(f)
    for key, value in dict(expect["config"], model_type=expect["model_type"]).items():
        if config.get(key) != value:
            sys.exit(f"FAIL {name}: config.json says {key} = {config.get(key)}, asked for {value}")
    rc, out, err = run(kvscope, ["inspect", "--model", a, "--json"])
    info = json.loads(out) if rc == 0 else sys.exit(f"FAIL inspect {a}: exit {rc}\n{err}")
    for key in ("kv_heads", "head_dim", "layer_windows"):
        if info.get(key) != expect[key]:
            sys.exit(f"FAIL {name}: inspect --json says {key} = {info.get(key)}, asked for {expect[key]}")
    prompt, n_new = [5, 17, 3, 99, 42, 8, 61, 23, 11, 7], 4
    npy = os.path.join(work, name + ".npy")
    rc, out, err = run(kvscope, ["generate", "--model", a, "--prompt-ids", ",".join(map(str, prompt)),
                                 "--max-new-tokens", str(n_new), "--dump-logits", npy, "--json"])
    if rc != 0:
        sys.exit(f"FAIL generate {a}: exit {rc}\n{err}")
    got = np.load(npy).reshape(n_new, -1)
    ids = prompt + json.loads(out)["generated_ids"]
    with torch.no_grad():
        want = LlamaModel(a).forward(ids).numpy()[len(prompt) - 1:len(prompt) - 1 + n_new]
    gap = np.abs(got - want).max()
    if not gap <= TOL:
        i = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
        sys.exit(f"FAIL {name}: logits differ from the reference by {gap:.3g} at {i}: {got[i]} vs {want[i]}")
    print(f"ok {name}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, logits within {gap:.2g} of the reference")


def check_bad(kvscope, work):
    out = os.path.join(work, "bad")
    for options, word in BAD:
        rc, _, err = run(kvscope, ["train", "--out", out] + RUN + options)
        lines = err.strip("\n").split("\n")
        if rc != 2 or len(lines) != 1 or word not in lines[0] or os.path.exists(out):
            sys.exit(f"FAIL train {' '.join(options)}: want exit 2, one line with '{word}' and no folder; "
                     f"got exit {rc}, folder {os.path.exists(out)}:\n{err}")
    print(f"ok {len(BAD)} bad combinations refused")


def main(kvscope, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check_bad(kvscope, work)
    for name, (options, expect) in CASES.items():
        check_case(kvscope, work, name, options, expect)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
