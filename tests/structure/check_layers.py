#!/usr/bin/python3
"""The folders of core/ are layers (core/README.md lists them, lowest first): a file may include only from
its own folder and the folders listed before it. Also: every core folder is listed, no core file includes
app/, and no source file outgrows the size a reader can hold (generated tables excepted).

usage: check_layers.py SOURCE_DIR"""
import os
import re
import sys

MAX_LINES = 1000
GENERATED = {"core/text/unicode_classes.cpp", "core/text/unicode_nfc_tables.inc", "core/text/chat_template_texts.inc"}


def layer_order(source):
    text = open(os.path.join(source, "core", "README.md"), encoding="utf-8").read()
    return re.findall(r"^\d+\. `([a-z_]+)/`", text, flags=re.M)


def problems(source):
    order = layer_order(source)
    rank = {name: i for i, name in enumerate(order)}
    core = os.path.join(source, "core")
    found = []
    folders = sorted(d for d in os.listdir(core) if os.path.isdir(os.path.join(core, d)))
    for d in folders:
        if d not in rank:
            found.append(f"core/{d}/ is not listed in core/README.md")
    for f in os.listdir(core):
        if os.path.isfile(os.path.join(core, f)) and f != "README.md":
            found.append(f"core/{f} sits outside every layer folder")
    include = re.compile(r'^#include "([^"]+)"', re.M)
    for root in ("core", "app"):
        for dirpath, _, files in os.walk(os.path.join(source, root)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".inc")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, source)
                text = open(path, encoding="utf-8").read()
                lines = text.count("\n")
                if lines > MAX_LINES and rel not in GENERATED:
                    found.append(f"{rel}: {lines} lines (more than {MAX_LINES})")
                if root != "core":
                    continue
                own = rel.split("/")[1]
                for target in include.findall(text):
                    parts = target.split("/")
                    if len(parts) == 1:
                        found.append(f"{rel}: #include \"{target}\" does not name its folder")
                        continue
                    folder = parts[0]
                    if folder not in rank:
                        found.append(f"{rel}: #include \"{target}\" is not a core layer")
                    elif own in rank and rank[folder] > rank[own]:
                        found.append(f"{rel}: #include \"{target}\" runs back up from {own}/ to {folder}/")
    return order, found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    order, found = problems(sys.argv[1])
    if len(order) < 5:
        sys.exit(f"core/README.md lists only {len(order)} layers: the list was not found")
    for p in found:
        print(p)
    if found:
        sys.exit(1)
    print(f"{len(order)} layers, every include runs down")


if __name__ == "__main__":
    main()
