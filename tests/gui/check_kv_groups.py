#!/usr/bin/env python3
"""K/V head groups in the window, against the model's config.json.

A random Llama folder with SmolLM2's head layout (9 query heads, 3 K/V heads; tools/make_llama_model.py,
assets/llama-gqa's tokenizer) runs a prefill at 1280x720 and 1920x1080 with query head 4 selected. From
the final frame's --layout-dump:
  - the KV cache panel names the kind of attention, lists each K/V head with the query heads that read it
    (h // (H / K)), and titles the shown rows "K/V head 1 (read by query heads 3..5)";
  - its bytes meter equals 2 * layers * heads * head_dim * 4 bytes for 3 (the model), 9 (multi-head) and
    1 (multi-query) K/V heads, and the positions held equal the prompt's length;
  - the all-heads attention view frames each group: group j's frame holds exactly query heads 3j..3j+2's
    maps, and the frames do not overlap.
Then the same on a multi-head model (4 query heads, 4 K/V heads): the panel says so and shows no groups.
"""
import json
import os
import shutil
import sys

from guitest import arguments, fail, prompt_length, window

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
import make_llama_model  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog"


def model(work, name, heads, kv_heads, assets):
    path = os.path.join(work, name)
    make_llama_model.write(path, vocab=768, hidden=72, inner=96, layers=2, heads=heads, kv_heads=kv_heads, seed=21)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(assets, "llama-gqa", f), path)
    return json.load(open(os.path.join(path, "config.json"))), path


def inside(inner, outer):
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def overlap(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def main():
    a = arguments()
    cfg, gqa = model(a.work, "gqa_9x3", 9, 3, a.assets)
    H, K, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    D, G = cfg["hidden_size"] // H, H // K
    n_prompt = prompt_length(a.kvscope, gqa, PROMPT)
    per_head = 2 * L * D * 4
    want_bytes = "per_token=%d multi_head=%d multi_query=%d held=%d" % (per_head * K, per_head * H, per_head, n_prompt)
    want_groups = " | ".join("KV%d:%s" % (j, "".join(" h%d" % h for h in range(H) if h // G == j)) for j in range(K))
    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        lines = ["prompt " + PROMPT, "prefill", "head 4", "view all-heads", "kv-heads open"]
        # The KV cache panel in the Cache workspace; the all-heads attention view in Step.
        t = window(a.kvscope, gqa, a.work, "gqa_" + label, size, lines + ["workspace Cache"])["texts"]
        boxes = window(a.kvscope, gqa, a.work, "gqa_step_" + label, size, lines)["widgets"]
        checks = {
            "kv groups": "grouped-query attention: %d K/V heads, each read by %d query heads" % (K, G),
            "kv group heads": want_groups,
            "kv bytes": want_bytes,
        }
        for name, want in checks.items():
            if t.get(name) != want:
                fail("%s: %s reads %r, expected %r" % (label, name, t.get(name), want))
        want_header = "K/V head %d (read by query heads %d..%d)" % (4 // G, 4 // G * G, 4 // G * G + G - 1)
        if want_header not in t.get("kv header", ""):
            fail("%s: the KV panel's title %r lacks %r" % (label, t.get("kv header"), want_header))
        frames = [boxes.get("kv group %d" % j) for j in range(K)]
        if None in frames:
            fail("%s: group frames missing in the all-heads view: %s" % (label, frames))
        for h in range(H):
            cell = boxes.get("head map %d" % h)
            if cell is None:
                fail("%s: head %d's map missing" % (label, h))
            holders = [j for j in range(K) if inside(cell, frames[j])]
            if holders != [h // G]:
                fail("%s: head %d's map %s lies in group frames %s, expected [%d]" % (label, h, cell, holders, h // G))
        for i in range(K):
            for j in range(i + 1, K):
                if overlap(frames[i], frames[j]):
                    fail("%s: group frames %d and %d overlap: %s %s" % (label, i, j, frames[i], frames[j]))
        print("  ok %s: %s; %s; %s; %d group frames hold their heads" % (label, t["kv groups"], t["kv group heads"],
                                                                        t["kv bytes"], K))

    cfg, mha = model(a.work, "mha_4x4", 4, 4, a.assets)
    lines = ["prompt " + PROMPT, "prefill", "view all-heads", "kv-heads open"]
    d = window(a.kvscope, mha, a.work, "mha", (1280, 720), lines + ["workspace Cache"])
    step = window(a.kvscope, mha, a.work, "mha_step", (1280, 720), lines)
    if d["texts"].get("kv groups") != "multi-head attention: each query head has its own K/V head":
        fail("multi-head model: kv groups reads %r" % d["texts"].get("kv groups"))
    if not any(k.startswith("head map ") for k in step["widgets"]):
        fail("multi-head model: the all-heads view drew no head maps")
    if "kv group heads" in d["texts"] or any(k.startswith("kv group ") for k in step["widgets"]):
        fail("multi-head model: groups shown where there are none")
    per_head = 2 * cfg["num_hidden_layers"] * (cfg["hidden_size"] // 4) * 4
    if not d["texts"].get("kv bytes", "").startswith("per_token=%d multi_head=%d " % (4 * per_head, 4 * per_head)):
        fail("multi-head model: kv bytes %r" % d["texts"].get("kv bytes"))
    print("  ok multi-head model: %s, no group frames" % d["texts"]["kv groups"])
    print("ok: K/V groups, bytes per token and the grouped all-heads view match config.json")


if __name__ == "__main__":
    main()
