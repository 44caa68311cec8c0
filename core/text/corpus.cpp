#include "text/corpus.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "base/errors.h"

namespace kvscope {

uint64_t Rng::next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t Rng::below(uint64_t n) { return next() % n; }  // bias < 2^-50 for our n: irrelevant

double Rng::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

double Rng::normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
    Rng r(a ^ 0x6B7673636F7065ull);
    r.state ^= r.next() + b;
    r.state ^= r.next() + c;
    return r.next();
}

namespace {

template <size_t N> const char* pick(Rng& r, const char* const (&items)[N]) { return items[r.below(N)]; }

const char* const kNames[] = {"Tom", "Anna", "Sam", "Lily", "Max", "Nora", "Ben", "Mia", "Leo",
                              "Ella", "Jack", "Ruth", "Oscar", "Grace", "Henry", "Clara", "Felix", "Zoe"};
const char* const kAnimals[] = {"cat", "dog", "bird", "fox", "horse", "rabbit", "mouse", "duck",
                                "sheep", "goat", "frog", "bear", "owl", "fish", "tiger", "lion",
                                "whale", "turtle", "monkey", "spider", "snake", "camel", "donkey",
                                "parrot", "squirrel"};
const char* const kNouns[] = {"cat", "dog", "bird", "fox", "horse", "rabbit", "mouse", "duck", "sheep",
                              "goat", "frog", "bear", "owl", "fish", "tiger", "lion", "ball", "book",
                              "apple", "box", "hat", "cup", "kite", "boat", "tree", "house", "door",
                              "window", "garden", "river", "road", "hill", "chair", "table", "lamp",
                              "letter", "bottle", "pencil", "blanket", "basket", "bicycle", "candle",
                              "flower", "mountain", "island", "bridge", "kitchen", "picture",
                              "sandwich", "umbrella", "wagon", "cookie", "shoe"};
const char* const kThings[] = {"ball", "book", "apple", "box", "hat", "cup", "kite", "boat", "tree",
                               "house", "chair", "table", "lamp", "letter", "bottle", "pencil",
                               "basket", "candle", "flower", "cookie", "shoe"};
const char* const kAdjs[] = {"little", "big", "red", "blue", "green", "old", "young", "happy", "tired",
                             "small", "quiet", "bright", "dark", "warm", "cold", "yellow", "purple",
                             "strange", "funny", "hungry", "clever", "gentle", "brave", "sleepy",
                             "shiny", "heavy", "empty"};
const char* const kPast[] = {"saw", "found", "liked", "wanted", "carried", "painted", "opened",
                             "watched", "followed", "helped", "dropped", "cleaned", "borrowed",
                             "noticed", "pushed", "pulled", "touched", "visited", "remembered", "forgot"};
const char* const kPresent[] = {"sees", "finds", "likes", "wants", "carries", "paints", "opens",
                                "watches", "follows", "helps", "drops", "cleans", "borrows",
                                "notices", "pushes", "pulls", "touches", "visits", "remembers", "forgets"};
const char* const kPlaces[] = {"in the garden", "by the river", "on the hill", "near the house",
                               "under the tree", "at school", "in the park", "behind the kitchen",
                               "across the bridge", "beside the mountain", "inside the basket"};
const char* const kTimes[] = {"Yesterday", "Today", "In the morning", "At night", "After lunch",
                              "On Sunday", "Every day"};
const char* const kDets[] = {"the", "a", "the", "my", "her", "his", "our"};

std::string noun_phrase(Rng& r) {
    std::string s = pick(r, kDets);
    if (r.below(2)) s += std::string(" ") + pick(r, kAdjs);
    return s + " " + pick(r, kNouns);
}

std::string capitalized(std::string s) {
    if (!s.empty()) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
}

std::string num(Rng& r, uint64_t n, uint64_t offset = 0) { return std::to_string(r.below(n) + offset); }

}  // namespace

