#!/usr/bin/python3
"""The K/V quantization tab against numpy, from the rows `kvscope generate --trace` exports.

On the default model the window runs a prompt's prefill, selects layer 1 head 2 and shows the tab for
int8, fp8 and int4 (G 8, R 4) at both sizes. numpy quantizes the exported float32 keys and values of that
head with tests/reference/kv_quant_reference.py (written from the README, not from core/), and computes the causal
scores q·k/sqrt(D) and softmax weights in float64 with the original and the reconstructed keys: the
tab's largest K error, V error, score change and weight change must equal numpy's. The tab must say so
when the session itself stores quantized K/V (its rows are reconstructions), and a group that does not
divide the head dimension must be refused in the tab.
"""
import os
import sys

import numpy as np

from guitest import arguments, fail, run, window

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference")))
import kv_quant_reference as ref  # noqa: E402

PROMPT = "Tom saw the cat. Tom saw the dog. Tom saw the"
LAYER, HEAD = 1, 2


def expected(q, k, v, fmt, G=8, R=4):
    P, D = k.shape
    if fmt in ("int8", "fp8"):
        k_hat, v_hat = ref.dequantize_kv(k, fmt), ref.dequantize_kv(v, fmt)
    else:  # KIVI: key groups of G positions below floor((P - R) / G) * G, values per row there
        k_hat, v_hat = k.copy(), v.copy()
        boundary = max(0, (P - R) // G) * G
        for p0 in range(0, boundary, G):
            k_hat[p0:p0 + G] = ref.int4_keys_dequantize(ref.int4_keys_quantize(k[p0:p0 + G]), G, D)
        for p in range(boundary):
            v_hat[p] = ref.int4_values_dequantize(ref.int4_values_quantize(v[p], G), D, G)
    mask = np.tril(np.ones((P, P), bool))
    scale = 1.0 / np.sqrt(D)

    def softmax_scores(keys):
        s = (q.astype(np.float64) @ keys.astype(np.float64).T) * scale
        s = np.where(mask, s, -np.inf)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        return s, w / w.sum(axis=1, keepdims=True)

    s, w = softmax_scores(k)
    s_hat, w_hat = softmax_scores(k_hat)
    return [np.abs(k_hat - k).max(), np.abs(v_hat - v).max(), np.abs(s_hat[mask] - s[mask]).max(),
            np.abs(w_hat[mask] - w[mask]).max()]


def main():
    a = arguments()
    model = os.path.join(a.assets, "default")
    trace = os.path.join(a.work, "trace")
    run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "1", "--trace", trace])
    step = os.path.join(trace, "step_0000")
    q, k, v = (np.load(os.path.join(step, n + ".npy")) for n in ("q", "k", "v"))  # (L, R, C)
    L, P, C = k.shape
    D = C // 4  # the default model: 4 heads
    sl = slice(HEAD * D, (HEAD + 1) * D)
    q, k, v = q[LAYER, :, sl], k[LAYER, :, sl], v[LAYER, :, sl]

    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        for fmt, line in (("int8", "quant-view int8"), ("fp8", "quant-view fp8"), ("int4", "quant-view int4 8 4")):
            d = window(a.kvscope, model, a.work, "quant_%s_%s" % (fmt, label), size,
                       ["prompt " + PROMPT, "prefill", "layer %d" % LAYER, "head %d" % HEAD, "panel K/V quant", line])
            t = d["texts"]
            header = t.get("quant header", "")
            if "layer %d head %d" % (LAYER, HEAD) not in header or "%d keys, %d queries" % (P, P) not in header:
                fail("%s %s: the tab's header %r does not name layer %d head %d, %d keys and queries"
                     % (label, fmt, header, LAYER, HEAD, P))
            shown = [float(x) for x in t.get("quant maxima exact", "").split()]
            want = expected(q, k, v, fmt)
            if len(shown) != 4:
                fail("%s %s: the tab shows no maxima (%r)" % (label, fmt, t.get("quant maxima exact")))
            for name, got, w in zip(("K error", "V error", "score change", "weight change"), shown, want):
                if not abs(got - w) <= 1e-6 * max(1.0, abs(w)):
                    fail("%s %s: largest %s %.9g, numpy %.9g" % (label, fmt, name, got, w))
            if want[0] == 0 or want[2] == 0:
                fail("%s %s: numpy finds no error at all: the check would teach nothing" % (label, fmt))
            print("  ok %s %s: max |K err| %.4g, |V err| %.4g, |score change| %.4g, |weight change| %.4g = numpy"
                  % (label, fmt, *shown))

    # A quantized session records reconstructions: the tab says so instead of comparing them with themselves.
    d = window(a.kvscope, model, a.work, "quant_session", (1280, 720),
               ["options kv-quant=int8", "prompt " + PROMPT, "prefill", "panel K/V quantization"])  # the old title still names it
    if "quant session note" not in d.get("items", {}) and "quant session note" not in str(d):
        fail("an int8 session's tab does not say its rows are already reconstructions")
    if "quant maxima exact" in d["texts"]:
        fail("an int8 session's tab still compares its rows")
    # A group that does not divide the head dimension (32): refused in the tab, in one line.
    d = window(a.kvscope, model, a.work, "quant_bad_group", (1280, 720),
               ["prompt " + PROMPT, "prefill", "panel K/V quant", "quant-view int4 5 0"])
    problem = d["texts"].get("quant problem", "")
    if not problem or "\n" in problem:
        fail("group 5 with head dim 32 is not refused in one line: %r" % problem)
    print("  ok: an int8 session is named, group 5 refused: %s" % problem)
    print("ok: the K/V quantization tab equals numpy's int8 / fp8 / int4 reconstruction and score change")


if __name__ == "__main__":
    main()
