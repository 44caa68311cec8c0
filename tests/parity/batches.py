#!/usr/bin/python3
"""Parity group 4: ragged batches of 3 prompts (lengths 5, 1, 9 and 9, 4, 6) cached, --no-cache,
with a window and with chunked prefill. The reference pads rows on the right in one forward pass
and is checked against single-prompt runs by the selfcheck group.

    batches.py --kvscope BIN --work DIR
"""
import sys

from common import check_case, main, model_dir, prompt


def cases(kvscope, work):
    for i, name in enumerate(["base", "untied_lm_bias", "f16", "original_transformer"]):
        m = model_dir(work, name)
        ps = [prompt(300 + 3 * i, 5), prompt(301 + 3 * i, 1), prompt(302 + 3 * i, 9)]
        yield lambda m=m, ps=ps: check_case(kvscope, m, ps, 7)
        yield lambda m=m, ps=ps: check_case(kvscope, m, ps, 7, no_cache=True)
        yield lambda m=m, ps=ps: check_case(kvscope, m, ps, 7, window=3)
        yield lambda m=m, ps=ps: check_case(kvscope, m, ps, 7, chunk=2)
    m = model_dir(work, "gelu_erf_no_qkv_bias")
    ps = [prompt(320, 9), prompt(321, 4), prompt(322, 6)]
    yield lambda: check_case(kvscope, m, ps, 6, window=4, chunk=3)
    yield lambda: check_case(kvscope, m, [ps[0], ps[0], ps[0]], 5)  # identical rows stay identical


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
