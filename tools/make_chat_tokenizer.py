#!/usr/bin/python3
"""Turn a GPT-2 tokenizer folder (vocab.json + merges.txt) into a Hugging Face tokenizer.json +
tokenizer_config.json with ChatML's two special tokens and chat template, for a model that chats
(assets/chat: tools/train_chat_model.sh calls this, then `kvscope train --tokenizer`).

    /usr/bin/python3 tools/make_chat_tokenizer.py SRC_DIR OUT_DIR

SRC_DIR  vocab.json + merges.txt whose last id is <|endoftext|> (assets/default: 768 ids)
OUT_DIR  a new or empty folder; existing tokenizer files are never overwritten

The vocabulary keeps every id of SRC_DIR and adds <|im_start|> and <|im_end|> after it (the template's turn
markers, special: matched in chat text, never produced by BPE). The pre-tokenizer is GPT-2's (ByteLevel with
its regex), so plain text encodes to the same ids as with SRC_DIR. eos_token is <|im_end|>: a reply ends there.
The output is deterministic (same bytes on every run).
"""
import json
import os
import sys

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def added(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_chat_tokenizer.py SRC_DIR OUT_DIR")
    src, out = sys.argv[1], sys.argv[2]
    try:
        vocab = json.load(open(os.path.join(src, "vocab.json"), encoding="utf-8"))
        merges = [m for m in open(os.path.join(src, "merges.txt"), encoding="utf-8").read().split("\n")
                  if m and not m.startswith("#version")]
    except (OSError, ValueError) as e:
        sys.exit(f"make_chat_tokenizer: {src}: {e}")
    n = len(vocab)
    if sorted(vocab.values()) != list(range(n)) or vocab.get("<|endoftext|>") != n - 1:
        sys.exit(f"make_chat_tokenizer: {src}/vocab.json: ids must be 0..N-1 with <|endoftext|> last")
    os.makedirs(out, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(out, name)):
            sys.exit(f"make_chat_tokenizer: {out}/{name} exists; not overwriting it")
    specials = [added(n - 1, "<|endoftext|>"), added(n, "<|im_start|>"), added(n + 1, "<|im_end|>")]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": dict(vocab, **{"<|im_start|>": n, "<|im_end|>": n + 1}), "merges": merges},
    }
    config = {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace", "model_max_length": 512,
        "tokenizer_class": "GPT2Tokenizer", "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in specials},
        "chat_template": CHAT_TEMPLATE,
    }
    for name, obj in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config)):
        with open(os.path.join(out, name), "x", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"make_chat_tokenizer: {n + 2} ids ({n} from {src}, <|im_start|> {n}, <|im_end|> {n + 1}) -> {out}")


if __name__ == "__main__":
    main()
