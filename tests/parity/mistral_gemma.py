#!/usr/bin/python3
"""Parity group: per-layer sliding windows (Mistral, Qwen2 / Qwen3 with use_sliding_window or layer_types)
and Gemma 3 (gemma3_text) folders from tools/make_llama_model.py against the reference
(tools/kvscope_reference/llama.py): windows shorter than the prompt, Gemma's sliding/full layer pattern
with its two rotary bases, (1 + weight) norms, query_pre_attn_scalar, final logit soft-capping, GQA and
MQA, tied and untied heads, F16 and BF16 files; cached, --no-cache, chunked and batched runs, bit-identical
among themselves. Then the classic mistakes of these models, each switched into the reference alone, must
put kvscope far outside the tolerance, and bad windows in config.json are one-line errors.

    mistral_gemma.py --kvscope BIN --work DIR
"""
import json
import os
import shutil
import sys

from common import Failure, check_case, trace_weights_gap, main, prompt, reference_model, refused_config, run_cli
from llama import bit_identical, mutant_differs

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402

GEMMA = make_llama_model.SHAPES["gemma3-tiny"]  # 6 layers, pattern 3 (layers 2 and 5 full), window 4, MQA
MODELS = {
    "mistral_w3":      dict(model_type="mistral", heads=4, kv_heads=2, sliding_window=3, seed=20),
    "mistral_no_window": dict(model_type="mistral", heads=4, kv_heads=1, sliding_window=None, seed=21),
    "qwen2_sliding":   dict(model_type="qwen2", heads=4, kv_heads=2, layers=3, sliding_window=3, max_window_layers=1,
                            tied=True, seed=22),
    "qwen3_layer_types": dict(model_type="qwen3", heads=4, kv_heads=2, head_dim=12, layers=3, sliding_window=4,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"], seed=23),
    "gemma3":          dict(GEMMA, seed=24),
    "gemma3_gqa_softcap": dict(GEMMA, heads=4, kv_heads=2, final_logit_softcapping=3.0, tied=False,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                            "sliding_attention", "sliding_attention", "full_attention"], seed=25),
    "gemma3_linear_rope": dict(GEMMA, rope_scaling={"rope_type": "linear", "factor": 8.0}, seed=26),
    "gemma3_bf16":     dict(GEMMA, dtype="BF16", seed=27),
    "gemma3_f16":      dict(GEMMA, dtype="F16", heads=8, kv_heads=2, seed=28),
}


def model_dir(work, name):
    path = os.path.join(work, "models", name)
    make_llama_model.write(path, **MODELS[name])
    return path


def bad_config(kvscope, work, label, edit, expect):
    return refused_config(kvscope, model_dir(work, "gemma3"), work, label, edit, expect)


def window_on_sliding_model(kvscope, work):
    """--window on a model with its own window is refused (usage error, exit 2), nothing written."""
    m = model_dir(work, "mistral_w3")
    out = os.path.join(work, "window_refused.npy")
    rc, _, err = run_cli(kvscope, ["generate", "--model", m, "--prompt-ids", "1,2,3", "--window", "2",
                                   "--dump-logits", out])
    lines = err.strip().splitlines()
    if rc != 2 or len(lines) != 1 or "--window cannot be combined" not in lines[0] or os.path.exists(out):
        raise Failure(f"--window on a sliding model: exit {rc}, stderr {err!r}")
    return "--window on a sliding model: exit 2, " + lines[0]


def inspect_windows(kvscope, work):
    """inspect --json says which layers slide and with what window."""
    m = model_dir(work, "gemma3")
    rc, out, err = run_cli(kvscope, ["inspect", "--model", m, "--json"])
    if rc != 0:
        raise Failure(f"inspect: exit {rc} {err}")
    got = json.loads(out)["layer_windows"]
    want = [0 if (il + 1) % 3 == 0 else 4 for il in range(6)]  # Gemma3TextConfig's pattern rule, pattern 3
    if got != want:
        raise Failure(f"inspect layer_windows {got}, expected {want}")
    # Gemma3RMSNorm scales by (1 + weight); Mistral's (LlamaRMSNorm) by the weight alone.
    norms = {}
    for name, form in (("gemma3", "times (1 + weight)"), ("mistral_w3", "times the weight")):
        rc, out, err = run_cli(kvscope, ["inspect", "--model", model_dir(work, name), "--json"])
        norms[name] = json.loads(out)["architecture"]["rms_norm_eps"] if rc == 0 else err
        if rc != 0 or form not in norms[name]:
            raise Failure(f"inspect {name}: rms_norm_eps says {norms[name]!r}, expected {form!r}")
    return f"inspect --json layer_windows {got}; norms: {norms['gemma3']!r}"


def trace_weights(kvscope, work, name):
    """--trace's attention weights of the prefill step (every layer and head) equal the reference's softmax
    weights: the export recomputes them with the layer's own window and the model's score scale."""
    m = model_dir(work, name)
    p = prompt(470, 10)
    folder = os.path.join(work, "trace_" + name)
    shutil.rmtree(folder, ignore_errors=True)
    rc, _, err = run_cli(kvscope, ["generate", "--model", m, "--prompt-ids", ",".join(map(str, p)),
                                   "--max-new-tokens", "1", "--trace", folder])
    if rc != 0:
        raise Failure(f"--trace: exit {rc} {err}")
    ref = reference_model(m)
    ref.attention_record = []
    try:
        ref.forward(p)
        want = ref.attention_record
    finally:
        ref.attention_record = None
    worst = trace_weights_gap(folder, want, name)
    if worst > 1e-5:
        raise Failure(f"{name}: --trace attention weights differ from the reference by {worst:.3g}")
    with open(os.path.join(folder, "trace.json")) as f:
        model = json.load(f)["model"]
    windows = [w or 0 for w in ref.cfg["layer_windows"]]
    if model.get("layer_windows") != windows:
        raise Failure(f"{name}: trace.json layer_windows {model.get('layer_windows')}, expected {windows}")
    return f"{name} --trace weights of every layer and head = reference (max diff {worst:.2g})"


