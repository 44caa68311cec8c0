"""What the scripted GUI checks share: their arguments, failing with one line, running a command, and
running the window on a script under Xvfb to read its final frame's --layout-dump."""
import argparse
import json
import os
import shutil
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, timeout=240):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail("command failed (%d): %s\nstdout: %s\nstderr: %s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p


def arguments():
    """--kvscope BIN --assets DIR --work DIR; the work folder emptied; xvfb-run required."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    if shutil.which("xvfb-run") is None:
        fail("xvfb-run not found (apt install xvfb)")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    return a


def window(kvscope, model, work, name, size, lines):
    """Runs `lines` as a script on `model` at size (w, h); returns the final frame's layout dump.
    NAME.txt, NAME.json and NAME.png are left in `work`."""
    script = os.path.join(work, name + ".txt")
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    dump = os.path.join(work, name + ".json")
    w, h = size
    run(["xvfb-run", "-a", "-s", "-screen 0 %dx%dx24" % (w + 100, h + 100), kvscope, "gui", "--model", model,
         "--script", script, "--size", "%dx%d" % size, "--layout-dump", dump,
         "--screenshot", os.path.join(work, name + ".png")])
    with open(dump) as f:
        return json.load(f)


def prompt_length(kvscope, model, text):
    """Tokens `kvscope tokenize` gives for text with the model's tokenizer."""
    return len(run([kvscope, "tokenize", "--model", model, "--text", text], timeout=60).stdout.split())
