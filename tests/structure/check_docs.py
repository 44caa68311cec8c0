#!/usr/bin/python3
"""The README is a front door: at most MAX_README lines, and every relative link in it and in docs/*.md
(and the folder READMEs) leads to a file or folder that exists, and to a heading that exists when it
names one (#anchor, GitHub's slug rules).

usage: check_docs.py SOURCE_DIR"""
import os
import re
import sys

MAX_README = 300
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def markdown_files(source):
    yield os.path.join(source, "README.md")
    for folder in ("docs", "core", "app", "assets"):
        for dirpath, _, files in os.walk(os.path.join(source, folder)):
            for f in sorted(files):
                if f.endswith(".md"):
                    yield os.path.join(dirpath, f)


def problems(source):
    found = []
    readme = os.path.join(source, "README.md")
    n = open(readme, encoding="utf-8").read().count("\n")
    if n > MAX_README:
        found.append(f"README.md: {n} lines (a front door has at most {MAX_README}; move details to docs/)")
    for path in markdown_files(source):
        rel = os.path.relpath(path, source)
        text = open(path, encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                found.append(f"{rel}: link to {target}: {os.path.relpath(dest, source)} does not exist")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                found.append(f"{rel}: link to {target}: no heading #{anchor} in {os.path.relpath(dest, source)}")
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    found = problems(sys.argv[1])
    for p in found:
        print(p)
    if found:
        sys.exit(1)
    print("README.md is a front door; every link in the docs resolves")


if __name__ == "__main__":
    main()
