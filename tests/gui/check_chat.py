#!/usr/bin/python3
"""The window's chat on a Llama 3 chat folder, against `kvscope chat --json` on the same folder and messages.

The folder is assets/llama-gqa with a Llama 3 chat template (built as tests/cli/check_chat.py builds it).
The window sends three messages with the script's `chat` line (each runs until its reply ends); the CLI
sends the same three, greedy, with the same max new tokens, once with the cache on and once with
--no-cache. From the final frame's --layout-dump at 1280x720 and 1920x1080:
  - the timeline's turn marks ("timeline turns"): user k at the CLI's first_position of turn k, assistant k
    at first_position + tokens_appended;
  - the conversation shown ("chat"): each message as typed and each reply as the CLI decoded it;
  - the Cache on vs off panel's per-turn rows ("cache turns"): cache ON reused / computed = the CLI's
    rows_reused / rows_computed; cache OFF computed = `--no-cache`'s rows_computed, i.e. the whole
    conversation's positions so far (first_position + tokens_appended, the previous reply's last token
    included), reused 0.
Bad input leaves the conversation as it was: an empty message, a message on a folder without a chat
template, and a message that would pass max_position_embeddings each fail in one line (expect-error),
and the marks and rows stay those of the three turns. Step back across a turn boundary and the turn is gone.
"""
import json
import os
import sys

from guitest import arguments, fail, run, window

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "cli")))
from check_chat import make_chat_folder  # noqa: E402

MESSAGES = ["Hello there", "What is a cat?", "Thanks"]
MAX_NEW = 5


def cli_turns(kvscope, model, work, cache):
    turns = os.path.join(work, "turns.txt")
    with open(turns, "w", encoding="utf-8") as f:
        f.write("\n".join(MESSAGES) + "\n")
    args = [kvscope, "chat", "--model", model, "--turns", turns, "--max-new-tokens", str(MAX_NEW), "--json"]
    out = run(args + ([] if cache else ["--no-cache"]), timeout=120).stdout
    return [json.loads(line) for line in out.splitlines()]


def parse_marks(text):
    """'user 1@0 assistant 1@12 ...' -> [('user', 1, 0), ('assistant', 1, 12), ...]"""
    words = text.split()
    out = []
    for i in range(0, len(words), 2):
        turn, pos = words[i + 1].split("@")
        out.append((words[i], int(turn), int(pos)))
    return out


def parse_costs(text):
    out = []
    for part in text.split("; "):
        out.append({k: int(v) for k, v in (kv.split("=") for kv in part.split())})
    return out


def main():
    a = arguments()
    model = make_chat_folder(a.work, "llama3")
    on = cli_turns(a.kvscope, model, a.work, True)
    off = cli_turns(a.kvscope, model, a.work, False)
    if len(on) != 3 or len(off) != 3:
        fail("kvscope chat gave %d / %d turns, expected 3" % (len(on), len(off)))
    # Turns are numbered from 1 in the window as in `chat --json` (issue 43, finding 10).
    if [t["turn"] for t in on] != [1, 2, 3]:
        fail("kvscope chat --json numbers its turns %r, expected 1, 2, 3" % [t["turn"] for t in on])
    want_marks = []
    for t in on:
        want_marks += [("user", t["turn"], t["first_position"]),
                       ("assistant", t["turn"], t["first_position"] + t["tokens_appended"])]
    want_chat = "\n".join("user %d: %s\nassistant %d: %s" % (t["turn"], m, t["turn"], t["reply"]) for m, t in zip(MESSAGES, on))
    want_costs = [{"turn": t["turn"], "reused_on": t["rows_reused"], "computed_on": t["rows_computed"], "reused_off": 0,
                   "computed_off": o["rows_computed"]} for k, (t, o) in enumerate(zip(on, off))]
    for k, (t, o) in enumerate(zip(on, off)):
        # Cache off re-prefills the whole conversation: every position up to this turn's last token.
        if o["rows_computed"] != t["first_position"] + t["tokens_appended"]:
            fail("--no-cache turn %d computed %d rows, expected the conversation's %d positions"
                 % (k, o["rows_computed"], t["first_position"] + t["tokens_appended"]))

    no_template = os.path.join(a.work, "no_template")
    os.makedirs(no_template)
    for name in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        os.symlink(os.path.join(model, name), os.path.join(no_template, name))

    chat = ["options max-new=%d" % MAX_NEW] + ["chat " + m for m in MESSAGES]
    bad = ["expect-error chat", "expect-error chat " + "cat " * 300]
    for size in ((1280, 720), (1920, 1080)):
        label = "%dx%d" % size
        d = window(a.kvscope, model, a.work, "chat_" + label, size, chat + bad + ["panel Cache on vs off"])
        t = d["texts"]
        if d["state"]["errors"] != 2:
            fail("%s: %d errors, expected the 2 bad messages" % (label, d["state"]["errors"]))
        if d["state"]["turns"] != 3:
            fail("%s: %d turns after the bad messages, expected 3" % (label, d["state"]["turns"]))
        marks = parse_marks(t.get("timeline turns", ""))
        if marks != want_marks:
            fail("%s: timeline turn marks %s, expected %s (kvscope chat --json)" % (label, marks, want_marks))
        if t.get("chat") != want_chat:
            fail("%s: the conversation reads %r, expected %r" % (label, t.get("chat"), want_chat))
        costs = [{k: c[k] for k in ("turn", "reused_on", "computed_on", "reused_off", "computed_off")}
                 for c in parse_costs(t.get("cache turns", ""))]
        if costs != want_costs:
            fail("%s: per-turn rows %s, expected %s (kvscope chat --json, with and without --no-cache)" % (label, costs, want_costs))
        for name in ("chat conversation", "chat message", "chat send"):
            if name not in d["widgets"]:
                fail("%s: no %s in the Controls panel" % (label, name))

    # Step back over the third turn's steps and its append: two turns remain, the shadow follows.
    n_steps = len(on[2]["reply_ids"]) - 1 + 1  # decode steps + the turn's one prefill step
    d = window(a.kvscope, model, a.work, "chat_back", (1280, 720), chat + ["back %d" % (n_steps + 1), "panel Cache on vs off"])
    if d["state"]["turns"] != 2 or parse_marks(d["texts"].get("timeline turns", "")) != want_marks[:4]:
        fail("step back across a turn: turns %s, marks %s" % (d["state"]["turns"], d["texts"].get("timeline turns")))
    costs = [{k: c[k] for k in ("turn", "reused_on", "computed_on", "reused_off", "computed_off")}
             for c in parse_costs(d["texts"].get("cache turns", ""))]
    if costs != want_costs[:2]:
        fail("step back across a turn: per-turn rows %s, expected %s" % (costs, want_costs[:2]))

    # A folder without a chat template: the message is refused in one line, the window keeps going.
    d = window(a.kvscope, no_template, a.work, "no_template", (1280, 720), ["expect-error chat Hello"])
    p = d["state"]["problem"]
    if "no chat" not in p["text"] or "\n" in p["text"] or d["state"]["turns"] != 0:
        fail("no template: problem %r, turns %s" % (p, d["state"]["turns"]))
    print("ok: the window's chat turns, replies and per-turn rows match kvscope chat --json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
