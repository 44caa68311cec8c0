#!/usr/bin/python3
"""`kvscope bench --json` and `kvscope bench --sharing --json`: run the benchmark, parse its one JSON object
and check its shape: every key, in the order the benchmark prints them, with the type its readers expect
(the README's tables, tools/bench_compare.sh, tools/bench_llama.sh). Counts and byte sizes must be JSON
integers; figures are numbers; min / median / max figures are {"min", "median", "max"}. Figures are not
judged (speed lives in the benchmark, not in tests), except what must hold on any machine: the generated
tokens agree across layouts, the prompt cache file gives the same first token, each ratio is held / ideal,
and the prefill bound's flops agree with the model's config.json.
With --chart the PNG must exist.

Usage: check_bench_json.py {bench|sharing} --kvscope BUILD/app/kvscope [-- extra kvscope arguments]
"""
import argparse
import json
import os
import subprocess
import sys

STATS = "stats"  # {"min": number, "median": number, "max": number}

BENCH = {
    "model": str,
    "threads": int,
    "repeat": int,
    "machine": {"read_bandwidth_gb_s": STATS, "read_bandwidth_bf16_set_gb_s": STATS,
                "llc_bytes": int, "large_buffer_bytes": int,
                "read_large_gb_s": {"sequential": STATS, "streams": STATS, "gemv": STATS}, "fma_peak_gflop_s": STATS},
    "bounds": {"weight_bytes_per_token": int, "decode_tokens_per_s": float, "prefill_tokens_per_s": float,
               "weight_bytes_per_token_bf16": int, "decode_tokens_per_s_bf16": float,
               "matrix_flops_per_token": float, "prefill_attention_flops_per_token": float},
    "decode_tokens_per_s": {"batch1": STATS, "batch4": STATS, "batch8": STATS, "bf16_batch1": STATS},
    "decode_vs_bound_paired": {"batch1": STATS, "bf16_batch1": STATS},
    "bf16_max_abs_logit_diff": float,
    "max_abs_logit": float,
    "prefill_tokens_per_s": STATS,
    "prefill_bf16_tokens_per_s": STATS,
    "prefill_tokens": int,
    "steps": [{"position": int, "cached_ms": STATS, "uncached_ms": STATS, "bound_ms": float}],
    "recording": {"prompt": int, "decode": int, "trace_bytes": int, "decode_tokens_per_s_recorded": float,
                  "decode_tokens_per_s_plain": float},
    "load_seconds": STATS,
    "weights_placement": str,
    "block_matrices": int,
    "peak_rss_mb": float,
    "kv_bytes_per_token": int,
    "kv_bytes_full_context": int,
    "kv_bytes_per_token_bf16": int,
}

SHARING = {
    "model": str,
    "threads": int,
    "repeat": int,
    "prefix_tokens": int,
    "suffix_tokens": int,
    "new_tokens": int,
    "block_size": int,
    "kv_bytes_per_position": int,
    "ring_up_to": int,
    "tokens_agree": bool,
    "runs": [{
        "sequences": int, "layout": str,
        "positions_after_prefill": int, "kv_bytes_after_prefill": int, "ideal_bytes_after_prefill": int,
        "ratio_after_prefill": float, "blocks_after_prefill": int,
        "positions_at_end": int, "kv_bytes_at_end": int, "ideal_bytes_at_end": int, "ratio_at_end": float,
        "blocks_at_end": int, "rss_kv_bytes": int, "prefill_positions_computed": int,
        "prefill_positions_skipped": int, "prefill_seconds": float, "prefill_flops": float,
        "decode_seconds": float, "copies_on_write": int}],
    "prompt_file": {
        "positions": int, "file_bytes": int, "fingerprint_seconds": float, "write_seconds": float,
        "compute_prefix_seconds": STATS, "read_seconds": STATS, "restore_seconds": STATS, "prompt_tokens": int,
        "prefill_prompt_seconds": STATS, "prefill_prompt_with_file_seconds": STATS, "same_first_token": bool},
}

errors = []