def prompt_cache_fingerprint(kvscope, work):
    """A prompt cache file made with one sliding_window is refused by the same folder with another."""
    path = os.path.join(work, "fingerprint")
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(model_dir(work, "gemma3"), path)
    cache_file = path + ".kvcache"
    if os.path.exists(cache_file):
        os.remove(cache_file)
    args = ["generate", "--model", path, "--prompt-ids", "1,2,3,4,5,6,7,8", "--max-new-tokens", "2",
            "--prompt-cache", cache_file]
    rc, _, err = run_cli(kvscope, args)
    if rc != 0:
        raise Failure(f"writing the prompt cache: exit {rc} {err}")
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg["sliding_window"] = 5
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    rc, _, err = run_cli(kvscope, args)
    if rc != 1 or '"sliding_window": 4 in the file, "sliding_window": 5 here' not in err:
        raise Failure(f"a prompt cache of another window: exit {rc}, {err!r}")
    return "prompt cache fingerprint covers sliding_window: " + err.strip()


def cases(kvscope, work):
    for i, name in enumerate(MODELS):
        m = model_dir(work, name)
        p = prompt(400 + i, 11, vocab=300)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, no_cache=True)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, chunk=3)
    for name in ("mistral_w3", "qwen2_sliding", "gemma3", "gemma3_gqa_softcap"):
        m = model_dir(work, name)
        p = prompt(420, 12, vocab=300)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 6, chunk=1)
        yield lambda m=m: check_case(kvscope, m, [prompt(430, 5), prompt(431, 12), prompt(432, 1)], 6)
        yield lambda m=m: bit_identical(kvscope, m, prompt(445, 10))
    # The paged cache, prefix sharing (copy on write where prompts part) and a prompt cache file on models
    # whose layers slide: the same numbers as the reference.
    for name in ("gemma3", "mistral_w3"):
        m = model_dir(work, name)
        shared = prompt(480, 7)
        prompts = [shared + prompt(481, 4), shared + prompt(482, 6), shared[:5]]
        yield lambda m=m, prompts=prompts: check_case(kvscope, m, prompts, 6, extra=("--block-size", "4"))
        yield lambda m=m, prompts=prompts: check_case(kvscope, m, prompts, 6,
                                                      extra=("--block-size", "3", "--share-prefix"))
        cache_file = os.path.join(work, name + ".kvcache")
        for fresh in (True, False):  # the first run writes the file, the second reads it
            def run(m=m, cache_file=cache_file, fresh=fresh):
                if fresh and os.path.exists(cache_file):
                    os.remove(cache_file)
                return check_case(kvscope, m, [prompt(490, 12)], 6, extra=("--prompt-cache", cache_file))
            yield run
    # No window of its own: --window and sinks behave as for GPT-2.
    m = model_dir(work, "mistral_no_window")
    yield lambda m=m: check_case(kvscope, m, [prompt(450, 11)], 8, window=4)
    yield lambda m=m: check_case(kvscope, m, [prompt(450, 11)], 8, window=4, chunk=3)
    # The classic mistakes: each must move the logits far outside the tolerance.
    p = prompt(460, 12)
    for name, mutation in (("gemma3", "no_plus_one"), ("gemma3", "global_rope_everywhere"),
                           ("gemma3_linear_rope", "global_rope_everywhere"), ("gemma3", "window_plus_one"),
                           ("mistral_w3", "window_plus_one"), ("qwen2_sliding", "window_plus_one"),
                           ("gemma3_gqa_softcap", "modulo"), ("gemma3", "interleaved")):
        m = model_dir(work, name)
        yield lambda m=m, mutation=mutation: mutant_differs(kvscope, m, p, mutation)
    for name in ("gemma3", "mistral_w3"):
        yield lambda name=name: trace_weights(kvscope, work, name)
    yield lambda: prompt_cache_fingerprint(kvscope, work)
    yield lambda: window_on_sliding_model(kvscope, work)
    yield lambda: inspect_windows(kvscope, work)
    yield lambda: bad_config(kvscope, work, "window_zero", lambda c: c.update(sliding_window=0),
                             "sliding_window must be positive, found 0")
    yield lambda: bad_config(kvscope, work, "layer_type_unknown",
                             lambda c: c.update(layer_types=["sliding_attention"] * 5 + ["chunked_attention"]),
                             'layer_types[5] is string "chunked_attention", not "sliding_attention" or "full_attention"')
    yield lambda: bad_config(kvscope, work, "layer_types_length",
                             lambda c: c.update(layer_types=["sliding_attention"] * 4),
                             "layer_types has 4 entries, num_hidden_layers is 6")
    yield lambda: bad_config(kvscope, work, "multimodal_gemma3", lambda c: c.update(model_type="gemma3"),
                             'model_type "gemma3" is not supported')


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
