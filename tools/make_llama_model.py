#!/usr/bin/python3
"""Write a random-weight Llama-family model folder the way Hugging Face ships one.

config.json with LlamaForCausalLM keys, model.safetensors with HF tensor names in nn.Linear [out, in]
layout, and a byte-level BPE tokenizer made here for the folder's vocab size (tokenizer.json and
tokenizer_config.json with a ChatML chat template; --no-tokenizer for none: prompts are then token ids),
so text prompts, heads, chat and the lab work on it. Shapes of real checkpoints are presets
(--shape smollm2-135m); tests use tiny ones.

    make_llama_model.py OUT_DIR [--heads 4 --kv-heads 2 --head-dim 16 ...] [--shape smollm2-135m] [--shards 3]

--shards N writes model.safetensors.index.json and N shard files (model-0000i-of-0000N.safetensors)
instead of model.safetensors, as save_pretrained does for large models.
"""
import argparse
import json
import os
import re
import sys

try:
    import torch
except ImportError:
    sys.exit("error: make_llama_model.py needs PyTorch: run it as tools/make_llama_model.py (its first line names "
             "/usr/bin/python3, which has Debian's python3-torch) or install python3-torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvscope_reference import bpe, safetensors_io  # noqa: E402

DEFAULTS = dict(vocab=300, hidden=32, inner=64, layers=2, heads=4, kv_heads=2, head_dim=None,
                positions=128, rope_theta=10000.0, rope_scaling=None, tied=False, attention_bias=False,
                mlp_bias=False, eps=1e-5, dtype="F32", seed=0, shards=1, std=0.3, act="silu", model_type="llama",
                # windows: Mistral's sliding_window; Qwen2/Qwen3 with use_sliding_window and
                # max_window_layers; Gemma 3's sliding_window with layer_types or sliding_window_pattern
                sliding_window=None, max_window_layers=None, layer_types=None, sliding_window_pattern=None,
                # Gemma 3
                query_pre_attn_scalar=None, rope_local_base_freq=10000.0, final_logit_softcapping=None)

SHAPES = {
    "smollm2-135m": dict(vocab=49152, hidden=576, inner=1536, layers=30, heads=9, kv_heads=3, positions=8192,
                         rope_theta=100000.0, tied=True, std=0.02),
    "qwen2.5-0.5b": dict(model_type="qwen2", vocab=151936, hidden=896, inner=4864, layers=24, heads=14, kv_heads=2,
                         positions=32768, rope_theta=1000000.0, tied=True, eps=1e-6, std=0.02),
    "llama-3.2-1b": dict(vocab=128256, hidden=2048, inner=8192, layers=16, heads=32, kv_heads=8, positions=8192,
                         rope_theta=500000.0, tied=True, std=0.02),
    "llama-tiny-gqa": dict(vocab=512, hidden=64, inner=128, layers=2, heads=4, kv_heads=2, positions=256),
    "gemma-3-270m": dict(model_type="gemma3_text", vocab=262144, hidden=640, inner=2048, layers=18, heads=4,
                         kv_heads=1, head_dim=256, positions=32768, rope_theta=1000000.0, tied=True, eps=1e-6,
                         std=0.02, sliding_window=512, query_pre_attn_scalar=256, act="gelu_pytorch_tanh",
                         layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                      for i in range(18)]),
    "gemma3-tiny": dict(model_type="gemma3_text", vocab=300, hidden=32, inner=64, layers=6, heads=4, kv_heads=1,
                        head_dim=16, positions=128, rope_theta=1000000.0, tied=True, sliding_window=4,
                        sliding_window_pattern=3, query_pre_attn_scalar=24, act="gelu_pytorch_tanh"),
}


