#!/usr/bin/python3
"""GUI batch / Memory panel / prompt cache test: drive `kvscope gui --script` under Xvfb with a batch of 3 sequences over
one paged block pool with prefix sharing, step the prefill and some decodes, step back, and check the
Memory panel's numbers (written by the script line `memory-json FILE`) against figures computed here from
the token counts alone:

  A sequence whose prompt shares its first c tokens with an earlier sequence maps a = min(c, P - 1)
  positions (the prompt's last token is always computed: its logits are the prediction). Whole blocks of
  B positions are shared; when a % B != 0 the partly filled block it adopted is written into at once,
  so it is copied (copy-on-write). Sequence i then owns ceil(n_i / B) - floor(a_i / B) blocks for its
  n_i positions, and on its own would need ceil(n_i / B).

Token counts come from `kvscope tokenize` (the CLI tokenizer; the prompt and each suffix are encoded on
their own, as the GUI does), block bytes from config.json (2 * L * H * B * D * 4). Two cases: identical
prompts (sampling with seeds 0, 1, 2 at temperature 0.8), and a shared system prompt with distinct
suffixes. The screenshot must show the Memory panel with content.

Prompt cache (`prompt-cache FILE`): the first prefill finds no file and writes it; a longer prompt then
loads min(common tokens, P - 1) positions (counted from the two token lists); a damaged file gives one
error line naming it, and is left byte for byte as it was, with no temporary file beside it.

Usage: check_memory.py --kvscope BUILD/app/kvscope --work DIR
"""
import json
import os
import sys

import numpy as np

from guitest import arguments, error_lines, fail, read_json, read_png, run, script

W, H = 1600, 1000
B = 4
N = 3


def n_tokens(kvscope, text):
    return [int(x) for x in run([kvscope, "tokenize", "--text", text]).stdout.split()]


