#!/usr/bin/python3
"""Does a chat model answer from an earlier turn? An independent check of assets/chat (issue 46).

Independent of kvscope's C++ engine, tokenizer, template engine and corpus generator: the chat is rendered by
jinja2 from tokenizer_config.json's chat_template, encoded by tools/kvscope_reference/bpe.py (special tokens
split out first, as Hugging Face tokenizers do), run by tools/kvscope_reference/llama.py (PyTorch, Hugging Face
semantics), and drawn by numpy's PCG64 from the story world written out below.

Each test chat has three user turns' worth of structure, like the training chats:
  user       2-3 facts: "NAME has a ADJECTIVE THING." or "NAME is PLACE."
  assistant  "OK."
  user       (half of the chats) one sentence of small talk, then assistant "OK."
  user       the question about one fact: "What does NAME have?" / "Where is NAME?"
  assistant  greedy decoding until <|im_end|>: correct when it is the fact's sentence, word for word.
The asked fact is always a held-out pair (a NAME and THING, or NAME and PLACE, that training never states
together: the rule below mirrors core/text/corpus.h's ChatWorld::held_out_*), so the answer can only come from
the earlier turn. Attention: for every answer token that copies a token of the fact (same id), the weight
each head gives that fact token from the position that predicts it (teacher-forced on the expected answer):
the head with the highest mean is the one that reads the earlier turn.

  /usr/bin/python3 tools/chat_probe.py DIR [--n 10] [--seed 46] [--json] [--check]
      --check: exit 1 unless at least 9 of the n answers are right (issue 46's bar)
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvscope_reference import bpe  # noqa: E402
from kvscope_reference.llama import LlamaModel  # noqa: E402

NAMES = ["Tom", "Anna", "Sam", "Lily", "Max", "Nora", "Ben", "Mia", "Leo", "Ella", "Jack", "Ruth", "Oscar",
         "Grace", "Henry", "Clara", "Felix", "Zoe"]
THINGS = ["ball", "book", "apple", "box", "hat", "cup", "kite", "boat", "lamp", "pencil", "basket", "candle",
          "flower", "cookie", "shoe", "duck", "cat", "dog", "bird", "fox", "rabbit", "mouse", "frog", "owl", "fish"]
ADJECTIVES = ["little", "big", "red", "blue", "green", "small", "yellow", "purple", "shiny", "funny", "sleepy",
              "heavy", "dark", "warm"]
PLACES = ["in the garden", "by the river", "on the hill", "near the house", "under the tree", "at school",
          "in the park", "behind the kitchen", "across the bridge", "beside the mountain", "inside the basket"]
SMALL_TALK = ["The dog sees a red ball.", "Where is my hat? It's in the park.", "I'm tired, and she is happy.",
              "Tom saw the cookie at school."]


def held_out_thing(n, t):
    return (n * 5 + t) % 9 == 0


def held_out_place(n, p):
    return (n * 3 + p) % 7 == 0


class ChatTokenizer:
    """tokenizer.json's byte-level BPE; special tokens (added_tokens) matched in the text first."""

    def __init__(self, folder):
        tj = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
        self.vocab = tj["model"]["vocab"]
        self.merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tj["model"]["merges"]]
        self.special = {t["content"]: t["id"] for t in tj["added_tokens"]}
        self.by_id = {i: s for s, i in self.vocab.items()}
        self.split = re.compile("(" + "|".join(re.escape(s) for s in self.special) + ")")
        self.char_to_byte = {c: b for b, c in bpe.byte_table()}

    def encode(self, text):
        ids = []
        for piece in self.split.split(text):
            if piece in self.special:
                ids.append(self.special[piece])
            elif piece:
                ids += bpe.encode(piece, self.merges, self.vocab)
        return ids

    def decode(self, ids):
        out = []
        for i in ids:
            s = self.by_id[i]
            out.append(s if s in self.special else bytes(self.char_to_byte[c] for c in s).decode("latin-1"))
        return "".join(out)


def render(folder, messages, add_generation_prompt):
    import jinja2
    cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(cfg["chat_template"]).render(messages=messages,
                                                        add_generation_prompt=add_generation_prompt)


