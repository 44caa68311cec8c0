#pragma once
// GPT-2 byte-level BPE, equal to tiktoken's "gpt2" encoding.
//
//   Tokenizer::load(dir)           reads dir/vocab.json + dir/merges.txt; throws LoadError
//   Tokenizer::from_text(v, m, o)  the same from the files' contents; `o` names the folder in errors
//   encode(text, allow_special)    UTF-8 text -> ids; "<|endoftext|>" is plain text unless allow_special
//   decode(ids)                    ids -> raw bytes (may end inside a UTF-8 sequence)
//   token_bytes(id)                the bytes one token stands for
//   display(bytes)                 text for a person: valid UTF-8 kept, control chars and invalid or
//                                  incomplete sequences shown as escapes like \x0a or \xe2 (never throws)
//   n_vocab()                      number of ids (vocab.json entries)
//   end_of_text()                  id of "<|endoftext|>" when the vocabulary has it
//
// Free functions (also used by tests and the GUI):
//   pretokenize(text)              the pieces tiktoken's gpt2 pattern cuts `text` into, before BPE
//   bytes_to_symbols(bytes)        GPT-2's printable spelling of bytes, as in vocab.json ("Ġthe")
//   symbols_to_bytes(symbols)      the inverse; nullopt when a character is not in the byte map
//   display_bytes(bytes)           see display() above
//
// The files:
//   vocab.json   one object {"token spelled with the byte map": id}; ids are exactly 0..n_vocab-1,
//                every single byte must be a token (so any text can be encoded).
//   merges.txt   optional "#version..." first line, then one merge "left right" per line, best first.
//                Both sides and their concatenation must be tokens.
// Tokens spelled "<|...|>" are special: encode() matches them in the text only when allow_special.
// Invalid UTF-8 in the text is accepted: each bad byte counts as one symbol (not letter, digit or space).
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
    int64_t n_merges() const;                                   // merge rules loaded from merges.txt
    std::optional<TokenId> end_of_text() const;                 // id of <|endoftext|> if present

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

std::vector<std::string_view> pretokenize(std::string_view text);   // views into `text`
std::string bytes_to_symbols(std::string_view bytes);
std::optional<std::string> symbols_to_bytes(std::string_view symbols);

// Printable form of token bytes for a person (see above). Also escapes '\' as "\\", C1 controls and
// invisible format characters (BOM, zero-width and bidi marks) as \uXXXX, so nothing is hidden.
std::string display_bytes(std::string_view bytes);

}  // namespace kvscope