def expected(prompts, n_decoded, bytes_per_block):
    """Figures after the prefill and n_decoded decode steps of every sequence (all prompts prefilled in one step)."""
    adopted, own, alone, copies = [], 0, 0, 0
    for i, p in enumerate(prompts):
        common = 0
        for q in prompts[:i]:
            c = 0
            while c < min(len(p), len(q)) and p[c] == q[c]:
                c += 1
            common = max(common, c)
        a = min(common, len(p) - 1)
        adopted.append(a)
        copies += 1 if a % B else 0
        n = len(p) + n_decoded
        blocks = -(-n // B)
        alone += blocks
        own += blocks - a // B
    return {"mapped": own, "unshared": alone, "bytes_saved": (alone - own) * bytes_per_block,
            "copies_on_write": copies, "positions_adopted": sum(adopted), "adopted": adopted,
            "shared_blocks": max([a // B for a in adopted[1:]], default=0)}


def check(name, got, want):
    for k, v in want.items():
        if got.get(k) != v:
            fail("%s: %s = %r, expected %r (computed from the token counts)\n%s" % (name, k, got.get(k), v, json.dumps(got, indent=1)))
    print("  %-34s %s" % (name, ", ".join("%s %s" % (k, want[k]) for k in ("mapped", "unshared", "copies_on_write",
                                                                           "positions_adopted", "shared_blocks"))))


def check_figure(path, tables):
    """Save figure's block tables: each mapped cell holds its pool block's id ("#b"), row by row as the tables,
    and is shaded by how many sequences map that block (cells of equal count alike, of different counts not)."""
    import xml.etree.ElementTree as ET
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.parse(path).getroot()
    texts = [(float(t.get("y")), float(t.get("x")), t.text) for t in root.iter(ns + "text") if (t.text or "").startswith("#")]
    ys = sorted({round(y) for y, _, _ in texts})
    got = [[int(txt[1:]) for y, x, txt in sorted(texts, key=lambda t: t[1]) if round(y) == row] for row in ys]
    want = [[b for b in t if b >= 0] for t in tables]
    if got != [w for w in want if w]:
        fail("memory figure: block ids per row %s, the tables say %s" % (got, want))
    # A cell's fill: the rect whose box holds the text's anchor.
    rects = [(float(r.get("x")), float(r.get("y")), float(r.get("width")), float(r.get("height")), r.get("fill"))
             for r in root.iter(ns + "rect") if r.get("fill", "").startswith("#") and r.get("x") is not None]
    count = {}
    for t in tables:
        for b in t:
            if b >= 0:
                count[b] = count.get(b, 0) + 1
    fill_of = {}
    for y, x, txt in texts:
        fills = [f for rx, ry, rw, rh, f in rects if rx <= x < rx + rw and ry <= y - 4 < ry + rh and rw < 200]
        if not fills:
            fail("memory figure: no cell under the text %s" % txt)
        fill_of.setdefault(count[int(txt[1:])], set()).add(fills[-1])
    if any(len(f) != 1 for f in fill_of.values()) or len({next(iter(f)) for f in fill_of.values()}) != len(fill_of):
        fail("memory figure: cell shades do not follow the sharer counts %s" % fill_of)
    print("  memory figure: %d mapped cells, ids and shades as the tables (sharer counts %s)" % (
        len(texts), sorted(fill_of)))


def case(a, title, prompt, suffixes, work):
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    D = cfg["n_embd"] // cfg["n_head"]
    bpb = 2 * cfg["n_layer"] * cfg["n_head"] * B * D * 4
    base = n_tokens(a.kvscope, prompt)
    prompts = [base + (n_tokens(a.kvscope, s) if s else []) for s in suffixes]
    os.makedirs(work, exist_ok=True)
    j = lambda n: os.path.join(work, n + ".json")
    lines = ["options block=%d share=1 seqs=%d temperature=0.8 max-new=8" % (B, N), "prompt " + prompt]
    lines += ["suffix %d %s" % (i, s) for i, s in enumerate(suffixes) if s]
    fig_dir = os.path.join(work, "export")
    lines += ["prefill", "memory-json " + j("prefill"), "export-dir " + fig_dir, "export-format svg",
              "save-figure memory mem", "decode 5", "memory-json " + j("decode5"),
              "back 2", "memory-json " + j("back2"), "show-step 0", "sequence 1", "memory-json " + j("shown0")]
    script(a.kvscope, work, "memory", lines, (W, H), model=a.model)
    shot = os.path.join(work, "memory.png")
    print("%s: prompt lengths %s" % (title, [len(p) for p in prompts]))
    got = {n: read_json(j(n)) for n in ("prefill", "decode5", "back2", "shown0")}
    after_prefill = expected(prompts, 0, bpb)
    check("after prefill", got["prefill"], after_prefill)
    if got["prefill"]["this_step"]["copied"] != after_prefill["copies_on_write"]:
        fail("prefill step: %d blocks outlined as copied on write, expected %d" % (
            got["prefill"]["this_step"]["copied"], after_prefill["copies_on_write"]))
    tables = got["prefill"]["tables"]
    for i in range(1, N):
        k = after_prefill["adopted"][i] // B
        if tables[i][:k] != tables[0][:k] or (len(tables[i]) > k and tables[i][k] in tables[0]):
            fail("sequence %d's table %s should map exactly its first %d blocks to sequence 0's %s" % (i, tables[i], k, tables[0]))
    check_figure(os.path.join(fig_dir, "figures", "mem_block_tables.svg"), tables)
    # Each decode step writes one position: after the prefill n = P positions, after d decodes P + d.
    check("after 5 decodes", got["decode5"], dict(expected(prompts, 5, bpb), copies_on_write=after_prefill["copies_on_write"]))
    check("after stepping back 2", got["back2"], dict(expected(prompts, 3, bpb), copies_on_write=after_prefill["copies_on_write"]))
    if got["shown0"] != got["prefill"]:
        fail("viewing step 0 of sequence 1 should show the pool as after the prefill step")
    img = read_png(shot)
    # The batch became paged, so the window shows the Memory workspace: its panel, where the layout dump says.
    layout = read_json(os.path.join(work, "memory.json"))
    if layout["state"].get("workspace") != "Memory" or "Memory" not in layout["windows"]:
        fail("the paged batch did not open the Memory workspace (workspace %r, windows %s)" % (
            layout["state"].get("workspace"), sorted(layout["windows"])))
    x0, y0, x1, y1 = (int(v) for v in layout["windows"]["Memory"])
    region = img[y0 + 4:y1 - 4, x0 + 4:x1 - 4].reshape(-1, 3).astype(int)
    busy = np.mean(np.abs(region - np.array([28, 28, 33])).sum(axis=1) > 24)
    print("  memory panel: %.1f%% non-background" % (100 * busy))
    if busy < 0.05:
        fail("the Memory panel looks empty in %s" % shot)


def prompt_cache_case(a, work):
    """prompt-cache FILE: the first prefill writes FILE, a longer prompt then loads the matching positions
    (never its last one); a damaged FILE is refused with one line and left as it was."""
    os.makedirs(work, exist_ok=True)
    first, second = "The cat sat on the mat because it was", "The cat sat on the mat because it was tired"
    t1, t2 = n_tokens(a.kvscope, first), n_tokens(a.kvscope, second)
    lcp = 0
    while lcp < min(len(t1), len(t2)) and t1[lcp] == t2[lcp]:
        lcp += 1
    want = min(lcp, len(t2) - 1)
    pc, j1, j2 = (os.path.join(work, n) for n in ("prompt.kvcache", "first.json", "second.json"))
    script(a.kvscope, work, "prompt_cache", ["prompt-cache " + pc, "prompt " + first, "prefill", "memory-json " + j1,
                                             "prompt " + second, "prefill", "memory-json " + j2],
           (W, H), model=a.model, dump=False, shot=False)
    got1 = read_json(j1)["not_computed"][0]["prompt_cache"]
    got2 = read_json(j2)["not_computed"][0]["prompt_cache"]
    print("prompt cache: first prefill loaded %d (file absent, then written), second %d of %d (expected %d)" % (
        got1, got2, len(t2), want))
    if got1 != 0 or got2 != want or not os.path.exists(pc):
        fail("prompt cache: loaded %d then %d positions, expected 0 then %d" % (got1, got2, want))
    bad = os.path.join(work, "damaged.kvcache")
    with open(bad, "wb") as f:
        f.write(b"KVPROMPT" + bytes(range(200)))
    before = open(bad, "rb").read()
    p = script(a.kvscope, work, "damaged", ["prompt-cache " + bad, "prompt " + first, "prefill"], (W, H), model=a.model,
               dump=False, shot=False, expect_ok=False)
    lines = error_lines(p)
    print("damaged prompt cache -> exit %d: %s" % (p.returncode, lines[0] if lines else ""))
    if p.returncode == 0 or len(lines) != 1 or bad not in lines[0]:
        fail("damaged prompt cache: expected one error line naming the file and a non-zero exit, got %d %r" % (
            p.returncode, p.stderr))
    if open(bad, "rb").read() != before or [n for n in os.listdir(work) if n.endswith(".tmp")]:
        fail("damaged prompt cache: the file was changed or a temporary file was left behind")


def main():
    a = arguments(assets=False, model=True)
    case(a, "identical prompts", "The cat sat on the mat because it", ["", "", ""], os.path.join(a.work, "same"))
    case(a, "system prompt + suffixes", "You are a helpful assistant. Answer briefly.",
         ["", " What is a cat?", " Where is the mat?"], os.path.join(a.work, "suffixes"))
    prompt_cache_case(a, os.path.join(a.work, "prompt_cache"))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