def build(**kw):
    o = dict(DEFAULTS)
    o.update(kw)
    g = torch.Generator().manual_seed(o["seed"])
    V, C, F, L, H, K = o["vocab"], o["hidden"], o["inner"], o["layers"], o["heads"], o["kv_heads"]
    D = o["head_dim"] or C // H
    std = o["std"]
    qwen2 = o["model_type"] == "qwen2"  # Qwen2: q, k, v biases always, o never, no attention_bias key
    qwen3 = o["model_type"] == "qwen3"  # Qwen3: q_norm / k_norm per head
    gemma = o["model_type"] == "gemma3_text"  # Gemma 3: q_norm / k_norm, four norms per layer
    qkv_bias, o_bias = o["attention_bias"] or qwen2, o["attention_bias"] and not qwen2

    def mat(out, inp):  # nn.Linear weight [out, in]
        return torch.randn(out, inp, generator=g) * (std if out == V else 1.0 / inp ** 0.5)

    def vec(n, scale=0.1):
        return torch.randn(n, generator=g) * scale

    def gain(n):  # norm weights near 1, not exactly 1, so a missing weight shows; Gemma's multiply by
        return (0.0 if gemma else 1.0) + torch.randn(n, generator=g) * 0.2  # 1 + weight: weights near 0

    t = [("model.embed_tokens.weight", torch.randn(V, C, generator=g) * std)]                # [V, C]
    for il in range(L):
        p = f"model.layers.{il}."
        t.append((p + "input_layernorm.weight", gain(C)))
        for name, out, inp in (("q_proj", H * D, C), ("k_proj", K * D, C), ("v_proj", K * D, C),
                               ("o_proj", C, H * D)):
            t.append((p + f"self_attn.{name}.weight", mat(out, inp)))                         # [out, in]
            if (o_bias if name == "o_proj" else qkv_bias):
                t.append((p + f"self_attn.{name}.bias", vec(out)))
        if qwen3 or gemma:
            t += [(p + "self_attn.q_norm.weight", gain(D)), (p + "self_attn.k_norm.weight", gain(D))]
        t.append((p + "post_attention_layernorm.weight", gain(C)))
        if gemma:
            t += [(p + "pre_feedforward_layernorm.weight", gain(C)), (p + "post_feedforward_layernorm.weight", gain(C))]
        for name, out, inp in (("gate_proj", F, C), ("up_proj", F, C), ("down_proj", C, F)):
            t.append((p + f"mlp.{name}.weight", mat(out, inp)))
            if o["mlp_bias"]:
                t.append((p + f"mlp.{name}.bias", vec(out)))
    t.append(("model.norm.weight", gain(C)))
    if not o["tied"]:
        t.append(("lm_head.weight", mat(V, C)))                                              # [V, C]
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": V, "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": K, "max_position_embeddings": o["positions"],
        "rms_norm_eps": o["eps"], "rope_theta": o["rope_theta"], "rope_scaling": o["rope_scaling"],
        "tie_word_embeddings": o["tied"], "attention_bias": o["attention_bias"], "mlp_bias": o["mlp_bias"],
        "hidden_act": o["act"], "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[o["dtype"]],
        "attention_dropout": 0.0, "initializer_range": 0.02,
    }
    if o["head_dim"]:
        config["head_dim"] = D
    if qwen2:
        config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                      sliding_window=o["positions"], max_window_layers=L)
        del config["attention_bias"], config["mlp_bias"]
    if qwen3:
        config.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", use_sliding_window=False,
                      sliding_window=None, max_window_layers=L, head_dim=D)
        del config["mlp_bias"]
    if qwen2 or qwen3:
        if o["sliding_window"]:
            config.update(use_sliding_window=True, sliding_window=o["sliding_window"])
        if o["max_window_layers"] is not None:
            config["max_window_layers"] = o["max_window_layers"]
    if o["model_type"] == "mistral":
        config.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=o["sliding_window"],
                      head_dim=D)
        del config["attention_bias"], config["mlp_bias"]
    if gemma:
        config.update(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", head_dim=D,
                      sliding_window=o["sliding_window"] or 4096, hidden_activation=o["act"],
                      query_pre_attn_scalar=o["query_pre_attn_scalar"] or D,
                      rope_local_base_freq=o["rope_local_base_freq"],
                      final_logit_softcapping=o["final_logit_softcapping"], attn_logit_softcapping=None,
                      bos_token_id=2, eos_token_id=1, pad_token_id=0, use_bidirectional_attention=False)
        del config["hidden_act"], config["mlp_bias"]
        if o["sliding_window_pattern"]:
            config["sliding_window_pattern"] = o["sliding_window_pattern"]
    if o["layer_types"]:
        config["layer_types"] = o["layer_types"]
    return config, t


def write(out_dir, **kw):
    config, tensors = build(**kw)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    dtype = kw.get("dtype", DEFAULTS["dtype"])
    metadata = {"format": "pt", "generator": "tools/make_llama_model.py"}
    shards = kw.get("shards") or 1
    # A rewritten folder holds one form only: the single file wins over an index when both are present.
    for name in os.listdir(out_dir):
        if name in ("model.safetensors", safetensors_io.INDEX_NAME) or re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", name):
            os.remove(os.path.join(out_dir, name))
    if shards > 1:
        safetensors_io.write_sharded(out_dir, tensors, shards, dtype, metadata)
    else:
        safetensors_io.write(os.path.join(out_dir, "model.safetensors"), tensors, dtype, metadata)
    return config


