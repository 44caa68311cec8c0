// Fuzzes the JSON reader and the config.json checks: any bytes must give a value or a typed error,
// never a crash, hang or sanitizer report. Also checks json_escape's promises: its output is always
// valid JSON, and reads back to the same bytes whenever the input is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/errors.h"
#include "io/json.h"
#include "model/config.h"

namespace {

// A plain decoder, written separately from json.cpp's: well-formed UTF-8 per RFC 3629.
bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        size_t len;
        uint32_t cp;
        if (c < 0x80) { len = 1; cp = c; }
        else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return false;
        if (i + len > s.size()) return false;
        for (size_t k = 1; k < len; ++k) {
            const unsigned char d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    bool parsed = false;
    try {
        kvscope::Json::parse(text);
        parsed = true;
    } catch (const kvscope::JsonError& e) {
        if (e.offset > size) std::abort();  // an error points inside the text, or at its end
    }

    try {
        const kvscope::ModelConfig c = kvscope::parse_config(text, "fuzz/config.json");
        if (!parsed) std::abort();  // a config is JSON first
        const kvscope::ModelConfig d = kvscope::parse_config(kvscope::config_to_json(c), "roundtrip");
        if (d.n_vocab != c.n_vocab || d.n_embd != c.n_embd || d.n_inner != c.n_inner ||
            d.layer_norm_epsilon != c.layer_norm_epsilon || d.embedding_scale != c.embedding_scale ||
            d.activation != c.activation || d.n_embd % d.n_head != 0)
            std::abort();
    } catch (const kvscope::LoadError&) {
    }

    std::string back;
    try {
        back = kvscope::Json::parse(kvscope::json_escape(text)).as_string();
    } catch (const kvscope::JsonError&) {
        std::abort();  // json_escape must always produce valid JSON
    }
    if (valid_utf8(text) ? back != text : !valid_utf8(back)) std::abort();
    return 0;
}
