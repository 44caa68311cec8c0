#!/usr/bin/python3
"""tools/make_llama_model.py's folders work with every text feature (issue 43 #7).

Two folders made by the tool as a user runs it: a tiny Llama with SmolLM2-135M's vocabulary size (49152,
so the filler tokens are written too) and a tiny Gemma 3 (its bos/eos ids swapped). On each:
  (a) tokenizer.json: every id 0..vocab-1 exactly once, merges over tokens it has; `kvscope tokenize`
      ids == @lenml/tokenizers (transformers.js, an independent encoder; --node-modules) on
      tests/data/tokenizer_strings.jsonl plus unicode, emoji, digit, space and special-token strings,
      and `kvscope detokenize` gives each text back
  (b) `kvscope chat-template` == Debian's python3-jinja2 set up as transformers does
      (tests/reference/chat_template_reference.py) on a few conversations
  (c) generate with a text prompt, heads with --prompt-ids, with --prompt and with its own text probes,
      chat with two scripted turns (each reply ending at <|im_end|> or the cap), lab on its built-in text:
      exit 0
  (d) chat without --model opens $KVSCOPE_CHAT_MODEL (else assets/chat): set to a folder without a chat
      template (the made folder without its tokenizer_config.json), one 'error:' line saying so, exit 2
  (e) the tool refuses a vocabulary too small for a tokenizer in one line, writing nothing;
      --no-tokenizer writes none and removes the ones an earlier run wrote; on that folder heads runs
      with --prompt-ids and refuses its text probes (exit 2)
Without --node-modules, (a)'s comparison with transformers.js is skipped (saying so).

    check_made_model.py --kvscope BIN --work DIR [--node-modules DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(REPO, "tools", "make_llama_model.py")
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import chat_template_reference  # noqa: E402  (jinja2, as transformers sets it up)
import transformers_js  # noqa: E402

MINE = [
    "The cat sat on the mat.", " the", "the cache", "  two  spaces   and a tab\there", "\n\nnew\r\nlines\n",
    "digits 0 7 42 365 2026 3.14159 -1e-5", "1234567890", "café naïve Zürich", "Ελληνικά и русский текст",
    "日本語のテキスト、中文字符", "한국어 문장", "emoji 😀🚀 and 👩‍👩‍👧 family", "math ∑ ∞ → ≤ € £ ¥ — “quoted” …",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "a<|endoftext|>b", "<|im_end|><|im_end|>",
    "mixed 123abc ABC def's they're we'll", "   ", "x", "🚀", "\u00e9\u0301", "tab\tand\u00a0nbsp",
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?  "}],
    [{"role": "user", "content": "ünïcödé 😀\nline two"}, {"role": "assistant", "content": " spaced "}],
]

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def run(cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, errors="surrogateescape", timeout=300)


def make(folder, *args):
    r = run([TOOL, folder] + list(args))
    assert r.returncode == 0, r.stderr
    return folder


def byte_decoder():
    """GPT-2's printable spelling of bytes, inverted (written here from its definition)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


