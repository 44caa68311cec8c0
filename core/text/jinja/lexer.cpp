#include "text/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "base/errors.h"
#include "base/utf8.h"
#include "text/jinja/value.h"

namespace kvscope::jinja {
namespace {

class Lexer {
public:
    Lexer(std::string source, const std::string& origin) : src_(std::move(source)), origin_(origin) {
        line_starts_.push_back(0);
        for (size_t i = 0; i < src_.size(); ++i)
            if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<Token> run() {
        bool line_starting = true;
        size_t pos = 0;
        while (pos < src_.size()) {
            const size_t open = find_open(pos);
            std::string text = src_.substr(pos, open - pos);
            if (open == src_.size()) {
                push_text(std::move(text), pos);
                break;
            }
            const char kind = src_[open + 1];  // '{', '%' or '#'
            const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
            if (sign == '-') {
                text = rstrip_space(text);
            } else if (sign != '+' && kind != '{') {
                // lstrip_blocks: whitespace alone between the line's start and the tag goes
                const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
                if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text, l_pos))
                    text.resize(l_pos);
            }
            push_text(std::move(text), pos);
            size_t body = open + 2 + ((sign == '-' || (sign == '+' && kind != '{')) ? 1 : 0);
            if (kind == '#') {
                pos = end_comment(open, body);
            } else {
                out_.push_back(Token{kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", at(open)});
                pos = lex_tag(body, kind == '{');
            }
            line_starting = pos > 0 && src_[pos - 1] == '\n';
        }
        out_.push_back(Token{Tok::Eof, "", at(src_.size())});
        return std::move(out_);
    }

private:
    std::string src_;
    const std::string& origin_;
    std::vector<size_t> line_starts_;
    std::vector<Token> out_;

    SourcePos at(size_t offset) const {
        const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
        const size_t start = *it;
        return SourcePos{int(it - line_starts_.begin()) + 1,
                         int(code_point_count(std::string_view(src_).substr(start, offset - start))) + 1};
    }

    [[noreturn]] void fail(size_t offset, const std::string& what) const {
        const SourcePos p = at(offset);
        throw UsageError(origin_ + ":" + std::to_string(p.line) + ":" + std::to_string(p.column) + ": " + what);
    }

    size_t find_open(size_t from) const {
        for (size_t i = from; i + 1 < src_.size(); ++i)
            if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        return src_.size();
    }

    void push_text(std::string text, size_t offset) {
        if (!text.empty()) out_.push_back(Token{Tok::Text, std::move(text), at(offset)});
    }

    static std::string rstrip_space(const std::string& s) {
        auto cps = code_points(s);
        size_t keep = s.size();
        for (size_t k = cps.size(); k-- > 0;) {
            char32_t cp;
            if (decode_utf8(cps[k], 0, cp) == 0 || !is_py_space(cp)) break;
            keep -= cps[k].size();
        }
        return s.substr(0, keep);
    }

    // Whitespace after offset `i` (Python's \s+): stops at the first other code point.
    size_t skip_space(size_t i) const {
        while (i < src_.size()) {
            char32_t cp;
            const size_t n = decode_utf8(src_, i, cp);
            if (n == 0 || !is_py_space(cp)) break;
            i += n;
        }
        return i;
    }

    static bool all_space(const std::string& s, size_t from) {
        for (size_t i = from; i < s.size();) {
            char32_t cp;
            const size_t n = decode_utf8(s, i, cp);
            if (n == 0 || !is_py_space(cp)) return false;
            i += n;
        }
        return true;
    }

    size_t end_comment(size_t open, size_t body) const {
        const size_t close = src_.find("#}", body);
        if (close == std::string::npos) fail(open, "a comment {# is never closed with #}");
        const char before = close > body ? src_[close - 1] : '\0';
        size_t after = close + 2;
        if (before == '-') return skip_space(after);
        if (before != '+' && after < src_.size() && src_[after] == '\n') ++after;
        return after;
    }

    // Expression tokens up to the tag's end; returns the offset after it (and its whitespace rules).
    size_t lex_tag(size_t i, bool variable) {
        int depth = 0;  // open brackets: an end tag inside them is not one (Jinja2's balancing)
        while (true) {
            i = skip_space(i);
            if (i >= src_.size()) fail(i, variable ? "a {{ is never closed with }}" : "a {% is never closed with %}");
            const std::string_view rest = std::string_view(src_).substr(i);
            if (depth == 0) {
                const char* close = variable ? "}}" : "%}";
                const bool minus = rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == close;
                const bool plus = !variable && rest.size() >= 3 && rest[0] == '+' && rest.substr(1, 2) == close;
                if (minus || plus || rest.substr(0, 2) == close) {
                    out_.push_back(Token{variable ? Tok::VarEnd : Tok::BlockEnd, "", at(i)});
                    size_t after = i + 2 + ((minus || plus) ? 1 : 0);
                    if (minus) return skip_space(after);
                    if (!variable && !plus && after < src_.size() && src_[after] == '\n') ++after;
                    return after;
                }
            }
            i = lex_one(i, depth);
        }
    }

    size_t lex_one(size_t i, int& depth) {
        const char c = src_[i];
        const SourcePos p = at(i);
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t j = i;
            while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
            out_.push_back(Token{Tok::Name, src_.substr(i, j - i), p});
            return j;
        }
        if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(i);
        if (c == '\'' || c == '"') return lex_string(i);
        static const char* const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                          "]", "(", ")", "{", "}", ">", "<", "=", ".", ",", ":", "|"};
        for (const char* op : ops) {
            const std::string_view o(op);
            if (std::string_view(src_).substr(i, o.size()) == o) {
                if (o == "(" || o == "[" || o == "{") ++depth;
                if ((o == ")" || o == "]" || o == "}") && depth > 0) --depth;
                out_.push_back(Token{Tok::Op, std::string(o), p});
                return i + o.size();
            }
        }
        char32_t cp;
        const size_t n = decode_utf8(src_, i, cp);
        fail(i, "unexpected character '" + (n ? src_.substr(i, n) : std::string("\\x") + "??") + "' in a tag");
    }

