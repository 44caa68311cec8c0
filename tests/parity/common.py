"""Shared pieces of the parity tests: generated models, running the kvscope CLI, comparing with the
reference (tools/kvscope_reference, float64, full recompute without a cache).

Goldens are never stored: every expected token and logit is recomputed here from the model folder by
the independent PyTorch reference, so regenerating them is just running the test again.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.normpath(os.path.join(HERE, "..", "..", "tools"))
sys.path.insert(0, TOOLS)
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "reference")))  # kv_quant_reference

import make_model  # noqa: E402
import kvscope_reference as ref  # noqa: E402

TOL = 1e-4          # |engine - reference| <= TOL * max(1, |reference|)
MIN_MARGIN = 2e-4   # a smaller top-2 gap in the reference is a near tie: too fragile for greedy parity
# (2 x TOL; a float32 engine is typically within 1e-6 of the float64 reference)

# The model matrix: every config option, and the combinations that interact (post-LN without a
# final norm, sinusoidal positions with a scaled embedding, untied heads with bias, low precision).
MODELS = {
    "base":              dict(),
    "post_relu":         dict(norm="post", activation="relu"),
    "gelu_erf_no_qkv_bias": dict(activation="gelu", qkv_bias=False),
    "untied_lm_bias":    dict(untied=True, lm_head_bias=True),
    "tied_lm_bias":      dict(lm_head_bias=True, seed=11),
    "sinusoidal_scaled": dict(positions="sinusoidal", embedding_scale=8.0),
    "no_final_ln":       dict(final_ln=False, seed=3),
    "post_no_final_ln":  dict(norm="post", final_ln=False, seed=4),
    "hf_checkpoint":     dict(n_inner=96, prefix="transformer.", with_buffers=True, hf_style=True),
    "f16":               dict(dtype="F16", seed=5),
    "bf16_8_heads":      dict(dtype="BF16", n_head=8, n_embd=32, seed=6),
    "one_head_3_layers": dict(n_head=1, n_embd=32, n_layer=3, seed=7),
    "original_transformer": dict(norm="post", positions="sinusoidal", activation="relu",
                                 embedding_scale=8.0, untied=True, lm_head_bias=True,
                                 qkv_bias=False, final_ln=False, n_inner=128,
                                 prefix="transformer.", with_buffers=True, dtype="F16", seed=8),
    "bf16_post_gelu_untied": dict(dtype="BF16", norm="post", activation="gelu", untied=True,
                                  n_layer=3, n_positions=64, seed=9),
}


def model_dir(work, name):
    """Write models[name] under work/models/name (cheap, so always rewritten) -> path."""
    path = os.path.join(work, "models", name)
    make_model.write(path, **MODELS[name])
    return path


def prompt(seed, length, vocab=300):
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randint(0, vocab, (length,), generator=g).tolist()


class Failure(Exception):
    pass


def run_cli(kvscope, args, timeout=120):
    """-> (returncode, stdout, stderr). A hang or a signal is a failure by itself. The limit leaves room
    for the sanitizer builds on a busy 2-core machine (an uncached 240-position run took > 30 s there)."""
    try:
        p = subprocess.run([kvscope] + args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure(f"kvscope {' '.join(args)}: no answer after {timeout} s")
    if p.returncode < 0:
        raise Failure(f"kvscope {' '.join(args)}: killed by signal {-p.returncode}\n{p.stderr}")
    return p.returncode, p.stdout, p.stderr


def generate(kvscope, model, prompts, n_new, window=None, chunk=None, no_cache=False, extra=()):
    """Run `kvscope generate` -> (json object, logits ndarray [B, N, V] or [N, V])."""
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "logits.npy")
        args = ["generate", "--model", model]
        for p in prompts:
            args += ["--prompt-ids", ",".join(str(i) for i in p)]
        args += ["--max-new-tokens", str(n_new), "--dump-logits", npy, "--json"]
        if no_cache:
            args.append("--no-cache")
        if window is not None:
            args += ["--window", str(window)]
        if chunk is not None:
            args += ["--prefill-chunk", str(chunk)]
        args += list(extra)
        rc, out, err = run_cli(kvscope, args)
        if rc != 0:
            raise Failure(f"kvscope {' '.join(args)}: exit {rc}\n{err.strip()}")
        try:
            obj = json.loads(out)
        except json.JSONDecodeError as e:
            raise Failure(f"--json output is not one JSON object ({e}):\n{out[:500]}")
        if not os.path.exists(npy):
            raise Failure(f"--dump-logits wrote no file {npy}")
        logits = np.load(npy)
    if logits.dtype != np.float32:
        raise Failure(f"--dump-logits dtype is {logits.dtype}, expected float32")
    return obj, logits, args


_model_cache = {}
_expected_cache = {}


def refused_folder(kvscope, src, work, label, edit, expect):
    """A copy of folder `src` changed by edit(path): generate must exit 1 with one line naming the
    problem (`expect`) and write nothing."""
    path = os.path.join(work, "bad", label)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(src, path)
    edit(path)
    out = os.path.join(work, "bad", label + ".npy")
    if os.path.exists(out):
        os.remove(out)
    rc, _, err = run_cli(kvscope, ["generate", "--model", path, "--prompt-ids", "1,2", "--dump-logits", out])
    lines = err.strip().splitlines()
    if rc != 1 or len(lines) != 1 or expect not in lines[0] or os.path.exists(out):
        raise Failure(f"{label}: expected exit 1 and one line with {expect!r}, nothing written; got exit {rc}, "
                      f"stderr {err!r}, output {'written' if os.path.exists(out) else 'absent'}")
    return f"{label}: exit 1, {lines[0]}"


def refused_config(kvscope, src, work, label, edit, expect):
    """refused_folder with edit(cfg) applied to the copy's config.json."""
    def edit_config(path):
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        edit(cfg)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f)
    return refused_folder(kvscope, src, work, label, edit_config, expect)


