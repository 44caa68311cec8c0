#!/usr/bin/python3
"""The Logit lens tab against numpy, from the rows `kvscope generate --trace` exports.

On assets/llama-gqa (tied embeddings, RMSNorm) the window runs a prompt's prefill, selects query position
3 and shows the Logit lens tab. numpy reads residual.npy of the same prefill from the trace, applies
model.norm (RMSNorm in float64) and the embedding matrix as the output layer at every depth 0..L, and
takes the softmax: at each depth the tab's five tokens must be numpy's five most likely, with their
probabilities. The tab's last depth must be the full model's prediction there, and the lens must change
its answer between some two depths (or the tab would teach nothing on this model).

The caption of the "embeddings" row must say what it is and, from the numbers, whether it names the input
token: on assets/llama-gqa (tied) and the default model (GPT-2, learned positions) it does here; on an untied
random folder (tools/make_llama_model.py) its top is numpy's top of lm_head over the normed embedding, not the
input, and the caption says so, with numpy's token and percentage in every case.

The saved lens figure (default model, position 2, PNG at scale 1 and SVG): no masked-hatch legend (no cell
can be masked), and the colour bar's title "probability" drawn whole: its ink ends at least 4 px inside the
image's right edge.
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np

from guitest import arguments, fail, read_png, run, window

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
from kvscope_reference import safetensors_io  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog"
QPOS = 3
NS = "{http://www.w3.org/2000/svg}"


def lens_top(residual, norm, head, eps, layer_norm=None):
    """Depth 0's most likely token and its probability at every row of residual (L + 1, R, C)."""
    x = residual[0]
    if layer_norm is None:
        n = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * norm
    else:
        n = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + eps) * norm + layer_norm
    logits = n @ head.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p.argmax(axis=1), p.max(axis=1)


def check_caption(label, caption, top, prob, input_id, text_of, learned_positions):
    """The embeddings row's caption against numpy's depth-0 top token and the input token there."""
    if "embedding" not in caption or ("position vector" in caption) != learned_positions:
        fail("%s: the caption %r does not say what the embeddings row is" % (label, caption))
    pct = "(%.0f%%)" % (100 * prob)
    want = ("names the input token itself, '%s' %s" % (text_of(top), pct) if top == input_id
            else "names '%s' %s, not the input '%s'" % (text_of(top), pct, text_of(input_id)))
    if want not in caption:
        fail("%s: the caption %r does not say %r (numpy: top %d at %.4f, input %d)" % (label, caption, want, top, prob,
                                                                                       input_id))
    print("  ok %s: %r" % (label, caption))


def untied_case(a, work):
    """A random untied Llama folder: the embeddings row read through its own lm_head names another token."""
    sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")))
    import make_llama_model
    model = os.path.join(work, "untied")
    make_llama_model.write(model, vocab=300, seed=5, tied=False)
    ids = [5, 17, 250, 42, 99, 7]
    trace = os.path.join(work, "untied_trace")
    run([a.kvscope, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", "1",
         "--trace", trace])
    residual = np.load(os.path.join(trace, "step_0000", "residual.npy")).astype(np.float64)
    cfg = json.load(open(os.path.join(model, "config.json")))
    tensors, _, _ = safetensors_io.read_folder(model)
    tops, probs = lens_top(residual, tensors["model.norm.weight"].double().numpy(),
                           tensors["lm_head.weight"].double().numpy(), cfg["rms_norm_eps"])
    pos = next((i for i in range(len(ids)) if tops[i] != ids[i]), None)
    if pos is None:
        fail("untied folder: the embeddings row names the input token at every position; pick another seed")
    d = window(a.kvscope, model, work, "untied", (1280, 720), ["prompt " + ",".join(map(str, ids)), "prefill",
                                                               "select %d 0" % pos, "panel Logit lens"])
    # No tokenizer: the window names a token by its id, "<id>".
    check_caption("untied position %d" % pos, d["texts"].get("lens embeddings", ""), int(tops[pos]), probs[pos], ids[pos],
                  lambda i: "<%d>" % i, False)


def check_figure(a, work):
    """The default model's lens figure: no masked legend, the colour bar's title whole."""
    model = os.path.join(a.assets, "default")
    out = os.path.join(work, "fig_out")
    window(a.kvscope, model, work, "figure", (1280, 720),
           ["export-dir " + out, "prompt Tom saw the cookie at school. Tom saw the", "prefill", "select 2 0",
            "export-format png 1", "save-figure logit-lens fig", "export-format svg", "save-figure logit-lens fig"])
    root = ET.parse(os.path.join(out, "figures", "fig.svg")).getroot()
    texts = [(t.text or "", float(t.get("x")), float(t.get("y"))) for t in root.iter(NS + "text")]
    if any(t == "masked" for t, _, _ in texts):
        fail("lens figure: a 'masked' legend, but no cell of a logit lens can be masked")
    cells = [g for g in root.iter(NS + "g") if g.get("id") == "cells"]
    hatched = [r for r in root.iter(NS + "rect") if r.get("fill") == "url(#masked)" and not any(r in list(g) for g in cells)]
    if hatched:
        fail("lens figure: %d hatch sample(s) outside the cells" % len(hatched))
    bar = [(x, y) for t, x, y in texts if t == "probability"]
    if len(bar) != 1:
        fail("lens figure: want one colour-bar title 'probability', got %s" % [t for t, _, _ in texts])
    x, y = bar[0]
    png = read_png(os.path.join(out, "figures", "fig.png")).astype(int)
    band = png[int(y) - 12:int(y) + 4, int(x):]  # the title's line: its text sits 12 px above the SVG baseline
    ink = np.where((band.sum(axis=2) < 300).any(axis=0))[0]
    if len(ink) == 0 or int(x) + ink.max() > png.shape[1] - 5:
        fail("lens figure: the colour bar's title runs to the image's edge (ink to column %s of %d): it is cut"
             % (None if len(ink) == 0 else int(x) + ink.max(), png.shape[1]))
    print("  ok figure: no masked legend; 'probability' ends %d px inside the %d px image"
          % (png.shape[1] - 1 - (int(x) + ink.max()), png.shape[1]))


