#!/usr/bin/python3
"""Write the example model folders for the four reference systems (assets/README.md says which is which).

    /usr/bin/python3 tools/make_seed_models.py [--out assets] [--only NAME ...]
    /usr/bin/python3 tools/make_seed_models.py --check assets     regenerate in a temporary folder, compare bytes
    /usr/bin/python3 tools/make_seed_models.py --only encoder-decoder --dtype F32 --out /tmp/x
                                                                  the encoder-decoder with the same values in F32

Folders (each: config.json, model.safetensors, and assets/default's vocab.json + merges.txt, so text
prompts work; 768 ids, <|endoftext|> = 767):
    minigpt            document 000 MiniGPT-Inference: pre-LN, exact (erf) GELU, fused qkv with bias, untied head
    gpt2-walkthrough   document 001 GPT-2 walkthrough: tanh GELU, no qkv bias, untied head without bias
    cached-decoder     document 004 decoder with past_kvs: ReLU feed-forward of width 192, head with bias
    encoder-decoder    document 002 the original transformer: post-LN, sinusoidal positions, one table for
                       both inputs and the output layer, embeddings times sqrt(n_embd), ReLU, bfloat16

Weights are random (not trained) and deterministic: one torch.Generator per folder, seeded with a fixed
number and drawn in a fixed order, so every run writes the same bytes (the script prints each file's
sha256). Decoder-only folders come from tools/make_model.py's generator (std 0.2 at fan-in 64, so
attention is peaked); the encoder-decoder's tensor list and shapes come from
tools/kvscope_reference/encoder_decoder.py (tensor_names), which is the format's specification as code.
"""
import argparse
import filecmp
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile

import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)
import make_model  # noqa: E402
from kvscope_reference import safetensors_io  # noqa: E402
from kvscope_reference.encoder_decoder import tensor_names  # noqa: E402

TOKENIZER_FROM = os.path.join(REPO, "assets", "default")
TOKENIZER_FILES = ("vocab.json", "merges.txt")
VOCAB, END_OF_TEXT = 768, 767
COMMON = dict(vocab=VOCAB, n_embd=64, n_layer=3, n_head=4, n_positions=256)

# name -> (document, make_model.build options). Every extension key is written explicitly.
DECODERS = {
    "minigpt": ("000", dict(COMMON, activation="gelu", qkv_bias=True, untied=True, lm_head_bias=False,
                            norm="pre", positions="learned", final_ln=True, seed=1000)),
    "gpt2-walkthrough": ("001", dict(COMMON, activation="gelu_new", qkv_bias=False, untied=True,
                                     lm_head_bias=False, norm="pre", positions="learned", final_ln=True,
                                     seed=1001)),
    "cached-decoder": ("004", dict(COMMON, n_inner=192, activation="relu", qkv_bias=True, untied=True,
                                   lm_head_bias=True, norm="pre", positions="learned", final_ln=True,
                                   seed=1004)),
}
ENCODER_DECODER = "encoder-decoder"
NAMES = list(DECODERS) + [ENCODER_DECODER]


def encoder_decoder_config():
    C = 64
    return {
        "architectures": ["KvscopeEncoderDecoder"], "model_type": "encoder_decoder",
        "vocab_size": VOCAB, "n_positions": 256, "n_embd": C, "n_head": 4,
        "n_encoder_layer": 2, "n_layer": 2, "n_inner": 4 * C,
        "activation_function": "relu", "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True, "qkv_bias": True, "lm_head_bias": False,
        "norm_position": "post", "position_embedding": "sinusoidal",
        "embedding_scale": math.sqrt(C), "final_layer_norm": False,
        "decoder_start_token_id": END_OF_TEXT, "bos_token_id": END_OF_TEXT, "eos_token_id": END_OF_TEXT,
        "torch_dtype": "bfloat16",
    }


