#!/usr/bin/python3
"""Parity group 1: every model in the matrix, cached and --no-cache, against the reference.

    architectures.py --kvscope BIN --work DIR
"""
import os
import sys

from common import HERE, MODELS, check_case, main, model_dir, prompt

DEFAULT_MODEL = os.path.normpath(os.path.join(HERE, "..", "..", "assets", "default"))


def cases(kvscope, work):
    for i, name in enumerate(MODELS):
        m = model_dir(work, name)
        p = prompt(i, 7)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 12)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 12, no_cache=True)
    # A one-token prompt, one new token (the smallest run), and threads must not change numbers.
    m = model_dir(work, "base")
    yield lambda: check_case(kvscope, m, [[42]], 1)
    yield lambda: check_case(kvscope, m, [prompt(50, 9)], 8, extra=("--threads", "2"))
    yield lambda: check_case(kvscope, m, [prompt(50, 9)], 8, extra=("--threads", "1"))
    # The embedded default model (V = 768, 4 layers, n_positions 512), by ids; no id is <|endoftext|>.
    p = prompt(61, 20, vocab=767)
    yield lambda: check_case(kvscope, DEFAULT_MODEL, [p], 10)
    yield lambda: check_case(kvscope, DEFAULT_MODEL, [p], 10, no_cache=True, window=8)
    yield lambda: check_case(kvscope, DEFAULT_MODEL, [p], 10, window=8, chunk=6)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
