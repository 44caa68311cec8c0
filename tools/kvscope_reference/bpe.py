"""GPT-2 byte-level BPE for ASCII corpora: learning merges, writing vocab.json / merges.txt, encoding.

The learner handles ASCII text only: its pre-tokenizer is GPT-2's pattern with the Unicode classes
\\p{L} and \\p{N} narrowed to [A-Za-z] and [0-9], which splits ASCII text exactly as GPT-2 does.

Token ids: 0..255 are the 256 byte tokens in the order of GPT-2's byte-to-unicode table, then one
id per merge in merge order (merge i makes id 256 + i, so merge rank and token id agree), then
<|endoftext|> last.
"""
import json
import re

PRETOKENIZE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
END_OF_TEXT = "<|endoftext|>"


def byte_table():
    """GPT-2's byte -> printable unicode char map, as a list of (byte, char) in id order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    pairs, extra = [(b, chr(b)) for b in printable], 0
    for b in range(256):
        if b not in printable:
            pairs.append((b, chr(256 + extra)))
            extra += 1
    return pairs


BYTE_TO_CHAR = dict(byte_table())


def pretokenize(text):
    if not text.isascii():
        raise ValueError("the BPE learner handles ASCII text only")
    return PRETOKENIZE.findall(text)


def learn(text, n_merges):
    """-> list of merges (left, right), most frequent pair first; ties go to the smallest pair."""
    counts = {}
    for piece in pretokenize(text):
        word = tuple(BYTE_TO_CHAR[b] for b in piece.encode("ascii"))
        counts[word] = counts.get(word, 0) + 1
    words = list(counts.items())
    known = set(BYTE_TO_CHAR.values())
    merges = []
    while len(merges) < n_merges:
        pair_counts = {}
        for word, n in words:
            for pair in zip(word, word[1:]):
                pair_counts[pair] = pair_counts.get(pair, 0) + n
        # A pair spelling a token we already have would give two merges one id: skip it.
        candidates = [(-n, pair) for pair, n in pair_counts.items() if pair[0] + pair[1] not in known]
        if not candidates:
            raise ValueError(f"corpus too small: only {len(merges)} merges possible")
        _, best = min(candidates)
        merges.append(best)
        known.add(best[0] + best[1])
        words = [(_merge_word(word, best), n) for word, n in words]
    return merges


def _merge_word(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def vocab_of(merges):
    vocab = {ch: i for i, (_, ch) in enumerate(byte_table())}
    for left, right in merges:
        vocab[left + right] = len(vocab)
    vocab[END_OF_TEXT] = len(vocab)
    return vocab


def vocab_json(vocab):
    return json.dumps(vocab, ensure_ascii=False, separators=(",", ":")) + "\n"


def merges_txt(merges):
    return "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)


def encode(text, merges, vocab, by="merge_rank"):
    """ASCII text -> ids. by="merge_rank" applies the lowest-ranked merge first (GPT-2's encoder);
    by="token_id" merges the adjacent pair whose joined string has the lowest id (tiktoken's rule).
    With merge i making id 256 + i the two agree; encoding both ways checks that."""
    rank = {pair: i for i, pair in enumerate(merges)}
    ids = []
    for piece in pretokenize(text):
        word = [BYTE_TO_CHAR[b] for b in piece.encode("ascii")]
        while len(word) > 1:
            if by == "merge_rank":
                scored = [(rank.get((a, b)), i) for i, (a, b) in enumerate(zip(word, word[1:]))]
            else:
                scored = [(vocab.get(a + b) if vocab.get(a + b, 0) >= 256 else None, i)
                          for i, (a, b) in enumerate(zip(word, word[1:]))]
            scored = [(r, i) for r, i in scored if r is not None]
            if not scored:
                break
            r, _ = min(scored)
            # merge every occurrence of the chosen pair, left to right
            pair = next((word[i], word[i + 1]) for rr, i in scored if rr == r)
            word = list(_merge_word(tuple(word), pair))
        ids += [vocab[s] for s in word]
    return ids
