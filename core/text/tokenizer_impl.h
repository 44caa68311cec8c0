#pragma once
// The state behind Tokenizer, shared by its two readers (tokenizer.cpp for vocab.json + merges.txt,
// tokenizer_json.cpp for tokenizer.json). Not part of the API: include only from those two files.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/pretokenizer.h"
#include "text/tokenizer.h"

namespace kvscope {

struct Tokenizer::Impl {
    // How text becomes the symbols that byte pair merging starts from.
    enum class Model {
        ByteLevel,      // pieces cut by `pattern`, each piece's UTF-8 bytes are the symbols (GPT-2, Llama 3, Qwen)
        SentencePiece,  // spaces become U+2581 "▁", the whole text is one piece of Unicode characters;
                        // a character without a token becomes its bytes' <0xNN> tokens (Llama 2, Gemma)
    };
    struct Merge {
        int32_t rank;    // position in the merge list; lower merges first
        TokenId merged;  // id of left+right
    };
    struct AddedToken {
        std::string content;
        TokenId id;
    };

    Model model = Model::ByteLevel;
    SplitPattern pattern = SplitPattern::Gpt2;  // ByteLevel only
    bool nfc = false;                // normalize each segment to NFC first (Qwen)
    bool prepend_marker = false;     // SentencePiece: "▁" before each non-empty segment (Llama 2)
    bool prepend_unless_marked = false;  // ... only when it does not start with "▁" already (Metaspace)
    bool ignore_merges = false;      // a piece that is itself a token skips merging (Llama 3)
    bool decode_strip_space = false; // decode() drops one leading space (Llama 2's Strip decoder)

    std::vector<std::string> id_bytes;                   // (n_vocab) the bytes each id decodes to
    std::unordered_map<std::string, TokenId> symbol_id;  // ByteLevel: token bytes -> id;
                                                         // SentencePiece: token as spelled ("▁the") -> id
    std::array<TokenId, 256> byte_id{};                  // single-byte tokens (ByteLevel) or <0xNN> (-1: none)
    std::optional<TokenId> unk;                          // SentencePiece without a byte token: <unk>
    std::unordered_map<uint64_t, Merge> merges;          // pair_key(left, right) -> merge
    std::vector<AddedToken> specials;                    // matched in the text only with allow_special
    std::vector<AddedToken> added;                       // matched always (non-special added tokens)
    std::optional<TokenId> bos;                          // put first by encode()
    std::optional<TokenId> end_of_text;

    // Added tokens by content, for leftmost-longest matching: lengths[b] lists the lengths (longest
    // first) of the contents that start with byte b.
    struct AddedIndex {
        std::unordered_map<std::string, TokenId> by_content;
        std::array<std::vector<size_t>, 256> lengths;
    };
    AddedIndex index_plain, index_special;  // `added`; `added` + `specials`

    void index_added_tokens();  // call once after filling `added` and `specials`
    static uint64_t pair_key(TokenId left, TokenId right) {
        return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    }
    void bpe(std::vector<TokenId>& symbols, std::vector<TokenId>& out) const;
    void encode_segment(std::string_view text, std::vector<TokenId>& out) const;
};

}  // namespace kvscope
