#!/usr/bin/python3
"""The command line's help and JSON say what they do (issue 13, item 10, command-line parts):

- `detokenize --help`'s example ids exist in the default vocabulary: the example runs, and its text
  tokenizes back to the same ids;
- `gui --help` lists every script command the parser accepts: each listed command is known to the parser
  (a script line with many arguments is not an "unknown command"), and the
  commands the README documents are all listed;
- `--model`'s help calls the tokenizer files optional; `inspect --json` names what "tokenizer" holds
  ({"files", "n_tokens"}, n_tokens = the entries of vocab.json; null without tokenizer files);
- `generate --json` holds the prompt text and every setting; without --max-new-tokens it generates the
  default `generate --help` states; `generate --trace` says where the files went.

    check_help_and_json.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

ASSETS_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "default")
README_SCRIPT_COMMANDS = ["prompt", "source", "prefill", "decode", "step", "run", "back", "reset", "pause", "cache",
                          "compare", "options", "model", "layer", "head", "view", "values", "scale", "rownorm",
                          "select", "show-step", "zoom", "export", "export-session", "frames", "measure", "heads",
                          "suffix", "sequence", "memory-json", "prompt-cache", "attention", "attention-json"]


def run(kvscope, args, env=None, ok=True):
    p = subprocess.run([kvscope] + args, capture_output=True, text=True, env=env)
    if ok and p.returncode != 0:
        raise SystemExit(f"FAIL: kvscope {' '.join(args)}: exit {p.returncode}: {p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-gui", action="store_true", help="kvscope was built without the window: skip gui --help")
    a = ap.parse_args()
    w = os.path.abspath(a.work)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    k = a.kvscope
    failures = []

    # detokenize's example
    m = re.search(r"e\.g\. ([0-9,]+)", run(k, ["detokenize", "--help"]).stdout)
    if not m:
        failures.append("detokenize --help shows no example ids")
    else:
        ids = m.group(1).strip(",")
        p = run(k, ["detokenize", "--ids", ids], ok=False)
        if p.returncode != 0:
            failures.append(f"detokenize --ids {ids} (the help's example) fails: {p.stderr.strip()}")
        else:
            back = run(k, ["tokenize", "--text", p.stdout]).stdout.split()
            if ",".join(back) != ids:
                failures.append(f"the example's text {p.stdout!r} tokenizes to {back}, not {ids}")

    # gui --help lists the script commands, each known to the parser
    listed = []
    if not a.no_gui:
        env = dict(os.environ)
        env.pop("DISPLAY", None)
        env.pop("WAYLAND_DISPLAY", None)
        gui_help = run(k, ["gui", "--help"]).stdout
        section = gui_help.split("script commands", 1)
        listed = re.findall(r"^  ([a-z][a-z-]*)", section[1], re.M) if len(section) == 2 else []
        if not listed:
            failures.append("gui --help has no 'script commands' section")
        for name in README_SCRIPT_COMMANDS:
            if name not in listed:
                failures.append(f"gui --help does not list the script command '{name}'")
        script = os.path.join(w, "script.txt")
        for name in listed:
            with open(script, "w") as f:
                f.write(name + " " + " ".join(["1"] * 13) + "\n")  # more arguments than any command takes
            p = run(k, ["gui", "--script", script], env=env, ok=False)
            # Known commands fail on the argument count ("see kvscope gui --help"), or, for those that take the
            # rest of the line (prompt, source, suffix), parse and stop at the missing display.
            if "unknown command" in p.stderr or p.returncode != 2 or not ("gui --help" in p.stderr or "no display" in p.stderr):
                failures.append(f"script command '{name}' from gui --help: parser says {p.stderr.strip()!r}")

    # the tokenizer files are optional, and inspect --json says what "tokenizer" is
    if not re.search(r"tokenizer\s+files\s+\(tokenizer\.json,\s+or\s+vocab\.json\s+and\s+merges\.txt\)\s+are\s+optional",
                     run(k, ["inspect", "--help"]).stdout):
        failures.append("inspect --help does not call the tokenizer files (tokenizer.json, or vocab.json and merges.txt) optional")
    tok = json.loads(run(k, ["inspect", "--json"]).stdout).get("tokenizer")
    n_vocab = len(json.load(open(os.path.join(ASSETS_DEFAULT, "vocab.json"))))
    if not isinstance(tok, dict) or tok.get("n_tokens") != n_vocab or tok.get("files") != ["vocab.json", "merges.txt"]:
        failures.append(f"inspect --json 'tokenizer' is {tok!r}, expected files and n_tokens = {n_vocab}")
    bare = os.path.join(w, "no_tokenizer")
    os.makedirs(bare)
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(ASSETS_DEFAULT, name)), os.path.join(bare, name))
    bare_inspect = json.loads(run(k, ["inspect", "--json", "--model", bare]).stdout)
    if bare_inspect.get("tokenizer", "absent") is not None:
        failures.append(f"inspect --json without tokenizer files: 'tokenizer' is {bare_inspect.get('tokenizer')!r}, not null")
    # without a tokenizer there is no text: null, not "" (which would say the text was empty)
    bare_gen = json.loads(run(k, ["generate", "--model", bare, "--prompt-ids", "1,2", "--max-new-tokens", "2", "--json"]).stdout)
    for key in ("text", "prompt_text"):
        if bare_gen.get(key, "absent") is not None:
            failures.append(f"generate --json without tokenizer files: {key!r} is {bare_gen.get(key, '(absent)')!r}, not null")

    # generate --json: the prompt text and every setting; the default count
    m = re.search(r"--max-new-tokens N\s+tokens to generate \(default (\d+)\)", run(k, ["generate", "--help"]).stdout)
    default_n = int(m.group(1)) if m else None
    if default_n is None:
        failures.append("generate --help states no default for --max-new-tokens")
    prompt = "The cat sat"
    trace = os.path.join(w, "trace")
    p = run(k, ["generate", "--prompt", prompt, "--json", "--window", "8", "--trace", trace])
    out = json.loads(p.stdout)
    if out.get("prompt_text") != prompt:
        failures.append(f"generate --json prompt_text is {out.get('prompt_text')!r}, not {prompt!r}")
    settings = out.get("settings", {})
    want = {"max_new_tokens": default_n, "cache": True, "window": 8, "sinks": 0, "sink_positions": "text", "prefill_chunk": 0, "block_size": 0,
            "share_prefix": False, "system": None, "prompt_cache": None, "prompt_cache_read_only": False,
            "allow_special": False, "dtype": "f32", "trace": trace, "dump_logits": None}
    for key, value in want.items():
        if key not in settings or settings[key] != value:
            failures.append(f"generate --json settings.{key} is {settings.get(key, '(absent)')!r}, expected {value!r}")
    sampling = settings.get("sampling", {})
    for key in ("mode", "temperature", "top_k", "top_p", "seed"):
        if key not in sampling:
            failures.append(f"generate --json settings.sampling lacks {key}")
    for key in ("model", "threads"):
        if key not in settings:
            failures.append(f"generate --json settings lacks {key}")
    if default_n is not None and len(out.get("generated_ids", [])) != default_n:
        failures.append(f"generate without --max-new-tokens made {len(out.get('generated_ids', []))} tokens, "
                        f"the help says {default_n}")
    if trace not in p.stderr or "trace.json" not in p.stderr:
        failures.append(f"generate --trace does not say where the files went: {p.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"ok: detokenize example, {len(listed)} script commands in gui --help, inspect and generate JSON")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
