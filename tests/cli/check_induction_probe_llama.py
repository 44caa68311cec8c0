#!/usr/bin/python3
"""tools/induction_probe.py on a Llama-family folder (and its ablations), checked by what they must mean.

    check_induction_probe_llama.py KVSCOPE WORK

`kvscope train --family qwen3` writes a tiny model (2 layers of 4 query heads over 2 K/V heads, layer 0 sliding
with window 4, tied embeddings) in 30 steps; a copy of it gets the chat model's tokenizer layout instead
(tokenizer.json with <|im_start|> / <|im_end|> / <think> added, no vocab.json). The probe (--json, 1 span per
test) must:
  - report the same bytes for both folders (token kinds from tokenizer.json = from vocab.json), every kind
    with its counts in 0..n and prev / ind as [layer][head] weights in [0, 1], ids' pool = the ordinary tokens;
  - honour the model's own sliding layer: ind (11 positions back) is exactly 0 in layer 0, not in layer 1;
  - --remove-head L H = the same model with o_proj columns H*D..(H+1)*D-1 zeroed in the file (written here);
    a head of layer 0 removed leaves layer 0's figures as they were and changes layer 1's;
  - --window-override 1 4 = the same model with layer 1 made sliding in config.json's layer_types; 1 1 leaves
    each query only itself (prev = ind = 0 in layer 1, layer 0 as it was); 0 64 widens layer 0 (ind > 0);
  - refuse bad layers, heads and windows, and a folder without a tokenizer, with one line and exit 1.
The same window and ablation rules on a tiny GPT-2 (the numpy path): windows 12 and 11 around ind's distance 11.
"""
import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "..", "..", "tools", "induction_probe.py")
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from kvscope_reference import safetensors_io  # noqa: E402

# The probe runs in this process (torch is imported once): main() with its command line in sys.argv.
_spec = importlib.util.spec_from_file_location("induction_probe", PROBE)
induction_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(induction_probe)

N = 1  # spans per kind and test
TRAIN = ["--steps", "30", "--batch", "2", "--seq", "32", "--n-positions", "256", "--n-layer", "2", "--n-embd", "32",
         "--n-head", "4", "--log-every", "30", "--lr", "0.01"]
QWEN3 = ["--family", "qwen3", "--n-kv-head", "2", "--sliding-window", "4", "--sliding-layers", "0"]
KEYS = {"pool", "copy12", "copyvar", "copyrep", "fails", "prev", "ind", "best_prev", "best_ind"}
L, H = 2, 4


def fail(msg):
    sys.exit(f"FAIL {msg}")


def probe(folder, *extra):
    """The probe's stdout; a refusal (sys.exit with a message: exit 1 from the command line) fails the test."""
    out, message = run_probe(folder, *extra)
    if message is not None:
        fail(f"induction_probe.py {folder} {' '.join(map(str, extra))}: {message}")
    return out


def run_probe(folder, *extra):
    """-> (stdout, the message it exits with, or None)."""
    sys.argv = [PROBE, folder, "--n", str(N), "--json"] + [str(x) for x in extra]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            induction_probe.main()
    except SystemExit as e:
        return out.getvalue(), str(e.code)
    return out.getvalue(), None


