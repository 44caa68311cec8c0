#!/usr/bin/python3
"""The window and `kvscope generate` share one default for max new tokens (issue 13, item 10): a scripted
window run to the end on a prompt makes as many tokens as `generate` does without --max-new-tokens.
The window's last step is read from `attention-json` (its query positions), compared with the CLI's
prompt and generated ids. Runs the window under xvfb-run; exits 77 (skipped) without it.

    check_gui_defaults.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

PROMPT = "The cat sat"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    if not shutil.which("xvfb-run"):
        print("SKIP: xvfb-run not found (apt install xvfb)")
        return 77
    w = os.path.abspath(a.work)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    cli = json.loads(subprocess.run([a.kvscope, "generate", "--prompt", PROMPT, "--json"], capture_output=True,
                                    text=True, check=True).stdout)
    n_prompt, n_new = len(cli["prompt_ids"]), len(cli["generated_ids"])
    out = os.path.join(w, "last_step.json")
    script = os.path.join(w, "script.txt")
    with open(script, "w") as f:
        f.write(f"prompt {PROMPT}\nrun end\nshow-step newest\nattention-json {out}\n")
    p = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1380x820x24", a.kvscope, "gui", "--script", script,
                        "--size", "1280x720"], capture_output=True, text=True, timeout=240)
    if p.returncode != 0 or not os.path.exists(out):
        print(f"FAIL: the scripted window: exit {p.returncode}: {p.stderr[-600:]}")
        return 1
    last = json.load(open(out))
    # The last decode step feeds generated token n_new - 1 (the last one is chosen, never fed back):
    # its query sits at position n_prompt + n_new - 2.
    want = n_prompt + n_new - 2
    got = last["query_positions"][-1]
    if got != want:
        print(f"FAIL: the window's last step queries position {got}; generate's default ({n_new} new tokens "
              f"after {n_prompt}) ends at {want}: the defaults differ")
        return 1
    print(f"ok: window and generate both stop after {n_new} new tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