std::string sentence(Rng& r) {
    using std::string;
    switch (r.below(10)) {
    case 0: return string(pick(r, kNames)) + " " + pick(r, kPast) + " " + noun_phrase(r) + " " + pick(r, kPlaces) + ".";
    case 1: {
        string s = string(pick(r, kTimes)) + ", " + pick(r, kNames) + " " + pick(r, kPast) + " ";
        return s + num(r, 20, 2) + " " + pick(r, kAnimals) + "s.";
    }
    case 2: return "Where is " + noun_phrase(r) + "? It's " + pick(r, kPlaces) + ".";
    case 3: {
        string s = capitalized(noun_phrase(r)) + " " + pick(r, kPresent) + " ";
        return s + noun_phrase(r) + ".";
    }
    case 4: {
        static const char* const who[] = {"she", "he", "they"};
        static const char* const is[] = {"is", "was", "is not"};
        string s = string("I'm ") + pick(r, kAdjs) + ", and " + pick(r, who) + " ";
        s += string(pick(r, is)) + " ";
        return s + pick(r, kAdjs) + ".";
    }
    case 5: {
        string s = string(pick(r, kNames)) + " said: \"We'll go " + pick(r, kPlaces) + " at ";
        return s + num(r, 12, 1) + " o'clock.\"";
    }
    case 6: {
        string s = "Don't open " + noun_phrase(r) + "; " + pick(r, kNames) + " can't find ";
        return s + noun_phrase(r) + "!";
    }
    case 7: {
        string s = "There are " + num(r, 100) + " " + pick(r, kThings) + "s and ";
        s += num(r, 10) + " " + pick(r, kAnimals) + "s ";
        return s + pick(r, kPlaces) + ".";
    }
    case 8: {
        string s = string(pick(r, kNames)) + " and " + pick(r, kNames) + " " + pick(r, kPast) + " ";
        return s + noun_phrase(r) + ", then they went home.";
    }
    default: {
        string s = "Why did " + noun_phrase(r) + " go " + pick(r, kPlaces) + "? Because it was ";
        return s + pick(r, kAdjs) + ".";
    }
    }
}

std::vector<TokenId> ordinary_tokens(const Tokenizer& tokenizer) {
    std::vector<TokenId> ids;
    const char* alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (const char* c = alnum; *c; ++c) {
        const std::string text = std::string(" ") + *c;
        const std::vector<TokenId> enc = tokenizer.encode_continuation(text);
        if (enc.size() == 1) ids.push_back(enc[0]);
    }
    return ids;
}

Corpus::Corpus(const Tokenizer& tokenizer, uint64_t seed, CorpusMix mix)
    : tokenizer_(tokenizer), seed_(seed), mix_(mix), ordinary_(ordinary_tokens(tokenizer)) {
    if (ordinary_.size() < 10)
        throw UsageError("corpus: the tokenizer has only " + std::to_string(ordinary_.size()) +
                         " single-token letters/digits (\" a\", \" 7\"); random spans need at least 10");
    const std::vector<TokenId> nl = tokenizer.encode_continuation("\n");
    newline_ = nl.at(0);
    const std::optional<TokenId> eot = tokenizer.end_of_text();
    for (TokenId id = 0; id < TokenId(tokenizer.n_vocab()); ++id)
        if (!eot || id != *eot) all_.push_back(id);
}

std::vector<TokenId> Corpus::pooled_vocab_span(Rng& rng, int64_t n, int64_t pool) const {
    const std::vector<TokenId> ids = vocab_span(rng, std::max<int64_t>(pool, 1));
    std::vector<TokenId> span(size_t(std::max<int64_t>(n, 0)));
    for (TokenId& t : span) t = ids[rng.below(ids.size())];
    return span;
}

std::vector<TokenId> Corpus::paragraph(Rng& rng) const {
    std::string text;
    const int64_t n = 1 + int64_t(rng.below(4));
    for (int64_t i = 0; i < n; ++i) text += (i ? " " : "") + sentence(rng);
    return tokenizer_.encode(text);
}

std::vector<TokenId> Corpus::random_span(Rng& rng, int64_t n) const {
    std::vector<TokenId> span(size_t(std::max<int64_t>(n, 0)));
    for (TokenId& t : span) t = ordinary_[rng.below(ordinary_.size())];
    return span;
}

std::vector<TokenId> Corpus::vocab_span(Rng& rng, int64_t n) const {
    std::vector<TokenId> span(size_t(std::max<int64_t>(n, 0)));
    for (TokenId& t : span) t = all_[rng.below(all_.size())];
    return span;
}

