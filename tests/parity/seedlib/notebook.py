"""Find the reference documents and run the definitions in their Python code, at test time.

Nothing from the documents is stored in the repository: the test reads them where the checkout keeps
them (`../shared/seeds` beside the clone in CI) and executes their own classes and functions.

    find_seeds(explicit)        -> (folder or None, [reasons it was not found])
    document(folder, prefix)    -> path of the one `<prefix>_*.txt` document, or None
    code_cells(text)            -> [str]: the Python in `In [..]:` notebook cells and ```python fences
    load_definitions(path, ...) -> Definitions: a module holding the document's classes and functions

Only definitions run: imports that resolve, `class` and `def` statements (and `@dataclass` on them).
Everything else at the top level of a cell (building a 124M model, tokenizing with tiktoken, timing,
printing, example loops) is skipped and listed in `Definitions.skipped`, so no cell downloads, trains or
plots, and a document's imports of its own package layout (`from model.config import ...`) resolve to
the names its earlier cells defined.
"""
import ast
import glob
import os
import re
import sys
import types

IN_CELL = re.compile(r"^In \[[^\]]*\]:\s*$")          # a notebook export's cell marker
FENCE_OPEN = re.compile(r"^```\s*(python|py)\s*$")
FENCE_CLOSE = re.compile(r"^```\s*$")


def find_seeds(explicit=None):
    """The first folder that exists among --seeds, $KVSCOPE_SEEDS, <repo>/../shared/seeds, /work/shared/seeds."""
    repo = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    candidates = []
    if explicit:
        candidates.append(("--seeds", explicit))
    if os.environ.get("KVSCOPE_SEEDS"):
        candidates.append(("$KVSCOPE_SEEDS", os.environ["KVSCOPE_SEEDS"]))
    candidates.append(("<repo>/../shared/seeds", os.path.join(repo, "..", "shared", "seeds")))
    candidates.append(("/work/shared/seeds", "/work/shared/seeds"))
    reasons = []
    for how, path in candidates:
        path = os.path.normpath(os.path.abspath(path))
        if os.path.isdir(path):
            return path, reasons
        reasons.append(f"{how}: {path} is not a folder")
    return None, reasons


def document(folder, prefix):
    found = sorted(glob.glob(os.path.join(folder, f"{prefix}_*.txt")))
    return found[0] if found else None


def _parsing_prefix(lines):
    """The longest prefix of `lines` that is valid Python: a notebook cell runs until prose begins."""
    best = 0
    for k in range(1, len(lines) + 1):
        try:
            ast.parse("\n".join(lines[:k]))
            best = k
        except SyntaxError:
            pass
    return "\n".join(lines[:best])


def code_cells(text):
    lines = text.splitlines()
    cells, i = [], 0
    while i < len(lines):
        if IN_CELL.match(lines[i]):
            j = i + 1
            while j < len(lines) and not IN_CELL.match(lines[j]):
                j += 1
            cells.append(_parsing_prefix(lines[i + 1:j]))
            i = j
        elif FENCE_OPEN.match(lines[i]):
            j = i + 1
            while j < len(lines) and not FENCE_CLOSE.match(lines[j]):
                j += 1
            cells.append("\n".join(lines[i + 1:j]))
            i = j + 1
        else:
            i += 1
    return [c for c in cells if c.strip()]


class Definitions:
    """The names a document defines, executed in a module of their own."""

    def __init__(self, path, module, skipped):
        self.path = path
        self.module = module
        self.skipped = skipped      # [(cell index, line, what)] statements that were not run

    def __getattr__(self, name):
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise LookupError(f"{os.path.basename(self.path)} defines no '{name}' (its code cells "
                              "changed, or the document is not the one this test was written for)")

    def summary(self):
        return f"{len(self.skipped)} top-level statements skipped (" + ", ".join(
            sorted({what for _, _, what in self.skipped})) + ")" if self.skipped else "nothing skipped"


def load_definitions(path, module_name):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    module = types.ModuleType(module_name)
    module.__file__ = path
    sys.modules[module_name] = module  # dataclasses look their class's module up here

    # `from model.config import X` and friends: the document's own package layout. Every such module
    # answers with what the document has defined so far.
    own_packages = set()

    def provide(name):
        for part in range(1, name.count(".") + 2):
            sub = ".".join(name.split(".")[:part])
            if sub not in sys.modules or sub in own_packages:
                stub = types.ModuleType(sub)
                stub.__getattr__ = lambda attr, m=module: getattr(m, attr)
                sys.modules[sub] = stub
                own_packages.add(sub)

    skipped = []
    for ic, cell in enumerate(code_cells(text)):
        tree = ast.parse(cell)
        for node in tree.body:
            what = None
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                try:
                    exec(compile(ast.Module([node], []), path, "exec"), module.__dict__)
                except ImportError as e:
                    target = node.module if isinstance(node, ast.ImportFrom) else e.name
                    if isinstance(node, ast.ImportFrom) and node.module and all(
                            hasattr(module, a.name) for a in node.names):
                        provide(node.module)
                        exec(compile(ast.Module([node], []), path, "exec"), module.__dict__)
                    else:
                        what = f"import of unavailable {target}"
            elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                exec(compile(ast.Module([node], []), path, "exec"), module.__dict__)
            else:
                what = type(node).__name__.lower() + " statement"
            if what:
                skipped.append((ic, node.lineno, what))
    for name in own_packages:
        sys.modules.pop(name, None)
    return Definitions(path, module, skipped)
