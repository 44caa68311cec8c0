#!/usr/bin/python3
"""Write kvscope's embedded default model, assets/default/: a small GPT-2 style model folder with a
byte-level BPE tokenizer, so `kvscope` works with text prompts and no download.

    /usr/bin/python3 tools/make_default_model.py assets/default          # (re)write the folder
    /usr/bin/python3 tools/make_default_model.py --check assets/default  # regenerate elsewhere, compare bytes
    ... --cases tests/data/default_tokenizer_cases.json   # also write text -> ids cases for tokenizer tests
    ... --tokenizer-only   # write / check vocab.json and merges.txt only

The shipped assets/default keeps this script's tokenizer but carries TRAINED weights (`kvscope train`,
see assets/default/README.md), so the parity test checks it with --tokenizer-only. Without that flag
the script still writes the random weights below (a quick stand-in model for a fresh folder).

Everything is deterministic (own xorshift generator for the corpus, a seeded torch.Generator for
the weights, sorted tie-breaks in the BPE learner), so two runs give identical bytes.

  corpus       ~4000 simple English sentences from a small grammar (ASCII; never written to disk)
  tokenizer    GPT-2 byte-level BPE: 256 byte tokens + 511 merges learned from the corpus + <|endoftext|>
               = 768 ids (vocab.json, merges.txt). The learner handles ASCII corpora only.
  weights      random, tools/make_model.py: n_embd 128, n_layer 4, n_head 4, n_positions 512, gelu_new,
               pre-LN, tied, F32 (about 3.8 MB). Not trained: a trained model will replace them.
"""
import argparse
import hashlib
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model  # noqa: E402
from kvscope_reference import bpe  # noqa: E402

N_MERGES = 511
MODEL = dict(vocab=256 + N_MERGES + 1, n_embd=128, n_layer=4, n_head=4, n_positions=512,
             activation="gelu_new", hf_style=True, seed=20240601, std=0.2)
FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt")
TOKENIZER_FILES = ("vocab.json", "merges.txt")


