#!/usr/bin/python3
"""Write assets/llama-gqa: the small Llama-family example folder of the model picker.

A LlamaForCausalLM shaped like SmolLM2 in miniature (grouped-query attention, 4 query heads sharing 2
K/V heads, RMSNorm, SwiGLU, rotary positions, tied embeddings), random weights from a seeded generator
(tools/make_llama_model.py), stored as BF16 as SmolLM2 ships, with default/'s tokenizer (GPT-2
byte-level BPE, 768 ids) so text prompts work. Same bytes on every run.

    /usr/bin/python3 tools/make_llama_example.py                    write assets/llama-gqa
    /usr/bin/python3 tools/make_llama_example.py --check assets     regenerate in a temporary folder, compare bytes
"""
import argparse
import filecmp
import hashlib
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_llama_model  # noqa: E402

NAME = "llama-gqa"
TOKENIZER_FROM = os.path.join(REPO, "assets", "default")
TOKENIZER_FILES = ("vocab.json", "merges.txt")
END_OF_TEXT = 767  # <|endoftext|> in default/'s vocabulary
SHAPE = dict(vocab=768, hidden=64, inner=192, layers=3, heads=4, kv_heads=2, positions=256,
             rope_theta=100000.0, tied=True, std=0.3, dtype="BF16", seed=2026)
FILES = ("config.json", "model.safetensors") + TOKENIZER_FILES


def write(folder):
    os.makedirs(folder, exist_ok=True)
    make_llama_model.write(folder, **SHAPE)
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(bos_token_id=END_OF_TEXT, eos_token_id=END_OF_TEXT, torch_dtype="bfloat16")
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(TOKENIZER_FROM, name), os.path.join(folder, name))
    for name in FILES:
        with open(os.path.join(folder, name), "rb") as fh:
            data = fh.read()
        print(f"{NAME}/{name:18s} {len(data):8d} B  sha256 {hashlib.sha256(data).hexdigest()[:16]}")


def check(shipped):
    with tempfile.TemporaryDirectory() as tmp:
        write(os.path.join(tmp, NAME))
        bad = [f for f in FILES if not os.path.exists(os.path.join(shipped, NAME, f)) or
               not filecmp.cmp(os.path.join(tmp, NAME, f), os.path.join(shipped, NAME, f), shallow=False)]
    if bad:
        print(f"{NAME}: {', '.join(bad)} differ from what the generator writes now"
              "\n  regenerate: /usr/bin/python3 tools/make_llama_example.py")
        return 1
    print(f"{NAME} reproduces byte for byte")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "assets"))
    ap.add_argument("--check", metavar="FOLDER", help="compare FOLDER/llama-gqa with a fresh generation")
    a = ap.parse_args(argv)
    if a.check:
        return check(a.check)
    write(os.path.join(a.out, NAME))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
