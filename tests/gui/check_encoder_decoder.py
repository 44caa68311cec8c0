#!/usr/bin/python3
"""GUI test for encoder-decoder models: drive `kvscope gui --script` under Xvfb as a new user would, and
check what the Attention and KV cache panels show against computations that do not go through the GUI.

  A. start on the default (decoder-only) model, load assets/encoder-decoder with the `model` line (the
     Model panel's picker sends the same intent) and press prefill / decode with nothing typed: the
     default source and an empty prompt must step at once, the decoder input beginning with the start
     token;
  B. type a source and a prompt, prefill, decode, and write the maps the Attention panel shows
     (`attention-json`: cross at a decode step and at the prefill step, the encoder's own map). Checks:
       - the cross map has S columns, labelled with the source's token ids, and one row per decoder query;
       - its weights equal `kvscope generate --trace` (cross_lXX_hYY_weights.npy) for the same run;
       - its weights equal the cross-attention of tools/kvscope_reference/encoder_decoder.py, an independent
         PyTorch model written from the reference document (float64), row for row by decoder position;
       - the encoder map (S x S, no mask) equals that reference's encoder attention;
       - the KV cache panel drew the self cache and the cross cache (K and V), the timeline its encoder
         note, Controls the source box and the decoder start chip (--layout-dump rectangles);
  C. `source` on a decoder-only model fails with one line naming the script line.

Needs xvfb-run, /usr/bin/python3 with numpy, PIL and torch (python3-torch). Usage:
  check_encoder_decoder.py --kvscope BUILD/app/kvscope --assets REPO/assets --work DIR
"""
import json
import os
import sys

import numpy as np

from guitest import arguments, error_lines, fail, read_json, read_png, run, script, skip

SOURCE = "the cat sat on the mat"
DEFAULT_SOURCE = "the cat sat on the mat"  # kDefaultSource in app/gui/logic/commands.h
PROMPT = "le"
N_DECODE = 3                               # decode steps after the prefill
LAYER, HEAD = 1, 2
W, H = 1600, 1000


def check_map(name, got, want, tol):
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        fail("%s: shape %s, expected %s" % (name, got.shape, want.shape))
    d = np.abs(got - want)
    print("  %-44s %s  max|d| %.2e" % (name, "x".join(map(str, got.shape)), d.max()))
    if d.max() > tol:
        i = np.unravel_index(np.argmax(d), d.shape)
        fail("%s differs at %s: %.7g vs %.7g" % (name, i, got[i], want[i]))


def reference(assets, work, source, prompt, n_new):
    """The independent model: greedy run, cross-attention of the whole decoder input, encoder attention."""
    root = os.path.join(os.path.dirname(assets), "tools")
    sys.path.insert(0, root)
    import torch
    from kvscope_reference import encoder_decoder as ed
    folder = os.path.join(assets, "encoder-decoder")
    out = os.path.join(work, "reference_cross.npy")
    p = run(["/usr/bin/python3", os.path.join(root, "kvscope_reference", "encoder_decoder.py"), "--model", folder,
             "--source", source, "--prompt", prompt, "--max-new-tokens", str(n_new), "--dump-cross-attention", out])
    info = json.loads(p.stdout)
    model = ed.EncoderDecoder(folder, torch.float64)
    with torch.no_grad():
        model.encode(info["source_ids"])
    encoder_attention = [w.numpy() for w in model.encoder_attention]  # per layer [H, S, S]
    return info, np.load(out), encoder_attention


