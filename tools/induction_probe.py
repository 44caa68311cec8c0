#!/usr/bin/python3
"""Does a model folder copy WHATEVER repeats? An independent check of the default model (issue 18).

Independent of kvscope's C++ engine and of its corpus generator (core/text/corpus.cpp): a plain numpy GPT-2
forward of model.safetensors, and its own RNG (numpy's PCG64, seeded here) drawing tokens of four kinds
straight from vocab.json. Llama-family folders (config.json model_type llama, qwen2, qwen3, mistral,
gemma3_text; issue 46's chat model) run through tools/kvscope_reference/llama.py's LlamaModel instead (the
PyTorch HF-semantics reference, sliding layers included) in float64 like the numpy path, on one torch thread
(on the chat model float32 gave the same report and saved a fifth of the ~10 s), and their tokens come from
tokenizer.json's model.vocab when there is no vocab.json (byte-level BPE; every added or <|...|> token is
skipped). Kinds:

  chars    tokens that decode to one printable ASCII character ("a", "%", "Q", "7")
  words    tokens that decode to letters only, at least 3 of them, with or without a leading space
           (" the", "ing", " garden")
  digpunct tokens that decode to digits and ASCII punctuation only (spaces allowed, at least one
           non-space): "7", " 25", ".\\"", "?"
  ids      any id but <|endoftext|>, uniformly

Tests (greedy decoding, checked in one forward of prompt + wanted tokens; the first failures are decoded
token by token, with a full recompute per token, to show what came instead):
  copy12   issue 18's test: a 12-token span, then its first 4 tokens -> are the next 8 the rest of the span?
  copyvar  a random-length prefix (0-40 ids of any kind), a span of 6-30, 0-30 random ids, the span's first
           4 -> the rest: periods, lengths and positions the test draws itself
  copyrep  a 20-token span drawn WITH replacement from 40 tokens of the kind, then its first 5 -> the other
           15: tokens repeat inside the span, so one token of context is ambiguous and the token before it
           must decide (the repository's letter/digit copying test, for every kind)
The spans of copy12 and copyvar have no token twice (drawn without replacement), so one token of context
decides what follows.
Attention (per head, averaged over the copy12 prompts of a kind, span repeated whole):
  prev     mean weight from position t to t-1
  ind      mean weight from the second occurrence of span token i to the first occurrence of token i+1

  /usr/bin/python3 tools/induction_probe.py DIR [--n 10] [--seed 2718] [--json] [--check] [--remove-head L H ...]
                                             [--window-override L W ...]
      --remove-head L H: zero head H of layer L's output projection first (an ablation; repeatable): GPT-2's
      c_proj rows, a Llama-family o_proj's columns h*D..(h+1)*D-1
      --window-override L W: run layer L as a sliding layer of window W (a query at i sees keys i-W+1..i;
      repeatable; on gemma3_text the layer then also takes the sliding layers' rope_local_base_freq, as
      Hugging Face's sliding layers do). The ablation of issue 46: an induction head cannot live in a
      short-window layer. A copied token's first occurrence lies 12 (copy12), 20 (copyrep) or 6-60
      (copyvar) positions back and ind looks 11 back: in issue 46's chat model (layer 0 slides with window
      8, layer 2 holds the induction heads) --window-override 2 8 takes copying from 10/10 to 0/10 for
      every kind and layer 2's ind to 0, while --window-override 1 8 leaves it
      --check: exit 1 unless copy12 continues >= 90 % of the spans for at least three kinds (issue 18's bar;
      the ctest train.default_copies_any_tokens runs it on assets/default)
  /usr/bin/python3 tools/induction_probe.py DIR --pattern N GAP
      the search's quick look (docs/default_model_search.md): on 6 prompts "N random ids, GAP random ids,
      the same N ids", teacher-forced copy accuracy and, per head, the mean attention from each copied token
      to itself, the previous position, its first occurrence (dup), the token after it (ind: the induction
      target) and the token before it (ind-1)
"""
import argparse
import json
import os
import string
import struct
import sys

import numpy as np

LLAMA_FAMILY = ("llama", "qwen2", "qwen3", "mistral", "gemma3_text")


