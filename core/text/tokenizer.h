#pragma once
// BPE tokenizers: GPT-2's files (vocab.json + merges.txt, equal to tiktoken's "gpt2" encoding) and
// Hugging Face tokenizer.json files of byte-level (Llama 3, Qwen) and SentencePiece-style (Llama 2,
// Mistral, Gemma) BPE, equal to Hugging Face tokenizers' encode(text) (tokenizer_json.h says what
// of tokenizer.json is read).
//
//   has_tokenizer_files(dir)       dir holds tokenizer.json, vocab.json or merges.txt (a folder without
//                                  any is a model without a tokenizer, not a broken one)
//   Tokenizer::load(dir)           reads dir/tokenizer.json (+ tokenizer_config.json) when present, else
//                                  dir/vocab.json + dir/merges.txt; throws LoadError
//   Tokenizer::from_text(v, m, o)  vocab.json + merges.txt from the files' contents; `o` names the folder in errors
//   Tokenizer::from_tokenizer_json(t, c, o)   tokenizer.json + tokenizer_config.json ("" when absent)
//   encode(text, allow_special)    UTF-8 text -> ids, begin_of_text() first when the tokenizer adds it;
//                                  special tokens ("<|endoftext|>", "<s>") are plain text unless
//                                  allow_special; non-special added tokens always match
//   encode_continuation(text, a)   the same without begin_of_text(): text that follows other text
//   decode(ids)                    ids -> raw bytes (may end inside a UTF-8 sequence); an id the tokenizer
//                                  does not have is written "<id N>" (never throws): models pad their
//                                  embedding beyond the tokenizer (Qwen2.5: 151936 rows, 151665 tokens)
//                                  and may sample such an id
//   token_bytes(id)                the bytes one token stands for; throws for an id it does not have
//   bytes_or_id(id)                token_bytes(id), or "<id N>" for an id it does not have
//   display(bytes)                 text for a person: valid UTF-8 kept, control chars and invalid or
//                                  incomplete sequences shown as escapes like \x0a or \xe2 (never throws)
//   n_vocab()                      number of ids (vocab.json entries)
//   end_of_text()                  id of "<|endoftext|>", or of tokenizer_config.json's eos_token
//   begin_of_text()                the id encode() puts first (tokenizer.json's post-processor), if any
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

bool has_tokenizer_files(const std::string& dir);

class Tokenizer {
public:
    static Tokenizer load(const std::string& dir);
    static Tokenizer from_text(std::string_view vocab_json, std::string_view merges_txt,
                               const std::string& origin);  // origin names the files in errors
    static Tokenizer from_tokenizer_json(std::string_view tokenizer_json, std::string_view config_json,
                                         const std::string& origin);

    std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const;
    std::vector<TokenId> encode_continuation(std::string_view text, bool allow_special = false) const;
    std::string decode(const std::vector<TokenId>& ids) const;  // unknown ids as "<id N>"
    const std::string& token_bytes(TokenId id) const;           // throws UsageError on an unknown id
    std::string bytes_or_id(TokenId id) const;                  // unknown ids as "<id N>"
    bool has(TokenId id) const { return id >= 0 && id < n_vocab(); }
    int64_t n_vocab() const;
    int64_t n_merges() const;                                   // merge rules loaded from merges.txt
    std::optional<TokenId> end_of_text() const;                 // id of <|endoftext|> / eos_token if present
    std::optional<TokenId> begin_of_text() const;               // put first by encode(), if any

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    struct Impl;  // defined in tokenizer_impl.h, for the two file readers only

private:
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
