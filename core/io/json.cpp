// Strict RFC 8259 reader. Choices the RFC leaves open, made here:
//   - strings must be valid UTF-8 (no overlong forms, no encoded surrogates, nothing above U+10FFFF);
//   - \u escapes must pair surrogates correctly; a lone surrogate is an error, not U+FFFD,
//     because a silently altered vocab.json key would tokenize wrongly;
//   - duplicate keys in one object are an error (which value wins is otherwise undefined);
//   - nesting deeper than kMaxDepth is an error, so "[[[[..." cannot overflow the stack;
//   - a number whose magnitude overflows a double is an error; integers without fraction or
//     exponent that fit int64 are kept exactly;
//   - a leading UTF-8 byte order mark is skipped (RFC 8259 §8.1 allows ignoring it).
#include "io/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "io/json_write.h"

namespace kvscope {

namespace {

constexpr int kMaxDepth = 256;

const char* kind_to_name(Json::Kind k) {
    switch (k) {
    case Json::Kind::Null: return "null";
    case Json::Kind::Bool: return "bool";
    case Json::Kind::Number: return "number";
    case Json::Kind::String: return "string";
    case Json::Kind::Array: return "array";
    case Json::Kind::Object: return "object";
    }
    return "?";
}

// Length of the valid UTF-8 sequence starting at s[0] (RFC 3629 table 3-7), or 0 if invalid.
size_t utf8_sequence_length(const unsigned char* s, size_t avail) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    auto cont = [&](size_t i) { return i < avail && (s[i] & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (avail < 2) return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;          // overlong
        if (c == 0xED) hi = 0x9F;          // UTF-16 surrogates
        if (s[1] < lo || s[1] > hi) return 0;
        return cont(2) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (avail < 2) return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c == 0xF0) lo = 0x90;          // overlong
        if (c == 0xF4) hi = 0x8F;          // above U+10FFFF
        if (s[1] < lo || s[1] > hi) return 0;
        return cont(2) && cont(3) ? 4 : 0;
    }
    return 0;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

}  // namespace

class JsonParser {
public:
    explicit JsonParser(std::string_view text) : s_(text.data()), n_(text.size()) {}

    Json parse_document() {
        if (n_ >= 3 && std::memcmp(s_, "\xEF\xBB\xBF", 3) == 0) i_ = 3;
        skip_space();
        if (i_ == n_) fail(n_ == 0 ? "empty document" : "document has only whitespace");
        Json v = parse_value(0);
        skip_space();
        if (i_ != n_) fail("unexpected text after the JSON value");
        return v;
    }

private:
    const char* s_;
    size_t n_;
    size_t i_ = 0;

    [[noreturn]] void fail(const std::string& what) const { fail_at(what, i_); }
    [[noreturn]] static void fail_at(const std::string& what, size_t at) {
        throw JsonError("JSON error at byte " + std::to_string(at) + ": " + what, at);
    }

    void skip_space() {
        while (i_ < n_) {
            char c = s_[i_];
            if (c == ' ' || c == '\n' || c == '\t' || c == '\r') ++i_;
            else break;
        }
    }

    std::string describe_here() const {
        if (i_ >= n_) return "end of input";
        unsigned char c = static_cast<unsigned char>(s_[i_]);
        if (c >= 0x20 && c < 0x7F) return std::string("'") + char(c) + "'";
        char buf[16];
        std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
        return buf;
    }

    Json parse_value(int depth) {
        if (i_ >= n_) fail("expected a value, found end of input");
        char c = s_[i_];
        Json v;
        switch (c) {
        case '{': parse_object(v, depth + 1); return v;
        case '[': parse_array(v, depth + 1); return v;
        case '"':
            v.kind_ = Json::Kind::String;
            parse_string(v.string_);
            return v;
        case 't': expect_word("true"); v.kind_ = Json::Kind::Bool; v.bool_ = true; return v;
        case 'f': expect_word("false"); v.kind_ = Json::Kind::Bool; v.bool_ = false; return v;
        case 'n': expect_word("null"); return v;
        default:
            if (c == '-' || (c >= '0' && c <= '9')) {
                parse_number(v);
                return v;
            }
            fail("expected a value, found " + describe_here());
        }
    }

    void expect_word(const char* word) {
        size_t len = std::strlen(word);
        if (n_ - i_ < len || std::memcmp(s_ + i_, word, len) != 0)
            fail("expected a value, found " + describe_here());
        i_ += len;
    }

