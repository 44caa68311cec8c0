#!/usr/bin/python3
"""Every file kvscope reads has a size limit checked before reading, and only regular files are read
(issue 41, "nothing lost, nothing silent"): FIFOs, devices and folders where a file is expected, and
files or stdin streams over their limit (core/io/read_file.h), each end in one stderr line 'error: ...'
and exit 1 (a file that cannot be read, core/base/errors.h) -- never a hang, never a process the kernel
kills for its memory.

Each run has an address-space limit of 2 GiB (RLIMIT_AS, so reading /dev/zero without a bound fails
fast instead of taking the machine's memory) and a timeout that turns a hang (opening a FIFO blocks until
a writer comes, and none does) into a failure. The oversized files are sparse (truncate), so they cost no
disk.

    check_bounded_inputs.py --kvscope BIN --work DIR [--no-gui]
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# GPT-2 style: config.json, model.safetensors, vocab.json, merges.txt
DEFAULT = os.path.normpath(os.path.join(HERE, "..", "..", "assets", "default"))
MEMORY_LIMIT = 2 << 30
NO_MEMORY_LIMIT = "--no-memory-limit" in sys.argv  # a sanitizer build: its shadow memory needs more
TIMEOUT = 60                                   # seconds; only a hang comes near it

failures = []


def limit_memory():
    if NO_MEMORY_LIMIT:
        return
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(kvscope, args, stdin=subprocess.DEVNULL, timeout=TIMEOUT):
    return subprocess.run([kvscope] + args, stdin=stdin, capture_output=True, text=True, errors="replace",
                          timeout=timeout, preexec_fn=limit_memory)


def folder(w, name, replace, kind):
    """assets/default with the file `replace` swapped for a FIFO, a link to /dev/zero, a folder or a sparse file."""
    d = os.path.join(w, name)
    os.makedirs(d)
    for f in os.listdir(DEFAULT):
        if f != replace:
            os.symlink(os.path.join(DEFAULT, f), os.path.join(d, f))
    p = os.path.join(d, replace)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero":
        os.symlink("/dev/zero", p)
    elif kind == "folder":
        os.makedirs(p)
    else:  # a size: a sparse file of that many bytes
        with open(p, "wb") as f:
            f.truncate(kind)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-gui", action="store_true", help="kvscope was built without the window: skip gui cases")
    ap.add_argument("--no-memory-limit", action="store_true", help="run without the 2 GiB limit (sanitizer builds)")
    ap.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds a run may take before it counts as a hang")
    a = ap.parse_args()
    w = os.path.abspath(a.work)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)

    # The limit leaves room for real work: the default model loads and runs under it.
    r = run(a.kvscope, ["tokenize", "--text", "The cat sat"])
    if r.returncode != 0:
        print("FAIL: kvscope does not run under the %d GiB limit: %s" % (MEMORY_LIMIT >> 30, r.stderr.strip()), file=sys.stderr)
        return 1

    fifo = os.path.join(w, "fifo.txt")
    os.mkfifo(fifo)
    fifo_turns = os.path.join(w, "turns.jsonl")
    os.mkfifo(fifo_turns)
    fifo_script = os.path.join(w, "script.txt")
    os.mkfifo(fifo_script)
    fifo_cache = os.path.join(w, "cache.kvp")
    os.mkfifo(fifo_cache)
    big_text = os.path.join(w, "big.txt")
    with open(big_text, "wb") as f:
        f.truncate(3 << 30)
    a_folder = os.path.join(w, "a_folder")
    os.makedirs(a_folder)

    config_fifo = folder(w, "config_fifo", "config.json", "fifo")
    weights_fifo = folder(w, "weights_fifo", "model.safetensors", "fifo")
    vocab_fifo = folder(w, "vocab_fifo", "vocab.json", "fifo")
    merges_zero = folder(w, "merges_zero", "merges.txt", "zero")
    config_zero = folder(w, "config_zero", "config.json", "zero")
    config_folder = folder(w, "config_folder", "config.json", "folder")
    weights_folder = folder(w, "weights_folder", "model.safetensors", "folder")
    config_big = folder(w, "config_big", "config.json", 3 << 30)
    vocab_big = folder(w, "vocab_big", "vocab.json", 1 << 30)
    tokenizer_json_fifo = folder(w, "tokenizer_json_fifo", "tokenizer.json", "fifo")
    # tokenizer_config.json is read beside a tokenizer.json: a four-token one is enough for tokenize
    tokenizer_config_fifo = os.path.join(w, "tokenizer_config_fifo")
    os.makedirs(tokenizer_config_fifo)
    with open(os.path.join(tokenizer_config_fifo, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "x": 3}, "merges": ["a b"]}, '
                '"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, "decoder": {"type": "ByteLevel"}}')
    os.mkfifo(os.path.join(tokenizer_config_fifo, "tokenizer_config.json"))
    # chat reads stdin only once the model and its template loaded: check_chat.py's Llama 3 chat folder
    sys.path.insert(0, HERE)
    from check_chat import make_chat_folder
    chat_model = make_chat_folder(w, "llama3")
    # A sharded checkpoint whose index is a FIFO (model.safetensors absent, so the index is read).
    index_fifo = os.path.join(w, "index_fifo")
    os.makedirs(index_fifo)
    for f in ("config.json", "vocab.json", "merges.txt"):
        os.symlink(os.path.join(DEFAULT, f), os.path.join(index_fifo, f))
    os.mkfifo(os.path.join(index_fifo, "model.safetensors.index.json"))

    def tok(model):
        return ["tokenize", "--model", model, "--text", "x"]

    # (what, arguments, stdin, exit code, text the error line must contain)
    cases = [
        ("config.json is a FIFO", ["inspect", "--model", config_fifo], None, 1, "config.json: is a FIFO"),
        ("model.safetensors is a FIFO", ["inspect", "--model", weights_fifo], None, 1, "model.safetensors: is a FIFO"),
        ("the safetensors index is a FIFO", ["inspect", "--model", index_fifo], None, 1,
         "model.safetensors.index.json: is a FIFO"),
        ("tokenizer.json is a FIFO", tok(tokenizer_json_fifo), None, 1, "tokenizer.json: is a FIFO"),
        ("tokenizer_config.json is a FIFO", ["tokenize", "--model", tokenizer_config_fifo, "--text", "x"], None, 1,
         "tokenizer_config.json: is a FIFO"),
        ("vocab.json is a FIFO", tok(vocab_fifo), None, 1, "vocab.json: is a FIFO"),
        ("merges.txt is /dev/zero", tok(merges_zero), None, 1, "merges.txt: is a character device"),
        ("tokenize --file FIFO", ["tokenize", "--file", fifo], None, 1, fifo + ": is a FIFO"),
        ("tokenize --jsonl FIFO", ["tokenize", "--jsonl", fifo], None, 1, fifo + ": is a FIFO"),
        ("lab --text FIFO", ["lab", "--text", fifo], None, 1, fifo + ": is a FIFO"),
        ("chat --turns FIFO", ["chat", "--turns", fifo_turns], None, 1, fifo_turns + ": is a FIFO"),
        ("generate --prompt-cache-ro FIFO", ["generate", "--prompt", "a", "--prompt-cache-ro", fifo_cache], None, 1,
         fifo_cache + ": is a FIFO"),
        ("tokenize --file /dev/zero", ["tokenize", "--file", "/dev/zero"], None, 1, "/dev/zero: is a character device"),
        ("lab --text /dev/zero", ["lab", "--text", "/dev/zero"], None, 1, "/dev/zero: is a character device"),
        ("config.json linked to /dev/zero", ["inspect", "--model", config_zero], None, 1,
         "config.json: is a character device"),
        ("tokenize --file - from /dev/zero", ["tokenize", "--file", "-"], "/dev/zero", 1,
         "stdin: holds more than the 256 MiB a text input may have"),
        ("tokenize --jsonl - from /dev/zero", ["tokenize", "--jsonl", "-"], "/dev/zero", 1, "the 256 MiB a text input"),
        ("chat from /dev/zero on stdin", ["chat", "--model", chat_model], "/dev/zero", 1,
         "stdin: holds more than the 256 MiB a text input may have"),
        ("config.json is a folder", ["inspect", "--model", config_folder], None, 1, "config.json: is a folder"),
        ("model.safetensors is a folder", ["inspect", "--model", weights_folder], None, 1,
         "model.safetensors: is a folder"),
        ("tokenize --file folder", ["tokenize", "--file", a_folder], None, 1, a_folder + ": is a folder"),
        ("lab --text folder", ["lab", "--text", a_folder], None, 1, a_folder + ": is a folder"),
        ("chat --turns folder", ["chat", "--turns", a_folder], None, 1, a_folder + ": is a folder"),
        ("config.json of 3 GiB", ["inspect", "--model", config_big], None, 1,
         "config.json: 3 GiB is more than the 16 MiB a config file may have"),
        ("vocab.json of 1 GiB", tok(vocab_big), None, 1, "vocab.json: 1 GiB is more than the 256 MiB a tokenizer file"),
        ("tokenize --file of 3 GiB", ["tokenize", "--file", big_text], None, 1,
         big_text + ": 3 GiB is more than the 256 MiB a text input may have"),
        ("lab --text of 3 GiB", ["lab", "--text", big_text], None, 1, big_text + ": 3 GiB is more than the 256 MiB"),
        ("chat --turns of 3 GiB", ["chat", "--turns", big_text], None, 1, big_text + ": 3 GiB is more than the 256 MiB"),
    ]
    if not a.no_gui:
        cases += [
            ("gui --script FIFO", ["gui", "--script", fifo_script], None, 1, fifo_script + ": is a FIFO"),
            ("gui --script of 3 GiB", ["gui", "--script", big_text], None, 1, big_text + ": 3 GiB is more than the 16 MiB"),
        ]
    failed_cases = set()
    for what, args, stdin, code, needle in cases:
        n_before = len(failures)
        stdin_file = open(stdin, "rb") if stdin else None
        try:
            r = run(a.kvscope, args, stdin=stdin_file or subprocess.DEVNULL, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            failures.append("%s: no answer in %g s (a hang)" % (what, a.timeout))
            failed_cases.add(what)
            continue
        finally:
            if stdin_file:
                stdin_file.close()
        lines = r.stderr.splitlines()
        if r.returncode < 0:
            failures.append("%s: killed by signal %d (%r)" % (what, -r.returncode, lines[-3:]))
            failed_cases.add(what)
            continue
        if r.returncode != code:
            failures.append("%s: exit %d, expected %d (%r)" % (what, r.returncode, code, lines[-3:]))
        if len(lines) != 1 or not lines[0].startswith("error: "):
            failures.append("%s: expected one stderr line 'error: ...', got %r" % (what, lines[:5]))
        elif needle not in lines[0]:
            failures.append("%s: the error does not say %r: %r" % (what, needle, lines[0]))
        if len(failures) > n_before:
            failed_cases.add(what)
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    if failures:
        print("%d of %d cases failed" % (len(failed_cases), len(cases)), file=sys.stderr)
        return 1
    print("bounded inputs: all %d cases passed" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
