#include "text/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/utf8.h"

namespace kvscope {
namespace {

struct CombiningClass {
    char32_t cp;
    uint8_t ccc;
};
struct Decomposition {
    char32_t cp;
    uint32_t offset, length;  // into k_decomposition_cps
};
struct Composition {
    char32_t first, second, composite;
};

#include "text/unicode_nfc_tables.inc"

// Hangul syllables decompose and compose by arithmetic (Unicode chapter 3.12).
constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
constexpr char32_t l_count = 19, v_count = 21, t_count = 28, n_count = v_count * t_count, s_count = l_count * n_count;

uint8_t ccc_of(char32_t cp) {
    auto it = std::lower_bound(std::begin(k_ccc), std::end(k_ccc), cp,
                               [](const CombiningClass& e, char32_t c) { return e.cp < c; });
    return (it != std::end(k_ccc) && it->cp == cp) ? it->ccc : 0;
}

// A code point, or an invalid byte kept as-is (is_byte) that never composes or reorders.
struct Unit {
    char32_t cp;
    uint8_t ccc;
    bool is_byte;
};

void decompose(char32_t cp, std::vector<Unit>& out) {
    if (cp >= s_base && cp < s_base + s_count) {
        char32_t s = cp - s_base;
        out.push_back({l_base + s / n_count, 0, false});
        out.push_back({v_base + (s % n_count) / t_count, 0, false});
        if (s % t_count) out.push_back({t_base + s % t_count, 0, false});
        return;
    }
    auto it = std::lower_bound(std::begin(k_decomposition), std::end(k_decomposition), cp,
                               [](const Decomposition& e, char32_t c) { return e.cp < c; });
    if (it != std::end(k_decomposition) && it->cp == cp) {
        for (uint32_t k = 0; k < it->length; ++k) {
            char32_t d = k_decomposition_cps[it->offset + k];
            out.push_back({d, ccc_of(d), false});
        }
        return;
    }
    out.push_back({cp, ccc_of(cp), false});
}

// The primary composite of a pair, or 0.
char32_t compose(char32_t a, char32_t b) {
    if (a >= l_base && a < l_base + l_count && b >= v_base && b < v_base + v_count)
        return s_base + ((a - l_base) * v_count + (b - v_base)) * t_count;
    if (a >= s_base && a < s_base + s_count && (a - s_base) % t_count == 0 && b > t_base && b < t_base + t_count)
        return a + (b - t_base);
    auto it = std::lower_bound(std::begin(k_composition), std::end(k_composition), std::pair(a, b),
                               [](const Composition& e, const std::pair<char32_t, char32_t>& k) {
                                   return e.first != k.first ? e.first < k.first : e.second < k.second;
                               });
    return (it != std::end(k_composition) && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

std::string to_nfc(std::string_view text) {
    // Below U+0300 nothing decomposes, reorders or composes with what follows except before a
    // combining mark, so plain ASCII (the common case) is returned as it is.
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
        return std::string(text);

    // pass 1: full canonical decomposition
    std::vector<Unit> units;
    units.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        char32_t cp;
        size_t len = decode_utf8(text, i, cp);
        if (len == 0) {
            units.push_back({char32_t(static_cast<unsigned char>(text[i])), 0, true});
            ++i;
            continue;
        }
        decompose(cp, units);
        i += len;
    }
    // pass 2: canonical ordering -- each run of non-starters sorted stably by combining class
    for (size_t i = 0; i < units.size();) {
        if (units[i].ccc == 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < units.size() && units[j].ccc != 0) ++j;
        std::stable_sort(units.begin() + i, units.begin() + j,
                         [](const Unit& a, const Unit& b) { return a.ccc < b.ccc; });
        i = j;
    }
    // pass 3: canonical composition -- a character joins the last starter unless a character of the
    // same or a higher class (or a starter) stands between them
    std::vector<Unit> out;
    out.reserve(units.size());
    size_t starter = SIZE_MAX;  // index in `out`
    for (const Unit& u : units) {
        if (starter != SIZE_MAX && !u.is_byte) {
            const Unit& last = out.back();
            bool blocked = &last != &out[starter] && (last.ccc == 0 || last.ccc >= u.ccc);
            if (!blocked) {
                if (char32_t c = compose(out[starter].cp, u.cp)) {
                    out[starter].cp = c;
                    continue;
                }
            }
        }
        if (u.ccc == 0) starter = u.is_byte ? SIZE_MAX : out.size();
        out.push_back(u);
    }
    std::string result;
    result.reserve(text.size());
    for (const Unit& u : out) {
        if (u.is_byte) result += char(u.cp);
        else append_utf8(result, u.cp);
    }
    return result;
}

const char* unicode_nfc_version() { return k_nfc_unicode_version; }

}  // namespace kvscope
