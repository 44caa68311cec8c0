#!/usr/bin/env python3
"""Per-layer windows in the window, against the model's config.json.

A Gemma 3 folder of tools/make_llama_model.py's gemma3-tiny shape (6 layers, sliding window 4, every third
layer full; assets/llama-gqa's tokenizer) runs a prompt and five decode steps. From the final frame's
--layout-dump, with N positions stored:
  - the KV cache panel's per-layer fill: a sliding layer stores min(N, 4 - 1 + C) positions (its window
    plus the chunk being written: C = 1 on the last step, a decode step, although the prompt's P tokens
    were prefilled whole) in as many slots and its last query saw min(N, 4) of them, a full layer stores
    and saw N;
  - the bytes it states as stored: sum over layers of the positions stored x 2 * K/V heads * head_dim * 4;
  - the timeline's note for the selected layer (a sliding one, then a full one): the keys its last query
    saw, q - 3 .. q or 0 .. q;
  - the Mask panel's rule for that layer: "window 4" for a sliding one, "causal" for a full one (issue 43);
  - the Controls header's D: config.json's head_dim (16), not hidden_size / heads (8);
  - the KV maps' legend names the rows a sliding layer no longer stores (drawn near black), a full layer's does not;
  - with a paged cache (`options block=4`) every layer stores all N positions and the panel says so.
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
    P = prompt_length(a.kvscope, model, PROMPT)
    n = P + 5  # the prompt, then five decode steps: past the sliding layers' W slots
    if n <= W:
        fail("the prompt is too short to fill a window of %d" % W)

    C = 1  # the last step decoded one token: the ring gave the prefill's extra slots back
    stored = [min(n, W - 1 + C) if s else n for s in sliding]
    want_seen = " ".join("%d/%d" % (min(st, W) if s else st, st) for s, st in zip(sliding, stored))
    want_bytes = "bytes=%d" % (sum(stored) * per_layer_token)

    def stored_ok(text):  # "stored/slots" per layer, then the bytes; a full layer's slots are the session's
        parts = (text or "").split()
        if len(parts) != L + 1 or parts[-1] != want_bytes:
            return False
        for (st, sl), s, want in zip((x.split("/") for x in parts[:-1]), sliding, stored):
            if int(st) != want or (s and int(sl) != W - 1 + C) or (not s and int(sl) < n):
                return False
        return True
    for layer in (0, sliding.index(False)):
        for size in ((1280, 720), (1920, 1080)):
            label = "layer %d at %dx%d" % (layer, size[0], size[1])
            lines = ["prompt " + PROMPT, "prefill", "decode 5", "layer %d" % layer]
            name = "layer%d_%dx%d" % (layer, size[0], size[1])
            # The KV cache panel's fill in the Cache workspace; the Mask panel's rule in Step (the timeline: both).
            t = window(a.kvscope, model, a.work, name, size, lines + ["workspace Cache"])["texts"]
            step = window(a.kvscope, model, a.work, name + "_step", size, lines)["texts"]
            if step.get("timeline layer window") != t.get("timeline layer window"):
                fail("%s: the timeline's note differs between workspaces: %r, %r" % (
                    label, step.get("timeline layer window"), t.get("timeline layer window")))
            t["mask rule"] = step.get("mask rule", "")
            if t.get("layer windows") != want_seen:
                fail("%s: per-layer fill %r, expected %r" % (label, t.get("layer windows"), want_seen))
            if not stored_ok(t.get("layer stored")):
                fail("%s: stored/slots %r, expected stored %s in %d slots per sliding layer, %s" %
                     (label, t.get("layer stored"), stored, W - 1 + C, want_bytes))
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
            dropped_legend = "near black = no longer stored by this layer" in t.get("kv legend", "")
            if dropped_legend != sliding[layer]:
                fail("%s: the KV maps' legend %s the rows the layer no longer stores: %r" %
                     (label, "does not name" if sliding[layer] else "names", t.get("kv legend")))
            if "keeps every position in every layer" in t.get("layer stored text", ""):
                fail("%s: the ring cache says it keeps every position: %r" % (label, t.get("layer stored text")))
            print("  ok %s: seen/stored %s; stored/slots %s; %s" % (label, t["layer windows"], t["layer stored"], want_note))
    # A paged cache keeps every position in every layer (one block table for all layers) and says so.
    d = window(a.kvscope, model, a.work, "paged", (1280, 720),
               ["options block=4", "prompt " + PROMPT, "prefill", "decode 5", "workspace Cache"])
    t = d["texts"]
    held = [int(x.split("/")[0]) for x in (t.get("layer stored") or "").split()[:-1]]
    if held != [n] * L:
        fail("paged: positions stored per layer %r, expected %d in every layer" % (t.get("layer stored"), n))
    if "keeps every position in every layer" not in t.get("layer stored text", ""):
        fail("paged: the fill text does not say the sliding layers are kept whole: %r" % t.get("layer stored text"))
    print("  ok paged: every layer stores %d positions, and the panel says why" % n)
    print("ok: per-layer windows in the KV cache panel and the timeline match config.json")


if __name__ == "__main__":
    main()
