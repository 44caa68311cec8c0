#pragma once
// Writing JSON. Every writer builds a JsonOut value and prints it with json_text; no JSON is pasted
// together from strings. JsonOut is nlohmann::ordered_json, so keys print in the order they were set.
//
//   JsonOut                    nlohmann::ordered_json
//   json_text(v)               one line, no spaces: {"a":1,"b":[2,3]}
//   json_text(v, indent)       one member or element per line, `indent` spaces per level
//   put_text(obj, key, bytes)  text made of token bytes (see below); put_texts for a list of them
//   is_valid_utf8(bytes)       RFC 3629, as the reader (json.h) requires of strings
//   hex_bytes(bytes)           lowercase hex, two digits a byte
//
// Text from token bytes: KEY holds the text as it is (a newline is a newline, not an escape). A token
// can end inside a character, so the bytes may not be valid UTF-8; then KEY shows U+FFFD for each bad
// sequence and KEY_hex holds the exact bytes, so nothing is lost. (put_texts: KEY_hex is a parallel
// list, null where an element is valid, present only when one is not.)
//
// Strings may hold any bytes (token text, file names): invalid UTF-8 prints as U+FFFD where nlohmann
// would throw. Doubles print in the shortest form that reads back to the same double (a float is
// widened first, so it reads back exactly as a float); NaN and infinities, which JSON cannot spell,
// print as null.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvscope {

using JsonOut = nlohmann::ordered_json;

inline std::string json_text(const JsonOut& v, int indent = -1) {
    return v.dump(indent, ' ', false, JsonOut::error_handler_t::replace);
}

bool is_valid_utf8(std::string_view bytes);
std::string hex_bytes(std::string_view bytes);
void put_text(JsonOut& obj, const std::string& key, std::string_view bytes);
void put_texts(JsonOut& obj, const std::string& key, const std::vector<std::string>& texts);

}  // namespace kvscope