    size_t lex_number(size_t i) {
        const SourcePos p = at(i);
        size_t j = i;
        const auto digits = [&] {
            while (j < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[j])) ||
                                       (src_[j] == '_' && j + 1 < src_.size() &&
                                        std::isdigit(static_cast<unsigned char>(src_[j + 1])))))
                ++j;
        };
        digits();
        bool is_float = false;
        if (j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
            ++j;
            digits();
            is_float = true;
        }
        if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
            size_t k = j + 1;
            if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
            if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
                j = k;
                digits();
                is_float = true;
            }
        }
        std::string text = src_.substr(i, j - i);
        std::string clean;
        for (char ch : text)
            if (ch != '_') clean += ch;
        Token t{is_float ? Tok::Float : Tok::Int, text, p};
        errno = 0;
        if (is_float) {
            t.real = std::strtod(clean.c_str(), nullptr);
        } else {
            if (clean.size() > 1 && clean[0] == '0' && clean.find_first_not_of('0') != std::string::npos)
                fail(i, "the number " + text + " (a leading zero) is not supported");
            t.integer = std::strtoll(clean.c_str(), nullptr, 10);
            if (errno == ERANGE) fail(i, "the integer " + text + " does not fit 64 bits");
        }
        out_.push_back(std::move(t));
        return j;
    }

    size_t lex_string(size_t i) {
        const char quote = src_[i];
        std::string value;
        size_t j = i + 1;
        while (true) {
            if (j >= src_.size()) fail(i, "a string literal is never closed");
            const char c = src_[j];
            if (c == quote) break;
            if (c != '\\') {
                value += c;
                ++j;
                continue;
            }
            if (j + 1 >= src_.size()) fail(i, "a string literal is never closed");
            j = escape(j, value);
        }
        out_.push_back(Token{Tok::String, std::move(value), at(i)});
        return j + 1;
    }

    // Python's unicode-escape decoding of one backslash sequence at `j`; returns the offset after it.
    size_t escape(size_t j, std::string& value) const {
        const char e = src_[j + 1];
        const auto hex = [&](size_t from, int n) -> char32_t {
            if (from + size_t(n) > src_.size()) fail(j, "a truncated \\x, \\u or \\U escape");
            char32_t v = 0;
            for (int k = 0; k < n; ++k) {
                const char h = src_[from + size_t(k)];
                if (!std::isxdigit(static_cast<unsigned char>(h))) fail(j, "a malformed \\x, \\u or \\U escape");
                v = v * 16 + char32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
            }
            return v;
        };
        const auto put = [&](char32_t cp) {
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                fail(j, "an escape naming a surrogate or no code point is not supported");
            append_utf8(value, cp);
        };
        switch (e) {
            case '\n': return j + 2;
            case '\\': value += '\\'; return j + 2;
            case '\'': value += '\''; return j + 2;
            case '"': value += '"'; return j + 2;
            case 'a': value += '\a'; return j + 2;
            case 'b': value += '\b'; return j + 2;
            case 'f': value += '\f'; return j + 2;
            case 'n': value += '\n'; return j + 2;
            case 'r': value += '\r'; return j + 2;
            case 't': value += '\t'; return j + 2;
            case 'v': value += '\v'; return j + 2;
            case 'x': put(hex(j + 2, 2)); return j + 4;
            case 'u': put(hex(j + 2, 4)); return j + 6;
            case 'U': put(hex(j + 2, 8)); return j + 10;
            default: break;
        }
        if (e >= '0' && e <= '7') {
            char32_t v = 0;
            size_t k = j + 1;
            for (int n = 0; n < 3 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++n, ++k) v = v * 8 + char32_t(src_[k] - '0');
            put(v);
            return k;
        }
        if (static_cast<unsigned char>(e) >= 0x80 || e == 'N')
            fail(j, std::string("the escape \\") + (e == 'N' ? "N{...}" : "<non-ASCII>") + " is not supported");
        value += '\\';  // Python keeps an unknown escape as written
        value += e;
        return j + 2;
    }
};

std::string normalize_newlines(std::string_view source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            out += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            out += source[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
    return out;
}

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& origin) {
    return Lexer(normalize_newlines(source), origin).run();
}

}  // namespace kvscope::jinja
