#pragma once
// GPT-2 byte-level BPE, equal to tiktoken's "gpt2" encoding.
//
//   Tokenizer::load(dir)           reads dir/vocab.json + dir/merges.txt; throws LoadError
//   encode(text, allow_special)    UTF-8 text -> ids; "<|endoftext|>" is plain text unless allow_special
//   decode(ids)                    ids -> raw bytes (may end inside a UTF-8 sequence)
//   token_bytes(id)                the bytes one token stands for
//   display(bytes)                 text for a person: valid UTF-8 kept, control chars and invalid or
//                                  incomplete sequences shown as escapes like \x0a or \xe2 (never throws)
//   n_vocab()                      number of ids (vocab.json entries)
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

using TokenId = int32_t;

class Tokenizer {
public:
    static Tokenizer load(const std::string& dir);
    static Tokenizer from_text(std::string_view vocab_json, std::string_view merges_txt,
                               const std::string& origin);  // origin names the files in errors

    std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const;
    std::string decode(const std::vector<TokenId>& ids) const;  // throws UsageError on an unknown id
    const std::string& token_bytes(TokenId id) const;           // throws UsageError on an unknown id
    int64_t n_vocab() const;
    std::optional<TokenId> end_of_text() const;                 // id of <|endoftext|> if present

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Printable form of token bytes for a person (see above).
std::string display_bytes(std::string_view bytes);

}  // namespace kvscope
