#!/usr/bin/python3
"""Issue 41 from the command line: nothing lost, nothing silent.

    check_numerics.py --kvscope BIN --assets DIR --work DIR

Every run has an address-space limit of 2 GiB (RLIMIT_AS).

Model folders are copies of assets/default (GPT-2 shape, F32, its 768-token tokenizer) and
assets/llama-gqa with one thing changed each:
  - a NaN / +inf in one weight: `generate` prints one stderr line naming the tensor and exits 1;
  - a degenerate config.json value: one line naming config.json and the key, exit 1;
  - 1.5e38 in token 7's embedding and in layer 1's two output biases (column 0), lm_head untied: only
    a row holding token 7 overflows float32 (1.5e38 * 3 > 3.4e38), in layer 1: one line naming the step
    and layer 1;
  - vocab_size 800 over the 768-token tokenizer, with lm_head.bias[790] = 1000 so greedy decoding picks
    the padded id 790 at every step: stdout, --json and the trace show "<id 790>", exit 0; detokenize says
    which ids are padding.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        tensors[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).copy()
    return tensors


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def variant(src, dst, edit_tensors=None, edit_config=None):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    if edit_config:
        with open(os.path.join(dst, "config.json")) as f:
            cfg = json.load(f)
        edit_config(cfg)
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    if edit_tensors:
        t = read_safetensors(os.path.join(dst, "model.safetensors"))
        edit_tensors(t)
        write_safetensors(os.path.join(dst, "model.safetensors"), t)
    return dst


MEMORY_LIMIT = 2 << 30  # the issue's `ulimit -v` of 2 GB: every run here fits in it
NO_MEMORY_LIMIT = "--no-memory-limit" in sys.argv  # a sanitizer build: its shadow memory needs more


def limit_memory():
    if NO_MEMORY_LIMIT:
        return
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(args):
    p = subprocess.run(args, capture_output=True, timeout=120, preexec_fn=limit_memory)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def one_line_error(args, code, must_contain, label):
    rc, out, err = run(args)
    lines = err.splitlines()
    check(rc == code, f"{label}: exit {rc}, wanted {code} (stderr: {err!r})")
    check(len(lines) == 1 and lines[0].startswith("error: "), f"{label}: stderr is not one 'error: ' line: {err!r}")
    for s in must_contain:
        check(s in err, f"{label}: stderr lacks {s!r}: {err!r}")
    check("Traceback" not in err and "terminate" not in err, f"{label}: crashed: {err!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-memory-limit", action="store_true", help="run without the 2 GiB limit (sanitizer builds)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    default = os.path.join(a.assets, "default")
    llama = os.path.join(a.assets, "llama-gqa")
    gen = lambda folder, *more: [a.kvscope, "generate", "--model", folder, *more]

    # 1. non-finite weights are refused at load, naming the tensor and the element
    for value, shown in ((np.nan, "NaN"), (np.inf, "+inf")):
        def poke(t, value=value):
            t["h.1.mlp.c_fc.weight"][3, 5] = value
        folder = variant(default, os.path.join(a.work, f"weight-{shown}"), edit_tensors=poke)
        one_line_error(gen(folder, "--prompt-ids", "1,2,3", "--max-new-tokens", "2"), 1,
                       ["tensor h.1.mlp.c_fc.weight holds " + shown + " at [3, 5]"], f"{shown} weight")

    # 2. degenerate config values are refused by key
    cases = [
        (default, "layer_norm_epsilon", 1e308),
        (default, "embedding_scale", 1e300),
        (llama, "rope_theta", 1e-300),
        (llama, "rms_norm_eps", 1e308),
    ]
    for src, key, value in cases:
        def edit(cfg, key=key, value=value):
            cfg[key] = value
        folder = variant(src, os.path.join(a.work, f"config-{key}"), edit_config=edit)
        one_line_error(gen(folder, "--prompt-ids", "1,2,3", "--max-new-tokens", "2"), 1,
                       ["config.json: " + key + " must be a finite number"], f"config {key}={value}")
    folder = variant(llama, os.path.join(a.work, "config-rope-factor"),
                     edit_config=lambda cfg: cfg.update(rope_scaling={"rope_type": "linear", "factor": 1e-300}))
    one_line_error(gen(folder, "--prompt-ids", "1,2,3", "--max-new-tokens", "2"), 1,
                   ["config.json: rope_scaling.factor must be a finite number from 1 to 10000"], "rope_scaling.factor")

    # 3. a step that overflows fails naming the step and the layer; never a token
    def overflow(t):
        t["lm_head.weight"] = t["wte.weight"].copy()  # untied: token 7's row must not reach the logits
        t["wte.weight"][7, 0] = 1.5e38
        t["h.1.attn.c_proj.bias"][0] = 1.5e38
        t["h.1.mlp.c_proj.bias"][0] = 1.5e38
    folder = variant(default, os.path.join(a.work, "overflow"), edit_tensors=overflow,
                     edit_config=lambda cfg: cfg.update(tie_word_embeddings=False))
    rc, out, err = run(gen(folder, "--prompt-ids", "1,2,3", "--max-new-tokens", "2"))
    check(rc == 0, f"overflow model without token 7: exit {rc}: {err}")
    one_line_error(gen(folder, "--prompt-ids", "1,7,3", "--max-new-tokens", "2"), 1,
                   ["step 0 (prefill, positions 0-2): layer 1 produced NaN or infinity; no token was sampled"],
                   "overflow in layer 1")
    one_line_error(gen(folder, "--prompt-ids", "1,7,3", "--max-new-tokens", "2", "--json"), 1,
                   ["layer 1 produced NaN or infinity"], "overflow in layer 1, --json")
    rc, out, err = run(gen(folder, "--prompt-ids", "1,7,3", "--max-new-tokens", "2", "--json"))
    check(out == b"", f"overflow --json printed a result: {out!r}")

    # 4. a padded vocabulary: ids the model has beyond the tokenizer show as <id N>
    def pad(t):
        rng = np.random.default_rng(41)
        wte = t["wte.weight"]
        t["wte.weight"] = np.concatenate([wte, rng.normal(0, 0.02, (800 - wte.shape[0], wte.shape[1]))]).astype("<f4")
        bias = np.zeros(800, dtype="<f4")
        bias[790] = 1000.0  # greedy picks 790: every other logit is far below 1000
        t["lm_head.bias"] = bias
    padded = variant(default, os.path.join(a.work, "padded"), edit_tensors=pad,
                     edit_config=lambda cfg: cfg.update(vocab_size=800, lm_head_bias=True))
    trace = os.path.join(a.work, "padded-trace")
    shutil.rmtree(trace, ignore_errors=True)
    rc, out, err = run(gen(padded, "--prompt", "The cat", "--max-new-tokens", "3"))
    check(rc == 0, f"padded generate: exit {rc}: {err}")
    check(out == b"The cat<id 790><id 790><id 790>\n", f"padded generate stdout: {out!r}")
    rc, out, err = run(gen(padded, "--prompt", "The cat", "--max-new-tokens", "3", "--json", "--trace", trace))
    check(rc == 0, f"padded generate --json: exit {rc}: {err}")
    if rc == 0:
        obj = json.loads(out)
        check(obj["generated_ids"] == [790, 790, 790], f"padded --json ids: {obj['generated_ids']}")
        check(obj["text"] == "<id 790><id 790><id 790>", f"padded --json text: {obj['text']!r}")
        with open(os.path.join(trace, "trace.json")) as f:
            steps = json.load(f)["steps"]
        chosen = [s.get("chosen_text") for s in steps]
        check(chosen == ["<id 790>"] * 3, f"trace chosen_text: {chosen}")
        check(steps[-1].get("text") == "<id 790>", f"trace last step text: {steps[-1].get('text')!r}")
    # detokenize: with the model's config.json it knows 790 is padding and 900 is outside
    rc, out, err = run([a.kvscope, "detokenize", "--model", padded, "--ids", "51,790"])
    _, cat, _ = run([a.kvscope, "detokenize", "--model", default, "--ids", "51"])
    check(rc == 0 and out == cat + b"<id 790>", f"detokenize padded: exit {rc}, {out!r}")
    check("790" in err and "padding of the model's 800-id embedding" in err and len(err.splitlines()) == 1,
          f"detokenize padded stderr: {err!r}")
    one_line_error([a.kvscope, "detokenize", "--model", padded, "--ids", "51,900"], 2,
                   ["token id 900 is not in the vocabulary (ids 0..799"], "detokenize beyond the model")
    tok_only = os.path.join(a.work, "tokenizer-only")
    shutil.rmtree(tok_only, ignore_errors=True)
    os.makedirs(tok_only)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(default, name), tok_only)
    rc, out, err = run([a.kvscope, "detokenize", "--model", tok_only, "--ids", "51,800"])
    check(rc == 0 and out == cat + b"<id 800>", f"detokenize without config: exit {rc}, {out!r}")
    check("padded vocabulary or out of range" in err, f"detokenize without config stderr: {err!r}")
    one_line_error([a.kvscope, "detokenize", "--model", tok_only, "--ids", "-1"], 2, ["-1"], "detokenize -1")

    if failures:
        for f in failures:
            print("FAIL:", f)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
