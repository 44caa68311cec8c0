#!/usr/bin/python3
"""Sliding layers store only their window (issue 43, finding 2), in bytes, against config.json alone.

Two random folders of tools/make_llama_model.py: Gemma 3 (gemma3-tiny: 6 layers, sliding window 4, every
third layer full) and Mistral (every layer slides a window of 5). From config.json's values the test
computes each layer's window W_l (0 = full), the bytes of one position in one layer (2 x K/V heads x
head_dim x 4, float32) and, after N positions written C at a time, what the cache stores:

    sum over layers of min(N, held_l) x bytes per layer position,  held_l = W_l - 1 + C (sliding), N (full)

(Hugging Face's DynamicSlidingWindowLayer: W - 1 positions between steps, plus the chunk being written;
C is the last step's chunk: after a decode step 1, however large the prefill was).
It asserts that number against
  - `inspect --json --positions N --chunk C`: kv_bytes_held.bytes and .layer_positions;
  - `generate --json --prefill-chunk C`: kv.bytes_held and kv.layer_positions_held after the run's N
    positions (the prompt, then the new tokens but the last, which is sampled and not yet written; the
    last step a decode step, so C = 1 there whatever the prefill's chunk), and the positions per layer on
    generate's kv line;
  - `lab --json` (one position at a time, C = 1): the last entry of the full configuration's cache_bytes;
  - the paged cache and int4, which keep every position in every layer (llama.cpp's --swa-full): generate --json
    says why in kv.sliding_layers_keep_every_position and holds N positions per layer; the ring says null.
On today's main every layer stores every position and none of these equals the formula.

    check_sliding_storage.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402


def layer_windows(cfg):
    L = cfg["num_hidden_layers"]
    if cfg["model_type"] == "mistral":  # MistralConfig: every layer slides when sliding_window is set
        return [cfg["sliding_window"]] * L
    if "layer_types" in cfg:
        return [cfg["sliding_window"] if t == "sliding_attention" else 0 for t in cfg["layer_types"]]
    pattern = cfg["sliding_window_pattern"]  # Gemma3TextConfig: every pattern-th layer is full
    return [cfg["sliding_window"] if (i + 1) % pattern != 0 else 0 for i in range(L)]


def expected(cfg, n, chunk):
    per_layer_position = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
    held = [min(n, w - 1 + chunk) if w else n for w in layer_windows(cfg)]
    return held, sum(held) * per_layer_position


def run_json(cmd, failures):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"{' '.join(cmd[1:3])}: exit {p.returncode}: {p.stderr.strip()}")
        return {}, p
    return json.loads(p.stdout), p


def check_model(a, name, model, failures):
    cfg = json.load(open(os.path.join(model, "config.json")))
    if not any(layer_windows(cfg)):
        raise SystemExit(f"FAIL: {name}: the folder has no sliding layer")
    # inspect: at N positions written C at a time, and at the full context one at a time.
    for n, chunk in ((20, 1), (20, 6), (3, 1)):
        held, want = expected(cfg, n, chunk)
        j, _ = run_json([a.kvscope, "inspect", "--model", model, "--json", "--positions", str(n), "--chunk", str(chunk)],
                        failures)
        got = j.get("kv_bytes_held", {})
        if (got.get("bytes"), got.get("layer_positions")) != (want, held):
            failures.append(f"{name}: inspect N={n} C={chunk}: {got}, config.json gives {want} bytes, {held}")
    full = expected(cfg, cfg["max_position_embeddings"], 1)[1]
    if j.get("kv_bytes_full_context") != full:
        failures.append(f"{name}: inspect kv_bytes_full_context {j.get('kv_bytes_full_context')}, expected {full}")
    # generate: a prompt of 11 ids, 9 new tokens; prefilled whole and in chunks of 4.
    prompt = ",".join(str(5 + 7 * i) for i in range(11))
    new = 9
    n = 11 + new - 1
    for chunk in (11, 4):
        held, want = expected(cfg, n, 1)  # the last step decoded one token
        j, _ = run_json([a.kvscope, "generate", "--model", model, "--prompt-ids", prompt, "--max-new-tokens", str(new),
                         "--prefill-chunk", str(chunk), "--json"], failures)
        kv = j.get("kv", {})
        if (kv.get("bytes_held"), kv.get("layer_positions_held")) != (want, held):
            failures.append(f"{name}: generate --prefill-chunk {chunk}: kv.bytes_held {kv.get('bytes_held')} "
                            f"layer_positions_held {kv.get('layer_positions_held')}, config.json gives {want}, {held}")
        t = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt-ids", prompt, "--max-new-tokens", str(new),
                            "--prefill-chunk", str(chunk)], capture_output=True, text=True)
        want_line = "(positions per layer: %s)" % " ".join(str(x) for x in held)
        if not any(x.startswith("kv: sliding layers store only their window") and x.endswith(want_line)
                   for x in t.stderr.splitlines()):
            failures.append(f"{name}: generate's kv line does not end {want_line!r}: {t.stderr.strip()}")
    # The paged cache and int4 keep every position in every layer (one block table for all layers; key groups of
    # consecutive positions) and say so; the ring says nothing of the kind.
    all_layers = [n] * cfg["num_hidden_layers"]
    for extra, whole in (([], False), (["--block-size", "4"], True), (["--kv-quant", "int4", "--kv-group", "8"], True)):
        j, _ = run_json([a.kvscope, "generate", "--model", model, "--prompt-ids", prompt, "--max-new-tokens", str(new),
                         "--json"] + extra, failures)
        kv = j.get("kv", {})
        why = kv.get("sliding_layers_keep_every_position")
        if whole and (not why or kv.get("layer_positions_held") != all_layers):
            failures.append(f"{name}: generate {' '.join(extra)}: sliding_layers_keep_every_position {why!r}, "
                            f"layer_positions_held {kv.get('layer_positions_held')}, expected a reason and {all_layers}")
        if not whole and why is not None:
            failures.append(f"{name}: generate (ring): sliding_layers_keep_every_position {why!r}, expected null")
    # lab: one position at a time through the ids.
    ids = ",".join(str(3 + 11 * i % 250) for i in range(24))
    j, _ = run_json([a.kvscope, "lab", "--model", model, "--text-ids", ids, "--config", "full", "--json"], failures)
    runs = {r["name"]: r for r in j.get("configs", [])} if j else {}
    series = runs.get("full", {}).get("per_position", {}).get("cache_bytes")
    if not series:
        failures.append(f"{name}: lab --json has no cache_bytes for the full configuration: {list(runs)}")
    else:
        for i, got in enumerate(series):
            want = expected(cfg, i + 1, 1)[1]
            if got != want:
                failures.append(f"{name}: lab cache_bytes after {i + 1} positions {got}, config.json gives {want}")
                break


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    gemma = os.path.join(a.work, "gemma3")
    make_llama_model.write(gemma, **dict(make_llama_model.SHAPES["gemma3-tiny"], seed=43))
    mistral = os.path.join(a.work, "mistral")
    make_llama_model.write(mistral, model_type="mistral", vocab=300, hidden=32, inner=64, layers=3, heads=4, kv_heads=2,
                           positions=64, sliding_window=5, seed=44)
    failures = []
    for name, model in (("gemma3", gemma), ("mistral", mistral)):
        check_model(a, name, model, failures)
    for f in failures[:20]:
        print("FAIL:", f)
    if failures:
        return 1
    print("ok: inspect, generate --json and lab report sum over layers of min(N, W_l - 1 + C) x bytes per position")
    return 0


if __name__ == "__main__":
    sys.exit(main())
