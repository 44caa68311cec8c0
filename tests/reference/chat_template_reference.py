#!/usr/bin/env python3
"""The independent reference for kvscope's Jinja engine (core/text/jinja/): Debian's python3-jinja2 set up as
Hugging Face transformers' apply_chat_template sets it up, rendering every template of
tests/data/chat_templates/ over a fixed set of conversations.

    /usr/bin/python3 tests/reference/chat_template_reference.py TEMPLATE_DIR OUT.jsonl [SNIPPETS.json]

TEMPLATE_DIR  tests/data/chat_templates (sources.json names the templates and their bos/eos tokens)
SNIPPETS      tests/data/jinja_snippets.json: small templates, one rule of Python or Jinja2 each (number
              printing, slicing, undefined values, Markup, whitespace control ...), rendered over
              SNIPPET_MESSAGES; their lines carry the text itself as "source" instead of a file name
OUT.jsonl     one line per template x conversation (the hand-written CONVERSATIONS, then N_RANDOM seeded random
              ones per template) x add_generation_prompt:
                {"template": file name, "conversation": its name, "variables": everything the template is
                 rendered with (messages, add_generation_prompt, bos_token, eos_token, maybe tools),
                 "date": "YYYY-MM-DD" strftime_now() formats, "text": the rendering or null,
                 "error": null or {"type": the exception class, "message": str(exception)}}

The environment, from transformers' utils/chat_template_utils.py (_compile_jinja_template) and
tokenization_utils_base.py (apply_chat_template), written here from their semantics:
  - jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols]) (transformers also adds an extension for {% generation %},
    which none of these templates uses)
  - filters["tojson"]: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
    sort_keys=sort_keys), the keyword defaults None/None/False, so no HTML escaping and non-ASCII kept
  - globals["raise_exception"]: raises jinja2.exceptions.TemplateError(message)
  - globals["strftime_now"]: datetime.now().strftime(format); here the clock is fixed at DATE 00:00:00
  - rendered with messages, add_generation_prompt, the tokenizer's special tokens as strings, and tools /
    documents only when given (None is not passed: the template sees them undefined)
"""
import datetime
import json
import random
import sys
import zlib
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATE = "2024-07-26"


def environment():
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(format):
        return datetime.datetime.strptime(DATE, "%Y-%m-%d").strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def S(c): return {"role": "system", "content": c}
