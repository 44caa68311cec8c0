#!/usr/bin/python3
"""A class that composes parts keeps a small public surface: the classes in LIMITS declare at most that many
public member functions (constructors, operators and = default / = delete ones counted; members a class
does not declare, like the moves the compiler writes, are not). A part's answers are read through the
part's accessor, not a pass-through on the class (issue 42: KvCache had 64, Session 34).

usage: check_surface.py SOURCE_DIR [-v]   (-v lists each class's public member functions)"""
import os
import re
import sys

LIMITS = {
    ("core/cache/kv_cache.h", "KvCache"): 28,
    ("core/run/session.h", "Session"): 16,
}


def public_functions(text, cls):
    """The declarations of the public member functions of class `cls` in a header's text, as this codebase
    writes them: at the class's top level, each ending in ';' or followed by its inline body."""
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"\bclass\s+" + cls + r"\b[^;{]*\{", text)
    if not m:
        return None
    i, depth, parens, access = m.end(), 1, 0, "private"
    stmt, body, names = "", False, []
    while depth > 0 and i < len(text):
        c = text[i]
        if depth == 1 and parens == 0 and c == "{":  # a function body, or a data member's brace initializer
            if not body and "(" in stmt and access == "public":
                names.append(stmt)
            body, depth = True, depth + 1
        elif depth > 1:
            depth += {"{": 1, "}": -1}.get(c, 0)
            if depth == 1:
                stmt, body = "", False
        elif c == "}" and parens == 0:
            depth -= 1
        else:
            parens += {"(": 1, ")": -1}.get(c, 0)
            if c == ";" and parens == 0:
                if not body and "(" in stmt and access == "public":
                    names.append(stmt)
                stmt, body = "", False
            elif c == ":" and re.fullmatch(r"\s*(public|private|protected)\s*", stmt) and text[i + 1] != ":":
                access, stmt = stmt.strip(), ""
            else:
                stmt += c
        i += 1
    return [" ".join(n.split()) for n in names]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    found = []
    for (header, cls), limit in sorted(LIMITS.items()):
        fns = public_functions(open(os.path.join(sys.argv[1], header), encoding="utf-8").read(), cls)
        if fns is None:
            found.append(f"{header}: no class {cls}")
            continue
        if "-v" in sys.argv:
            print(f"{cls} ({header}): {len(fns)}")
            for f in fns:
                print("  ", f)
        if len(fns) > limit:
            found.append(f"{header}: {cls} has {len(fns)} public member functions, more than {limit}: read a "
                         f"part through its accessor instead of passing it through")
    for p in found:
        print(p)
    if found:
        sys.exit(1)
    print(", ".join(f"{cls} within {limit}" for (_, cls), limit in sorted(LIMITS.items())) + " public member functions")


if __name__ == "__main__":
    main()