# --- the tokenizer (written unless --no-tokenizer) ---------------------------------------------------------
# A byte-level BPE tokenizer.json in Hugging Face's format (GPT-2's pipeline: ByteLevel pre-tokenizer and
# decoder), sized exactly to the model's vocab_size, built here and copied from no model:
#   ids 0..2     <|endoftext|>, <|im_start|> (at config.json's bos_token_id), <|im_end|> (at its eos_token_id)
#   ids 3..258   the 256 byte tokens, in GPT-2's byte-to-unicode order
#   then merges, one new token each, best first:
#     1. " a".." z", " 0".." 9", " A".." Z" (a space and one letter or digit: kvscope heads' probes need them)
#     2. learned from TEXT below by a small BPE trainer, most frequent pair first, until every word of it
#        is one token (or the vocabulary is full): common words are single tokens
#     3. filler up to vocab_size: whole UTF-8 characters (Latin, Greek, Cyrillic, punctuation, emoji, kana,
#        CJK, Hangul, then every other code point), each built byte by byte from its lead byte; they never
#        touch an ASCII merge, so every such token encodes back to itself
# tokenizer_config.json names <|im_start|> / <|im_end|> as bos / eos and carries a ChatML chat template.
TEXT = """\
The cat sat on the mat and looked at the door. When the door opened, the cat ran into the kitchen,
where the children were eating their breakfast. It was a bright morning in the small town by the river.
People walked to work, shops opened their windows, and the old clock on the tower struck eight.

A language model reads a text one token at a time and predicts the next one. To do that, each layer
computes a query, a key and a value for every token. The keys and values of earlier tokens do not change,
so the model keeps them in a cache and reuses them at every step: this is the KV cache. Without the cache,
the model would have to compute the whole prompt again for each new token, which takes much more time.

Tom and Anna went to the market on Saturday. They bought apples, bread, cheese and a bottle of milk.
On the way home they met their friend Sam, who was walking his dog in the park. "Would you like to come
with us?" asked Anna. "We are going to have lunch in the garden." Sam said that he would be happy to come.

There are many ways to learn something new. Some people like to read books, others prefer to watch
videos or to listen to a teacher. What matters most is to practise every day, to ask questions, and to
find out why things work the way they do. A good question is often worth more than a quick answer.

The weather was cold in the winter and warm in the summer. In the spring the trees turned green again,
the birds came back from the south, and the farmers worked in their fields from morning until night.
In the autumn the leaves turned red and yellow, and the days became shorter and shorter.

Numbers are words too: one, two, three, four, five, six, seven, eight, nine and ten. The year had 365
days, the week 7, and the day 24 hours. She counted the steps to the top of the hill: there were 128 of them.
"""
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")
# Code point ranges the filler draws from first, then every other code point in order.
FILLER_FIRST = [(0x00A0, 0x0250), (0x0370, 0x0530), (0x2010, 0x2070), (0x20A0, 0x20C0), (0x2190, 0x2300),
                (0x1F300, 0x1F650), (0x1F680, 0x1F700), (0x1F900, 0x1FA00), (0x3000, 0x3100), (0x4E00, 0xA000),
                (0xAC00, 0xD7A4)]
MIN_TOKENIZER_VOCAB = len(SPECIALS) + 256


def special_ids(config):
    """The id of each special token: <|im_start|> at bos_token_id and <|im_end|> at eos_token_id when both
    are distinct ids below 3 (Llama's 1, 2; Gemma's 2, 1), <|endoftext|> at the one left."""
    bos, eos = config.get("bos_token_id"), config.get("eos_token_id")
    if bos in (0, 1, 2) and eos in (0, 1, 2) and bos != eos:
        return {"<|im_start|>": bos, "<|im_end|>": eos, "<|endoftext|>": 3 - bos - eos}
    return {s: i for i, s in enumerate(SPECIALS)}