def load(d):
    raw = open(f"{d}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    w = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            sys.exit(f"induction_probe: {k} is {v['dtype']}, only F32 is read")
        a, b = v["data_offsets"]
        w[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(v["shape"]).astype(np.float64)
    return json.load(open(f"{d}/config.json")), w


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, w, ids, windows=None):
    """ids (T,) -> logits (T, V), attention weights per layer (H, T, T). windows: {layer: W} of --window-override."""
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    D, T = C // H, len(ids)
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    atts = []
    for il in range(L):
        h = f"h.{il}."
        qkv = layer_norm(x, w[h + "ln_1.weight"], w[h + "ln_1.bias"]) @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, H, D).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
        s[:, mask] = -np.inf
        if windows and il in windows:  # a sliding layer: key j only when i - j < W
            s[:, np.subtract.outer(np.arange(T), np.arange(T)) >= windows[il]] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        a = s / s.sum(-1, keepdims=True)
        atts.append(a)
        x = x + (a @ v).transpose(1, 0, 2).reshape(T, C) @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        f = gelu(layer_norm(x, w[h + "ln_2.weight"], w[h + "ln_2.bias"]) @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
        x = x + f @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    return layer_norm(x, w["ln_f.weight"], w["ln_f.bias"]) @ w["wte.weight"].T, atts


def byte_decoder():
    # GPT-2's bytes_to_unicode, inverted: vocab.json spells each byte as one printable character
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Gpt2:
    """A GPT-2 folder through the numpy forward above: model(ids) -> (logits (T, V), attention (H, T, T) per layer)."""

    def __init__(self, d):
        self.cfg, self.w = load(d)
        cfg = self.cfg
        self.n_layer, self.n_head, self.n_positions = cfg["n_layer"], cfg["n_head"], cfg["n_positions"]
        self.n_vocab = self.w["wte.weight"].shape[0]
        self.windows = {}

    def remove_head(self, il, h):
        D = self.cfg["n_embd"] // self.n_head
        self.w[f"h.{il}.attn.c_proj.weight"][h * D:(h + 1) * D, :] = 0  # rows = the head's slice of the concatenated heads

    def set_window(self, il, window):
        self.windows[il] = window

    def __call__(self, ids):
        return forward(self.cfg, self.w, ids, self.windows)


class Llama:
    """A Llama-family folder through tools/kvscope_reference/llama.py (PyTorch, Hugging Face semantics); the same
    model(ids) -> (logits (T, V), attention (H, T, T) per layer) as Gpt2, float64 numpy arrays."""

    def __init__(self, d):
        try:
            import torch
        except ImportError:
            sys.exit("induction_probe: Llama-family folders need PyTorch: run /usr/bin/python3 (python3-torch)")
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from kvscope_reference.llama import LlamaModel
        torch.set_num_threads(1)  # tiny matrices: one thread is as fast and leaves the other core alone
        self.torch = torch
        try:
            self.m = LlamaModel(d, torch.float64)
        except (OSError, KeyError, ValueError) as e:
            sys.exit(f"induction_probe: {d}: cannot load the model: {e}")
        cfg = self.m.cfg
        self.n_layer, self.n_head = cfg["num_hidden_layers"], self.m.H
        self.n_positions = cfg["max_position_embeddings"]
        self.n_vocab = self.m.w["model.embed_tokens.weight"].shape[0]

    def remove_head(self, il, h):
        D = self.m.D  # o_proj.weight is [C, H*D]: head h owns columns h*D..(h+1)*D-1
        self.m.w[f"model.layers.{il}.self_attn.o_proj.weight"][:, h * D:(h + 1) * D] = 0

    def set_window(self, il, window):
        self.m.cfg["layer_windows"][il] = window

    def __call__(self, ids):
        self.m.attention_record = []
        with self.torch.no_grad():
            logits = self.m.forward([int(i) for i in ids])
        return logits.numpy(), [a.numpy() for a in self.m.attention_record]


def open_model(d):
    try:
        with open(f"{d}/config.json") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"induction_probe: {d}/config.json: {e}")
    model_type = cfg.get("model_type", "gpt2")
    if model_type in LLAMA_FAMILY:
        return Llama(d)
    if model_type != "gpt2":
        sys.exit(f"induction_probe: {d}: model_type {model_type!r} is not read here (gpt2, {', '.join(LLAMA_FAMILY)})")
    try:
        return Gpt2(d)
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"induction_probe: {d}: cannot load the model: {e}")


