#pragma once
// The training corpus the default model learns from, generated on demand and deterministically: every
// training sequence is a pure function of (seed, step, index), so runs repeat exactly and nothing is
// written to disk. Three kinds of segment, joined by "\n" until the sequence is full:
//
//   text      1-4 sentences from a small English grammar (the grammar tools/make_default_model.py
//             learned the tokenizer's merges from: names, animals, things, places, ten sentence shapes)
//   copy      a span of 8-32 tokens copied from earlier in the same sequence (copying pays off)
//   random    a span of 8-32 "ordinary tokens" (single letters and digits, see below) drawn uniformly,
//             then repeated once or twice right after it, without a separator
//             (CorpusMix::min_repeat: repeated until the segment is that long)
//   vocab     a span of vocab_min_span-vocab_max_span ids drawn uniformly from the WHOLE vocabulary (every id
//             but <|endoftext|>), then 0-vocab_gap more such ids, then the span once more: the period varies
//             from segment to segment (vocab_repeats > 2: more copies, each after its own gap), so no fixed look-back offset predicts the copy; only a head that finds
//             the earlier occurrence of the current token and reads the token after it (an induction head) does
//   chat      a conversation in the ChatML template (<|im_start|>role\n...<|im_end|>\n): the user states 2-3 facts
//             of the story world ("Anna has a small duck. Ben is by the river."), the assistant acknowledges,
//             maybe a turn of small talk, then 1-2 questions ("What does Anna have?") each answered from the
//             first turn ("Anna has a small duck."). Fact pairs chat_held_out() names never occur: they are
//             left for evaluation. Needs a tokenizer with <|im_start|> and <|im_end|>
//   Text segments may repeat a sentence said earlier in the sequence (CorpusMix::text_repeat), so copying
//   pays off inside prose too.
//
//   Rng                            splitmix64; also seeds the trainer's initial weights
//   sentence(rng)                  one grammar sentence
//   ordinary_tokens(tokenizer)     ids of " a", " 7", ...: a space and one ASCII letter or digit that are
//                                  a single token (with the default tokenizer: 40 ids)
//   Corpus(tokenizer, seed)        the generator; keeps a reference to the tokenizer
//   Corpus::sequence(step, i, n)   n tokens of training sequence i of step `step` (optionally which are predictable)
//   Corpus::text(seed, n)          n tokens of text segments only (previous-token probes)
//   Corpus::random_span(rng, n)    n ordinary tokens drawn uniformly (induction and copy probes)
//   Corpus::vocab_span(rng, n)     n ids drawn uniformly from the whole vocabulary but its special tokens
//   Corpus::pooled_vocab_span      n ids drawn uniformly from a pool of ids drawn from the whole vocabulary
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace kvscope {

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next();                    // splitmix64
    uint64_t below(uint64_t n);         // uniform in [0, n); n >= 1
    double uniform();                   // [0, 1)
    double normal();                    // standard normal (Box-Muller, one draw per call)
};

// Mixes several numbers into one seed (each step and sequence gets its own stream).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

std::string sentence(Rng& rng);
std::vector<TokenId> ordinary_tokens(const Tokenizer& tokenizer);

struct CorpusMix {
    double text = 0.35;                 // probability of a text segment
    double copy = 0.15;                 // of a copy segment (when 16+ tokens exist); the rest is random
    int64_t min_span = 8, max_span = 32;
    int64_t min_repeat = 0;             // a random span repeats until its segment has this many tokens: short
                                        // spans then repeat many times ("a b a b a b"), which rewards a head
                                        // that looks back a fixed small offset, the seed of an induction circuit
    bool span_newline = true;           // false: no "\n" after a random span's last copy, the next segment follows
                                        // at once; the newline would otherwise compete with the span's first
                                        // token wherever a copy could end (greedy copying then stops early)
    bool distinct = false;              // random spans drawn without replacement (at most all ordinary tokens):
                                        // each token occurs once per span, so one token of context finds its
                                        // successor, the easiest case for an induction head
    double vocab = 0;                   // probability of a whole-vocabulary segment (taken from the random share)
    int64_t vocab_min_span = 4, vocab_max_span = 40;
    int64_t vocab_gap = 24;             // 0..vocab_gap random ids between the span and its copy
    int64_t vocab_repeats = 2;          // occurrences of the span in a vocab segment, each after its own gap
    bool vocab_partial = false;         // each copy after the first starts at a random id of the span and runs to
                                        // its end: one id of context must find the rest (no long-context shortcut)
    int64_t vocab_prefix = 0;           // each sequence starts with 0..vocab_prefix random whole-vocabulary ids
                                        // (unpredictable): segments then start at any position, so no mechanism
                                        // tied to absolute positions (the first segment at position 0) pays off
    double vocab_pool_share = 0;        // probability that a vocab segment's span draws from a small random pool of
    int64_t vocab_pool_min = 6, vocab_pool_max = 32;  // vocab_pool_min..max ids of the whole vocabulary: ids then
                                        // repeat inside the span, and one id of context no longer says where the
                                        // copy is; the id before it does (a two-token match)
    double text_repeat = 0;             // each sentence of a text segment is, with this probability, one said earlier
                                        // in the same sequence (when there is one): "Tom saw the cookie. Tom saw the"
    double chat = 0;                    // probability of a chat segment (after the vocab share; see above)
};

// The story world of chat segments, and which facts training never states (evaluation's held-out pairs):
// a "has" fact pairs chat_names()[n] with chat_things()[t], a "where" fact chat_names()[n] with chat_places()[p].
struct ChatWorld {
    static const std::vector<std::string>& names();
    static const std::vector<std::string>& things();     // "duck", "ball", ... (after "a ADJECTIVE")
    static const std::vector<std::string>& adjectives();
    static const std::vector<std::string>& places();     // "by the river", ...
    static bool held_out_thing(size_t name, size_t thing) { return (name * 5 + thing) % 9 == 0; }
    static bool held_out_place(size_t name, size_t place) { return (name * 3 + place) % 7 == 0; }
};


class Corpus {
public:
    Corpus(const Tokenizer& tokenizer, uint64_t seed, CorpusMix mix = {});  // throws UsageError when the
                                                                            // tokenizer has < 10 ordinary tokens
    std::vector<TokenId> sequence(int64_t step, int64_t index, int64_t n,
                                  std::vector<uint8_t>* predictable = nullptr) const;  // predictable: (n) flags,
                                  // 0 for the ids of a vocab segment no model can predict (its first span, its
                                  // gaps, the first id of each copy) and a chat's user messages, 1 elsewhere
    std::vector<TokenId> text(uint64_t seed, int64_t n) const;
    std::vector<TokenId> random_span(Rng& rng, int64_t n) const;
    std::vector<TokenId> vocab_span(Rng& rng, int64_t n) const;
    std::vector<TokenId> pooled_vocab_span(Rng& rng, int64_t n, int64_t pool) const;  // n draws from `pool` ids
    const std::vector<TokenId>& ordinary() const { return ordinary_; }

private:
    std::vector<TokenId> paragraph(Rng& rng, std::vector<std::string>* said = nullptr) const;
    void chat(Rng& rng, std::vector<TokenId>& seq, std::vector<uint8_t>& flags) const;  // appends one chat segment
    const Tokenizer& tokenizer_;
    uint64_t seed_;
    CorpusMix mix_;
    std::vector<TokenId> ordinary_;
    TokenId newline_;
    std::vector<TokenId> all_;          // every id but the special ones (vocab segments)
    TokenId im_start_ = -1, im_end_ = -1;  // chat segments' special tokens (mix.chat > 0)
};

}  // namespace kvscope
