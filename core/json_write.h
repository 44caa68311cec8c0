#pragma once
// Writing JSON. Every writer builds a JsonOut value and prints it with json_text; no JSON is pasted
// together from strings. JsonOut is nlohmann::ordered_json, so keys print in the order they were set.
//
//   JsonOut                    nlohmann::ordered_json
//   json_text(v)               one line, no spaces: {"a":1,"b":[2,3]}
//   json_text(v, indent)       one member or element per line, `indent` spaces per level
//
// Strings may hold any bytes (token text, file names): invalid UTF-8 prints as U+FFFD where nlohmann
// would throw. Doubles print in the shortest form that reads back to the same double (a float is
// widened first, so it reads back exactly as a float); NaN and infinities, which JSON cannot spell,
// print as null.
#include <string>

#include <nlohmann/json.hpp>

namespace kvscope {

using JsonOut = nlohmann::ordered_json;

inline std::string json_text(const JsonOut& v, int indent = -1) {
    return v.dump(indent, ' ', false, JsonOut::error_handler_t::replace);
}

}  // namespace kvscope
