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

std::vector<std::string> strings(std::initializer_list<const char*> items) { return {items.begin(), items.end()}; }

const char* const kAcks[] = {"OK.", "I see.", "Got it.", "Nice."};

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

const std::vector<std::string>& ChatWorld::names() {
    static const std::vector<std::string> v(std::begin(kNames), std::end(kNames));
    return v;
}
const std::vector<std::string>& ChatWorld::things() {
    static const std::vector<std::string> v = strings({"ball", "book", "apple", "box", "hat", "cup", "kite", "boat",
        "lamp", "pencil", "basket", "candle", "flower", "cookie", "shoe", "duck", "cat", "dog", "bird", "fox",
        "rabbit", "mouse", "frog", "owl", "fish"});
    return v;
}
const std::vector<std::string>& ChatWorld::adjectives() {  // consonant sounds only: "a ..." stays English
    static const std::vector<std::string> v = strings({"little", "big", "red", "blue", "green", "small", "yellow",
        "purple", "shiny", "funny", "sleepy", "heavy", "dark", "warm"});
    return v;
}
const std::vector<std::string>& ChatWorld::places() {
    static const std::vector<std::string> v(std::begin(kPlaces), std::end(kPlaces));
    return v;
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
    if (mix_.chat > 0) {
        const std::vector<TokenId> a = tokenizer.encode_continuation("<|im_start|>", true);
        const std::vector<TokenId> b = tokenizer.encode_continuation("<|im_end|>", true);
        if (a.size() != 1 || b.size() != 1)
            throw UsageError("corpus: chat segments need a tokenizer with the special tokens <|im_start|> and "
                             "<|im_end|> (tools/make_chat_tokenizer.py adds them to a GPT-2 tokenizer)");
        im_start_ = a[0], im_end_ = b[0];
    }
    std::vector<TokenId> special;  // never drawn as a random id
    if (const std::optional<TokenId> eot = tokenizer.end_of_text()) special.push_back(*eot);
    for (const char* name : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"})
        if (const std::vector<TokenId> id = tokenizer.encode_continuation(name, true); id.size() == 1)
            special.push_back(id[0]);
    for (TokenId id = 0; id < TokenId(tokenizer.n_vocab()); ++id)
        if (std::find(special.begin(), special.end(), id) == special.end()) all_.push_back(id);
}

std::vector<TokenId> Corpus::pooled_vocab_span(Rng& rng, int64_t n, int64_t pool) const {
    const std::vector<TokenId> ids = vocab_span(rng, std::max<int64_t>(pool, 1));
    std::vector<TokenId> span(size_t(std::max<int64_t>(n, 0)));
    for (TokenId& t : span) t = ids[rng.below(ids.size())];
    return span;
}

std::vector<TokenId> Corpus::paragraph(Rng& rng, std::vector<std::string>* said) const {
    std::string text;
    const int64_t n = 1 + int64_t(rng.below(4));
    for (int64_t i = 0; i < n; ++i) {
        // draws nothing when text_repeat is 0: sequences stay byte-identical
        const bool repeat = mix_.text_repeat > 0 && said && !said->empty() && rng.uniform() < mix_.text_repeat;
        const std::string s = repeat ? (*said)[rng.below(said->size())] : sentence(rng);
        if (said && !repeat) said->push_back(s);
        text += (i ? " " : "") + s;
    }
    return tokenizer_.encode(text);
}

void Corpus::chat(Rng& rng, std::vector<TokenId>& seq, std::vector<uint8_t>& flags) const {
    const std::vector<std::string>&names = ChatWorld::names(), &things = ChatWorld::things(),
                                   &adjs = ChatWorld::adjectives(), &places = ChatWorld::places();
    struct Fact { size_t name; bool has; std::string statement, question; };
    std::vector<Fact> facts;
    std::vector<size_t> used_names, used_things, used_adjs;
    auto fresh = [&](const std::vector<std::string>& from, std::vector<size_t>& used) {
        size_t i;
        do i = rng.below(from.size()); while (std::find(used.begin(), used.end(), i) != used.end());
        used.push_back(i);
        return i;
    };
    const int64_t n_facts = 2 + int64_t(rng.below(2));
    while (int64_t(facts.size()) < n_facts) {
        const size_t n = fresh(names, used_names);
        Fact f{n, rng.uniform() < 0.7, "", ""};
        if (f.has) {
            size_t t;
            do t = rng.below(things.size());
            while (ChatWorld::held_out_thing(n, t) || std::find(used_things.begin(), used_things.end(), t) != used_things.end());
            used_things.push_back(t);
            f.statement = names[n] + " has a " + adjs[fresh(adjs, used_adjs)] + " " + things[t] + ".";
            f.question = "What does " + names[n] + " have?";
        } else {
            size_t p;
            do p = rng.below(places.size()); while (ChatWorld::held_out_place(n, p));
            f.statement = names[n] + " is " + places[p] + ".";
            f.question = "Where is " + names[n] + "?";
        }
        facts.push_back(std::move(f));
    }
    auto text = [&](const std::string& t, uint8_t flag) {
        const std::vector<TokenId> ids = tokenizer_.encode_continuation(t);
        seq.insert(seq.end(), ids.begin(), ids.end());
        flags.resize(seq.size(), flag);
    };
    auto turn = [&](const char* role, const std::string& content) {
        const bool user = role[0] == 'u';
        seq.push_back(im_start_);
        flags.resize(seq.size(), 1);
        text(std::string(role) + "\n", 1);
        text(content, user ? 0 : 1);
        seq.push_back(im_end_);
        flags.resize(seq.size(), 1);
        text("\n", 1);
    };
    std::string told;
    for (const Fact& f : facts) told += (told.empty() ? "" : " ") + f.statement;
    turn("user", told);
    turn("assistant", pick(rng, kAcks));
    if (rng.below(2)) {
        turn("user", sentence(rng));
        turn("assistant", pick(rng, kAcks));
    }
    const int64_t n_questions = 1 + int64_t(rng.below(2));
    std::vector<size_t> asked;
    for (int64_t q = 0; q < n_questions; ++q) {
        size_t i;
        do i = rng.below(facts.size()); while (std::find(asked.begin(), asked.end(), i) != asked.end());
        asked.push_back(i);
        turn("user", facts[i].question);
        turn("assistant", facts[i].statement);
    }
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
    std::vector<std::string> said;  // sentences of this sequence's text so far (text_repeat)
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
            const std::vector<TokenId> p = paragraph(rng, &said);
            seq.insert(seq.end(), p.begin(), p.end());
        } else if (k < mix_.text + mix_.copy && seq.size() >= 16) {
            const int64_t len = std::min<int64_t>(span_length(), int64_t(seq.size()) - 1);
            const int64_t from = int64_t(rng.below(uint64_t(int64_t(seq.size()) - len)));
            for (int64_t i = 0; i < len; ++i) seq.push_back(seq[size_t(from + i)]);
        } else if (k >= mix_.text + mix_.copy + mix_.vocab && k < mix_.text + mix_.copy + mix_.vocab + mix_.chat) {
            flag_to(1);
            chat(rng, seq, flags);
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
