#!/usr/bin/env python3
"""Per-layer windows in the window, against the model's config.json.

A Gemma 3 folder of tools/make_llama_model.py's gemma3-tiny shape (6 layers, sliding window 4, every third
layer full; assets/llama-gqa's tokenizer) runs a prompt and two decode steps. From the final frame's
--layout-dump, with N positions stored:
  - the KV cache panel's per-layer fill: a sliding layer saw min(N, 4) of the N stored, a full layer N;
  - the saving it states: sum over sliding layers of (N - 4) * 2 * K/V heads * head_dim * 4 bytes now,
    and the same with max_position_embeddings at the full context;
  - the timeline's note for the selected layer (a sliding one, then a full one): the keys its last query
    saw, q - 3 .. q or 0 .. q;
  - the Mask panel's rule for that layer: "window 4" for a sliding one, "causal" for a full one (issue 43);
  - the Controls header's D: config.json's head_dim (16), not hidden_size / heads (8).
"""
import json
import os
import shutil
import sys

from guitest import arguments, fail, prompt_length, window

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog"


def main():
    a = arguments()
    model = os.path.join(a.work, "gemma3")
    make_llama_model.write(model, **dict(make_llama_model.SHAPES["gemma3-tiny"], vocab=768, seed=31))
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(a.assets, "llama-gqa", f), model)
    cfg = json.load(open(os.path.join(model, "config.json")))
    L, W, pattern = cfg["num_hidden_layers"], cfg["sliding_window"], cfg["sliding_window_pattern"]
    sliding = [(i + 1) % pattern != 0 for i in range(L)]  # Gemma3TextConfig's layer pattern
    per_layer_token = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 4
    n = prompt_length(a.kvscope, model, PROMPT) + 2  # the prompt, then two decode steps
    if n <= W:
        fail("the prompt is too short to fill a window of %d" % W)

    want_seen = " ".join("%d/%d" % (min(n, W) if s else n, n) for s in sliding)
    want_saving = "sliding=%d now=%d full=%d" % (sum(sliding), sum(sliding) * (n - W) * per_layer_token,
                                                 sum(sliding) * (cfg["max_position_embeddings"] - W) * per_layer_token)
    for layer in (0, sliding.index(False)):
        for size in ((1280, 720), (1920, 1080)):
            label = "layer %d at %dx%d" % (layer, size[0], size[1])
            d = window(a.kvscope, model, a.work, "layer%d_%dx%d" % (layer, size[0], size[1]), size,
                       ["prompt " + PROMPT, "prefill", "decode 2", "layer %d" % layer])
            t = d["texts"]
            if t.get("layer windows") != want_seen:
                fail("%s: per-layer fill %r, expected %r" % (label, t.get("layer windows"), want_seen))
            if t.get("layer window saving") != want_saving:
                fail("%s: saving %r, expected %r" % (label, t.get("layer window saving"), want_saving))
            q = n - 1
            want_note = ("layer %d slides (window %d): its last query saw keys %d..%d" % (layer, W, q - W + 1, q)
                         if sliding[layer] else "layer %d: full attention, keys 0..%d" % (layer, q))
            if want_note not in t.get("timeline layer window", ""):
                fail("%s: timeline note %r, expected %r" % (label, t.get("timeline layer window"), want_note))
            want_rule = ("layer %d rule: window %d (the model's sliding window for this layer)" % (layer, W)
                         if sliding[layer] else "layer %d rule: causal (full attention)" % layer)
            if not t.get("mask rule", "").startswith(want_rule):
                fail("%s: Mask panel rule %r, expected it to start %r" % (label, t.get("mask rule"), want_rule))
            want_shape = "L=%d H=%d D=%d " % (L, cfg["num_attention_heads"], cfg["head_dim"])
            if not t.get("controls shape", "").startswith(want_shape):
                fail("%s: Controls header %r, expected %r" % (label, t.get("controls shape"), want_shape))
            print("  ok %s: seen/stored %s; %s; %s" % (label, t["layer windows"], t["layer window saving"], want_note))
    print("ok: per-layer windows in the KV cache panel and the timeline match config.json")


if __name__ == "__main__":
    main()