def reference_model(path):
    if path not in _model_cache:
        with open(os.path.join(path, "config.json")) as f:
            model_type = json.load(f).get("model_type")
        kind = ref.LlamaModel if model_type in ("llama", "qwen2", "qwen3", "mistral", "gemma3_text") else ref.Model
        _model_cache[path] = kind(path, torch.float64)
    return _model_cache[path]


def _end_of_text(model):
    path = os.path.join(model, "vocab.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("<|endoftext|>")


def _per_prompt(value, n_prompts, key):
    """JSON lists for a batch are a list per prompt; for one prompt a flat list (or [[...]])."""
    if n_prompts == 1 and isinstance(value, list) and (not value or not isinstance(value[0], list)):
        return [value]
    if not (isinstance(value, list) and len(value) == n_prompts and all(isinstance(v, list) for v in value)):
        raise Failure(f"JSON {key} should hold one list per prompt ({n_prompts}), got {str(value)[:200]}")
    return value


def trace_weights_gap(folder, want, label):
    """Largest |difference| between a --trace export's prefill weights (step_0000/lLL_hHH_weights.npy) and
    the reference's softmax weights `want` (per layer, [H, T, T]); a shape mismatch is a Failure."""
    worst = 0.0
    for il, probs in enumerate(want):
        for h in range(probs.shape[0]):
            got = np.load(os.path.join(folder, "step_0000", f"l{il:02d}_h{h:02d}_weights.npy")).astype(np.float64)
            if got.shape != tuple(probs[h].shape):
                raise Failure(f"{label} layer {il} head {h}: weights shape {got.shape}, reference {tuple(probs[h].shape)}")
            worst = max(worst, float(np.max(np.abs(got - probs[h].numpy()))))
    return worst


def first_mismatches(got, want, limit=5):
    """Lines describing the first elements outside tolerance (index, engine, reference)."""
    bad = np.argwhere(np.abs(got - want) > TOL * np.maximum(1.0, np.abs(want)))
    lines = []
    for idx in bad[:limit]:
        t = tuple(int(i) for i in idx)
        lines.append(f"  at {list(t)}: kvscope {got[t]:.7g}  reference {want[t]:.7g}  diff {got[t] - want[t]:.3g}")
    return len(bad), lines


def check_case(kvscope, model, prompts, n_new, window=None, chunk=None, no_cache=False, extra=()):
    """One CLI run against the reference. Returns a short description; raises Failure."""
    desc = (f"{os.path.basename(model)} prompts={[len(p) for p in prompts]} new={n_new}"
            f"{' no-cache' if no_cache else ''}{f' window={window}' if window else ''}"
            f"{f' chunk={chunk}' if chunk else ''}{' ' + ' '.join(extra) if extra else ''}")
    m = reference_model(model)
    key = (model, tuple(tuple(p) for p in prompts), n_new, window)
    if key not in _expected_cache:  # cached, no-cache and chunked runs share one reference run
        if len(prompts) == 1:
            _expected_cache[key] = [ref.greedy(m, prompts[0], n_new, window)]
        else:
            _expected_cache[key] = ref.greedy_batch(m, prompts, n_new, window)
    expected = _expected_cache[key]
    eot = _end_of_text(model)
    for b, (ids, rows) in enumerate(expected):
        if eot is not None and eot in ids:
            raise Failure(f"{desc}: test case is ambiguous, the reference generates <|endoftext|> "
                          f"(where kvscope may stop) in prompt {b}; pick another prompt")
        margin = ref.margins(rows).min().item()
        if margin < MIN_MARGIN:
            raise Failure(f"{desc}: test case is fragile, reference top-2 gap {margin:.2g} in prompt {b}"
                          " (pick another seed or prompt)")
    obj, logits, args = generate(kvscope, model, prompts, n_new, window, chunk, no_cache, extra)
    try:
        _compare(desc, m, prompts, n_new, expected, obj, logits)
    except Failure as e:
        raise Failure(f"{e}\n  reproduce: {kvscope} {' '.join(args)}")
    return desc


def _compare(desc, m, prompts, n_new, expected, obj, logits):
    for key in ("prompt_ids", "generated_ids", "text"):
        if key not in obj:
            raise Failure(f"{desc}: --json output lacks '{key}': {json.dumps(obj)[:300]}")
    got_prompts = _per_prompt(obj["prompt_ids"], len(prompts), "prompt_ids")
    got_ids = _per_prompt(obj["generated_ids"], len(prompts), "generated_ids")
    if [list(p) for p in got_prompts] != [list(p) for p in prompts]:
        raise Failure(f"{desc}: prompt_ids echoed as {got_prompts}, expected {prompts}")
    V = m.cfg["vocab_size"]
    want_shape = (n_new, V) if len(prompts) == 1 else (len(prompts), n_new, V)
    if len(prompts) == 1 and logits.shape == (1, n_new, V):
        logits = logits[0]
    if logits.shape != want_shape:
        raise Failure(f"{desc}: logits shape {logits.shape}, expected {want_shape}")
    if len(prompts) == 1:
        logits = logits[None]
    for b, (want_ids, want_rows) in enumerate(expected):
        want_rows = want_rows.numpy()
        if got_ids[b] != want_ids:
            step = next((j for j, (x, y) in enumerate(zip(got_ids[b], want_ids)) if x != y),
                        min(len(got_ids[b]), len(want_ids)))
            n_bad, lines = first_mismatches(logits[b][: step + 1].astype(np.float64), want_rows[: step + 1])
            raise Failure(f"{desc}: prompt {b}: tokens differ from step {step}\n"
                          f"  kvscope   {got_ids[b]}\n  reference {want_ids}\n"
                          f"  reference top-2 gap at that step {ref.margins(torch.from_numpy(want_rows[step:step + 1])).item():.3g}"
                          + (f"\n  logits already off before it ({n_bad} values):\n" + "\n".join(lines) if n_bad else ""))
        n_bad, lines = first_mismatches(logits[b].astype(np.float64), want_rows)
        if n_bad:
            raise Failure(f"{desc}: prompt {b}: {n_bad} logits outside {TOL} (abs, or rel above 1):\n"
                          + "\n".join(lines))


def main(cases, argv):
    """cases(kvscope, work) yields (label, thunk). Runs all, prints one line each, exit 1 on failure."""
    import argparse
    import time
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    t0, n, failures = time.time(), 0, []
    for thunk in cases(os.path.abspath(a.kvscope), os.path.abspath(a.work)):
        n += 1
        try:
            print("ok  ", thunk(), flush=True)
        except Failure as e:
            failures.append(str(e))
            print("FAIL", e, flush=True)
    print(f"{n - len(failures)}/{n} cases passed in {time.time() - t0:.1f} s")
    return 1 if failures else 0