def check_files(model, name):
    config = json.load(open(os.path.join(model, "config.json")))
    tok = json.load(open(os.path.join(model, "tokenizer.json"), encoding="utf-8"))
    tc = json.load(open(os.path.join(model, "tokenizer_config.json"), encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    n = config["vocab_size"]
    check(sorted(vocab.values()) == list(range(n)), "%s: tokenizer.json's ids are exactly 0..%d" % (name, n - 1))
    for m in tok["model"]["merges"]:
        a, b = m.split(" ")
        if not (a in vocab and b in vocab and a + b in vocab):
            check(False, "%s: merge %r over tokens the vocabulary has" % (name, m))
            break
    check(len(tok["model"]["merges"]) == n - 259, "%s: one merge per token after the 3 specials and 256 bytes" % name)
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    check(ids.get(tc["bos_token"]) == config["bos_token_id"] and ids.get(tc["eos_token"]) == config["eos_token_id"],
          "%s: bos/eos tokens %s/%s at config.json's ids %s/%s" % (name, tc["bos_token"], tc["eos_token"],
                                                                   config["bos_token_id"], config["eos_token_id"]))
    decoder = byte_decoder()
    return {i: bytes(decoder[c] for c in s) for s, i in vocab.items() if s not in ids}


def check_tokenizer(kvscope, model, name, texts, node_modules, work):
    token_bytes = check_files(model, name)
    jsonl = os.path.join(work, name + "_texts.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    r = run([kvscope, "tokenize", "--model", model, "--jsonl", jsonl, "--allow-special"])
    check(r.returncode == 0, "%s: tokenize --jsonl exit 0: %s" % (name, r.stderr.strip()))
    got = [json.loads(line)["ids"] for line in r.stdout.splitlines()]
    check(len(got) == len(texts), "%s: one line of ids per text" % name)
    if node_modules:
        expected = transformers_js.encode(node_modules, model, texts)
        bad = [(t, g, e) for t, g, e in zip(texts, got, expected) if g != e]
        check(not bad, "%s: kvscope tokenize == transformers.js on %d texts; first of %d mismatches: %r" %
              (name, len(texts), len(bad), bad[:1]))
    else:
        print("note: (a) compared with transformers.js skipped: no --node-modules", file=sys.stderr)
    for t, ids in zip(texts, got):
        if "<|" in t:
            continue
        back = b"".join(token_bytes[i] for i in ids)
        if back != t.encode("utf-8"):
            check(False, "%s: the tokens' bytes in tokenizer.json spell %r, got %r" % (name, t, back))
            break
    r = run([kvscope, "detokenize", "--model", model, "--ids", ",".join(map(str, got[0]))])
    check(r.returncode == 0 and r.stdout.rstrip("\n") == texts[0], "%s: detokenize gives %r back: %r" % (name, texts[0], r.stdout))
    # Common words of English are single tokens; a whole character of the filler encodes to itself.
    for word in (" the", " and", " cache", " model"):
        r = run([kvscope, "tokenize", "--model", model, "--text", word])
        check(len(r.stdout.split()) == 1, "%s: %r is one token, got %s" % (name, word, r.stdout.strip()))


def check_template(kvscope, model, name, work):
    tc = json.load(open(os.path.join(model, "tokenizer_config.json"), encoding="utf-8"))
    env = chat_template_reference.environment()
    template = env.from_string(tc["chat_template"])
    for k, messages in enumerate(CONVERSATIONS):
        path = os.path.join(work, "%s_conversation%d.json" % (name, k))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(messages, f, ensure_ascii=False)
        for gen in (False, True):
            expected = template.render(messages=messages, add_generation_prompt=gen, bos_token=tc["bos_token"],
                                       eos_token=tc["eos_token"])
            r = run([kvscope, "chat-template", "--model", model, "--messages", path] +
                    (["--add-generation-prompt"] if gen else []))
            check(r.returncode == 0 and r.stdout == expected,
                  "%s: chat-template == jinja2 on conversation %d (generation prompt %s): %r vs %r" %
                  (name, k, gen, r.stdout, expected))


def check_features(kvscope, model, name, work):
    def ok(args, what, stdin=None):
        r = run([kvscope] + args, stdin=stdin)
        check(r.returncode == 0, "%s: %s exit 0: %s" % (name, what, r.stderr.strip()[-300:]))
        return r
    ok(["generate", "--model", model, "--prompt", "The cat sat on the", "--max-new-tokens", "4"], "generate --prompt TEXT")
    for what, extra in (("heads --prompt-ids", ["--prompt-ids", "5,17,250,3,99,42,7"]),
                        ("heads --prompt TEXT", ["--prompt", "Tom saw the cat. Tom saw the"]), ("heads (text probes)", [])):
        r = ok(["heads", "--model", model, "--json"] + extra, what)
        if r.returncode == 0:
            n = len(json.loads(r.stdout)["heads"])
            config = json.load(open(os.path.join(model, "config.json")))
            check(n == config["num_hidden_layers"] * config["num_attention_heads"], "%s: %s scores every head" % (name, what))
    turns = os.path.join(work, name + "_turns.txt")
    with open(turns, "w") as f:
        f.write("Hello there\nWhat is a KV cache?\n")
    r = ok(["chat", "--model", model, "--turns", turns, "--max-new-tokens", "6", "--json"], "chat --turns")
    if r.returncode == 0:
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        check([x["turn"] for x in lines] == [1, 2], "%s: chat ran two turns" % name)
        check(all(x["stop"] in ("end_of_turn", "max_new_tokens") for x in lines), "%s: replies end at <|im_end|> or the cap" % name)
    # lab's default configurations: a model with its own windows (Gemma 3) refuses a session window on top,
    # so its defaults try H2O in the windows' place
    r = ok(["lab", "--model", model, "--json"], "lab (built-in text, default configurations)")
    if r.returncode == 0:
        specs = [c["spec"] for c in json.loads(r.stdout)["configs"]]
        windows = [s for s in specs if s.startswith("window=")]
        if name == "gemma3":
            check(not windows and "policy=h2o,budget=32" in specs, "%s: lab's defaults trade the windows for H2O: %s" % (name, specs))
        else:
            check(windows == ["window=32", "window=32,sinks=4"], "%s: lab's defaults include the two windows: %s" % (name, specs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--node-modules", default=None)
    a = ap.parse_args()
    if a.node_modules:
        a.node_modules = os.path.abspath(a.node_modules)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    strings = [json.loads(x) for x in open(os.path.join(REPO, "tests", "data", "tokenizer_strings.jsonl"), encoding="utf-8")
               if x.strip()]
    # U+0085 and U+FEFF: JavaScript's \s and Rust's differ there (tools/npm/hf_expected.js leaves them out too)
    texts = MINE + [s for s in strings if "\u0085" not in s and "\ufeff" not in s]

    llama = make(os.path.join(a.work, "llama"), "--vocab", "49152", "--hidden", "32", "--inner", "64", "--heads", "4",
                 "--kv-heads", "2", "--positions", "256", "--seed", "5")
    gemma = make(os.path.join(a.work, "gemma3"), "--shape", "gemma3-tiny", "--vocab", "700", "--seed", "6")
    for name, model in (("llama", llama), ("gemma3", gemma)):
        check_tokenizer(a.kvscope, model, name, texts, a.node_modules, a.work)
        check_template(a.kvscope, model, name, a.work)
        check_features(a.kvscope, model, name, a.work)

    # (d) chat without --model, $KVSCOPE_CHAT_MODEL pointing at a folder without a chat template
    plain = os.path.join(a.work, "no-template")
    shutil.rmtree(plain, ignore_errors=True)
    shutil.copytree(llama, plain, ignore=shutil.ignore_patterns("tokenizer_config.json", "chat_template.jinja"))
    env = dict(os.environ, KVSCOPE_CHAT_MODEL=plain)
    r = subprocess.run([a.kvscope, "chat"], input="hi\n", capture_output=True, text=True, timeout=60, env=env)
    lines = r.stderr.splitlines()
    check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and plain in lines[0]
          and "no chat template" in lines[0],
          "chat without --model on $KVSCOPE_CHAT_MODEL without a template: one line, exit 2: exit %d, %r"
          % (r.returncode, r.stderr))
    check(r.stdout == "", "chat without --model prints nothing on stdout")

    # (e) too small a vocabulary; --no-tokenizer
    small = os.path.join(a.work, "small")
    r = run([TOOL, small, "--vocab", "258"])
    lines = r.stderr.splitlines()
    check(r.returncode != 0 and len(lines) == 1 and "--vocab 258" in lines[0] and "--no-tokenizer" in lines[0],
          "--vocab 258: one line, non-zero exit: %d %r" % (r.returncode, r.stderr))
    check(not os.path.exists(small), "--vocab 258 writes nothing")
    make(small, "--vocab", "259")
    check(os.path.exists(os.path.join(small, "tokenizer.json")), "--vocab 259 has room for a tokenizer")
    make(small, "--vocab", "258", "--no-tokenizer")
    check(sorted(os.listdir(small)) == ["config.json", "model.safetensors"],
          "--no-tokenizer leaves config.json and model.safetensors only: %s" % sorted(os.listdir(small)))
    # without a tokenizer, heads runs on token ids and refuses its text probes
    r = run([a.kvscope, "heads", "--model", small, "--prompt-ids", "5,6,7,8,5,6"])
    check(r.returncode == 0, "heads --prompt-ids without tokenizer files: exit 0: %s" % r.stderr.strip())
    r = run([a.kvscope, "heads", "--model", small])
    check(r.returncode == 2 and "--prompt-ids" in r.stderr, "heads without tokenizer files: exit 2 naming --prompt-ids: %d %r" %
          (r.returncode, r.stderr))

    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        sys.exit(1)
    print("make_llama_model.py's folders: tokenizer, chat template and every text feature OK")


if __name__ == "__main__":
    main()