def encoder_decoder_tensors(cfg, seed=1002, std=0.2):
    """(name, fp32 tensor) in the specification's order. The shared table is uniform with variance
    1/n_embd as document 002 prescribes (times sqrt(n_embd) at the input: variance 1); matrices have
    std `std` at fan-in 64 like the decoder-only folders; norms 1 +- 0.1."""
    g = torch.Generator().manual_seed(seed)
    C = cfg["n_embd"]
    out = []
    for name, shape in tensor_names(cfg).items():
        if name == "wte.weight":
            bound = math.sqrt(3.0 / C)                      # uniform(-b, b) has variance b^2 / 3
            t = (torch.rand(shape, generator=g) * 2 - 1) * bound
        elif len(shape) == 2:                               # Conv1D (in, out): fan-in = rows
            t = torch.randn(shape, generator=g) * (std * math.sqrt(64.0 / shape[0]))
        elif ".ln_" in name or name.startswith(("ln_", "encoder.ln_")):
            t = 1.0 + torch.randn(shape, generator=g) * 0.1 if name.endswith("weight") else \
                torch.randn(shape, generator=g) * 0.05
        else:                                               # biases
            t = torch.randn(shape, generator=g) * (0.1 if "c_attn" in name or "q_attn" in name else 0.05)
        out.append((name, t))
    return out


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def copy_tokenizer(folder):
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(TOKENIZER_FROM, name), os.path.join(folder, name))


def write_decoder(folder, name):
    doc, opts = DECODERS[name]
    config, tensors, dtypes = make_model.build(**opts)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", **config,
              "bos_token_id": END_OF_TEXT, "eos_token_id": END_OF_TEXT}
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "config.json"), config)
    safetensors_io.write(os.path.join(folder, "model.safetensors"), tensors, dtypes,
                         metadata={"format": "pt", "generator": "tools/make_seed_models.py",
                                   "reference_document": doc})
    copy_tokenizer(folder)


def write_encoder_decoder(folder, dtype="BF16"):
    cfg = encoder_decoder_config()
    if dtype != "BF16":
        cfg["torch_dtype"] = {"F32": "float32"}[dtype]
    # Values are rounded to bfloat16 first, so the F32 twin holds exactly the same numbers.
    tensors = [(n, t.to(torch.bfloat16).to(torch.float32)) for n, t in encoder_decoder_tensors(cfg)]
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "config.json"), cfg)
    safetensors_io.write(os.path.join(folder, "model.safetensors"), tensors, dtype,
                         metadata={"format": "pt", "generator": "tools/make_seed_models.py",
                                   "reference_document": "002"})
    copy_tokenizer(folder)


def write(out, names, dtype="BF16"):
    for name in names:
        folder = os.path.join(out, name)
        if name == ENCODER_DECODER:
            write_encoder_decoder(folder, dtype)
        else:
            write_decoder(folder, name)
        for f in sorted(os.listdir(folder)):
            if f in ("config.json", "model.safetensors") + TOKENIZER_FILES:
                with open(os.path.join(folder, f), "rb") as fh:
                    data = fh.read()
                print(f"{name}/{f:18s} {len(data):8d} B  sha256 {hashlib.sha256(data).hexdigest()[:16]}")


def check(shipped, names):
    """Regenerate into a temporary folder and compare with `shipped` byte for byte -> exit code."""
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        write(tmp, names)
        for name in names:
            for f in ("config.json", "model.safetensors") + TOKENIZER_FILES:
                a, b = os.path.join(tmp, name, f), os.path.join(shipped, name, f)
                if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
                    bad.append(f"{name}/{f}")
    if bad:
        print("differ from what the generator writes now: " + ", ".join(bad) +
              "\n  regenerate: /usr/bin/python3 tools/make_seed_models.py --out assets")
        return 1
    print(f"{len(names)} folders reproduce byte for byte")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "assets"))
    ap.add_argument("--only", nargs="+", choices=NAMES, default=NAMES)
    ap.add_argument("--dtype", choices=["BF16", "F32"], default="BF16",
                    help="storage of the encoder-decoder (same values either way)")
    ap.add_argument("--check", metavar="FOLDER", help="compare FOLDER/<name> with a fresh generation")
    a = ap.parse_args(argv)
    if a.check:
        return check(a.check, a.only)
    write(a.out, a.only, a.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