def merge_word(word, pair):
    out, i = [], 0
    while i < len(word):
        if word[i:i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def learn_merges(words, known, n_max):
    """BPE on word counts {tuple of symbols: count}: the most frequent adjacent pair (ties to the smallest pair)
    becomes a merge, until n_max or every word is one token. Pairs spelling a known token are skipped."""
    merges = []
    while len(merges) < n_max:
        counts = {}
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                counts[pair] = counts.get(pair, 0) + n
        best = min(((-n, p) for p, n in counts.items() if p[0] + p[1] not in known), default=None)
        if best is None:
            break
        pair = best[1]
        merges.append(pair)
        known.add(pair[0] + pair[1])
        words = {merge_word(w, pair): n for w, n in words.items()}
    return merges


def filler_merges(known, n_max):
    """Merges that spell whole UTF-8 characters byte by byte: (lead byte, 2nd) -> prefix, (prefix, 3rd) -> ..."""
    def code_points():
        seen = set()
        for lo, hi in FILLER_FIRST:
            for c in range(lo, hi):
                seen.add(c)
                yield c
        for c in range(0x80, 0x110000):
            if c not in seen and not 0xD800 <= c < 0xE000:
                yield c
    merges = []
    for c in code_points():
        b = [bpe.BYTE_TO_CHAR[x] for x in chr(c).encode("utf-8")]
        for k in range(1, len(b)):
            token = "".join(b[:k + 1])
            if token in known:
                continue
            if len(merges) == n_max:
                return merges
            merges.append(("".join(b[:k]), b[k]))
            known.add(token)
    return merges


def tokenizer_files(config):
    """-> (tokenizer.json, tokenizer_config.json) as dicts for config.json's vocab_size; ValueError when it
    is below MIN_TOKENIZER_VOCAB (3 special + 256 byte tokens)."""
    n_vocab = config["vocab_size"]
    if n_vocab < MIN_TOKENIZER_VOCAB:
        raise ValueError("vocab_size %d is below the %d tokens of a byte-level tokenizer" % (n_vocab, MIN_TOKENIZER_VOCAB))
    specials = special_ids(config)
    vocab = dict(specials)
    for _, ch in bpe.byte_table():
        vocab[ch] = len(vocab)
    known = set(vocab)
    room = n_vocab - len(vocab)
    space = bpe.BYTE_TO_CHAR[ord(" ")]
    merges = [(space, c) for c in "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"][:room]
    known.update(a + b for a, b in merges)
    words = {}
    for piece in bpe.pretokenize(TEXT):
        word = tuple(bpe.BYTE_TO_CHAR[x] for x in piece.encode("ascii"))
        for pair in merges:
            word = merge_word(word, pair)
        words[word] = words.get(word, 0) + 1
    merges += learn_merges(words, known, room - len(merges))
    merges += filler_merges(known, room - len(merges))
    for a, b in merges:
        vocab[a + b] = len(vocab)
    assert len(vocab) == n_vocab and sorted(vocab.values()) == list(range(n_vocab))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for s, i in sorted(specials.items(), key=lambda x: x[1])],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": ["%s %s" % m for m in merges]},
    }
    tokenizer_config = {
        "add_prefix_space": False, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"], "tokenizer_class": "GPT2Tokenizer",
    }
    return tokenizer, tokenizer_config


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def write_tokenizer(out_dir, config):
    """Writes tokenizer.json and tokenizer_config.json for config (tokenizer_files)."""
    for name, doc in zip(TOKENIZER_FILES, tokenizer_files(config)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1 if name == "tokenizer_config.json" else None)
            f.write("\n")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", help="the model folder to write (created if missing)")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="a real checkpoint's shape: its preset values, "
                    "which the options below override")
    helps = {"vocab": "vocabulary size", "hidden": "hidden_size", "inner": "intermediate_size (the MLP's width)",
             "layers": "num_hidden_layers", "heads": "num_attention_heads (query heads)",
             "kv_heads": "num_key_value_heads (K/V heads; fewer than --heads is grouped-query attention)",
             "head_dim": "head_dim (default hidden / heads)", "positions": "max_position_embeddings",
             "seed": "seed of the random weights", "shards": "write N shards and an index instead of model.safetensors"}
    for key, text in helps.items():
        default = "" if DEFAULTS[key] is None else " (default %s)" % DEFAULTS[key]
        ap.add_argument("--" + key.replace("_", "-"), type=int, help=text + default)
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], help="tensor dtype in the file (default F32)")
    ap.add_argument("--model-type", choices=["llama", "qwen2", "qwen3", "mistral", "gemma3_text"],
                    help="config.json's model_type and its family's tensors (default llama)")
    ap.add_argument("--sliding-window", type=int, help="the model's own sliding window (Mistral: every layer)")
    ap.add_argument("--tied", action="store_true", default=None, help="tie the output layer to the embedding")
    ap.add_argument("--no-tokenizer", action="store_true", help="write no tokenizer files (prompts are then token "
                    "ids; tokenizer.json and tokenizer_config.json left from an earlier run are removed)")
    a = ap.parse_args(argv)
    kw = dict(SHAPES[a.shape]) if a.shape else {}
    kw.update({k: v for k, v in vars(a).items() if k not in ("out_dir", "shape", "no_tokenizer") and v is not None})
    vocab = kw.get("vocab", DEFAULTS["vocab"])
    if not a.no_tokenizer and vocab < MIN_TOKENIZER_VOCAB:  # refused before anything is written
        sys.exit("error: --vocab %d is too small for a tokenizer (%d special + 256 byte tokens): give --vocab %d or "
                 "more, or --no-tokenizer" % (vocab, len(SPECIALS), MIN_TOKENIZER_VOCAB))
    config = write(a.out_dir, **kw)
    if a.no_tokenizer:
        for name in TOKENIZER_FILES:
            if os.path.exists(os.path.join(a.out_dir, name)):
                os.remove(os.path.join(a.out_dir, name))
    else:
        write_tokenizer(a.out_dir, config)


if __name__ == "__main__":
    main(sys.argv[1:])