class XorShift:
    """xorshift64*: the corpus must not depend on Python's random module across versions."""

    def __init__(self, seed):
        self.s = seed or 1

    def next(self):
        s = self.s
        s ^= (s >> 12)
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= (s >> 27)
        self.s = s
        return (s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def pick(self, items):
        return items[(self.next() >> 33) % len(items)]


NAMES = "Tom Anna Sam Lily Max Nora Ben Mia Leo Ella Jack Ruth Oscar Grace Henry Clara Felix Zoe".split()
ANIMALS = ("cat dog bird fox horse rabbit mouse duck sheep goat frog bear owl fish tiger lion whale "
           "turtle monkey spider snake camel donkey parrot squirrel").split()
THINGS = ("ball book apple box hat cup kite boat tree house door window garden river road hill chair "
          "table lamp letter bottle pencil blanket basket bicycle candle flower mountain island bridge "
          "kitchen picture sandwich umbrella wagon cookie shoe").split()
ADJS = ("little big red blue green old young happy tired small quiet bright dark warm cold yellow purple "
        "strange funny hungry clever gentle brave sleepy shiny heavy empty").split()
VERBS_PAST = ("saw found liked wanted carried painted opened watched followed helped dropped cleaned "
              "borrowed noticed pushed pulled touched visited remembered forgot").split()
VERBS_3 = ("sees finds likes wants carries paints opens watches follows helps drops cleans borrows "
           "notices pushes pulls touches visits remembers forgets").split()
PLACES = ("in the garden|by the river|on the hill|near the house|under the tree|at school|in the park|"
          "behind the kitchen|across the bridge|beside the mountain|inside the basket").split("|")
TIMES = "Yesterday|Today|In the morning|At night|After lunch|On Sunday|Every day".split("|")


def sentence(r):
    the = lambda: r.pick(["the", "a", "the", "my", "her", "his", "our"])  # noqa: E731
    noun = lambda: r.pick(ANIMALS + THINGS)  # noqa: E731
    np_ = lambda: f"{the()} {r.pick(ADJS)} {noun()}" if r.next() % 2 else f"{the()} {noun()}"  # noqa: E731
    k = r.next() % 10
    if k == 0:
        return f"{r.pick(NAMES)} {r.pick(VERBS_PAST)} {np_()} {r.pick(PLACES)}."
    if k == 1:
        return f"{r.pick(TIMES)}, {r.pick(NAMES)} {r.pick(VERBS_PAST)} {r.next() % 20 + 2} {r.pick(ANIMALS)}s."
    if k == 2:
        return f"Where is {np_()}? It's {r.pick(PLACES)}."
    if k == 3:
        return f"{np_().capitalize()} {r.pick(VERBS_3)} {np_()}."
    if k == 4:
        return f"I'm {r.pick(ADJS)}, and {r.pick(['she', 'he', 'they'])} {r.pick(['is', 'was', 'is not'])} {r.pick(ADJS)}."
    if k == 5:
        return f"{r.pick(NAMES)} said: \"We'll go {r.pick(PLACES)} at {r.next() % 12 + 1} o'clock.\""
    if k == 6:
        return f"Don't open {np_()}; {r.pick(NAMES)} can't find {np_()}!"
    if k == 7:
        return f"There are {r.next() % 100} {r.pick(THINGS)}s and {r.next() % 10} {r.pick(ANIMALS)}s {r.pick(PLACES)}."
    if k == 8:
        return f"{r.pick(NAMES)} and {r.pick(NAMES)} {r.pick(VERBS_PAST)} {np_()}, then they went home."
    return f"Why did {np_()} go {r.pick(PLACES)}? Because it was {r.pick(ADJS)}."


def corpus(n_sentences=4000, seed=0x6B7673636F7065):
    r = XorShift(seed)
    lines, para = [], []
    for _ in range(n_sentences):
        para.append(sentence(r))
        if len(para) >= 1 + r.next() % 5:
            lines.append(" ".join(para))
            para = []
    return "\n".join(lines) + "\n"


def write(out_dir, tokenizer_only=False):
    os.makedirs(out_dir, exist_ok=True)
    merges = bpe.learn(corpus(), N_MERGES)
    vocab = bpe.vocab_of(merges)
    assert len(vocab) == MODEL["vocab"] and vocab[bpe.END_OF_TEXT] == MODEL["vocab"] - 1
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(bpe.vocab_json(vocab))
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(bpe.merges_txt(merges))
    if not tokenizer_only:
        make_model.write(out_dir, **MODEL)
    return merges, vocab


CASE_TEXTS = [
    "The little cat sat on the red mat.",
    "Where is the dog? It's in the garden.",
    "Tom said: \"We'll go by the river at 7 o'clock.\"",
    "I'm tired, and they're not; you've seen it, he'd say, she'll know.",
    "There are 1234567 boxes!!! ...and 42 frogs",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnew\n\nlines\r\n",
    "Zebra quartz vexing jumps",
    "<|endoftext|> is plain text here",
    "",
]


def write_cases(path, merges, vocab):
    """Text -> ids by this module's encoder (lowest merge rank first; checked equal to lowest
    token id first). <|endoftext|> in text is encoded as plain text, as with allow_special=false."""
    import json
    cases = []
    for text in CASE_TEXTS:
        ids = bpe.encode(text, merges, vocab, "merge_rank")
        assert ids == bpe.encode(text, merges, vocab, "token_id")
        cases.append({"text": text, "ids": ids})
    doc = {"about": "Made by tools/make_default_model.py --cases from assets/default's vocab.json and "
                    "merges.txt with kvscope_reference/bpe.py (an independent Python BPE).",
           "model": "assets/default", "cases": cases}
    lines = [json.dumps(c, ensure_ascii=True) for c in cases]  # one case per line
    head = json.dumps({k: v for k, v in doc.items() if k != "cases"}, indent=1)[:-2]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(head + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")
    json.load(open(path))


def digests(folder, files=FILES):
    out = {}
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def main(argv):
    ap = argparse.ArgumentParser(description="Write or check kvscope's embedded default model.")
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--check", metavar="DIR", help="regenerate into --work and compare with DIR byte for byte")
    ap.add_argument("--work", default=None, help="scratch folder for --check")
    ap.add_argument("--cases", metavar="JSON", help="also write (or with --check, compare) tokenizer cases")
    ap.add_argument("--tokenizer-only", action="store_true", help="write / compare vocab.json and merges.txt only")
    a = ap.parse_args(argv)
    files = TOKENIZER_FILES if a.tokenizer_only else FILES
    if a.check:
        work = a.work or os.path.join(os.path.abspath(a.check), "..", ".default_check")
        shutil.rmtree(work, ignore_errors=True)
        merges, vocab = write(work, a.tokenizer_only)
        want, got = digests(a.check, files), digests(work, files)
        bad = [n for n in files if want[n] != got[n]]
        if a.cases:
            fresh = os.path.join(work, "cases.json")
            write_cases(fresh, merges, vocab)
            if open(fresh, "rb").read() != open(a.cases, "rb").read():
                bad.append(a.cases)
        for n in files:
            print(f"{'ok  ' if n not in bad else 'DIFF'} {n} {got[n]}")
        if bad:
            print(f"{a.check} differs from a fresh generation in {bad}: rerun tools/make_default_model.py {a.check}")
            return 1
        return 0
    if not a.out_dir:
        ap.error("give OUT_DIR or --check DIR")
    merges, vocab = write(a.out_dir, a.tokenizer_only)
    if a.cases:
        write_cases(a.cases, merges, vocab)
    for n, d in digests(a.out_dir, files).items():
        print(f"{d}  {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
