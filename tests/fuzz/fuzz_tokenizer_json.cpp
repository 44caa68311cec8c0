// libFuzzer target for the tokenizer.json reader (core/text/tokenizer_json.cpp) and what it builds. The first
// input byte picks what the rest is:
//   odd:  a tokenizer.json, then after the first 0 byte a text; the only exception allowed out of
//         loading is LoadError, and a tokenizer that loads must encode the text into ids inside its
//         vocabulary (bit 1: allow_special) and decode them without throwing.
//   even: a text for to_nfc and the Llama 3 / Qwen2 pre-tokenizers: NFC must be idempotent and the
//         pieces must cover the text in order.
// Seeds: tools/fuzz.sh writes small byte-level and SentencePiece tokenizer.json files.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/errors.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"
#include "text/unicode_nfc.h"

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t mode = data[0];
    std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);

    if (mode & 1) {
        size_t cut = rest.find('\0');
        std::string_view json = rest.substr(0, cut);
        std::string_view text = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 1);
        try {
            Tokenizer t = Tokenizer::from_tokenizer_json(json, "", "fuzz");
            std::vector<TokenId> ids = t.encode(text, mode & 2);
            for (TokenId id : ids)
                if (id < 0 || id >= t.n_vocab()) std::abort();
            (void)t.decode(ids);
        } catch (const LoadError&) {
        }
        return 0;
    }

    const std::string once = to_nfc(rest);
    if (to_nfc(once) != once) std::abort();
    for (SplitPattern p : {SplitPattern::Llama3, SplitPattern::Qwen2}) {
        size_t covered = 0;
        for (std::string_view piece : split_pieces(p, once)) {
            if (piece.empty() || piece.data() != once.data() + covered) std::abort();
            covered += piece.size();
        }
        if (covered != once.size()) std::abort();
    }
    return 0;
}
