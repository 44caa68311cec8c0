#!/usr/bin/python3
"""A GGUF file where a folder would go, for the commands the GGUF unit tests do not run (issue 45).

A random Llama folder with a tokenizer and ChatML template (tools/make_llama_model.py), converted by the
independent numpy writer (tests/reference/gguf_reference.py convert) to Q8_0 and to Q4_K (the K type needs
rows of 256: hidden 256). On each file:
  (a) `inspect --json`: file_bits_per_weight == the bytes the writer laid out x 8 / the weights, computed here
      from the file's own tensor infos (a small reader below) and ggml's block sizes; each tensor's file_type
      is the type the writer used; the text report's "file types" line names them
  (b) `chat-template --model FILE.gguf` == python3-jinja2 rendering the folder's tokenizer_config.json template
      (as transformers sets it up), with and without the generation prompt; --json ids == the folder's
  (c) a prompt cache file written by one `generate --model FILE.gguf --prompt-cache F` run and read back by a
      second: the second loads the prompt's positions and produces the same tokens
  (d) a file without tokenizer.chat_template: `chat-template` refuses it in one line (exit 2)

    check_gguf_file.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(REPO, "tools", "make_llama_model.py")
WRITER = os.path.join(REPO, "tests", "reference", "gguf_reference.py")
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import chat_template_reference  # noqa: E402  (jinja2, as transformers sets it up)

# ggml type number: (name, weights per block, bytes per block), from ggml's block structs
BLOCKS = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 14: ("Q6_K", 256, 210),
          30: ("BF16", 1, 2)}
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def tensor_infos(path):
    """(name, ggml type, element count) of every tensor in a GGUF v3 file: header, skip the metadata, infos."""
    data = open(path, "rb").read()
    at = 4
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, at)
    at += 20
    assert data[:4] == b"GGUF" and version == 3

    def string():
        nonlocal at
        (n,) = struct.unpack_from("<Q", data, at)
        at += 8 + n
        return data[at - n:at].decode()

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(t):
        nonlocal at
        if t == 8:
            string()
        elif t == 9:
            (inner, n) = struct.unpack_from("<IQ", data, at)
            at += 12
            for _ in range(n):
                value(inner)
        else:
            at += sizes[t]

    for _ in range(n_kv):
        string()
        (t,) = struct.unpack_from("<I", data, at)
        at += 4
        value(t)
    out = []
    for _ in range(n_tensors):
        name = string()
        (n_dims,) = struct.unpack_from("<I", data, at)
        at += 4
        dims = struct.unpack_from("<%dQ" % n_dims, data, at)
        at += 8 * n_dims
        (t, _offset) = struct.unpack_from("<IQ", data, at)
        at += 12
        count = 1
        for d in dims:
            count *= d
        out.append((name, t, count))
    return out


def check_inspect(kvscope, gguf, label):
    infos = tensor_infos(gguf)
    weights = sum(c for _, _, c in infos)
    bits = sum(c // BLOCKS[t][1] * BLOCKS[t][2] * 8 for _, t, c in infos) / weights
    r = run([kvscope, "inspect", "--model", gguf, "--json"])
    check(r.returncode == 0, "%s: inspect --json exit %d: %s" % (label, r.returncode, r.stderr.strip()))
    if r.returncode != 0:
        return
    j = json.loads(r.stdout)
    got = j.get("file_bits_per_weight")
    check(got is not None and abs(got - bits) < 1e-9 * bits,
          "%s: file_bits_per_weight %r, the file's tensor infos give %r" % (label, got, bits))
    by_name = {t.get("file_name"): t.get("file_type") for t in j.get("tensors", [])}
    for name, t, _ in infos:
        check(by_name.get(name) == BLOCKS[t][0], "%s: %s file_type %r, the file says %s" % (label, name, by_name.get(name), BLOCKS[t][0]))
    r = run([kvscope, "inspect", "--model", gguf])
    line = next((x for x in r.stdout.splitlines() if x.startswith("file types")), "")
    check("%.2f bits per weight" % bits in line and all(BLOCKS[t][0] in line for _, t, _ in infos),
          "%s: inspect's file types line %r (expected %.2f bits and every type)" % (label, line, bits))


def check_template(kvscope, folder, gguf, work, label):
    tc = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    template = chat_template_reference.environment().from_string(tc["chat_template"])
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "What is a KV cache?"},
                {"role": "assistant", "content": "Saved keys and values."}, {"role": "user", "content": "Why?"}]
    path = os.path.join(work, "conversation.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(messages, f)
    for gen in (False, True):
        want = template.render(messages=messages, add_generation_prompt=gen, bos_token=tc["bos_token"],
                               eos_token=tc["eos_token"])
        r = run([kvscope, "chat-template", "--model", gguf, "--messages", path] + (["--add-generation-prompt"] if gen else []))
        check(r.returncode == 0 and r.stdout == want,
              "%s: chat-template --model FILE.gguf (generation prompt %s) exit %d: %r, jinja2 gives %r %s" %
              (label, gen, r.returncode, r.stdout, want, r.stderr.strip()))
    got = run([kvscope, "chat-template", "--model", gguf, "--messages", path, "--json"])
    want = run([kvscope, "chat-template", "--model", folder, "--messages", path, "--json"])
    check(got.returncode == 0 and want.returncode == 0 and json.loads(got.stdout)["ids"] == json.loads(want.stdout)["ids"],
          "%s: chat-template --json ids from the file differ from the folder's: %s %s" % (label, got.stderr.strip(), want.stderr.strip()))


def check_prompt_cache(kvscope, gguf, work, label):
    cache = os.path.join(work, label + ".kvc")
    if os.path.exists(cache):
        os.remove(cache)
    prompt = ",".join(str(7 + 13 * i % 400) for i in range(24))
    runs = []
    for _ in range(2):
        r = run([kvscope, "generate", "--model", gguf, "--prompt-ids", prompt, "--max-new-tokens", "6",
                 "--prompt-cache", cache, "--json"])
        check(r.returncode == 0, "%s: generate --prompt-cache exit %d: %s" % (label, r.returncode, r.stderr.strip()))
        if r.returncode != 0:
            return
        runs.append(json.loads(r.stdout))
    first, second = (x["kv"]["prompt_cache"] for x in runs)
    check(first["written"] and first["loaded_positions"] == 0, "%s: first run's prompt cache: %s" % (label, first))
    check(second["loaded_positions"] == 23, "%s: second run loaded %s positions, the prompt's 23 expected: %s" %
          (label, second.get("loaded_positions"), second))
    check(runs[0]["generated_ids"] == runs[1]["generated_ids"],
          "%s: tokens differ with the cache file loaded: %s vs %s" % (label, runs[0]["generated_ids"], runs[1]["generated_ids"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    folder = os.path.join(a.work, "llama")
    r = run([TOOL, folder, "--vocab", "600", "--hidden", "256", "--inner", "256", "--layers", "2", "--heads", "4",
             "--kv-heads", "2", "--positions", "128", "--seed", "45"])
    if r.returncode != 0:
        raise SystemExit("FAIL: make_llama_model.py: " + r.stderr)
    for t in ("Q8_0", "Q4_K"):
        gguf = os.path.join(a.work, "llama-%s.gguf" % t)
        r = run([sys.executable, WRITER, "convert", folder, gguf, t])
        if r.returncode != 0:
            raise SystemExit("FAIL: gguf_reference.py convert %s: %s" % (t, r.stderr))
        check_inspect(a.kvscope, gguf, t)
        check_template(a.kvscope, folder, gguf, a.work, t)
        check_prompt_cache(a.kvscope, gguf, a.work, t)
    # The same model without its template: the writer reads tokenizer_config.json, so drop the key there.
    bare = os.path.join(a.work, "bare")
    shutil.copytree(folder, bare)
    tc = json.load(open(os.path.join(bare, "tokenizer_config.json")))
    tc.pop("chat_template")
    json.dump(tc, open(os.path.join(bare, "tokenizer_config.json"), "w"))
    gguf = os.path.join(a.work, "bare.gguf")
    r = run([sys.executable, WRITER, "convert", bare, gguf, "Q8_0"])
    if r.returncode != 0:
        raise SystemExit("FAIL: gguf_reference.py convert bare: " + r.stderr)
    r = run([a.kvscope, "chat-template", "--model", gguf, "--messages", os.path.join(a.work, "conversation.json")])
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "chat_template" in lines[0] and r.stdout == "",
          "a file without tokenizer.chat_template: chat-template exit %d, stderr %r" % (r.returncode, r.stderr))
    for f in failures[:20]:
        print("FAIL:", f)
    if failures:
        return 1
    print("ok: inspect's bits per weight and types, chat-template, prompt cache on GGUF files (Q8_0, Q4_K)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