def is_number(v):  # an integer-valued figure may print as 1 or 1.0; a bool is not a number
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check(value, schema, where):
    if schema is STATS:
        check(value, {"min": float, "median": float, "max": float}, where)
    elif isinstance(schema, dict):
        if not isinstance(value, dict):
            errors.append(f"{where}: expected an object, got {value!r}")
            return
        if list(value) != list(schema):
            errors.append(f"{where}: keys {list(value)}, expected {list(schema)} (in this order)")
        for key, sub in schema.items():
            if key in value:
                check(value[key], sub, f"{where}.{key}")
    elif isinstance(schema, list):
        if not isinstance(value, list) or not value:
            errors.append(f"{where}: expected a non-empty array, got {value!r}")
            return
        for i, item in enumerate(value):
            check(item, schema[0], f"{where}[{i}]")
    elif schema is float:
        if not is_number(value):
            errors.append(f"{where}: expected a number, got {value!r}")
    elif schema is int:
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{where}: expected an integer, got {value!r}")
    elif not isinstance(value, schema):
        errors.append(f"{where}: expected {schema.__name__}, got {value!r}")


def check_sharing(j):
    if j.get("tokens_agree") is not True:
        errors.append("tokens_agree is not true: the layouts generated different tokens")
    if j.get("prompt_file", {}).get("same_first_token") is not True:
        errors.append("prompt_file.same_first_token is not true")
    runs = j.get("runs", [])
    layouts = {r.get("layout") for r in runs}
    if layouts != {"shared", "paged", "ring"}:
        errors.append(f"layouts {sorted(map(str, layouts))}, expected shared, paged and ring")
    for i, r in enumerate(runs):
        for when in ("after_prefill", "at_end"):
            held, ideal, ratio = r.get(f"kv_bytes_{when}"), r.get(f"ideal_bytes_{when}"), r.get(f"ratio_{when}")
            if all(is_number(v) for v in (held, ideal, ratio)) and abs(ratio - held / ideal) > 1e-12 * abs(ratio):
                errors.append(f"runs[{i}].ratio_{when} = {ratio}, but held / ideal = {held / ideal}")


def check_bench(j):
    """The prefill bound's flops, recomputed from the model's config.json (GPT-2 layout, no windows)."""
    try:
        with open(os.path.join(j["model"], "config.json")) as f:
            c = json.load(f)
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
        errors.append(f"cannot read the model's config.json to check the prefill bound: {e}")
        return
    if c.get("model_type") != "gpt2":
        return
    L, H, C, P = c["n_layer"], c["n_head"], c["n_embd"], j["prefill_tokens"]
    F = c.get("n_inner") or 4 * C
    matrix = 2 * L * (4 * C * C + 2 * C * F)               # q, k, v, o; fc and its projection
    attention = L * H * 4 * (C // H) * (P * (P + 1) // 2) / P  # q.k and p.v at every position each query sees
    b = j["bounds"]
    for key, want in (("matrix_flops_per_token", matrix), ("prefill_attention_flops_per_token", attention),
                      ("prefill_tokens_per_s", j["machine"]["fma_peak_gflop_s"]["max"] * 1e9 / (matrix + attention))):
        if abs(b[key] - want) > 1e-9 * want:
            errors.append(f"bounds.{key} = {b[key]}, expected {want} from config.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["bench", "sharing"])
    ap.add_argument("--kvscope", required=True)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:split])
    a.extra = argv[split + 1:]  # more kvscope arguments
    cmd = [a.kvscope, "bench"] + (["--sharing"] if a.which == "sharing" else []) + ["--quick", "--json"] + a.extra
    chart = a.extra[a.extra.index("--chart") + 1] if "--chart" in a.extra else None
    if chart and os.path.exists(chart):
        os.remove(chart)  # so a chart left by an earlier run does not pass for this one
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stderr}")
        return 1
    try:
        j = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        print(f"FAIL: stdout is not one JSON object ({e}):\n{p.stdout[:2000]}")
        return 1
    check(j, BENCH if a.which == "bench" else SHARING, "$")
    if a.which == "sharing":
        check_sharing(j)
    elif not errors:
        check_bench(j)
    if chart:
        try:
            with open(chart, "rb") as f:
                if f.read(8) != b"\x89PNG\r\n\x1a\n":
                    errors.append(f"{chart} is not a PNG")
        except OSError as e:
            errors.append(f"--chart {chart}: {e}")
    for e in errors:
        print("FAIL: " + e)
    if not errors:
        print(f"ok: {' '.join(cmd)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
