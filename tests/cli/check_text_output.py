#!/usr/bin/python3
"""`kvscope generate` prints real text: stdout, `--json` "text" and the trace's `trace.json` hold the bytes
`kvscope detokenize` writes for the same ids (a newline is a newline, not `\\x0a`).

    check_text_output.py --kvscope BIN --work DIR

The default model continues "The cat" with a newline within 8 greedy tokens, so the old escaped form
would differ.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

PROMPT = "The cat"


def run(args):
    p = subprocess.run(args, capture_output=True)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(args)}: exit {p.returncode}: {p.stderr.decode(errors='replace')}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    trace = os.path.join(a.work, "trace")
    shutil.rmtree(trace, ignore_errors=True)
    os.makedirs(a.work, exist_ok=True)
    gen = [a.kvscope, "generate", "--prompt", PROMPT, "--max-new-tokens", "8"]
    obj = json.loads(run(gen + ["--json", "--trace", trace]))
    ids = obj["generated_ids"]
    detok = lambda ids: run([a.kvscope, "detokenize", "--ids", ",".join(map(str, ids))])
    want = detok(ids)
    failures = []
    if b"\n" not in want:
        failures.append(f"the test needs a newline in the generated text; got {want!r} (pick another prompt)")
    if obj["text"].encode() != want or "text_hex" in obj:
        failures.append(f"--json text {obj['text']!r} != detokenize {want!r}")
    shown = run(gen)
    if shown != detok(obj["prompt_ids"]) + want + b"\n":
        failures.append(f"stdout {shown!r} != the prompt and generated text {detok(obj['prompt_ids']) + want!r}")
    steps = json.load(open(os.path.join(trace, "trace.json")))["steps"]
    joined = "".join(s["text"] for s in steps[1:])  # step 0 is the prefill: its text is the prompt
    if joined.encode() != detok(ids[:-1]):  # the last chosen token is not fed back
        failures.append(f"trace.json decode steps' text {joined!r} != detokenize {detok(ids[:-1])!r}")
    if failures:
        print("FAIL: " + "\n      ".join(failures))
        return 1
    print(f"ok: {want!r} in stdout, --json and trace.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
