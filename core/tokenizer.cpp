#include "tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "errors.h"
#include "json.h"
#include "unicode_classes.h"

namespace kvscope {
namespace {

// ---------------------------------------------------------------------------------------------------
// GPT-2's byte map: every byte gets a printable code point so vocab.json and merges.txt can spell
// tokens as text. Printable Latin-1 bytes stand for themselves; the other 68 take U+0100.. in order.

struct ByteMap {
    std::array<char32_t, 256> to_symbol{};
    std::unordered_map<char32_t, unsigned char> to_byte;
    ByteMap() {
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
            to_symbol[b] = printable ? char32_t(b) : next++;
            to_byte[to_symbol[b]] = static_cast<unsigned char>(b);
        }
    }
};

const ByteMap& byte_map() {
    static const ByteMap map;
    return map;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xc0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += char(0xe0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    } else {
        out += char(0xf0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3f));
        out += char(0x80 | ((cp >> 6) & 0x3f));
        out += char(0x80 | (cp & 0x3f));
    }
}

// Decodes one well-formed UTF-8 sequence at s[i]; returns its length, or 0 when the bytes there are
// not one (stray continuation byte, truncated sequence, overlong form, surrogate, > U+10FFFF).
size_t decode_utf8(std::string_view s, size_t i, char32_t& cp) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char b0 = byte(i);
    if (b0 < 0x80) {
        cp = b0;
        return 1;
    }
    size_t len;
    char32_t min;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
        len = 2, cp = b0 & 0x1f, min = 0x80;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
        len = 3, cp = b0 & 0x0f, min = 0x800;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
        len = 4, cp = b0 & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (s.size() - i < len) return 0;
    for (size_t k = 1; k < len; ++k) {
        unsigned char b = byte(i + k);
        if ((b & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

// ---------------------------------------------------------------------------------------------------
// Pre-tokenizer: a hand-written scanner for tiktoken's gpt2 pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// tried left to right at each position like a backtracking regex (the first alternative that
// matches wins, each one greedy).

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

size_t run_end(std::string_view s, size_t i, CharClass cls) {
    while (i < s.size()) {
        Char c = char_at(s, i);
        if (c.cls != cls) break;
        i += c.len;
    }
    return i;
}

// End of the piece that starts at s[i] (i < s.size()).
size_t piece_end(std::string_view s, size_t i) {
    const size_t n = s.size();
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
    if (c.cls != CharClass::Space) return run_end(s, j + c.len, c.cls);
    // 5: \s+(?!\S) -- the whole run at the end of the text, else the run minus its last character
    //    (which a following ' ?X+' or the next \s+ takes); 6: \s+ when the run is one character
    size_t last = i, k = i;
    while (k < n) {
        Char w = char_at(s, k);
        if (w.cls != CharClass::Space) break;
        last = k;
        k += w.len;
    }
    if (k == n) return k;
    return last > i ? last : k;
}

std::string file_path(const std::string& origin, const char* name) {
    return origin.empty() ? std::string(name) : origin + "/" + name;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw LoadError(path, "cannot open file", "a tokenizer folder needs vocab.json and merges.txt");
    std::ostringstream buf;
    buf << in.rdbuf();
    if (in.bad()) throw LoadError(path, "read failed");
    return buf.str();
}

std::string quoted(std::string_view s) {
    constexpr size_t k_max = 40;
    std::string shown = display_bytes(s.substr(0, k_max));
    return "'" + shown + (s.size() > k_max ? "...'" : "'");
}

uint64_t pair_key(TokenId left, TokenId right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
    struct Merge {
        int32_t rank;    // line order in merges.txt; lower merges first
        TokenId merged;  // id of left+right
    };
    std::vector<std::string> id_bytes;                          // (n_vocab) bytes of each id
    std::unordered_map<std::string, TokenId> bytes_id;          // inverse of id_bytes
    std::array<TokenId, 256> byte_id{};                         // the single-byte tokens
    std::unordered_map<uint64_t, Merge> merges;                 // pair_key(left, right) -> merge
    std::vector<std::pair<std::string, TokenId>> specials;      // "<|...|>" tokens
    std::optional<TokenId> end_of_text;

    void bpe(std::string_view piece, std::vector<TokenId>& out) const;
    void encode_ordinary(std::string_view text, std::vector<TokenId>& out) const;
};

// Byte pair merging of one piece: start from single bytes and repeatedly merge the adjacent pair
// with the lowest merge rank (the leftmost on ties). A heap of candidate pairs keeps long pieces
// (a megabyte without a space) at O(n log n); entries made stale by earlier merges are skipped.
void Tokenizer::Impl::bpe(std::string_view piece, std::vector<TokenId>& out) const {
    const size_t n = piece.size();
    if (n == 1) {
        out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
        return;
    }
    struct Node {
        TokenId id;
        int32_t prev, next;  // -1 at the ends
        bool alive;
    };
    struct Candidate {
        int32_t rank, left;  // left = node index = byte position, so ties go leftmost
        TokenId left_id, right_id;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::vector<Node> nodes(n);
    for (size_t k = 0; k < n; ++k)
        nodes[k] = {byte_id[static_cast<unsigned char>(piece[k])], int32_t(k) - 1,
                    k + 1 < n ? int32_t(k + 1) : -1, true};
    std::vector<Candidate> storage;
    storage.reserve(n);
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(
        std::greater<Candidate>{}, std::move(storage));
    auto consider = [&](int32_t left) {
        if (left < 0 || nodes[left].next < 0) return;
        const Node& a = nodes[left];
        const Node& b = nodes[a.next];
        auto it = merges.find(pair_key(a.id, b.id));
        if (it != merges.end()) heap.push({it->second.rank, left, a.id, b.id});
    };
    for (size_t k = 0; k + 1 < n; ++k) consider(int32_t(k));
    while (!heap.empty()) {
        Candidate c = heap.top();
        heap.pop();
        Node& a = nodes[c.left];
        // A merge always changes the left node's id, and a right node only disappears by merging
        // into its left, so matching ids prove the pair is still there.
        if (!a.alive || a.next < 0 || a.id != c.left_id || nodes[a.next].id != c.right_id) continue;
        Node& b = nodes[a.next];
        a.id = merges.at(pair_key(c.left_id, c.right_id)).merged;
        b.alive = false;
        a.next = b.next;
        if (b.next >= 0) nodes[b.next].prev = c.left;
        consider(a.prev);
        consider(c.left);
    }
    for (int32_t k = 0; k >= 0; k = nodes[k].next) out.push_back(nodes[k].id);
}

void Tokenizer::Impl::encode_ordinary(std::string_view text, std::vector<TokenId>& out) const {
    for (size_t i = 0; i < text.size();) {
        size_t end = piece_end(text, i);
        std::string_view piece = text.substr(i, end - i);
        // Most pieces are whole tokens; a merge path to them exists in GPT-2-style files, but not
        // necessarily in others, so only single bytes skip the merging.
        bpe(piece, out);
        i = end;
    }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& dir) {
    std::string vocab = read_file(file_path(dir, "vocab.json"));
    std::string merges = read_file(file_path(dir, "merges.txt"));
    return from_text(vocab, merges, dir);
}

Tokenizer Tokenizer::from_text(std::string_view vocab_json, std::string_view merges_txt,
                               const std::string& origin) {
    auto impl = std::make_unique<Impl>();

    // pass 1: vocab.json -> id_bytes, bytes_id
    const std::string vocab_path = file_path(origin, "vocab.json");
    Json doc;
    try {
        doc = Json::parse(vocab_json);
    } catch (const JsonError& e) {
        throw LoadError(vocab_path, std::string("not valid JSON: ") + e.what() + " (at byte " +
                                        std::to_string(e.offset) + ")");
    }
    if (!doc.is_object())
        throw LoadError(vocab_path, std::string("expected an object {\"token\": id}, found ") + doc.kind_name());
    const Json::Object& entries = doc.as_object();
    const size_t n_vocab = entries.size();
    if (n_vocab > size_t(INT32_MAX))
        throw LoadError(vocab_path, "too many tokens (" + std::to_string(n_vocab) + ")");
    impl->id_bytes.assign(n_vocab, std::string());
    std::vector<bool> seen(n_vocab, false);
    impl->bytes_id.reserve(n_vocab);
    for (const auto& [symbols, value] : entries) {
        if (!value.is_integer())
            throw LoadError(vocab_path, "token " + quoted(symbols) + " has id of kind " + value.kind_name() +
                                            ", expected an integer");
        int64_t id = value.as_integer();
        if (id < 0 || uint64_t(id) >= n_vocab)
            throw LoadError(vocab_path, "token " + quoted(symbols) + " has id " + std::to_string(id) +
                                            ", outside 0.." + std::to_string(int64_t(n_vocab) - 1),
                            "ids must be exactly 0..n-1 for n entries");
        if (seen[id])
            throw LoadError(vocab_path, "id " + std::to_string(id) + " is used twice (again by token " +
                                            quoted(symbols) + ")");
        seen[id] = true;
        std::optional<std::string> bytes = symbols_to_bytes(symbols);
        if (!bytes || bytes->empty())
            throw LoadError(vocab_path, "token " + quoted(symbols) + " (id " + std::to_string(id) +
                                            ") is not spelled with GPT-2's byte map",
                            "is this a byte-level BPE vocabulary?");
        impl->bytes_id.emplace(*bytes, TokenId(id));  // distinct keys map to distinct bytes
        impl->id_bytes[id] = std::move(*bytes);
    }
    for (int b = 0; b < 256; ++b) {
        auto it = impl->bytes_id.find(std::string(1, char(b)));
        if (it == impl->bytes_id.end())
            throw LoadError(vocab_path, "no token for the byte " + display_bytes(std::string(1, char(b))) +
                                            " (spelled " + quoted(bytes_to_symbols(std::string(1, char(b)))) + ")",
                            "a byte-level vocabulary needs all 256 single-byte tokens");
        impl->byte_id[b] = it->second;
    }
    for (TokenId id = 0; id < TokenId(n_vocab); ++id) {
        const std::string& s = impl->id_bytes[id];
        if (s.size() > 4 && s.compare(0, 2, "<|") == 0 && s.compare(s.size() - 2, 2, "|>") == 0)
            impl->specials.emplace_back(s, id);
        if (s == "<|endoftext|>") impl->end_of_text = id;
    }
    // Longest first, so one special that starts another is not cut short.
    std::stable_sort(impl->specials.begin(), impl->specials.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

    // pass 2: merges.txt -> merges
    const std::string merges_path = file_path(origin, "merges.txt");
    int32_t rank = 0;
    size_t line_no = 0;
    for (size_t pos = 0; pos < merges_txt.size();) {
        size_t eol = merges_txt.find('\n', pos);
        if (eol == std::string_view::npos) eol = merges_txt.size();
        std::string_view line = merges_txt.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        if (line_no == 1 && line.substr(0, 8) == "#version") continue;
        auto where = [&] { return "line " + std::to_string(line_no) + ": "; };
        size_t space = line.find(' ');
        if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
            line.find(' ', space + 1) != std::string_view::npos)
            throw LoadError(merges_path, where() + "expected two tokens separated by one space, got " + quoted(line));
        std::string_view sides[2] = {line.substr(0, space), line.substr(space + 1)};
        TokenId ids[2];
        std::string joined;
        for (int k = 0; k < 2; ++k) {
            std::optional<std::string> bytes = symbols_to_bytes(sides[k]);
            if (!bytes)
                throw LoadError(merges_path, where() + quoted(sides[k]) + " is not spelled with GPT-2's byte map");
            auto it = impl->bytes_id.find(*bytes);
            if (it == impl->bytes_id.end())
                throw LoadError(merges_path, where() + quoted(sides[k]) + " is not a token in vocab.json",
                                "are vocab.json and merges.txt from the same tokenizer?");
            ids[k] = it->second;
            joined += *bytes;
        }
        auto merged = impl->bytes_id.find(joined);
        if (merged == impl->bytes_id.end())
            throw LoadError(merges_path, where() + "the merge result " + quoted(bytes_to_symbols(joined)) +
                                             " is not a token in vocab.json",
                            "are vocab.json and merges.txt from the same tokenizer?");
        // A repeated rule keeps its first (best) rank.
        impl->merges.emplace(pair_key(ids[0], ids[1]), Impl::Merge{rank, merged->second});
        if (rank == INT32_MAX) throw LoadError(merges_path, "too many merges");
        ++rank;
    }
    return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool allow_special) const {
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 1);
    if (!allow_special || impl_->specials.empty()) {
        impl_->encode_ordinary(text, out);
        return out;
    }
    size_t start = 0;
    for (size_t i = 0; i < text.size();) {
        size_t at = text.find("<|", i);
        if (at == std::string_view::npos) break;
        const std::pair<std::string, TokenId>* hit = nullptr;
        for (const auto& special : impl_->specials)
            if (text.substr(at, special.first.size()) == special.first) {
                hit = &special;
                break;
            }
        if (!hit) {
            i = at + 1;
            continue;
        }
        impl_->encode_ordinary(text.substr(start, at - start), out);
        out.push_back(hit->second);
        start = i = at + hit->first.size();
    }
    impl_->encode_ordinary(text.substr(start), out);
    return out;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids) const {
    std::string out;
    for (TokenId id : ids) out += token_bytes(id);
    return out;
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
    if (id < 0 || size_t(id) >= impl_->id_bytes.size())
        throw UsageError("token id " + std::to_string(id) + " is not in the vocabulary (ids 0.." +
                         std::to_string(int64_t(impl_->id_bytes.size()) - 1) + ")");
    return impl_->id_bytes[id];
}

int64_t Tokenizer::n_vocab() const { return int64_t(impl_->id_bytes.size()); }
int64_t Tokenizer::n_merges() const { return int64_t(impl_->merges.size()); }
std::optional<TokenId> Tokenizer::end_of_text() const { return impl_->end_of_text; }

// ---------------------------------------------------------------------------------------------------

std::vector<std::string_view> pretokenize(std::string_view text) {
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i < text.size();) {
        size_t end = piece_end(text, i);
        pieces.push_back(text.substr(i, end - i));
        i = end;
    }
    return pieces;
}

std::string bytes_to_symbols(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) append_utf8(out, byte_map().to_symbol[b]);
    return out;
}

std::optional<std::string> symbols_to_bytes(std::string_view symbols) {
    const ByteMap& map = byte_map();
    std::string out;
    out.reserve(symbols.size());
    for (size_t i = 0; i < symbols.size();) {
        char32_t cp;
        size_t len = decode_utf8(symbols, i, cp);
        if (len == 0) return std::nullopt;
        auto it = map.to_byte.find(cp);
        if (it == map.to_byte.end()) return std::nullopt;
        out += char(it->second);
        i += len;
    }
    return out;
}

std::string display_bytes(std::string_view bytes) {
    static const char* hex = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size());
    auto escape_byte = [&](unsigned char b) {
        out += "\\x";
        out += hex[b >> 4];
        out += hex[b & 15];
    };
    for (size_t i = 0; i < bytes.size();) {
        char32_t cp;
        size_t len = decode_utf8(bytes, i, cp);
        if (len == 0) {
            escape_byte(static_cast<unsigned char>(bytes[i]));
            ++i;
            continue;
        }
        if (cp < 0x20 || cp == 0x7f) {
            escape_byte(static_cast<unsigned char>(cp));
        } else if (cp == '\\') {
            out += "\\\\";
        } else if ((cp >= 0x80 && cp <= 0x9f) || cp == 0xad || cp == 0x034f || cp == 0x061c ||
                   (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
                   (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb)) {
            out += "\\u";
            for (int shift = 12; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 15];
        } else {
            out.append(bytes.substr(i, len));
        }
        i += len;
    }
    return out;
}

}  // namespace kvscope