    void parse_number(Json& v) {
        size_t start = i_;
        bool integral = true;
        if (s_[i_] == '-') ++i_;
        if (i_ >= n_ || s_[i_] < '0' || s_[i_] > '9') fail("expected a digit after '-'");
        if (s_[i_] == '0') {
            ++i_;
            if (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') fail("number has a leading zero");
        } else {
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        }
        if (i_ < n_ && s_[i_] == '.') {
            integral = false;
            ++i_;
            if (i_ >= n_ || s_[i_] < '0' || s_[i_] > '9') fail("expected a digit after '.'");
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        }
        if (i_ < n_ && (s_[i_] == 'e' || s_[i_] == 'E')) {
            integral = false;
            ++i_;
            if (i_ < n_ && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
            if (i_ >= n_ || s_[i_] < '0' || s_[i_] > '9') fail("expected a digit in the exponent");
            while (i_ < n_ && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        }
        const char* first = s_ + start;
        const char* last = s_ + i_;
        v.kind_ = Json::Kind::Number;
        v.string_.assign(first, last);
        if (integral) {
            int64_t x = 0;
            auto r = std::from_chars(first, last, x);
            if (r.ec == std::errc() && r.ptr == last) {
                v.integral_ = true;
                v.integer_ = x;
                v.number_ = double(x);
                return;
            }
        }
        double d = 0;
        auto r = std::from_chars(first, last, d);
        if (r.ec == std::errc::result_out_of_range) {
            // from_chars reports underflow and overflow alike; strtod tells them apart.
            d = std::strtod(v.string_.c_str(), nullptr);
        } else if (r.ec != std::errc() || r.ptr != last) {
            fail_at("malformed number", start);
        }
        if (!std::isfinite(d)) fail_at("number " + v.string_ + " is too large for a double", start);
        v.number_ = d;
    }

    void parse_hex4(uint32_t& out) {
        uint32_t x = 0;
        for (size_t k = 0; k < 4; ++k) {
            if (i_ + k >= n_) fail_at("\\u escape needs four hex digits", i_ + k);
            char c = s_[i_ + k];
            x <<= 4;
            if (c >= '0' && c <= '9') x |= uint32_t(c - '0');
            else if (c >= 'a' && c <= 'f') x |= uint32_t(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') x |= uint32_t(c - 'A' + 10);
            else fail_at("\\u escape needs four hex digits", i_ + k);
        }
        i_ += 4;
        out = x;
    }

    // On entry s_[i_] == '"'. Appends the decoded UTF-8 to out.
    void parse_string(std::string& out) {
        size_t open = i_;
        ++i_;
        for (;;) {
            // Fast path: copy the run of plain ASCII in one go.
            size_t run = i_;
            while (run < n_) {
                unsigned char c = static_cast<unsigned char>(s_[run]);
                if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
                ++run;
            }
            out.append(s_ + i_, run - i_);
            i_ = run;
            if (i_ >= n_) fail_at("string is not closed", open);
            unsigned char c = static_cast<unsigned char>(s_[i_]);
            if (c == '"') {
                ++i_;
                return;
            }
            if (c < 0x20) fail("control character inside a string (it must be escaped)");
            if (c >= 0x80) {
                size_t len = utf8_sequence_length(reinterpret_cast<const unsigned char*>(s_ + i_), n_ - i_);
                if (len == 0) fail("invalid UTF-8 inside a string");
                out.append(s_ + i_, len);
                i_ += len;
                continue;
            }
            // backslash
            size_t esc = i_;
            ++i_;
            if (i_ >= n_) fail_at("string is not closed", open);
            char e = s_[i_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                uint32_t cp = 0;
                parse_hex4(cp);
                if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at("lone low surrogate in \\u escape", esc);
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (n_ - i_ < 2 || s_[i_] != '\\' || s_[i_ + 1] != 'u')
                        fail_at("high surrogate in \\u escape is not followed by a low surrogate", esc);
                    i_ += 2;
                    uint32_t lo = 0;
                    parse_hex4(lo);
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        fail_at("high surrogate in \\u escape is not followed by a low surrogate", esc);
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                append_utf8(out, cp);
                break;
            }
            default: fail_at("unknown escape in string", esc);
            }
        }
    }

    void parse_array(Json& v, int depth) {
        if (depth > kMaxDepth) fail("nesting is deeper than " + std::to_string(kMaxDepth));
        v.kind_ = Json::Kind::Array;
        v.array_ = std::make_shared<Json::Array>();
        ++i_;
        skip_space();
        if (i_ < n_ && s_[i_] == ']') {
            ++i_;
            return;
        }
        for (;;) {
            skip_space();
            if (i_ < n_ && s_[i_] == ']') fail("trailing comma in array");
            v.array_->push_back(parse_value(depth));
            skip_space();
            if (i_ >= n_) fail("array is not closed");
            if (s_[i_] == ',') { ++i_; continue; }
            if (s_[i_] == ']') { ++i_; return; }
            fail("expected ',' or ']' in array, found " + describe_here());
        }
    }

    void parse_object(Json& v, int depth) {
        if (depth > kMaxDepth) fail("nesting is deeper than " + std::to_string(kMaxDepth));
        v.kind_ = Json::Kind::Object;
        v.object_ = std::make_shared<Json::Object>();
        Json::Object& members = *v.object_;
        std::vector<size_t> key_offsets;
        ++i_;
        skip_space();
        if (i_ < n_ && s_[i_] == '}') {
            ++i_;
            return;
        }
        for (;;) {
            skip_space();
            if (i_ >= n_) fail("object is not closed");
            if (s_[i_] == '}') fail("trailing comma in object");
            if (s_[i_] != '"') fail("expected a string key in object, found " + describe_here());
            key_offsets.push_back(i_);
            std::string key;
            parse_string(key);
            skip_space();
            if (i_ >= n_ || s_[i_] != ':') fail("expected ':' after object key, found " + describe_here());
            ++i_;
            skip_space();
            members.emplace_back(std::move(key), parse_value(depth));
            skip_space();
            if (i_ >= n_) fail("object is not closed");
            if (s_[i_] == ',') { ++i_; continue; }
            if (s_[i_] == '}') { ++i_; break; }
            fail("expected ',' or '}' in object, found " + describe_here());
        }
        check_duplicates(members, key_offsets);
    }

    // Small objects: compare pairwise; large ones (vocab.json): sort indices by key.
    static void check_duplicates(const Json::Object& members, const std::vector<size_t>& offsets) {
        size_t n = members.size();
        if (n < 2) return;
        auto report = [&](size_t later) {
            fail_at("duplicate key \"" + members[later].first + "\" in object", offsets[later]);
        };
        if (n <= 16) {
            for (size_t a = 1; a < n; ++a)
                for (size_t b = 0; b < a; ++b)
                    if (members[a].first == members[b].first) report(a);
            return;
        }
        std::vector<uint32_t> order(n);
        for (size_t k = 0; k < n; ++k) order[k] = uint32_t(k);
        std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
            int c = members[a].first.compare(members[b].first);
            return c != 0 ? c < 0 : a < b;
        });
        for (size_t k = 1; k < n; ++k)
            if (members[order[k]].first == members[order[k - 1]].first) report(order[k]);
    }
};

Json Json::parse(std::string_view text) { return JsonParser(text).parse_document(); }

const char* Json::kind_name() const { return kind_to_name(kind_); }

namespace {
[[noreturn]] void wrong_kind(const char* wanted, Json::Kind found) {
    throw JsonError(std::string("expected ") + wanted + ", found " + kind_to_name(found), std::string::npos);
}
}  // namespace

bool Json::as_bool() const {
    if (kind_ != Kind::Bool) wrong_kind("bool", kind_);
    return bool_;
}

double Json::as_number() const {
    if (kind_ != Kind::Number) wrong_kind("number", kind_);
    return number_;
}

bool Json::is_integer() const { return kind_ == Kind::Number && integral_; }

int64_t Json::as_integer() const {
    if (kind_ != Kind::Number) wrong_kind("integer", kind_);
    if (!integral_)
        throw JsonError("expected an integer, found " + string_, std::string::npos);
    return integer_;
}

const std::string& Json::as_string() const {
    if (kind_ != Kind::String) wrong_kind("string", kind_);
    return string_;
}

const Json::Array& Json::as_array() const {
    if (kind_ != Kind::Array) wrong_kind("array", kind_);
    return *array_;
}

const Json::Object& Json::as_object() const {
    if (kind_ != Kind::Object) wrong_kind("object", kind_);
    return *object_;
}

const Json* Json::find(std::string_view key) const {
    if (kind_ != Kind::Object) wrong_kind("object", kind_);
    for (const auto& [k, v] : *object_)
        if (k == key) return &v;
    return nullptr;
}

std::string json_escape(std::string_view s) { return json_text(JsonOut(std::string(s))); }

bool is_valid_utf8(std::string_view bytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    for (size_t i = 0; i < bytes.size();) {
        const size_t len = utf8_sequence_length(p + i, bytes.size() - i);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

std::string hex_bytes(std::string_view bytes) {
    static const char* hex = "0123456789abcdef";
    std::string out;
    out.reserve(2 * bytes.size());
    for (unsigned char b : bytes) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    return out;
}

void put_text(JsonOut& obj, const std::string& key, std::string_view bytes) {
    obj[key] = std::string(bytes);  // json_text prints bad sequences as U+FFFD
    if (!is_valid_utf8(bytes)) obj[key + "_hex"] = hex_bytes(bytes);
}

void put_texts(JsonOut& obj, const std::string& key, const std::vector<std::string>& texts) {
    obj[key] = texts;
    if (std::all_of(texts.begin(), texts.end(), [](const std::string& t) { return is_valid_utf8(t); })) return;
    JsonOut& hex = obj[key + "_hex"] = JsonOut::array();
    for (const std::string& t : texts) hex.push_back(is_valid_utf8(t) ? JsonOut() : JsonOut(hex_bytes(t)));
}

}  // namespace kvscope
