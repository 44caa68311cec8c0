"""Greedy generation on the reference model.

  greedy(model, prompt, n_new, window)              full recompute each step (the baseline)
  greedy_batch(model, prompts, n_new, window)       ragged batch, full recompute, one padded forward per step
  greedy_cached(model, prompt, n_new, window, chunk) CachedRunner: chunked prefill, then one token per step

Each returns (generated ids, logits [N, V]) per prompt, where row j holds the logits generated
token j was chosen from (row 0 = after the prompt). `margins` gives, per row, the gap between the
best and second-best logit: a small gap means greedy parity is fragile at that step.
"""
import torch

from .model import CachedRunner


def _pick(row):
    return int(torch.argmax(row).item())  # first maximum on ties, like std::max_element


def greedy(model, prompt, n_new, window=None):
    seq, rows = list(prompt), []
    for _ in range(n_new):
        row = model.forward(seq, window)[-1]
        rows.append(row)
        seq.append(_pick(row))
    return seq[len(prompt):], torch.stack(rows)


def greedy_batch(model, prompts, n_new, window=None):
    seqs = [list(p) for p in prompts]
    rows = [[] for _ in prompts]
    for _ in range(n_new):
        outs = model.forward_batch(seqs, window)
        for b, out in enumerate(outs):
            rows[b].append(out[-1])
            seqs[b].append(_pick(out[-1]))
    return [(s[len(p):], torch.stack(r)) for s, p, r in zip(seqs, prompts, rows)]


def greedy_cached(model, prompt, n_new, window=None, chunk=None):
    runner = CachedRunner(model, window)
    chunk = chunk or len(prompt)
    out = None
    for start in range(0, len(prompt), chunk):
        out = runner.feed(prompt[start:start + chunk])
    gen, rows = [], []
    for j in range(n_new):
        row = out[-1]
        rows.append(row)
        gen.append(_pick(row))
        if j + 1 < n_new:
            out = runner.feed([gen[-1]])
    return gen, torch.stack(rows)


def margins(logits):
    """logits [N, V] -> [N] best minus second best."""
    top = torch.topk(logits, 2, dim=-1).values
    return top[:, 0] - top[:, 1]