def read_vocab(d):
    """{token: id}: vocab.json, else tokenizer.json's model.vocab (byte-level BPE) without its added tokens."""
    if os.path.exists(f"{d}/vocab.json"):
        return json.load(open(f"{d}/vocab.json"))
    try:
        with open(f"{d}/tokenizer.json") as f:
            tok = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"induction_probe: {d} has no vocab.json and no readable tokenizer.json: {e}")
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or (tok.get("decoder") or {}).get("type") != "ByteLevel":
        sys.exit(f"induction_probe: {d}/tokenizer.json: only byte-level BPE tokenizers are read "
                 f"(model {model.get('type')}, decoder {(tok.get('decoder') or {}).get('type')})")
    added = {t["content"] for t in tok.get("added_tokens", [])}
    return {t: i for t, i in model["vocab"].items() if t not in added}


def token_kinds(d, n_vocab):
    vocab = read_vocab(d)
    dec = byte_decoder()
    kinds = {"chars": [], "words": [], "digpunct": [], "ids": []}
    printable = set(string.ascii_letters + string.digits + string.punctuation)
    for tok, i in vocab.items():
        if tok.startswith("<|") and tok.endswith("|>"):
            continue
        kinds["ids"].append(i)
        try:
            text = bytes(dec[c] for c in tok).decode("ascii")
        except (KeyError, UnicodeDecodeError):
            continue
        if len(text) == 1 and text in printable:
            kinds["chars"].append(i)
        core = text[1:] if text.startswith(" ") else text
        if len(core) >= 3 and core.isalpha():
            kinds["words"].append(i)
        if text.strip() and all(c in string.digits + string.punctuation + " " for c in text):
            kinds["digpunct"].append(i)
    if len(kinds["ids"]) < 30:
        sys.exit(f"induction_probe: {d}: the tokenizer has {len(kinds['ids'])} ordinary tokens, the probe needs 30")
    if not 0 <= min(kinds["ids"]) <= max(kinds["ids"]) < n_vocab:
        sys.exit(f"induction_probe: {d}: the tokenizer has id {max(kinds['ids'])}, past the model's {n_vocab} rows")
    for k in [k for k, v in kinds.items() if len(v) < 30]:  # copyvar draws up to 30 distinct tokens of a kind
        print(f"induction_probe: {len(kinds.pop(k))} {k} tokens, fewer than 30: {k} is not probed", file=sys.stderr)
    return {k: np.array(sorted(v)) for k, v in kinds.items()}


