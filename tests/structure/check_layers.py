#!/usr/bin/python3
"""The folders of core/ are layers (core/README.md lists them, lowest first): a file may include only from
its own folder and the folders listed before it. The folders of app/gui/ are layers the same way
(GUI_LAYERS, app/gui/README.md): logic/ never includes ImGui, GL or GLFW, and nothing includes a folder
above its own. Also: every core folder is listed, no core file includes app/, no source file outgrows the size a reader can hold (generated tables excepted), and no function in
core/ or app/ is longer than MAX_FUNCTION_LINES (today's longer ones are listed in LONG_FUNCTIONS, which
only shrinks).

usage: check_layers.py SOURCE_DIR"""
import os
import re
import sys

MAX_LINES = 1000
SELF = "tests/structure/check_layers.py"
GENERATED = {"core/text/unicode_classes.cpp", "core/text/unicode_nfc_tables.inc", "core/text/chat_template_texts.inc"}

# A function's length is the lines of its body, between the line that opens it and its closing brace.
MAX_FUNCTION_LINES = 150
# The functions in core/ and app/ that were longer than MAX_FUNCTION_LINES on 2026-11-28, with their
# length then. This list only shrinks: nothing is added to it, a listed function may not grow, and one
# that is split to MAX_FUNCTION_LINES or fewer (or renamed, or removed) must leave the list, or the check
# fails. Overloads share an entry: the longest definition of that name in the file counts.
LONG_FUNCTIONS = {
}

# The window's layers, lowest first (app/gui/README.md): the non-drawing half, the drawing helpers, one module
# per panel, the window and its script.
GUI_LAYERS = ["logic", "widgets", "panels", "window"]
_DRAWING = re.compile(r'^#include <(imgui|epoxy/|GLFW/|backends/|GL/)', re.M)

_TYPE = re.compile(r"^(class|struct|union|enum)\b")
_NOT_A_FUNCTION = re.compile(r"^(namespace|extern|using|typedef|static_assert|(public|protected|private)\s*:)")
_COMMENT = re.compile(r"^\s*//")


def _without_template(decl):
    """decl without a leading template <...> header."""
    if not decl.startswith("template"):
        return decl
    depth = 0
    for i, ch in enumerate(decl):
        depth += ch == "<"
        if ch == ">":
            depth -= 1
            if depth == 0:
                return decl[i + 1:].lstrip()
    return decl


def functions(text):
    """(name, first line, body lines) of every namespace-level function definition in a source file, found
    as this codebase writes them: the declaration starts at column 0, its last line ends in '{', and the
    body ends at the next line that starts with '}'. Types' and variables' bodies are skipped whole (member
    functions are indented); declarations and one-line definitions are not counted."""
    lines = text.split("\n")
    found = []
    head = None  # index of the current declaration's first line
    i = 0
    while i < len(lines):
        if head is not None and _COMMENT.match(lines[i]):  # a comment inside a declaration
            i += 1
            continue
        code = re.sub(r"\s+//.*$", "", lines[i]).rstrip()
        if head is None:
            if not code or code[0] in " \t}/#*" or _NOT_A_FUNCTION.match(code):
                i += 1
                continue
            head = i
        if not code or code.endswith((";", "}")) or i - head > 20:
            head = None  # a declaration or a one-line definition
        elif code.endswith("{"):
            decl = _without_template(" ".join(l.strip() for l in lines[head:i + 1] if not _COMMENT.match(l)))
            end = i + 1
            while end < len(lines) and not lines[end].startswith("}"):
                end += 1
            before = re.sub(r"operator\s*\S+", "", decl.split("(")[0])  # operator= is a function
            if not _TYPE.match(decl) and "(" in decl and "=" not in before:
                name = re.search(r"([\w:~]*operator\s*(\(\)|[^\s(]+)|~?[A-Za-z_][\w:~]*)\s*\(", decl)
                found.append((name.group(1) if name else "?", head + 1, end - i - 1))
            i = end  # past the body: a function's, a type's or a variable's
            head = None
        i += 1
    return found


def layer_order(source):
    text = open(os.path.join(source, "core", "README.md"), encoding="utf-8").read()
    return re.findall(r"^\d+\. `([a-z_]+)/`", text, flags=re.M)


def gui_problems(source):
    """app/gui/: every file in a GUI_LAYERS folder, quoted includes of app/gui name their folder and run down,
    logic/ draws nothing."""
    gui = os.path.join(source, "app", "gui")
    if not os.path.isdir(gui):
        return []
    rank = {name: i for i, name in enumerate(GUI_LAYERS)}
    include = re.compile(r'^#include "([^"]+)"', re.M)
    found = []
    for f in sorted(os.listdir(gui)):
        if os.path.isdir(os.path.join(gui, f)):
            if f not in rank:
                found.append(f"app/gui/{f}/ is not one of the window's layers {GUI_LAYERS} ({SELF})")
        elif f != "README.md":
            found.append(f"app/gui/{f} sits outside every layer folder")
    for own in GUI_LAYERS:
        for dirpath, _, files in os.walk(os.path.join(gui, own)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), source)
                text = open(os.path.join(dirpath, name), encoding="utf-8").read()
                if own == "logic":
                    for m in _DRAWING.finditer(text):
                        found.append(f"{rel}: includes <{m.group(1)}...>: logic/ draws nothing (no ImGui, no GL)")
                for target in include.findall(text):
                    folder = target.split("/")[0]
                    if "/" not in target:
                        found.append(f"{rel}: #include \"{target}\" does not name its folder")
                    elif folder in rank and rank[folder] > rank[own]:
                        found.append(f"{rel}: #include \"{target}\" runs back up from app/gui/{own}/ to {folder}/")
    return found


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
    longest = {}  # (file, function) -> the longest definition's body lines
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
                if name.endswith(".cpp") and rel not in GENERATED:
                    for function, line, length in functions(text):
                        key = (rel, function)
                        longest[key] = max(longest.get(key, 0), length)
                        if length <= MAX_FUNCTION_LINES:
                            continue
                        if key not in LONG_FUNCTIONS:
                            found.append(f"{rel}:{line}: {function} is {length} lines long (more than "
                                         f"{MAX_FUNCTION_LINES}): split it")
                        elif length > LONG_FUNCTIONS[key]:
                            found.append(f"{rel}:{line}: {function} grew from {LONG_FUNCTIONS[key]} to {length} "
                                         f"lines: LONG_FUNCTIONS only shrinks, split it")
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
    for (rel, function), length in sorted(LONG_FUNCTIONS.items()):
        now = longest.get((rel, function))
        if now is None:
            found.append(f"{rel}: {function} is not there any more: remove it from LONG_FUNCTIONS in {SELF}")
        elif now <= MAX_FUNCTION_LINES:
            found.append(f"{rel}: {function} is {now} lines now, within {MAX_FUNCTION_LINES}: remove it from "
                         f"LONG_FUNCTIONS in {SELF}")
    return order, found + gui_problems(source)


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
    print(f"{len(order)} core layers and {len(GUI_LAYERS)} app/gui layers, every include runs down; no function over {MAX_FUNCTION_LINES} lines but the "
          f"{len(LONG_FUNCTIONS)} listed")


if __name__ == "__main__":
    main()
