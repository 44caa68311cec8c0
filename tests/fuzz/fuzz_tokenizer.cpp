// libFuzzer target for core/tokenizer. The first input byte picks what the rest is:
//   odd:  vocab.json and merges.txt for Tokenizer::from_text, split at a position read from the
//         next two bytes; the only exception allowed out is LoadError, and a tokenizer that loads
//         must encode and decode its own files' text.
//   even: text to encode with a small valid vocabulary (bit 1: allow_special); the pieces must
//         cover the text and decode(encode(text)) must give the text back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/errors.h"
#include "io/json.h"
#include "text/tokenizer.h"

using namespace kvscope;

namespace {

const Tokenizer& small_tokenizer() {
    static const Tokenizer t = [] {
        const char* extra[] = {"ab", "bc", "abc", "<|endoftext|>", " a", "aa", " t", "he", " the", "\xc3\xa9"};
        const char* merges = "b c\na b\nab c\n\xc4\xa0 a\na a\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n\xc3\x83 \xc2\xa9\n";
        std::string vocab = "{";
        int id = 0;
        auto add = [&](const std::string& bytes) {
            vocab += (id ? ", " : "") + json_escape(bytes_to_symbols(bytes)) + ": " + std::to_string(id);
            ++id;
        };
        for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
        for (const char* e : extra) add(e);
        return Tokenizer::from_text(vocab + "}", merges, "fuzz");
    }();
    return t;
}

void check_round_trip(const Tokenizer& t, std::string_view text, bool allow_special) {
    std::vector<TokenId> ids = t.encode(text, allow_special);
    if (t.decode(ids) != text) std::abort();
    for (TokenId id : ids) (void)display_bytes(t.token_bytes(id));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t mode = data[0];
    std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);

    if (mode & 1) {
        if (rest.size() < 2) return 0;
        size_t cut = (size_t(uint8_t(rest[0])) << 8 | uint8_t(rest[1])) % (rest.size() - 1);
        std::string_view files = rest.substr(2);
        std::string_view vocab = files.substr(0, cut), merges = files.substr(cut);
        try {
            Tokenizer t = Tokenizer::from_text(vocab, merges, "fuzz");
            check_round_trip(t, vocab, mode & 2);
            check_round_trip(t, merges, mode & 2);
        } catch (const LoadError&) {
        }
        return 0;
    }

    size_t covered = 0;
    for (std::string_view piece : pretokenize(rest)) {
        if (piece.empty() || piece.data() != rest.data() + covered) std::abort();
        covered += piece.size();
    }
    if (covered != rest.size()) std::abort();
    (void)display_bytes(rest);
    check_round_trip(small_tokenizer(), rest, mode & 2);
    return 0;
}