def greedy(model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        logits, _ = model(np.array(ids))
        ids.append(int(logits[-1].argmax()))
    return ids[len(prompt):]


def greedy_gives(model, prompt, want):
    """greedy(model, prompt, len(want)) == want, from one forward of prompt + want: the model is causal, so greedy
    decoding continues with `want` exactly when every position's top token is the next wanted one."""
    logits, _ = model(np.array(list(prompt) + list(want[:-1])))
    return bool((logits[len(prompt) - 1:].argmax(-1) == np.array(want)).all())


def pattern(model, kinds, rng, n, gap, R=6):
    L, H = model.n_layer, model.n_head
    m = {k: np.zeros((L, H)) for k in ["self", "prev", "dup", "ind", "ind-1"]}
    acc = 0
    for _ in range(R):
        span = rng.choice(kinds["ids"], n, replace=False)
        ids = np.concatenate([span, rng.choice(kinds["ids"], gap), span])
        off = n + gap
        logits, atts = model(ids)
        q = np.arange(off + 1, off + n - 1)  # copied tokens with a token before and after them in the span
        acc += (logits[off:off + n - 1].argmax(-1) == ids[off + 1:off + n]).mean() / R
        for il in range(L):
            for k, key in (("self", q), ("prev", q - 1), ("dup", q - off), ("ind", q - off + 1), ("ind-1", q - off - 1)):
                m[k][il] += atts[il][:, q, key].mean(-1) / R
    print(f"span {n} + gap {gap} + span, random ids: teacher-forced copy accuracy {acc:.2f}")
    for k, v in m.items():
        print(f"  {k:6s}" + " | ".join(" ".join(f"{x:.2f}" for x in v[il]) for il in range(L)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--n", type=int, default=10, help="spans per kind and test")
    ap.add_argument("--seed", type=int, default=2718)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--pattern", nargs=2, type=int, metavar=("N", "GAP"))
    ap.add_argument("--remove-head", nargs=2, type=int, metavar=("LAYER", "HEAD"), action="append", default=[],
                    help="zero that head's output projection first (repeatable): what does copying need?")
    ap.add_argument("--window-override", nargs=2, type=int, metavar=("LAYER", "W"), action="append", default=[],
                    help="run that layer as a sliding layer of window W (repeatable): can a short window copy?")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless issue 18's bar holds: copy12 >= 9 of 10 for at least three kinds")
    a = ap.parse_args()
    model = open_model(a.dir)
    L, H = model.n_layer, model.n_head
    kinds = token_kinds(a.dir, model.n_vocab)
    for il, h in a.remove_head:
        if not (0 <= il < L and 0 <= h < H):
            sys.exit(f"induction_probe: --remove-head {il} {h}: no such head")
        model.remove_head(il, h)
    for il, window in a.window_override:
        if not (0 <= il < L and window >= 1):
            sys.exit(f"induction_probe: --window-override {il} {window}: wants a layer 0..{L - 1} and a window >= 1")
        model.set_window(il, window)
    if not a.pattern and isinstance(model, Gpt2) and model.n_positions < 130:
        sys.exit(f"induction_probe: {a.dir}: n_positions {model.n_positions}, the copyvar prompts need 130")
    rng = np.random.default_rng(a.seed)
    rep_rng = np.random.default_rng([a.seed, 1])  # its own stream: copy12 and copyvar draw as before it existed
    if a.pattern:
        n, gap = a.pattern
        if n < 3 or gap < 0 or 2 * n + gap > model.n_positions:
            sys.exit(f"induction_probe: --pattern wants N >= 3, GAP >= 0, 2N + GAP <= {model.n_positions}")
        return pattern(model, kinds, rng, n, gap)
    report = {}
    for kind, pool in kinds.items():
        r = {"pool": int(len(pool)), "copy12": 0, "copyvar": 0, "fails": []}
        prev, ind = np.zeros((L, H)), np.zeros((L, H))
        for _ in range(a.n):
            span = rng.choice(pool, 12, replace=False)
            r["copy12"] += greedy_gives(model, list(span) + list(span[:4]), list(span[4:]))
            _, atts = model(np.concatenate([span, span]))
            q = np.arange(12, 23)
            t = np.arange(1, 24)
            for il in range(L):
                ind[il] += atts[il][:, q, q - 11].mean(-1) / a.n
                prev[il] += atts[il][:, t, t - 1].mean(-1) / a.n
        for _ in range(a.n):
            n = int(rng.integers(6, 31))
            span = list(rng.choice(pool, n, replace=False))
            pre = list(rng.choice(kinds["ids"], int(rng.integers(0, 41))))
            gap = list(rng.choice(kinds["ids"], int(rng.integers(0, 31))))
            ok = greedy_gives(model, pre + span + gap + span[:4], span[4:])
            r["copyvar"] += ok
            if not ok and len(r["fails"]) < 2:
                out = greedy(model, pre + span + gap + span[:4], n - 4)
                r["fails"].append({"span": [int(x) for x in span], "got": [int(x) for x in out],
                                   "prefix": len(pre), "gap": len(gap)})
        r["copyrep"] = 0
        for _ in range(a.n):
            span = list(rep_rng.choice(rep_rng.choice(pool, min(40, len(pool)), replace=False), 20))
            ok = greedy_gives(model, span + span[:5], span[5:])
            r["copyrep"] += ok
            if not ok and len(r["fails"]) < 3:
                r["fails"].append({"span": [int(x) for x in span], "test": "copyrep"})
        r["prev"] = prev.round(3).tolist()
        r["ind"] = ind.round(3).tolist()
        r["best_prev"] = float(prev.max().round(3))
        r["best_ind"] = float(ind.max().round(3))
        report[kind] = r
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print_report(report, a.n, L)
    if a.check:
        passed = [k for k, r in report.items() if r["copy12"] >= 0.9 * a.n]
        if len(passed) < 3:
            sys.exit(f"induction_probe: copy12 >= 90 % for {len(passed)} kinds ({', '.join(passed) or 'none'}), "
                     "the bar is three")


def print_report(report, n, L):
    for kind, r in report.items():
        print(f"{kind:9s} pool {r['pool']:4d}  copy12 {r['copy12']}/{n}  copyvar {r['copyvar']}/{n}  copyrep {r['copyrep']}/{n}  "
              f"best prev {r['best_prev']:.3f}  best ind {r['best_ind']:.3f}")
        for il in range(L):
            print(f"   layer {il}: prev " + " ".join(f"{v:.2f}" for v in r["prev"][il]) +
                  " | ind " + " ".join(f"{v:.2f}" for v in r["ind"][il]))


if __name__ == "__main__":
    main()