def U(c): return {"role": "user", "content": c}
def A(c): return {"role": "assistant", "content": c}


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.\nReturns \"temp\" in °C\t(a <b>tab</b> & more).",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]}}}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "note": "line\nbreak \"q\""}}}]}
TOOL_RESULT = {"role": "tool", "name": "get_weather", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"}

# name -> (messages, extra variables)
CONVERSATIONS = {
    "one_user": ([U("Hello")], {}),
    "system_user": ([S("You are terse."), U("Hi")], {}),
    "two_turns": ([U("What is 2+2?"), A("4"), U("And 3+3?")], {}),
    "four_turns_system": ([S("Be brief."), U("q1"), A("a1"), U("q2"), A("a2"), U("q3"), A("a3"), U("q4")], {}),
    "ends_with_assistant": ([U("What is 2+2?"), A("4")], {}),
    "empty_content": ([U(""), A(""), U("")], {}),
    "unicode": ([S("Système: réponds en français."), U("héllo 世界 👍🏽 naïve café e\u0301 привет"),
                 A("¡Hola! — “quotes” … 🇯🇵"), U("\u3000ideographic\u00a0nbsp\u2028line")], {}),
    "jinja_looking": ([U("{{ x }} {% if true %}yes{% endif %} {# c #} {{- '-' -}}"), A("{% raw %}{{ y }}")], {}),
    "whitespace": ([S("  padded system \n"), U("\n\n  padded user  \t\n"), A("  answer \n"), U("\t\n")], {}),
    "special_lookalikes": ([U("<|im_end|> <start_of_turn> <|eot_id|> <s> [INST] </s> <think>")], {}),
    "assistant_first": ([A("I speak first"), U("then the user")], {}),
    "system_only": ([S("only a system message")], {}),
    "two_systems": ([S("first"), S("second"), U("u")], {}),
    "user_user": ([U("one"), U("two")], {}),
    "quotes_backslashes": ([U("it's \"quoted\" \\ back\\slash \\n not a newline"), A("ok")], {}),
    "thinking": ([U("q1"), A("<think>\nreasoning\n</think>\n\nanswer"), U("q2")], {}),
    "tool_call": ([U("Weather in Zürich?"), CALL, TOOL_RESULT], {"tools": [TOOL]}),
    "tools_given": ([S("sys"), U("Weather?")], {"tools": [TOOL]}),
    "tool_call_null_content": ([U("Weather in Zürich?"), {**CALL, "content": None}, TOOL_RESULT, A("21.5 °C")], {}),
    "list_content": ([{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}], {}),
    "long_text": ([U("word " * 200), A("x\n" * 50)], {}),
}


EDGES = ["", "", " ", "\n", "\n\n", "\t", " \n ", "\r\n", "\u3000", "\u00a0", "\u2028", "\x0b", "\x1c", "\x85",
         "\ufeff"]
WORDS = ["hello", "world", "KV", "naïve", "café", "世界", "привет", "👍🏽", "2+2=4", "<|im_end|>", "<|eot_id|>",
         "<start_of_turn>", "[INST]", "</s>", "<think>", "</think>", "{{ x }}", "{% endif %}", "{#", "'", '"', "\\",
         '{"a": 1}', "e\u0301", "a\nb"]


def random_text(rng):
    s = rng.choice(EDGES)
    for i in range(rng.randrange(5)):
        s += (rng.choice([" ", "\n", ""]) if i else "") + rng.choice(WORDS)
    return s + rng.choice(EDGES)


def random_conversations(file_name, n):
    """n seeded conversations for one template: mostly alternating user/assistant, sometimes not."""
    rng = random.Random(zlib.crc32(file_name.encode()))
    out = {}
    for k in range(n):
        msgs = [S(random_text(rng))] if rng.random() < 0.4 else []
        strict = rng.random() < 0.7
        for i in range(1 + rng.randrange(5)):
            role = ("user" if i % 2 == 0 else "assistant") if strict else rng.choice(["user", "assistant", "system"])
            msgs.append({"role": role, "content": random_text(rng)})
        out[f"random_{k}"] = (msgs, {})
    return out


N_RANDOM = 10
SNIPPET_MESSAGES = [S("Hello there\nsecond line"), U("  héllo 世界  "), A("A"), U("")]


def render_all(template_dir, out_path):
    env = environment()
    sources = json.loads((Path(template_dir) / "sources.json").read_text(encoding="utf-8"))
    n_lines = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for entry in sources:
            text = (Path(template_dir) / entry["file"]).read_text(encoding="utf-8")
            try:
                template = env.from_string(text)
                compile_error = None
            except Exception as e:  # a template Jinja2 itself cannot compile: every rendering is an error
                template, compile_error = None, e
            conversations = {**CONVERSATIONS, **random_conversations(entry["file"], N_RANDOM)}
            for name, (messages, extra) in conversations.items():
                for agp in (False, True):
                    variables = {"messages": messages, "add_generation_prompt": agp,
                                 "bos_token": entry["bos_token"], "eos_token": entry["eos_token"], **extra}
                    line = {"template": entry["file"], "conversation": name, "variables": variables, "date": DATE,
                            "text": None, "error": None}
                    try:
                        if compile_error:
                            raise compile_error
                        line["text"] = template.render(**variables)
                    except Exception as e:
                        line["error"] = {"type": type(e).__name__, "message": str(e)}
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")
                    n_lines += 1
    print(f"{len(sources)} templates x {len(CONVERSATIONS) + N_RANDOM} conversations x 2 = {n_lines} renderings -> {out_path}")


def render_snippets(snippets_path, out_path):
    env = environment()
    snippets = json.loads(Path(snippets_path).read_text(encoding="utf-8"))
    with open(out_path, "a", encoding="utf-8") as out:
        for k, source in enumerate(snippets):
            for agp in (False, True):
                variables = {"messages": SNIPPET_MESSAGES, "add_generation_prompt": agp, "bos_token": "<s>",
                             "eos_token": "</s>"}
                line = {"template": f"snippet {k}", "source": source, "conversation": "snippet_messages",
                        "variables": variables, "date": DATE, "text": None, "error": None}
                try:
                    line["text"] = env.from_string(source).render(**variables)
                except Exception as e:
                    line["error"] = {"type": type(e).__name__, "message": str(e)}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"{len(snippets)} snippets x 2 -> {out_path}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    render_all(sys.argv[1], sys.argv[2])
    if len(sys.argv) == 4:
        render_snippets(sys.argv[3], sys.argv[2])
