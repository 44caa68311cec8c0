#!/usr/bin/python3
"""kvscope chat on tiny chat model folders: the --json fields of each turn, and bad inputs.

Each folder is assets/llama-gqa (random Llama weights, default/'s byte-level vocabulary) with four of its
last merged tokens renamed to a template's special tokens and a tokenizer_config.json holding a chat
template kvscope renders (Llama 3, Qwen2.5's ChatML; texts copied from core/text/chat_template_texts.inc).
The expected appended text of each turn is written here from the template's rules (chat_template.h),
not rendered by kvscope; only its token count comes from `kvscope tokenize`.

    check_chat.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LLAMA_GQA = os.path.join(REPO, "assets", "llama-gqa")
# ids 763..766 in each folder; the end-of-turn token is the third
SPECIALS = {"llama3": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|begin_of_text|>"],
            "qwen25": ["<|im_start|>", "<|fim_pad|>", "<|im_end|>", "<|fim_middle|>"]}
END_OF_TURN = 765
MAX_POSITIONS = 256  # llama-gqa's max_position_embeddings

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def template_text(family):
    inc = open(os.path.join(REPO, "core", "text", "chat_template_texts.inc"), encoding="utf-8").read()
    m = re.search(r'k_%s_text = R"tpl\((.*?)\)tpl"' % family, inc, re.S)
    return m.group(1)


def make_chat_folder(w, family):
    d = os.path.join(w, family + "-chat")
    os.makedirs(d)
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(LLAMA_GQA, name), os.path.join(d, name))
    vocab = json.load(open(os.path.join(LLAMA_GQA, "vocab.json"), encoding="utf-8"))
    by_id = {i: s for s, i in vocab.items()}
    for k, special in enumerate(SPECIALS[family]):
        del vocab[by_id[763 + k]]
        vocab[special] = 763 + k
    merges = open(os.path.join(LLAMA_GQA, "merges.txt"), encoding="utf-8").read().splitlines()
    dropped = merges[-4:]  # the merges that made ids 763..766: nothing merges them further
    assert ["".join(m.split(" ")) for m in dropped] == [by_id[763 + k] for k in range(4)], dropped
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(merges[:-4]) + "\n")
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"chat_template": template_text(family), "bos_token": "<|begin_of_text|>" if family == "llama3" else None,
                   "eos_token": SPECIALS[family][2]}, f)
    return d


def run(kvscope, args, stdin=None):
    # replies are the model's bytes: a random model's may stop inside a UTF-8 sequence
    return subprocess.run([kvscope] + args, input=stdin, capture_output=True, text=True, errors="surrogateescape",
                          timeout=120)


def n_tokens(kvscope, model, text):
    r = run(kvscope, ["tokenize", "--model", model, "--allow-special", "--file", "-"], stdin=text)
    assert r.returncode == 0, r.stderr
    return len(r.stdout.split())


def header(role):
    return "<|start_header_id|>" + role + "<|end_header_id|>\n\n"


# What turn k appends. Llama 3: bos, then per message header + trim(content) + <|eot_id|>, then the
# assistant header. ChatML (Qwen2.5): <|im_start|>ROLE\n content <|im_end|>\n per message, untrimmed,
# then <|im_start|>assistant\n. A reply that ran to --max-new-tokens is closed by the next turn with the
# end-of-turn token; one that ended at it has it in the cache already.
def appended(family, messages, k, previous_stop):
    close = "" if previous_stop == "end_of_turn" else SPECIALS[family][2]
    if family == "llama3":
        if k == 0:
            return ("<|begin_of_text|>" + header("system") + "Be brief.<|eot_id|>" + header("user") +
                    messages[0].strip() + "<|eot_id|>" + header("assistant"))
        return close + header("user") + messages[k].strip() + "<|eot_id|>" + header("assistant")
    if k == 0:
        return ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n" + messages[0] +
                "<|im_end|>\n<|im_start|>assistant\n")
    return close + "\n<|im_start|>user\n" + messages[k] + "<|im_end|>\n<|im_start|>assistant\n"


def check_turns(kvscope, model, family, turns, messages, max_new):
    """Three turns with the cache on and off: every --json count of every turn."""
    runs = {}
    for cache in ("on", "off"):
        args = ["chat", "--model", model, "--turns", turns, "--system", "Be brief.", "--max-new-tokens", str(max_new),
                "--json"] + (["--no-cache"] if cache == "off" else [])
        r = run(kvscope, args)
        check(r.returncode == 0, "%s, cache %s: exit 0: %s" % (family, cache, r.stderr.strip()))
        lines = r.stdout.splitlines()
        check(len(lines) == 3, "%s, cache %s: one JSON line per turn, got %d" % (family, cache, len(lines)))
        runs[cache] = [json.loads(line) for line in lines]
    positions = 0  # tokens of the conversation so far, the last reply's last token included
    stop = None
    previous_reply = None
    for k, (on, off) in enumerate(zip(runs["on"], runs["off"])):
        t = "%s turn %d" % (family, k)
        check(on["turn"] == k + 1 and on["role"] == "user", t + ": turn (numbered from 1) and role")
        check(on["message"] == messages[k], t + ": the message as given")
        # Llama 3 renders trim(reply): a reply with whitespace at either end is rendered differently from
        # the cache, which is rolled back to the common token prefix (chat_conversation.h); ChatML keeps it.
        trimmed = family == "llama3" and previous_reply is not None and previous_reply.strip() != previous_reply
        check(("rolled_back_from" in on) == trimmed, t + ": rolled back %s, the template trims the reply %s" %
              ("rolled_back_from" in on, trimmed))
        if "rolled_back_from" in on:
            check(on["rolled_back_from"] == positions, t + ": rolled back from the conversation's %d positions" % positions)
            check(on["first_position"] < positions, t + ": the kept prefix is shorter than the conversation")
            check(on["rows_reused"] == on["first_position"], t + ": the kept prefix is what the first step reads")
            check(on["rows_computed"] == on["tokens_appended"], t + ": the rest of the rendering is computed")
            check(off["rows_computed"] == on["first_position"] + on["tokens_appended"], t + ", cache off: everything")
            check(on["reply_ids"] == off["reply_ids"], t + ": the same reply with the cache on and off")
            positions = on["first_position"] + on["tokens_appended"] + len(on["reply_ids"])
            check(on["positions"] == positions, t + ": positions %s, expected %d" % (on["positions"], positions))
            stop, previous_reply = on["stop"], on["reply"]
            continue
        n = n_tokens(kvscope, model, appended(family, messages, k, stop))
        check(on["first_position"] == positions, t + ": first_position %s, expected %d" % (on["first_position"], positions))
        check(on["tokens_appended"] == n, t + ": tokens_appended %s, expected %d" % (on["tokens_appended"], n))
        # Cache on: earlier positions are read, the new tokens (and the previous reply's last) computed.
        reused = max(positions - 1, 0)
        fed = n + (1 if k > 0 else 0)
        check(on["rows_reused"] == reused, t + ": rows_reused %s, expected %d" % (on["rows_reused"], reused))
        check(on["rows_computed"] == fed, t + ": rows_computed %s, expected %d" % (on["rows_computed"], fed))
        # Cache off: the whole conversation is recomputed in the turn's one prefill step.
        check(off["rows_reused"] == 0, t + ", cache off: rows_reused %s" % off["rows_reused"])
        check(off["rows_computed"] == reused + fed,
              t + ", cache off: rows_computed %s, expected %d" % (off["rows_computed"], reused + fed))
        check(on["reply_ids"] == off["reply_ids"], t + ": the same reply with the cache on and off")
        check(on["stop"] in ("end_of_turn", "end_of_text", "max_new_tokens"), t + ": stop %s" % on["stop"])
        if on["stop"] == "max_new_tokens":
            check(len(on["reply_ids"]) == max_new, t + ": a reply cut at --max-new-tokens has %d tokens" % max_new)
        else:
            last = END_OF_TURN if on["stop"] == "end_of_turn" else 767  # 767: <|endoftext|>
            check(on["reply_ids"][-1] == last, t + ": a reply that ended at a stop token ends with it")
        check(on["decode_tokens"] == len(on["reply_ids"]) - 1, t + ": decode steps = reply tokens - 1")
        check(isinstance(on["prefill_s"], float) and on["prefill_s"] >= 0, t + ": prefill_s")
        check(isinstance(on["decode_tokens_per_s"], (int, float)), t + ": decode_tokens_per_s")
        check(isinstance(on["reply"], str), t + ": reply text")
        positions += n + len(on["reply_ids"])
        check(on["positions"] == positions, t + ": positions %s, expected %d" % (on["positions"], positions))
        stop, previous_reply = on["stop"], on["reply"]
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    w = os.path.abspath(a.work)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    messages = ["Hello there", "  What is a cat?  ", "Thanks"]
    turns = os.path.join(w, "turns.txt")
    with open(turns, "w", encoding="utf-8") as f:
        f.write(messages[0] + "\n\n" + messages[1] + "\n" + messages[2] + "\n")
    max_new = 5
    qwen = make_chat_folder(w, "qwen25")
    check_turns(a.kvscope, qwen, "qwen25", turns, messages, max_new)
    model = make_chat_folder(w, "llama3")
    runs = check_turns(a.kvscope, model, "llama3", turns, messages, max_new)

    # stdin and .jsonl (a system message first) give the same turns.
    r = run(a.kvscope, ["chat", "--model", model, "--system", "Be brief.", "--max-new-tokens", str(max_new), "--json"],
            stdin=open(turns, encoding="utf-8").read())
    check(r.returncode == 0 and [json.loads(x)["reply_ids"] for x in r.stdout.splitlines()] ==
          [t["reply_ids"] for t in runs["on"]], "turns from stdin: the same replies (%s)" % r.stderr.strip())
    jsonl = os.path.join(w, "turns.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write(json.dumps({"role": "system", "content": "Be brief."}) + "\n")
        for m in messages:
            f.write(json.dumps({"role": "user", "content": m}) + "\n")
    r = run(a.kvscope, ["chat", "--model", model, "--turns", jsonl, "--max-new-tokens", str(max_new), "--json"])
    check(r.returncode == 0 and [json.loads(x)["reply_ids"] for x in r.stdout.splitlines()] ==
          [t["reply_ids"] for t in runs["on"]], "turns from .jsonl: the same replies (%s)" % r.stderr.strip())
    # tokenizer_config.json as transformers reads it: a list of named templates uses "default" (the same
    # replies as the plain string); a special token of the wrong type is refused naming the key, as
    # transformers raises on it (it was ignored).
    def with_config(name, config):
        d = os.path.join(w, name)
        os.makedirs(d)
        for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
            os.symlink(os.path.join(model, f), os.path.join(d, f))
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        return d
    named = with_config("named", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": [
        {"name": "tool_use", "template": "{{ messages }}"}, {"name": "default", "template": template_text("llama3")}]})
    r = run(a.kvscope, ["chat", "--model", named, "--turns", turns, "--system", "Be brief.", "--max-new-tokens", str(max_new),
                        "--json"])
    check(r.returncode == 0 and [json.loads(x)["reply_ids"] for x in r.stdout.splitlines()] ==
          [t["reply_ids"] for t in runs["on"]], "a list of named templates: \"default\" is used (%s)" % r.stderr.strip())
    bad_eos = with_config("bad_eos", {"bos_token": "<|begin_of_text|>", "eos_token": 42, "chat_template": template_text("llama3")})
    r = run(a.kvscope, ["chat", "--model", bad_eos, "--turns", turns, "--max-new-tokens", "2"])
    check(r.returncode == 1 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and
          "tokenizer_config.json: eos_token is a number" in r.stderr and r.stdout == "",
          "eos_token 42 is refused in one line naming it (exit %d: %r)" % (r.returncode, r.stderr))

    # Text mode: one reply per turn on stdout, one summary line per turn on stderr.
    r = run(a.kvscope, ["chat", "--model", model, "--turns", turns, "--max-new-tokens", "3"])
    check(r.returncode == 0 and r.stderr.count("rows reused") == 3, "text mode: a summary line per turn (%s)" % r.stderr)

    # Bad inputs: exit code, one line 'error: ...' naming the problem.
    empty = os.path.join(w, "empty.txt")
    with open(empty, "w") as f:
        f.write("\n  \n")
    bad_jsonl = os.path.join(w, "bad.jsonl")
    with open(bad_jsonl, "w") as f:
        f.write('{"role": "assistant", "content": "hi"}\n')
    bad_second = os.path.join(w, "bad_second.jsonl")  # a good first turn, then a role the turns refuse
    with open(bad_second, "w") as f:
        f.write('{"role": "user", "content": "hi"}\n{"role": "tool", "content": "42"}\n')
    long_turns = os.path.join(w, "long.txt")
    with open(long_turns, "w") as f:
        f.write("hi\n" + "cat " * 300 + "\n")
    no_template = os.path.join(w, "no_template")
    os.makedirs(no_template)
    for name in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        os.symlink(os.path.join(model, name), os.path.join(no_template, name))
    no_tokenizer = os.path.join(w, "no_tokenizer")
    os.makedirs(no_tokenizer)
    for name in ("config.json", "model.safetensors", "tokenizer_config.json"):
        os.symlink(os.path.join(model, name), os.path.join(no_tokenizer, name))
    no_specials = os.path.join(w, "no_specials")  # the template's tokens are not in this vocabulary
    os.makedirs(no_specials)
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(model, name), os.path.join(no_specials, name))
    for name in ("vocab.json", "merges.txt"):
        os.symlink(os.path.join(LLAMA_GQA, name), os.path.join(no_specials, name))
    os.symlink(os.path.join(model, "tokenizer_config.json"), os.path.join(no_specials, "tokenizer_config.json"))
    cases = [
        ("empty turns file", ["--model", model, "--turns", empty], None, 2, "holds no user message"),
        ("empty stdin", ["--model", model], "", 2, "stdin holds no user message"),
        ("missing turns file", ["--model", model, "--turns", os.path.join(w, "nope.txt")], None, 1, "nope.txt"),
        ("a turns file that is a folder", ["--model", model, "--turns", w], None, 1, w),
        ("an assistant line in .jsonl", ["--model", model, "--turns", bad_jsonl], None, 2, "line 1"),
        ("a bad role on line 2 of .jsonl", ["--model", model, "--turns", bad_second], None, 2, "bad_second.jsonl line 2"),
        ("a conversation past max_position_embeddings", ["--model", model, "--turns", long_turns, "--max-new-tokens", "4"],
         None, 2, "leaves no room for a reply in the model's max_position_embeddings (%d)" % MAX_POSITIONS),
        ("a model without a chat template", ["--model", no_template, "--turns", turns], None, 2, "no chat template"),
        ("a model without tokenizer files", ["--model", no_tokenizer, "--turns", turns], None, 2, "no tokenizer files"),
        # a vocabulary without the template's special tokens now chats (its <|endoftext|> ends a reply: stop
        # tokens come from the folder, chat_conversation.h) until the plain-text rendering outgrows the context
        ("a vocabulary without the template's special tokens", ["--model", no_specials, "--turns", turns], None, 2,
         "leaves no room for a reply"),
        ("--max-new-tokens 0", ["--model", model, "--turns", turns, "--max-new-tokens", "0"], None, 2, "--max-new-tokens"),
        ("--sinks without --window", ["--model", model, "--turns", turns, "--sinks", "2"], None, 2, "window"),
    ]
    for what, args, stdin, code, needle in cases:
        r = run(a.kvscope, ["chat"] + args, stdin=stdin if stdin is not None else "")
        lines = r.stderr.splitlines()
        errors = [x for x in lines if x.startswith("error: ")]
        check(r.returncode == code, "%s: exit %d, expected %d (%s)" % (what, r.returncode, code, r.stderr.strip()))
        check(len(errors) == 1 and lines[-1] == errors[0], "%s: one 'error:' line last on stderr, got %r" % (what, lines))
        check(bool(errors) and needle in errors[0], "%s: the error names %r: %r" % (what, needle, errors))
    # Without --model, chat opens assets/chat, the trained chat model: it answers from the first turn.
    r = run(a.kvscope, ["chat", "--max-new-tokens", "16"],
            stdin="Anna has a small duck. Tom is by the river.\nWhere is Tom?\nWhat does Anna have?\n")
    check(r.returncode == 0 and r.stdout.splitlines()[1:] == ["Tom is by the river.", "Anna has a small duck."],
          "chat without --model answers from the first turn (exit %d): %r %s" % (r.returncode, r.stdout, r.stderr.strip()))
    # A turns file is checked whole before the first turn: a bad line 2 leaves no turn 1 on stdout or stderr.
    r = run(a.kvscope, ["chat", "--model", model, "--turns", bad_second, "--max-new-tokens", "2", "--json"])
    check(r.returncode == 2 and r.stdout == "" and "rows reused" not in r.stderr,
          "a bad line 2 is refused before turn 1 runs (exit %d, stdout %r)" % (r.returncode, r.stdout))
    # The long conversation: the first turn was answered before the second was refused (its length is
    # known only once the first reply is).
    r = run(a.kvscope, ["chat", "--model", model, "--turns", long_turns, "--max-new-tokens", "4", "--json"])
    check(len(r.stdout.splitlines()) == 1, "a refused second turn comes after the first turn's answer")
    # --max-new-tokens is a cap, not a reservation (issue 43, finding 10): 300 on a 256-position model
    # runs; a reply that no token ends stops at the context with a one-line note.
    r = run(a.kvscope, ["chat", "--model", model, "--max-new-tokens", "300", "--json"], stdin="hi\n")
    check(r.returncode == 0, "--max-new-tokens 300 > %d positions: exit %d (%s)" % (MAX_POSITIONS, r.returncode,
                                                                                    r.stderr.strip()))
    for k, line in enumerate(r.stdout.splitlines() if r.returncode == 0 else []):
        t = json.loads(line)
        check(t["turn"] == k + 1, "--max-new-tokens 300: turn %s, expected %d" % (t["turn"], k + 1))
        check(t["positions"] <= MAX_POSITIONS and (t["stop"] != "context" or t["positions"] == MAX_POSITIONS),
              "--max-new-tokens 300: turn %d stop %s at %d positions" % (k + 1, t["stop"], t["positions"]))
    r = run(a.kvscope, ["chat", "--model", model, "--max-new-tokens", "300"], stdin="hi\n")
    notes = [x for x in r.stderr.splitlines() if x.startswith("turn 1: ")]
    check(r.returncode == 0 and len(notes) == 1 and ("stopped at the model's context (%d positions)" % MAX_POSITIONS in notes[0]
                                                     or "stopped at the end of" in notes[0]),
          "--max-new-tokens 300 from stdin: one 'turn 1:' note saying where the reply stopped, got %r" % r.stderr)

    if failures:
        print("%d checks failed" % len(failures), file=sys.stderr)
        return 1
    print("kvscope chat: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
