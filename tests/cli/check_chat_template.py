#!/usr/bin/python3
"""kvscope chat-template against Jinja2 (tests/reference/chat_template_reference.py's environment): the exact
bytes on stdout for real templates, --model folders (tokenizer_config.json, chat_template.jinja beside it),
--json's token ids, and bad inputs (exit 2, one 'error:' line).

    check_chat_template.py --kvscope BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TEMPLATES = os.path.join(REPO, "tests", "data", "chat_templates")
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import chat_template_reference as ref  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def run(kvscope, *args):
    return subprocess.run([kvscope, "chat-template", *args], capture_output=True)


def one_error_line(r):
    err = r.stderr.decode("utf-8", "replace")
    return err.startswith("error: ") and err.count("\n") == 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvscope", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    env = ref.environment()
    sources = json.load(open(os.path.join(TEMPLATES, "sources.json"), encoding="utf-8"))

    # 1. real templates, a few conversations each: stdout is the rendering, byte for byte
    n = 0
    for entry in sources[::6]:
        template = env.from_string(open(os.path.join(TEMPLATES, entry["file"]), encoding="utf-8").read())
        for name in ("one_user", "four_turns_system", "unicode", "assistant_first"):
            messages, _ = ref.CONVERSATIONS[name]
            path = os.path.join(a.work, name + ".json")
            json.dump(messages, open(path, "w", encoding="utf-8"), ensure_ascii=False)
            for agp in (False, True):
                args = ["--template", os.path.join(TEMPLATES, entry["file"]), "--messages", path, "--date", ref.DATE,
                        "--bos-token", entry["bos_token"], "--eos-token", entry["eos_token"]]
                if agp:
                    args.append("--add-generation-prompt")
                r = run(a.kvscope, *args)
                what = "%s / %s agp=%s" % (entry["file"], name, agp)
                n += 1
                try:
                    expected = template.render(messages=messages, add_generation_prompt=agp,
                                               bos_token=entry["bos_token"], eos_token=entry["eos_token"])
                except Exception as e:
                    check(r.returncode == 2 and one_error_line(r), "%s: Jinja2 raised %r, kvscope exit %d %r" %
                          (what, e, r.returncode, r.stderr))
                    if isinstance(e, ref.jinja2.exceptions.TemplateError) and type(e).__name__ == "TemplateError":
                        check(str(e)[:40].encode() in r.stderr, "%s: the error names %r: %r" % (what, str(e), r.stderr))
                    continue
                check(r.returncode == 0 and r.stdout == expected.encode("utf-8"),
                      "%s: exit %d, stdout %r, expected %r" % (what, r.returncode, r.stdout[:120], expected[:120]))
    print("%d renderings through the command" % n)

    # 2. --model: tokenizer_config.json's template and tokens, then chat_template.jinja beside it wins
    model = os.path.join(a.work, "model")
    os.makedirs(model)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(REPO, "assets", "default", f), model)
    config_template = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"
    json.dump({"chat_template": config_template, "bos_token": "<B>", "eos_token": {"content": "<E>"}},
              open(os.path.join(model, "tokenizer_config.json"), "w"))
    msgs = os.path.join(a.work, "m.json")
    json.dump([{"role": "user", "content": "The cat"}], open(msgs, "w"))
    r = run(a.kvscope, "--model", model, "--messages", msgs)
    check(r.returncode == 0 and r.stdout == b"<B>[user] The cat<E>", "--model renders the config's template: %r" % r.stdout)
    r = run(a.kvscope, "--model", model, "--messages", msgs, "--json")
    tok = subprocess.run([a.kvscope, "tokenize", "--model", model, "--text", "<B>[user] The cat<E>", "--allow-special"],
                         capture_output=True, text=True)
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got.get("text") == "<B>[user] The cat<E>" and got.get("ids") == [int(x) for x in tok.stdout.split()],
          "--json gives the text and tokenize's ids: %r vs %r" % (r.stdout, tok.stdout))
    open(os.path.join(model, "chat_template.jinja"), "w").write("{{ messages|length }} {{ 'x' if add_generation_prompt }}\n")
    r = run(a.kvscope, "--model", model, "--messages", msgs, "--add-generation-prompt")
    check(r.returncode == 0 and r.stdout == b"1 x", "chat_template.jinja is preferred (final newline dropped): %r" % r.stdout)

    # 3. bad inputs: exit 2 and one line naming the problem
    bad_template = os.path.join(a.work, "bad.jinja")
    open(bad_template, "w").write("ok\n{% for x in messages %}{{ x|wordwrap }}{% endfor %}")
    not_array = os.path.join(a.work, "object.json")
    open(not_array, "w").write('{"role": "user"}')
    for args, needle in (
            (["--messages", msgs], "exactly one of --model, --template"),
            (["--model", model, "--template", bad_template, "--messages", msgs], "exactly one of"),
            (["--template", bad_template, "--messages", msgs], "bad.jinja:2:29: the filter 'wordwrap' is not supported"),
            (["--model", model, "--messages", not_array], "expected a JSON array"),
            (["--model", model, "--messages", msgs, "--date", "2024-13-01"], "--date wants YYYY-MM-DD"),
            (["--template", bad_template, "--messages", msgs, "--json"], "--json gives token ids")):
        r = run(a.kvscope, *args)
        check(r.returncode == 2 and one_error_line(r) and needle.encode() in r.stderr,
              "%s: exit 2 naming %r (exit %d, %r)" % (args, needle, r.returncode, r.stderr))

    if failures:
        print("%d failure(s)" % len(failures), file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