def train(kvscope, out, options):
    p = subprocess.run([kvscope, "train", "--out", out] + TRAIN + options, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail(f"kvscope train {' '.join(options)}: exit {p.returncode}\n{p.stderr}")


def copy_folder(src, dst, files):
    os.makedirs(dst)
    for f in files:
        shutil.copy(os.path.join(src, f), dst)


def with_tokenizer_json(src, dst):
    """src's model with its vocab.json + merges.txt rewritten as the chat model's tokenizer.json."""
    copy_folder(src, dst, ["config.json", "model.safetensors"])
    vocab = json.load(open(os.path.join(src, "vocab.json")))
    merges = [m for m in open(os.path.join(src, "merges.txt")).read().split("\n") if m and not m.startswith("#")]
    # ids past the model's vocab_size, as the probe must skip them: the chat markers and an added token that is
    # not special and not spelt <|...|> (Qwen3 adds <think> so)
    added = [t for t in vocab if t.startswith("<|")] + ["<|im_start|>", "<|im_end|>", "<think>"]
    vocab.update({"<|im_start|>": len(vocab), "<|im_end|>": len(vocab) + 1, "<think>": len(vocab) + 2})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": t != "<think>"} for t in added],
           "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab, "merges": merges}}
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    return sum(1 for t in vocab if t not in added)


def zero_head_columns(src, dst, name, h, D):
    """The ablation written into the file: columns h*D..(h+1)*D-1 of `name` set to 0."""
    copy_folder(src, dst, [f for f in os.listdir(src) if f != "model.safetensors"])
    tensors, _, _ = safetensors_io.read(os.path.join(src, "model.safetensors"))
    tensors[name][:, h * D:(h + 1) * D] = 0
    safetensors_io.write(os.path.join(dst, "model.safetensors"), list(tensors.items()))


def check_structure(report, ordinary):
    if set(report) != {"chars", "words", "digpunct", "ids"}:
        fail(f"kinds {sorted(report)}")
    for kind, r in report.items():
        if set(r) != KEYS:
            fail(f"{kind}: keys {sorted(r)}")
        if not all(isinstance(r[k], int) and 0 <= r[k] <= N for k in ("copy12", "copyvar", "copyrep")):
            fail(f"{kind}: counts {r['copy12']} {r['copyvar']} {r['copyrep']} not in 0..{N}")
        for k in ("prev", "ind"):
            a = np.array(r[k])
            if a.shape != (L, H) or not ((a >= 0) & (a <= 1)).all():
                fail(f"{kind}: {k} is not [layer][head] weights: {r[k]}")
            if r["best_" + k] != a.max():
                fail(f"{kind}: best_{k} {r['best_' + k]} is not the largest of {k}")
    if report["ids"]["pool"] != ordinary:
        fail(f"ids pool {report['ids']['pool']}, the tokenizer has {ordinary} ordinary tokens")


def figures(report, layer):
    return {k: [r["prev"][layer], r["ind"][layer]] for k, r in report.items()}


def check_llama(kvscope, work):
    vj, tj = os.path.join(work, "qwen3"), os.path.join(work, "qwen3-tokenizer-json")
    train(kvscope, vj, QWEN3)
    ordinary = with_tokenizer_json(vj, tj)
    out = probe(tj)
    if probe(vj) != out:
        fail("the probe reports differently on the same model with vocab.json and with tokenizer.json")
    base = json.loads(out)
    check_structure(base, ordinary)
    for kind, r in base.items():
        if any(x != 0 for x in r["ind"][0]) or not any(x > 0 for x in r["ind"][1]):
            fail(f"{kind}: layer 0 slides with window 4, so ind 11 back must be 0 there and not in layer 1: {r['ind']}")

    # --remove-head = the ablation written into the weights
    D = json.load(open(os.path.join(vj, "config.json")))["head_dim"]
    for il, h in ((0, 1), (1, 2)):
        ablated = os.path.join(work, f"qwen3-no-head-{il}-{h}")
        zero_head_columns(tj, ablated, f"model.layers.{il}.self_attn.o_proj.weight", h, D)
        removed = probe(tj, "--remove-head", il, h)
        if probe(ablated) != removed:
            fail(f"--remove-head {il} {h} differs from o_proj columns {h * D}..{(h + 1) * D - 1} zeroed in the file")
        if il == 0:
            r = json.loads(removed)
            if figures(r, 0) != figures(base, 0) or figures(r, 1) == figures(base, 1):
                fail("--remove-head 0 1 must leave layer 0's attention as it was and change layer 1's")

    # --window-override = the window written into config.json
    slid = os.path.join(work, "qwen3-both-sliding")
    copy_folder(tj, slid, os.listdir(tj))
    cfg = json.load(open(os.path.join(tj, "config.json")))
    cfg["layer_types"] = ["sliding_attention"] * 2
    json.dump(cfg, open(os.path.join(slid, "config.json"), "w"))
    if probe(slid) != probe(tj, "--window-override", 1, 4):
        fail("--window-override 1 4 differs from layer_types making layer 1 sliding (window 4) in config.json")
    only_self = json.loads(probe(tj, "--window-override", 1, 1))
    for kind, r in only_self.items():
        if any(x != 0 for x in r["prev"][1] + r["ind"][1]) or [r["prev"][0], r["ind"][0]] != figures(base, 0)[kind]:
            fail(f"{kind}: window 1 on layer 1 must give prev = ind = 0 there and keep layer 0: {r['prev']} {r['ind']}")
    wide = json.loads(probe(tj, "--window-override", 0, 64))
    if not any(x > 0 for r in wide.values() for x in r["ind"][0]):
        fail("--window-override 0 64 must let layer 0 reach 11 positions back")
    if "teacher-forced copy accuracy" not in probe(tj, "--pattern", 6, 3):
        fail("--pattern on a Llama-family folder")

    # bad input: one line naming it (sys.exit's message: exit 1), here and from the command line
    for extra, word in ((["--window-override", 2, 4], "--window-override 2 4"),
                        (["--window-override", 1, 0], "--window-override 1 0"),
                        (["--remove-head", 0, 4], "--remove-head 0 4")):
        out, message = run_probe(tj, *extra)
        if message is None or word not in message or "\n" in message:
            fail(f"{' '.join(map(str, extra))}: want one line with '{word}', got {message!r}")
    bare = os.path.join(work, "qwen3-no-tokenizer")
    copy_folder(tj, bare, ["config.json", "model.safetensors"])
    p = subprocess.run([sys.executable, PROBE, bare], capture_output=True, text=True, timeout=300)
    if p.returncode != 1 or len(p.stderr.strip().split("\n")) != 1 or "tokenizer.json" not in p.stderr:
        fail(f"a folder without a tokenizer: want exit 1 and one line naming tokenizer.json, got exit "
             f"{p.returncode}:\n{p.stderr}")
    print("ok qwen3: structure, tokenizer.json = vocab.json, its sliding layer, --remove-head, --window-override",
          flush=True)


def check_gpt2(kvscope, work):
    g = os.path.join(work, "gpt2")
    train(kvscope, g, [])
    base = json.loads(probe(g))
    reach, short = json.loads(probe(g, "--window-override", 1, 12)), json.loads(probe(g, "--window-override", 1, 11))
    for kind in base:
        if not any(x > 0 for x in reach[kind]["ind"][1]) or any(x != 0 for x in short[kind]["ind"][1]):
            fail(f"gpt2 {kind}: ind reads 11 back: window 12 must reach it, 11 not: "
                 f"{reach[kind]['ind']} {short[kind]['ind']}")
        if figures(short, 0) != figures(base, 0):
            fail(f"gpt2 {kind}: a window on layer 1 changed layer 0")
    removed = json.loads(probe(g, "--remove-head", 0, 1))
    if figures(removed, 0) != figures(base, 0) or figures(removed, 1) == figures(base, 1):
        fail("gpt2: --remove-head 0 1 must leave layer 0's attention as it was and change layer 1's")
    print("ok gpt2: --window-override 12 reaches ind, 11 does not; --remove-head")


def main(kvscope, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check_llama(kvscope, work)
    check_gpt2(kvscope, work)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
