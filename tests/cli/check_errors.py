#!/usr/bin/python3
"""Every command follows one output rule and one exit-code table (issue 13, item 7; docs/cli.md "Exit codes"):

- 0 done; 1 the work failed (a file could not be read, a broken model folder); 2 the request was refused
  before any work (bad option or value, an output path the rules refuse, an unknown token id, prompt text
  for a model without tokenizer files);
- every error is exactly one stderr line 'error: ...', naming the path when a path is at fault;
- an output's parent folder must exist and is never created; an existing file of another kind and a
  folder holding other files are refused and left as they were; outputs are checked before any work
  (a bench or a training run with a bad --chart / --loss-png fails before it starts).

    check_errors.py --kvscope BIN --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

ASSETS_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "default")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-gui", action="store_true", help="kvscope was built without the window: skip gui cases")
    a = ap.parse_args()
    w = os.path.abspath(a.work)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    missing = os.path.join(w, "no_such_folder")
    notes = os.path.join(w, "notes.txt")
    with open(notes, "w") as f:
        f.write("my notes\n")
    notes_svg = os.path.join(w, "notes.svg")  # named like a figure, but not one kvscope wrote
    with open(notes_svg, "w") as f:
        f.write("my notes\n")
    foreign = os.path.join(w, "thesis")
    os.makedirs(foreign)
    with open(os.path.join(foreign, "chapter1.tex"), "w") as f:
        f.write("x")
    no_tokenizer = os.path.join(w, "no_tokenizer")  # the default model without vocab.json / merges.txt
    os.makedirs(no_tokenizer)
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(ASSETS_DEFAULT, name)), os.path.join(no_tokenizer, name))
    # tokenizer.json files kvscope refuses by name: a WordPiece model, a regex it does not know
    wordpiece = os.path.join(w, "wordpiece")
    os.makedirs(wordpiece)
    with open(os.path.join(wordpiece, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "WordPiece", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "ByteLevel"}}')
    # A model folder whose tokenizer.json is a Unigram model (T5, ALBERT): the folder is refused at load.
    unigram = os.path.join(w, "unigram")
    os.makedirs(unigram)
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(ASSETS_DEFAULT, name)), os.path.join(unigram, name))
    with open(os.path.join(unigram, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0]]}}')
    odd_regex = os.path.join(w, "odd_regex")
    os.makedirs(odd_regex)
    with open(os.path.join(odd_regex, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Sequence", '
                '"pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\\\p{N}+"}, "behavior": "Isolated"}, '
                '{"type": "ByteLevel", "use_regex": false}]}}')
    script = os.path.join(w, "script.txt")
    with open(script, "w") as f:
        f.write("prompt The cat\nprefill\ndecode 3\n")
    bad_export_script = os.path.join(w, "bad_export.txt")
    with open(bad_export_script, "w") as f:
        f.write("prompt The cat\nprefill\nexport %s\n" % os.path.join(missing, "out"))
    bad_cache_script = os.path.join(w, "bad_cache.txt")
    with open(bad_cache_script, "w") as f:
        f.write("prompt-cache %s\nprompt The cat\nprefill\n" % notes)
    bad_word_script = os.path.join(w, "bad_word.txt")
    with open(bad_word_script, "w") as f:
        f.write("prompt The cat\ndecode x\n")
    unknown_script = os.path.join(w, "unknown.txt")
    with open(unknown_script, "w") as f:
        f.write("prompt The cat\nfly away\n")
    gen = ["generate", "--prompt", "The cat", "--max-new-tokens", "2"]
    quant_logits = os.path.join(w, "quant_logits.npy")  # must not be written by a refused run

    # (what, arguments, exit code, text the line must contain). Refused before any work: shown by the
    # outputs a refused run must not have written (checked below), never by a clock.
    cases = [
        ("generate --dump-logits into a missing folder", gen + ["--dump-logits", os.path.join(missing, "x.npy")], 2, missing),
        ("generate --trace into a missing folder", gen + ["--trace", os.path.join(missing, "t")], 2, missing),
        ("generate --trace into a folder of other files", gen + ["--trace", foreign], 2, foreign),
        ("generate --dump-logits over a file that is not .npy", gen + ["--dump-logits", notes], 2, notes),
        ("generate --prompt-cache into a missing folder", gen + ["--prompt-cache", os.path.join(missing, "p.kvp")], 2, missing),
        ("generate --prompt-cache over a file that is not a prompt cache", gen + ["--prompt-cache", notes], 2, notes),
        ("generate --prompt-cache-ro of a file that is not a prompt cache (an input)", gen + ["--prompt-cache-ro", notes], 1, notes),
        ("generate text prompt, model without tokenizer", ["generate", "--model", no_tokenizer, "--prompt", "The cat"], 2, no_tokenizer),
        ("generate --system text, model without tokenizer",
         ["generate", "--model", no_tokenizer, "--prompt-ids", "1,2", "--system", "x"], 2, "--system"),
        ("generate unknown token id", ["generate", "--prompt-ids", "1,99999"], 2, "99999"),
        # Eviction under a budget (docs/engine.md "Eviction under a budget"): refused before any work.
        ("generate --evict with --kv-budget 0", gen + ["--evict", "h2o", "--kv-budget", "0"], 2, "budget"),
        ("generate --evict with a negative budget", gen + ["--evict", "snapkv", "--kv-budget", "-4"], 2, "budget"),
        ("generate --evict unknown policy", gen + ["--evict", "lru", "--kv-budget", "8"], 2, "lru"),
        ("generate --evict without --kv-budget", gen + ["--evict", "h2o"], 2, "--kv-budget"),
        ("generate --kv-budget without --evict", gen + ["--kv-budget", "8"], 2, "--evict"),
        ("generate --evict with --window", gen + ["--evict", "h2o", "--kv-budget", "8", "--window", "8"], 2, "--window"),
        ("generate --evict with --no-cache", gen + ["--evict", "h2o", "--kv-budget", "8", "--no-cache"], 2, "cache"),
        # oracle-off asked for by name is the full cache: a window or no cache would make it something else
        ("generate --evict oracle-off with --window", gen + ["--evict", "oracle-off", "--window", "8"], 2,
         "--evict oracle-off keeps every position, a window hides all but the last ones: leave out --window"),
        ("generate --evict oracle-off with --no-cache", gen + ["--evict", "oracle-off", "--no-cache"], 2,
         "--evict oracle-off keeps every row of the KV cache, and there is no cache: leave out --no-cache"),
        ("generate --evict-pool even", gen + ["--evict", "snapkv", "--kv-budget", "8", "--evict-pool", "4"], 2, "odd"),
        # Quantized K/V (docs/engine.md "Quantized K/V"): refused before anything is computed or written.
        ("generate --kv-quant unknown format", gen + ["--kv-quant", "int3"], 2, "'int3'"),
        ("generate --kv-group that does not divide head_dim",
         gen + ["--kv-quant", "int4", "--kv-group", "5", "--dump-logits", quant_logits], 2, "does not divide head_dim"),
        ("generate --kv-group 0", gen + ["--kv-quant", "int4", "--kv-group", "0"], 2, "--kv-group must be >= 1, got 0"),
        ("generate --kv-residual below 0", gen + ["--kv-quant", "int4", "--kv-residual", "-1"], 2,
         "--kv-residual must be >= 0, got -1"),
        ("generate --kv-quant int4 with a window", gen + ["--kv-quant", "int4", "--window", "8"], 2,
         "--kv-quant int4 groups keys of consecutive positions and keeps them all: leave out --window"),
        ("generate --kv-quant with the paged cache", gen + ["--kv-quant", "int8", "--block-size", "16"], 2, "--block-size"),
        ("generate --kv-quant with a prompt cache file",
         gen + ["--kv-quant", "fp8", "--prompt-cache", os.path.join(w, "quant.kvp")], 2, "--kv-quant"),
        ("generate missing model folder", ["generate", "--model", missing, "--prompt-ids", "1"], 1, missing),
        ("gui --screenshot into a missing folder",
         ["gui", "--script", script, "--screenshot", os.path.join(missing, "s.png")], 2, missing),
        ("gui --screenshot over a file that is not a PNG", ["gui", "--script", script, "--screenshot", notes], 2, notes),
        ("gui --layout-dump into a missing folder",
         ["gui", "--script", script, "--layout-dump", os.path.join(missing, "l.json")], 2, missing),
        ("gui script export into a missing folder", ["gui", "--script", bad_export_script], 2, missing),
        ("gui script prompt-cache over a file that is not one", ["gui", "--script", bad_cache_script], 2, notes),
        ("gui script with a bad argument points to gui --help", ["gui", "--script", bad_word_script], 2, "gui --help"),
        ("gui script with an unknown command points to gui --help", ["gui", "--script", unknown_script], 2, "gui --help"),
        ("gui missing script", ["gui", "--script", os.path.join(missing, "s.txt")], 1, missing),
        ("bench --chart into a missing folder", ["bench", "--chart", os.path.join(missing, "c.png")], 2, missing),
        ("bench --chart over a file that is not a PNG", ["bench", "--chart", notes], 2, notes),
        ("bench --sharing --chart into a missing folder",
         ["bench", "--sharing", "--chart", os.path.join(missing, "c.png")], 2, missing),
        ("bench --gpt2-shape --work below a missing folder",
         ["bench", "--gpt2-shape", "--work", os.path.join(missing, "m")], 2, missing),
        ("bench --shape unknown", ["bench", "--shape", "gpt3"], 2, "'gpt3'"),
        ("bench --shape beside --model", ["bench", "--shape", "gpt2", "--model", ASSETS_DEFAULT], 2, "give one"),
        ("bench --work without --shape", ["bench", "--work", os.path.join(w, "m")], 2, "--shape"),
        ("bench --matmul --dtype f16", ["bench", "--matmul", "--dtype", "f16"], 2, "'f16'"),
        ("bench --matmul --rows 0", ["bench", "--matmul", "--rows", "0"], 2, "--rows"),
        ("bench --matmul over 2 GiB", ["bench", "--matmul", "--k", "65536", "--n", "1048576"], 2, "2 GiB"),
        ("bench --matmul K not whole blocks", ["bench", "--matmul", "--k", "200", "--dtype", "q4_k"], 2, "multiple of a Q4_K block"),
        ("bench --work over a model folder kvscope did not write", ["bench", "--shape", "smollm2-135m", "--work", ASSETS_DEFAULT],
         2, "did not write"),
        ("train --out below a missing folder", ["train", "--out", os.path.join(missing, "m")], 2, missing),
        ("train --out into a folder of other files", ["train", "--out", foreign], 2, foreign),
        ("train --loss-png over a file that is not a PNG",
         ["train", "--out", os.path.join(w, "trained"), "--loss-png", notes], 2, notes),
        ("inspect missing model folder", ["inspect", "--model", missing], 1, missing),
        ("tokenize missing model folder", ["tokenize", "--model", missing, "--text", "x"], 1, missing),
        # A folder without tokenizer files: the same refusal (exit 2) as generate --prompt TEXT gives.
        ("tokenize on a model without tokenizer", ["tokenize", "--model", no_tokenizer, "--text", "x"], 2, no_tokenizer),
        ("detokenize on a model without tokenizer", ["detokenize", "--model", no_tokenizer, "--ids", "1"], 2, no_tokenizer),
        ("tokenize with a WordPiece tokenizer.json", ["tokenize", "--model", wordpiece, "--text", "x"], 1,
         'model type "WordPiece" is not supported'),
        ("tokenize with a Unigram tokenizer.json", ["tokenize", "--model", unigram, "--text", "x"], 1,
         'model type "Unigram" is not supported'),
        ("generate on a folder with a Unigram tokenizer.json",
         ["generate", "--model", unigram, "--prompt-ids", "1,2", "--dump-logits", os.path.join(w, "unigram.npy")], 1,
         'model type "Unigram" is not supported'),
        ("tokenize with an unknown Split regex", ["tokenize", "--model", odd_regex, "--text", "x"], 1,
         "Split regex"),
        ("tokenize missing input file", ["tokenize", "--file", os.path.join(missing, "in.txt")], 1, missing),
        ("tokenize two inputs", ["tokenize", "--text", "a", "--file", notes], 2, "exactly one"),
        ("detokenize unknown id", ["detokenize", "--ids", "99999"], 2, "99999"),
        ("heads with --prompts 0", ["heads", "--prompts", "0"], 2, "--prompts"),
        ("heads on a model without tokenizer", ["heads", "--model", no_tokenizer], 2, no_tokenizer),
        ("unknown option", ["inspect", "--no-such"], 2, "--no-such"),
        # Figures for papers: --format png|svg and --scale 1..8 (PNG only), checked before any work.
        ("generate --format bmp", ["generate", "--prompt", "a", "--trace", os.path.join(w, "t1"), "--format", "bmp"],
         2, "--format"),
        ("generate --scale 0", ["generate", "--prompt", "a", "--trace", os.path.join(w, "t2"), "--scale", "0"],
         2, "--scale"),
        ("generate --scale 9", ["generate", "--prompt", "a", "--trace", os.path.join(w, "t3"), "--scale", "9"],
         2, "--scale"),
        ("generate --scale two", ["generate", "--prompt", "a", "--trace", os.path.join(w, "t4"), "--scale", "two"],
         2, "--scale"),
        ("generate --format svg --scale 2",
         ["generate", "--prompt", "a", "--trace", os.path.join(w, "t5"), "--format", "svg", "--scale", "2"],
         2, "--scale"),
        ("generate --format without --trace", ["generate", "--prompt", "a", "--format", "svg"], 2, "--trace"),
        ("bench --chart over a file that is not an SVG", ["bench", "--chart", notes_svg], 2, notes_svg),
        ("bench --scale without --chart", ["bench", "--scale", "2"], 2, "--chart"),
        ("bench --dtype (it measures both)", ["bench", "--dtype", "bf16"], 2, "--dtype does not apply"),
        ("train --loss-png SVG with --scale",
         ["train", "--out", os.path.join(w, "trained_svg"), "--loss-png", os.path.join(w, "loss.svg"), "--scale", "2"],
         2, "--scale"),
        ("lab --chart into a missing folder", ["lab", "--chart", os.path.join(missing, "c.png")], 2, missing),
        ("lab --chart over a file that is not a PNG", ["lab", "--chart", notes], 2, notes),
        ("lab --scale without --chart", ["lab", "--scale", "2"], 2, "--chart"),
        ("lab unknown policy", ["lab", "--config", "policy=lru,budget=64"], 2, "unknown policy 'lru'"),
        ("lab budget 0", ["lab", "--config", "window=0"], 2, "budget must be >= 1"),
        ("lab unknown format", ["lab", "--config", "quant=int2"], 2, "unknown format 'int2'"),
        ("lab group not dividing head_dim", ["lab", "--config", "int4,g=5"], 2, "does not divide head_dim"),
        ("lab missing text file", ["lab", "--text", os.path.join(missing, "t.txt")], 1, missing),
        ("lab on a model without tokenizer", ["lab", "--model", no_tokenizer], 2, "--text-ids"),
        ("lab two configurations with one name", ["lab", "--config", "int8,name=a", "--config", "fp8,name=a"], 2,
         "--config 'fp8,name=a': the name 'a' is taken by 'int8,name=a'"),
        ("lab one configuration twice", ["lab", "--config", "int8", "--config", "full", "--config", "int8"], 2,
         "--config 'int8' is given twice"),
        ("lab bad value in a spec", ["lab", "--config", "window=8,sinks=x"], 2,
         "--config 'window=8,sinks=x': sinks wants a whole number, got 'x'"),
        ("generate --model a missing folder", gen + ["--model", missing], 1,
         "no such folder (--model wants a folder with config.json and model.safetensors, or a .gguf file)"),
        ("unknown command", ["no-such-command"], 2, "no-such-command"),
        ("--version with an argument", ["--version", "extra"], 2, "--version takes no arguments, got 'extra'"),
    ]
    env = dict(os.environ)
    env.pop("WAYLAND_DISPLAY", None)
    failures = []
    if a.no_gui:
        cases = [c for c in cases if c[1][0] != "gui"]
    for what, args, code, needle in cases:
        p = subprocess.run([a.kvscope] + args, capture_output=True, text=True, env=env, timeout=300)
        lines = p.stderr.splitlines()
        problems = []
        if p.returncode != code:
            problems.append(f"exit {p.returncode}, expected {code}")
        if len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(f"stderr is not one 'error: ...' line: {p.stderr[:300]!r}")
        elif needle not in lines[0]:
            problems.append(f"the line does not name {needle!r}")
        print(("FAIL: " if problems else "ok:   ") + what + ": " + (lines[0] if lines else "(no stderr)"))
        for pr in problems:
            failures.append(f"{what}: {pr}")
    for path in (quant_logits, os.path.join(w, "quant.kvp")):
        if os.path.exists(path):
            failures.append(f"{path} was written by a refused run")
    if os.path.exists(missing):
        failures.append(f"{missing} was created: kvscope must not create the folders above an output")
    for kept in (notes, notes_svg):
        if open(kept).read() != "my notes\n":
            failures.append(f"{kept} was overwritten")
    for t in ("t1", "t2", "t3", "t4", "t5", "trained_svg"):
        if os.path.exists(os.path.join(w, t)):
            failures.append(f"{t} was created although its options were refused")
    if sorted(os.listdir(foreign)) != ["chapter1.tex"]:
        failures.append(f"{foreign} was written into: {sorted(os.listdir(foreign))}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
