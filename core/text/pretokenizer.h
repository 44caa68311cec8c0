#pragma once
// Pre-tokenizers: the pieces a text is cut into before byte pair merging, as hand-written scanners
// for the few regular expressions real byte-level vocabularies use (each tried left to right at
// every position like a backtracking regex: the first alternative that matches wins, each greedy).
//
//   SplitPattern                   which expression (one enumerator per known pattern string)
//   split_pattern_named(regex)     the pattern a tokenizer.json Split regex is, by its exact string
//   split_pattern_regex(pattern)   that string back ("" for Gpt2DigitsApart, which is no single regex)
//   piece_end(pattern, text, i)    end of the piece that starts at text[i] (i < text.size())
//   split_pieces(pattern, text)    all pieces, as views into `text`
//
// Character classes come from unicode_classes.h (\p{L}, \p{N}, \s = White_Space). Invalid UTF-8 is
// accepted: each bad byte is one character of class Other.
#include <optional>
#include <string_view>
#include <vector>

namespace kvscope {

enum class SplitPattern {
    Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+   (tiktoken gpt2)
    Llama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    Qwen2,   // the Llama 3 pattern with \p{N} (single digits) in place of \p{N}{1,3}
    Gpt2DigitsApart,  // every \p{N} character a piece of its own, GPT-2's pattern on the text between
                      // (tokenizer.json Sequence[Digits(individual_digits), ByteLevel]: SmolLM2)
};

std::optional<SplitPattern> split_pattern_named(std::string_view regex);
std::string_view split_pattern_regex(SplitPattern pattern);
size_t piece_end(SplitPattern pattern, std::string_view text, size_t i);
std::vector<std::string_view> split_pieces(SplitPattern pattern, std::string_view text);

}  // namespace kvscope
