#pragma once
// A small, strict JSON reader (RFC 8259) for config.json, vocab.json and safetensors headers.
// Writers build JSON with json_write.h instead.
//
//   Json::parse(text)          parse a whole document; throws JsonError with a byte offset
//   v.is_object() ... is_null  kind tests
//   v.as_string() / as_number() / as_bool() / as_array() / as_object()   typed access, throw on kind mismatch
//   v.find("key")              member or nullptr (objects keep file order; duplicate keys are an error)
//   json_escape(s)             s as a JSON string literal, for quoting names in error messages
//                              (writing JSON is json_write.h's job)
//
// Strictness: no comments, trailing commas, NaN, leading zeros or raw control characters; strings
// must be valid UTF-8 and \u escapes must pair surrogates (a lone surrogate is an error); nesting
// deeper than 256 is an error; a leading UTF-8 BOM is skipped. Typed accessors on the wrong kind
// throw JsonError with offset == std::string::npos.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope {

struct JsonError : std::runtime_error {
    size_t offset;  // byte offset into the parsed text
    JsonError(const std::string& what, size_t offset_) : std::runtime_error(what), offset(offset_) {}
};

class Json {
public:
    enum class Kind { Null, Bool, Number, String, Array, Object };
    using Array = std::vector<Json>;
    using Object = std::vector<std::pair<std::string, Json>>;

    static Json parse(std::string_view text);  // whole document; trailing non-space is an error

    Kind kind() const { return kind_; }
    const char* kind_name() const;  // "null", "bool", "number", "string", "array", "object"
    bool is_null() const { return kind_ == Kind::Null; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_number() const { return kind_ == Kind::Number; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_array() const { return kind_ == Kind::Array; }
    bool is_object() const { return kind_ == Kind::Object; }

    bool as_bool() const;
    double as_number() const;
    bool is_integer() const;          // a number with no fraction or exponent that fits int64
    int64_t as_integer() const;       // throws JsonError unless is_integer()
    const std::string& as_string() const;
    const Array& as_array() const;
    const Object& as_object() const;
    const Json* find(std::string_view key) const;  // objects only; nullptr when absent

    Json() = default;

private:
    Kind kind_ = Kind::Null;
    bool bool_ = false;
    double number_ = 0;
    bool integral_ = false;
    int64_t integer_ = 0;
    std::string string_;  // String value, or the number's source text
    std::shared_ptr<Array> array_;
    std::shared_ptr<Object> object_;
    friend class JsonParser;
};

std::string json_escape(std::string_view s);  // "..." with JSON escapes; invalid UTF-8 becomes U+FFFD

}  // namespace kvscope