std::vector<TokenId> Corpus::sequence(int64_t step, int64_t index, int64_t n, std::vector<uint8_t>* predictable) const {
    Rng rng(mix_seed(seed_, uint64_t(step), uint64_t(index)));
    std::vector<TokenId> seq;
    std::vector<uint8_t> flags;  // grows with seq: 0 = unpredictable vocab-segment id
    auto flag_to = [&](uint8_t f) { flags.resize(seq.size(), f); };
    seq.reserve(size_t(n + 2 * mix_.max_span + 64));
    auto span_length = [&] { return mix_.min_span + int64_t(rng.below(uint64_t(mix_.max_span - mix_.min_span + 1))); };
    bool after_span = false;
    if (mix_.vocab_prefix > 0) {  // draws nothing when off: sequences stay byte-identical
        const std::vector<TokenId> prefix = vocab_span(rng, int64_t(rng.below(uint64_t(mix_.vocab_prefix + 1))));
        seq.insert(seq.end(), prefix.begin(), prefix.end());
        flag_to(0);
        after_span = true;  // like a span: no newline before the first segment unless span_newline
    }
    while (int64_t(seq.size()) < n) {
        if (!seq.empty() && (mix_.span_newline || !after_span)) seq.push_back(newline_);
        after_span = false;
        const double k = rng.uniform();
        if (k < mix_.text) {
            const std::vector<TokenId> p = paragraph(rng);
            seq.insert(seq.end(), p.begin(), p.end());
        } else if (k < mix_.text + mix_.copy && seq.size() >= 16) {
            const int64_t len = std::min<int64_t>(span_length(), int64_t(seq.size()) - 1);
            const int64_t from = int64_t(rng.below(uint64_t(int64_t(seq.size()) - len)));
            for (int64_t i = 0; i < len; ++i) seq.push_back(seq[size_t(from + i)]);
        } else if (k >= mix_.text + mix_.copy && k < mix_.text + mix_.copy + mix_.vocab) {
            // span, 0..vocab_gap filler ids, span again: a period no fixed offset can know
            const int64_t len = mix_.vocab_min_span +
                                int64_t(rng.below(uint64_t(mix_.vocab_max_span - mix_.vocab_min_span + 1)));
            // draws nothing when the pool share is 0: sequences stay byte-identical
            const bool pooled = mix_.vocab_pool_share > 0 && rng.uniform() < mix_.vocab_pool_share;
            const std::vector<TokenId> span =
                pooled ? pooled_vocab_span(rng, len,
                                           mix_.vocab_pool_min +
                                               int64_t(rng.below(uint64_t(mix_.vocab_pool_max - mix_.vocab_pool_min + 1))))
                       : vocab_span(rng, len);
            flag_to(1);
            seq.insert(seq.end(), span.begin(), span.end());
            flag_to(0);
            for (int64_t r = 1; r < mix_.vocab_repeats; ++r) {
                const std::vector<TokenId> gap = vocab_span(rng, int64_t(rng.below(uint64_t(mix_.vocab_gap + 1))));
                seq.insert(seq.end(), gap.begin(), gap.end());
                const size_t from = mix_.vocab_partial ? size_t(rng.below(span.size() - 1)) : 0;  // span size >= 2
                seq.push_back(span[from]);
                flag_to(0);
                seq.insert(seq.end(), span.begin() + std::ptrdiff_t(from) + 1, span.end());
                flag_to(1);
            }
            after_span = true;
        } else {
            std::vector<TokenId> span;
            if (mix_.distinct) {
                // partial Fisher-Yates shuffle of the ordinary tokens
                std::vector<TokenId> pool = ordinary_;
                span.resize(size_t(std::min<int64_t>(span_length(), int64_t(pool.size()))));
                for (size_t i = 0; i < span.size(); ++i) {
                    std::swap(pool[i], pool[i + rng.below(pool.size() - i)]);
                    span[i] = pool[i];
                }
            } else {
                span = random_span(rng, span_length());
            }
            const int64_t copies = 2 + int64_t(rng.below(2));
            for (int64_t c = 0; c < copies || c * int64_t(span.size()) < mix_.min_repeat; ++c)
                seq.insert(seq.end(), span.begin(), span.end());
            after_span = true;
        }
    }
    seq.resize(size_t(n));
    if (predictable) {
        flag_to(1);
        flags.resize(size_t(n));
        *predictable = std::move(flags);
    }
    return seq;
}

std::vector<TokenId> Corpus::text(uint64_t seed, int64_t n) const {
    Rng rng(mix_seed(seed, 0x74657874));
    std::vector<TokenId> seq;
    while (int64_t(seq.size()) < n) {
        if (!seq.empty()) seq.push_back(newline_);
        const std::vector<TokenId> p = paragraph(rng);
        seq.insert(seq.end(), p.begin(), p.end());
    }
    seq.resize(size_t(n));
    return seq;
}

}  // namespace kvscope