def main():
    a = arguments()
    model = os.path.join(a.assets, "llama-gqa")
    trace = os.path.join(a.work, "trace")
    # The generated text goes nowhere: a random model's token need not be valid UTF-8.
    p = subprocess.run([a.kvscope, "generate", "--model", model, "--prompt", PROMPT, "--max-new-tokens", "1",
                        "--trace", trace], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    if p.returncode != 0:
        fail("kvscope generate failed: %s" % p.stderr.decode(errors="replace"))
    residual = np.load(os.path.join(trace, "step_0000", "residual.npy")).astype(np.float64)  # (L + 1, R, C)
    cfg = json.load(open(os.path.join(model, "config.json")))
    tensors, _, _ = safetensors_io.read_folder(model)
    meta = json.load(open(os.path.join(trace, "step_0000", "meta.json")))
    norm = tensors["model.norm.weight"].double().numpy()
    head = (tensors["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else tensors["lm_head.weight"]).double().numpy()

    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        d = window(a.kvscope, model, a.work, "lens_" + label, size,
                   ["prompt " + PROMPT, "prefill", "select %d 0" % QPOS, "panel Logit lens"])
        t = d["texts"]
        if "position %d " % QPOS not in t.get("lens header", ""):
            fail("%s: the tab's header %r does not name position %d" % (label, t.get("lens header"), QPOS))
        tops = []
        for depth in range(residual.shape[0]):
            x = residual[depth, QPOS]
            n = x / np.sqrt(np.mean(x * x) + cfg["rms_norm_eps"]) * norm
            logits = head @ n
            p = np.exp(logits - logits.max())
            p /= p.sum()
            want = np.argsort(-p)[:5]
            shown = [(int(i), float(q)) for i, q in (w.split(":") for w in t.get("lens depth %d" % depth, "").split())]
            if len(shown) != 5:
                fail("%s: depth %d shows %r" % (label, depth, t.get("lens depth %d" % depth)))
            for rank, (i, q) in enumerate(shown):
                if i != int(want[rank]) and abs(p[i] - p[want[rank]]) > 1e-5:
                    fail("%s: depth %d rank %d shows token %d, numpy %d" % (label, depth, rank, i, int(want[rank])))
                if abs(q - p[i]) > 1e-5:
                    fail("%s: depth %d token %d probability %.6f, numpy %.6f" % (label, depth, i, q, p[i]))
            tops.append(shown[0][0])
        if len(set(tops)) < 2:
            fail("%s: every depth predicts token %d: the lens shows no change on this model" % (label, tops[0]))
        print("  ok %s: position %d, top token by depth %s = numpy" % (label, QPOS, tops))
        top0, prob0 = lens_top(residual[:, QPOS:QPOS + 1], norm, head, cfg["rms_norm_eps"])
        check_caption(label, t.get("lens embeddings", ""), int(top0[0]), prob0[0], meta["tokens"]["ids"][QPOS],
                      lambda i: meta["tokens"]["text"][meta["tokens"]["ids"].index(i)], False)

    # The default model (LayerNorm, learned positions) at " at": the row names the input token itself.
    default = os.path.join(a.assets, "default")
    dtrace = os.path.join(a.work, "default_trace")
    dprompt = "Tom saw the cookie at school. Tom saw the"
    run([a.kvscope, "generate", "--model", default, "--prompt", dprompt, "--max-new-tokens", "1", "--trace", dtrace])
    dmeta = json.load(open(os.path.join(dtrace, "step_0000", "meta.json")))
    dres = np.load(os.path.join(dtrace, "step_0000", "residual.npy")).astype(np.float64)
    dt, _, _ = safetensors_io.read_folder(default)
    dcfg = json.load(open(os.path.join(default, "config.json")))
    tops0, probs0 = lens_top(dres, dt["ln_f.weight"].double().numpy(), dt["wte.weight"].double().numpy(),
                             dcfg.get("layer_norm_epsilon", 1e-5), dt["ln_f.bias"].double().numpy())
    at = dmeta["tokens"]["text"].index(" at")
    d = window(a.kvscope, default, a.work, "lens_default", (1280, 720),
               ["prompt " + dprompt, "prefill", "select %d 0" % at, "panel Logit lens"])
    check_caption("default ' at'", d["texts"].get("lens embeddings", ""), int(tops0[at]), probs0[at],
                  dmeta["tokens"]["ids"][at], lambda i: dmeta["tokens"]["text"][dmeta["tokens"]["ids"].index(i)], True)
    untied_case(a, a.work)
    check_figure(a, a.work)
    print("ok: the Logit lens tab equals numpy's final norm and output layer over the exported residual stream")


if __name__ == "__main__":
    main()
