#!/usr/bin/python3
"""Parity group 2: sliding windows 1, 3, 8 with prompts longer than the window, cached and
--no-cache, and a run that ends exactly at n_positions (positions stay absolute as the window slides).

    windows.py --kvscope BIN --work DIR
"""
import os
import sys

from common import HERE, check_case, main, model_dir, prompt


def cases(kvscope, work):
    for i, name in enumerate(["base", "original_transformer", "bf16_post_gelu_untied"]):
        m = model_dir(work, name)
        p = prompt(100 + i, 12)
        for w in (1, 3, 8):
            yield lambda m=m, p=p, w=w: check_case(kvscope, m, [p], 10, window=w)
            yield lambda m=m, p=p, w=w: check_case(kvscope, m, [p], 10, window=w, no_cache=True)
    # bf16_post_gelu_untied has n_positions 64: prompt 40 + 24 new tokens uses every position.
    m = model_dir(work, "bf16_post_gelu_untied")
    yield lambda: check_case(kvscope, m, [prompt(110, 40)], 24, window=8)
    yield lambda: check_case(kvscope, m, [prompt(110, 40)], 24, window=8, chunk=5)
    # The default model over a long run: 200-token prompt, 40 new tokens, window 64 (the cache slides
    # for every decode step), prefilled in chunks of 32 and recomputed without a cache.
    d = os.path.normpath(os.path.join(HERE, "..", "..", "assets", "default"))
    p = prompt(72, 200, vocab=767)
    yield lambda: check_case(kvscope, d, [p], 40, window=64, chunk=32)
    yield lambda: check_case(kvscope, d, [p], 40, window=64, no_cache=True)
    # A window wider than the whole run must equal no window at all.
    m = model_dir(work, "sinusoidal_scaled")
    yield lambda: check_case(kvscope, m, [prompt(111, 6)], 6, window=100)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