def draw_chat(rng):
    n_facts = int(rng.integers(2, 4))
    names = rng.choice(len(NAMES), size=n_facts, replace=False)
    things = rng.choice(len(THINGS), size=n_facts, replace=False)
    adjs = rng.choice(len(ADJECTIVES), size=n_facts, replace=False)
    asked = int(rng.integers(n_facts))
    facts = []
    for i in range(n_facts):
        n = int(names[i])
        has = bool(rng.random() < 0.6)
        if i == asked:  # the asked fact: a pair training never states
            if has:
                pool = [t for t in range(len(THINGS)) if held_out_thing(n, t)]
            else:
                pool = [p for p in range(len(PLACES)) if held_out_place(n, p)]
            if not pool:
                has = not has
                pool = ([t for t in range(len(THINGS)) if held_out_thing(n, t)] if has
                        else [p for p in range(len(PLACES)) if held_out_place(n, p)])
            if not pool:
                return None
            obj = int(rng.choice(pool))
        else:
            obj = int(things[i]) if has else int(rng.integers(len(PLACES)))
        if has:
            facts.append((f"{NAMES[n]} has a {ADJECTIVES[int(adjs[i])]} {THINGS[obj]}.", f"What does {NAMES[n]} have?"))
        else:
            facts.append((f"{NAMES[n]} is {PLACES[obj]}.", f"Where is {NAMES[n]}?"))
    messages = [{"role": "user", "content": " ".join(f for f, _ in facts)}, {"role": "assistant", "content": "OK."}]
    if rng.random() < 0.5:
        messages += [{"role": "user", "content": SMALL_TALK[int(rng.integers(len(SMALL_TALK)))]},
                     {"role": "assistant", "content": "OK."}]
    messages.append({"role": "user", "content": facts[asked][1]})
    return messages, facts[asked][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    tok = ChatTokenizer(a.folder)
    model = LlamaModel(a.folder, dtype=torch.float32)
    end = tok.special["<|im_end|>"]
    rng = np.random.Generator(np.random.PCG64(a.seed))
    L, H = model.cfg["num_hidden_layers"], model.H
    reads = np.zeros((L, H))
    n_reads = 0
    chats = []
    while len(chats) < a.n:
        drawn = draw_chat(rng)
        if drawn is None:
            continue
        messages, expected = drawn
        prompt = tok.encode(render(a.folder, messages, True))
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(24):
                nxt = int(model.forward(ids)[-1].argmax())
                ids.append(nxt)
                if nxt == end:
                    break
        reply = ids[len(prompt):]
        answer = tok.decode([i for i in reply if i != end])
        # attention, teacher-forced on the expected answer: weight on the first turn's copy of each answer token
        target = tok.encode(expected)
        full = prompt + target
        first_turn_end = prompt.index(end)  # the facts are in the first user turn
        model.attention_record = []
        with torch.no_grad():
            model.forward(full)
        atts = [r.numpy() for r in model.attention_record]
        model.attention_record = None
        for k, t in enumerate(target[1:], start=1):
            src = [j for j in range(first_turn_end) if full[j] == t]
            if len(src) != 1:
                continue
            q = len(prompt) + k - 1  # the position whose output predicts target[k]
            for il in range(L):
                reads[il] += atts[il][:, q, src[0]]
            n_reads += 1
        chats.append({"messages": messages, "expected": expected, "answer": answer,
                      "correct": answer == expected and reply[-1:] == [end]})
    reads /= max(n_reads, 1)
    best = np.unravel_index(reads.argmax(), reads.shape)
    report = {"correct": sum(c["correct"] for c in chats), "n": len(chats), "chats": chats,
              "reads_earlier_turn": {"layer": int(best[0]), "head": int(best[1]), "mean_weight": float(reads[best]),
                                     "per_head": reads.round(3).tolist()}}
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        for c in chats:
            print(f"{'ok ' if c['correct'] else 'BAD'} {c['messages'][-1]['content']!r:32} -> {c['answer']!r}"
                  + ("" if c["correct"] else f"   (expected {c['expected']!r})"))
        r = report["reads_earlier_turn"]
        print(f"correct: {report['correct']} of {report['n']}")
        print(f"head reading the earlier turn: layer {r['layer']} head {r['head']}, mean weight {r['mean_weight']:.3f} "
              f"on the fact's copy of each answer token")
    if a.check and report["correct"] < 0.9 * a.n:
        sys.exit(1)


if __name__ == "__main__":
    main()
