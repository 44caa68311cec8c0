#!/usr/bin/python3
"""Parity group 3: chunked prefill (chunks 1, 2, 3, 7 on an 11-token prompt; also a chunk longer
than the prompt), alone and with a sliding window.

    chunks.py --kvscope BIN --work DIR
"""
import sys

from common import check_case, main, model_dir, prompt


def cases(kvscope, work):
    for i, name in enumerate(["base", "post_no_final_ln", "hf_checkpoint"]):
        m = model_dir(work, name)
        p = prompt(200 + i, 11)
        for c in (1, 2, 3, 7, 64):
            yield lambda m=m, p=p, c=c: check_case(kvscope, m, [p], 8, chunk=c)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, chunk=2, window=3)
        yield lambda m=m, p=p: check_case(kvscope, m, [p], 8, chunk=7, window=3)


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
