#include "text/pretokenizer.h"

#include <array>

#include "base/utf8.h"
#include "text/unicode_classes.h"

namespace kvscope {
namespace {

constexpr std::string_view k_gpt2_regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view k_llama3_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view k_qwen2_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Char {
    CharClass cls;
    size_t len;  // bytes
};

Char char_at(std::string_view s, size_t i) {
    static const auto ascii = [] {
        std::array<CharClass, 128> t{};
        for (int c = 0; c < 128; ++c) t[c] = char_class(char32_t(c));
        return t;
    }();
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) return {ascii[b], 1};
    char32_t cp;
    size_t len = decode_utf8(s, i, cp);
    if (len == 0) return {CharClass::Other, 1};  // an invalid byte is a symbol of its own
    return {char_class(cp), len};
}

size_t run_end(std::string_view s, size_t i, CharClass cls, size_t max_chars = SIZE_MAX) {
    for (size_t n = 0; i < s.size() && n < max_chars; ++n) {
        Char c = char_at(s, i);
        if (c.cls != cls) break;
        i += c.len;
    }
    return i;
}

bool is_newline(char c) { return c == '\r' || c == '\n'; }

// \s+(?!\S) then \s+, for a whitespace run starting at s[i]: the whole run at the end of the text
// (or before a digit, when digits are cut apart first, which ends the text the regex sees), else
// the run minus its last character (which the next piece takes), else the one character.
size_t space_run_end(std::string_view s, size_t i, bool digits_apart = false) {
    size_t last = i, k = i;
    CharClass next = CharClass::Other;
    while (k < s.size()) {
        Char w = char_at(s, k);
        next = w.cls;
        if (w.cls != CharClass::Space) break;
        last = k;
        k += w.len;
    }
    if (k == s.size() || (digits_apart && next == CharClass::Number)) return k;
    return last > i ? last : k;
}

size_t gpt2_piece_end(std::string_view s, size_t i, bool digits_apart) {
    const size_t n = s.size();
    if (digits_apart) {
        Char c0 = char_at(s, i);
        if (c0.cls == CharClass::Number) return i + c0.len;
    }
    // 1: contractions, lowercase only
    if (s[i] == '\'' && i + 1 < n) {
        char c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n) {
            std::string_view two = s.substr(i + 1, 2);
            if (two == "re" || two == "ve" || two == "ll") return i + 3;
        }
    }
    // 2-4: an optional ' ' then a run of letters, of digits, or of other symbols
    size_t j = (s[i] == ' ' && i + 1 < n) ? i + 1 : i;
    Char c = char_at(s, j);
    if (c.cls != CharClass::Space && !(digits_apart && c.cls == CharClass::Number))
        return run_end(s, j + c.len, c.cls);
    // 5-6: whitespace
    return space_run_end(s, i, digits_apart);
}

char lower_ascii(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

// Llama 3 and Qwen2 differ only in how many digits one piece takes.
size_t llama3_piece_end(std::string_view s, size_t i, size_t max_digits) {
    const size_t n = s.size();
    // 1: contractions, any case
    if (s[i] == '\'' && i + 1 < n) {
        char c = lower_ascii(s[i + 1]);
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n) {
            char c2 = lower_ascii(s[i + 2]);
            if ((c == 'r' && c2 == 'e') || (c == 'v' && c2 == 'e') || (c == 'l' && c2 == 'l')) return i + 3;
        }
    }
    const Char c0 = char_at(s, i);
    // 2: [^\r\n\p{L}\p{N}]?\p{L}+
    if (c0.cls == CharClass::Letter) return run_end(s, i, CharClass::Letter);
    if (c0.cls != CharClass::Number && !is_newline(s[i]) && i + c0.len < n &&
        char_at(s, i + c0.len).cls == CharClass::Letter)
        return run_end(s, i + c0.len, CharClass::Letter);
    // 3: \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
    if (c0.cls == CharClass::Number) return run_end(s, i, CharClass::Number, max_digits);
    // 4: ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    size_t j = (s[i] == ' ' && i + 1 < n) ? i + 1 : i;
    if (char_at(s, j).cls == CharClass::Other) {
        size_t k = run_end(s, j, CharClass::Other);
        while (k < n && is_newline(s[k])) ++k;
        return k;
    }
    // 5: \s*[\r\n]+ -- up to the last newline of the whitespace run, if it has one
    size_t k = i, after_newline = 0;
    while (k < n) {
        Char w = char_at(s, k);
        if (w.cls != CharClass::Space) break;
        k += w.len;
        if (is_newline(s[k - 1]) && w.len == 1) after_newline = k;
    }
    if (after_newline > 0) return after_newline;
    // 6-7: \s+(?!\S), \s+
    return space_run_end(s, i);
}

}  // namespace

std::optional<SplitPattern> split_pattern_named(std::string_view regex) {
    if (regex == k_gpt2_regex) return SplitPattern::Gpt2;
    if (regex == k_llama3_regex) return SplitPattern::Llama3;
    if (regex == k_qwen2_regex) return SplitPattern::Qwen2;
    return std::nullopt;
}

std::string_view split_pattern_regex(SplitPattern pattern) {
    switch (pattern) {
        case SplitPattern::Gpt2: return k_gpt2_regex;
        case SplitPattern::Llama3: return k_llama3_regex;
        case SplitPattern::Qwen2: return k_qwen2_regex;
        case SplitPattern::Gpt2DigitsApart: return "";
    }
    return "";
}

size_t piece_end(SplitPattern pattern, std::string_view text, size_t i) {
    switch (pattern) {
        case SplitPattern::Gpt2: return gpt2_piece_end(text, i, false);
        case SplitPattern::Gpt2DigitsApart: return gpt2_piece_end(text, i, true);
        case SplitPattern::Llama3: return llama3_piece_end(text, i, 3);
        case SplitPattern::Qwen2: return llama3_piece_end(text, i, 1);
    }
    return text.size();
}

std::vector<std::string_view> split_pieces(SplitPattern pattern, std::string_view text) {
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i < text.size();) {
        size_t end = piece_end(pattern, text, i);
        pieces.push_back(text.substr(i, end - i));
        i = end;
    }
    return pieces;
}

}  // namespace kvscope