def main():
    a = arguments()
    try:
        import torch  # noqa: F401
    except ImportError:
        skip("torch not found for /usr/bin/python3 (apt install python3-torch)")
    ed_model = os.path.join(a.assets, "encoder-decoder")
    w = lambda name: os.path.join(a.work, name)  # noqa: E731

    # A. The picker's LoadModel intent, then stepping with nothing typed.
    print("A. load the encoder-decoder from the default model, step at once:")
    script(a.kvscope, a.work, "load", ["model " + ed_model, "prefill", "decode 1", "attention cross",
                                       "attention-json " + w("load_cross.json")], (W, H), model=os.path.join(a.assets, "default"),
           dump=False)
    m = read_json(w("load_cross.json"))
    info, _, _ = reference(a.assets, a.work, DEFAULT_SOURCE, "", 2)
    if m["key_ids"] != info["source_ids"]:
        fail("default source: the cross map's columns are %s, the reference tokenizes '%s' as %s"
             % (m["key_ids"], DEFAULT_SOURCE, info["source_ids"]))
    # Step 1 is the first decode: its query is position 1, the token chosen after the start token alone.
    if m["step"] != 1 or m["query_positions"] != [1] or m["query_ids"] != [info["decoder_input_ids"][1]]:
        fail("after prefill + decode 1 from the start token: query %s ids %s, expected position 1 id %d"
             % (m["query_positions"], m["query_ids"], info["decoder_input_ids"][1]))
    print("  default source '%s' = %d tokens, empty prompt: decoder input starts %s, as the reference"
          % (DEFAULT_SOURCE, len(m["key_ids"]), info["decoder_input_ids"][:2]))

    # B. A typed source and prompt; the maps the panel shows.
    print("B. source '%s', prompt '%s', prefill + %d decode steps:" % (SOURCE, PROMPT, N_DECODE))
    dump, shot = w("main.json"), w("main.png")
    lines = ["source " + SOURCE, "prompt " + PROMPT, "prefill", "decode %d" % N_DECODE,
             "layer %d" % LAYER, "head %d" % HEAD, "attention cross", "attention-json " + w("cross_last.json"),
             "show-step 0", "attention-json " + w("cross_first.json"),
             "attention encoder", "layer 0", "attention-json " + w("encoder_l0.json"),
             "layer 1", "attention-json " + w("encoder_l1.json"),
             "view all-heads", "frames 2", "view one-head", "layer %d" % LAYER,
             "attention cross", "show-step newest"]
    script(a.kvscope, a.work, "main", lines, (W, H), model=ed_model)
    # The same session in the Cache workspace: both caches in the KV cache panel.
    script(a.kvscope, a.work, "main_cache", lines + ["workspace Cache"], (W, H), model=ed_model)

    trace = w("trace")
    run([a.kvscope, "generate", "--model", ed_model, "--source", SOURCE, "--prompt", PROMPT,
         "--max-new-tokens", str(N_DECODE + 1), "--trace", trace])
    with open(os.path.join(trace, "step_0000", "meta.json")) as f:
        source_ids = json.load(f)["encoder"]["source"]["ids"]
    info, ref_cross, ref_encoder = reference(a.assets, a.work, SOURCE, PROMPT, N_DECODE + 1)
    if info["source_ids"] != source_ids:
        fail("kvscope tokenizes the source as %s, the reference as %s" % (source_ids, info["source_ids"]))
    S = len(source_ids)
    dec = info["decoder_input_ids"]  # start + prompt + generated[:-1]: every token the decoder read

    tag = "cross_l%02d_h%02d_weights.npy" % (LAYER, HEAD)
    for name, step in (("cross_first.json", 0), ("cross_last.json", N_DECODE)):
        m = read_json(w(name))
        if m["kind"] != "cross" or m["step"] != step or (m["layer"], m["head"]) != (LAYER, HEAD):
            fail("%s: shows %s step %d layer %d head %d" % (name, m["kind"], m["step"], m["layer"], m["head"]))
        if m["n_key"] != S or m["key_ids"] != source_ids or m["key_positions"] != list(range(S)):
            fail("%s: %d columns with ids %s, expected the %d source tokens %s" % (name, m["n_key"], m["key_ids"], S, source_ids))
        q = m["query_positions"]
        if m["query_ids"] != [dec[p] for p in q]:
            fail("%s: query tokens %s, the reference read %s at positions %s" % (name, m["query_ids"], [dec[p] for p in q], q))
        print("  %s: step %d, %d decoder queries (positions %s) x %d source tokens" % (name, step, len(q), q, S))
        weights = np.asarray(m["weights"])
        if np.abs(weights.sum(axis=1) - 1).max() > 1e-5:
            fail("%s: rows do not sum to 1 (no mask in cross-attention)" % name)
        check_map("vs kvscope generate --trace %s" % tag, weights,
                  np.load(os.path.join(trace, "step_%04d" % step, tag)).astype(np.float64), 1e-6)
        check_map("vs reference cross-attention [l%d, h%d, rows %d..%d]" % (LAYER, HEAD, q[0], q[-1]), weights,
                  ref_cross[LAYER, HEAD, q[0]:q[-1] + 1, :].astype(np.float64), 1e-4)

    for il in (0, 1):
        m = read_json(w("encoder_l%d.json" % il))
        if m["kind"] != "encoder" or (m["n_query"], m["n_key"]) != (S, S) or m["key_ids"] != source_ids:
            fail("encoder map layer %d: %s %dx%d, expected encoder %dx%d over the source" % (il, m["kind"], m["n_query"], m["n_key"], S, S))
        check_map("encoder l%d h%d vs reference encoder attention" % (il, HEAD), m["weights"], ref_encoder[il][HEAD], 1e-4)
        check_map("encoder l%d h%d vs generate --trace" % (il, HEAD), m["weights"],
                  np.load(os.path.join(trace, "step_0000", "encoder_l%02d_h%02d_weights.npy" % (il, HEAD))).astype(np.float64), 1e-6)

    # What was drawn: the widgets of both caches, the source box, the start chip, the timeline note.
    widgets = read_json(dump)["widgets"]
    widgets.update({n: r for n, r in read_json(w("main_cache.json"))["widgets"].items() if n not in widgets})
    state = read_json(dump)["state"]
    if state["steps"] != N_DECODE + 1 or state["attention"] != "cross" or state["source"] != SOURCE:
        fail("layout dump state %s" % state)
    kv = widgets.get("KV cache")
    for name in ("source", "decoder start chip", "attention cross", "attention encoder", "attention map", "self cache title",
                 "cross cache title", "cross K", "cross V", "timeline encoder note"):
        r = widgets.get(name)
        if not r or r[2] <= r[0] or r[3] <= r[1]:
            fail("widget '%s' was not drawn (layout dump: %s)" % (name, r))
    for name in ("self cache title", "cross K", "cross V"):
        r = widgets[name]
        if not (kv[0] <= r[0] and r[2] <= kv[2] and kv[1] <= r[1] and r[3] <= kv[3]):
            fail("'%s' %s lies outside the KV cache panel %s" % (name, r, kv))
    img = read_png(shot)
    if img.shape != (H, W, 3) or np.unique(img.reshape(-1, 3), axis=0).shape[0] < 1000:
        fail("screenshot %s looks blank or has the wrong size" % shot)
    print("  drawn: source box, start chip, self + cross cache (K, V) inside the KV cache panel, encoder note; %s" % shot)

    # C. A source for a decoder-only model: one error line.
    print("C. source on a decoder-only model:")
    p = script(a.kvscope, a.work, "bad", ["source hello"], (W, H), model=os.path.join(a.assets, "default"), dump=False,
               expect_ok=False)
    lines = error_lines(p)
    if p.returncode == 0 or len(lines) != 1 or "bad.txt:1" not in lines[0] or "decoder-only" not in lines[0]:
        fail("expected one error line naming bad.txt:1 and decoder-only, got %d %r" % (p.returncode, p.stderr))
    print("  exit %d: %s" % (p.returncode, lines[0]))
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
