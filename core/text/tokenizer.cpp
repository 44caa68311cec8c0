#include "text/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <queue>

#include "base/errors.h"
#include "base/utf8.h"
#include "io/json.h"
#include "io/read_file.h"
#include "text/tokenizer_impl.h"
#include "text/unicode_nfc.h"

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

std::string file_path(const std::string& origin, const char* name) {
    return origin.empty() ? std::string(name) : origin + "/" + name;
}

std::string read_file(const std::string& path) {
    return read_file_bounded(path, k_tokenizer_file, "a tokenizer folder needs tokenizer.json, or vocab.json and merges.txt");
}

std::string quote_token(std::string_view s) {
    constexpr size_t k_max = 40;
    std::string shown = display_bytes(s.substr(0, k_max));
    return "'" + shown + (s.size() > k_max ? "...'" : "'");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

// Byte pair merging of one piece: start from its symbols (bytes or characters) and repeatedly merge the adjacent pair
// with the lowest merge rank (the leftmost on ties). A heap of candidate pairs keeps long pieces
// (a megabyte without a space) at O(n log n); entries made stale by earlier merges are skipped.
void Tokenizer::Impl::bpe(std::vector<TokenId>& symbols, std::vector<TokenId>& out) const {
    const size_t n = symbols.size();
    if (n <= 1) {
        out.insert(out.end(), symbols.begin(), symbols.end());
        return;
    }
    struct Node {
        TokenId id;
        int32_t prev, next;  // -1 at the ends
        bool alive;
    };
    struct Candidate {
        int32_t rank, left;  // left = node index = symbol position, so ties go leftmost
        TokenId left_id, right_id;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::vector<Node> nodes(n);
    for (size_t k = 0; k < n; ++k)
        nodes[k] = {symbols[k], int32_t(k) - 1,
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

// One stretch of text between added tokens: normalize, cut into pieces, merge each piece.
void Tokenizer::Impl::encode_segment(std::string_view text, std::vector<TokenId>& out) const {
    if (text.empty()) return;
    std::string normalized;
    if (nfc) {
        normalized = to_nfc(text);
        text = normalized;
    }
    std::vector<TokenId> symbols;
    if (model == Model::SentencePiece) {
        // pass 1: spaces -> "▁" (and one "▁" in front); pass 2: characters -> tokens, else byte tokens
        static constexpr std::string_view marker = "\xe2\x96\x81";  // U+2581
        std::string spelled;
        for (char c : text) {
            if (c == ' ') spelled += marker;
            else spelled += c;
        }
        if (prepend_marker && !(prepend_unless_marked && spelled.compare(0, marker.size(), marker) == 0))
            spelled.insert(0, marker);
        for (size_t i = 0; i < spelled.size();) {
            char32_t cp;
            size_t len = decode_utf8(spelled, i, cp);
            if (len == 0) len = 1;  // an invalid byte is a character of its own, found by byte fallback
            auto it = symbol_id.find(spelled.substr(i, len));
            if (it != symbol_id.end()) {
                symbols.push_back(it->second);
            } else if (std::all_of(spelled.begin() + i, spelled.begin() + i + len,
                                   [&](char b) { return byte_id[static_cast<unsigned char>(b)] >= 0; })) {
                for (size_t k = i; k < i + len; ++k) symbols.push_back(byte_id[static_cast<unsigned char>(spelled[k])]);
            } else if (symbols.empty() || symbols.back() != *unk) {
                symbols.push_back(*unk);  // runs of unknown characters fuse into one <unk>
            }
            i += len;
        }
        bpe(symbols, out);
        return;
    }
    for (size_t i = 0; i < text.size();) {
        size_t end = piece_end(pattern, text, i);
        std::string_view piece = text.substr(i, end - i);
        i = end;
        if (ignore_merges) {
            auto it = symbol_id.find(std::string(piece));
            if (it != symbol_id.end()) {
                out.push_back(it->second);
                continue;
            }
        }
        symbols.clear();
        for (unsigned char b : piece) symbols.push_back(byte_id[b]);
        bpe(symbols, out);
    }
}

void Tokenizer::Impl::index_added_tokens() {
    auto add = [](AddedIndex& index, const AddedToken& t) {
        if (t.content.empty() || !index.by_content.emplace(t.content, t.id).second) return;
        std::vector<size_t>& lengths = index.lengths[static_cast<unsigned char>(t.content[0])];
        if (std::find(lengths.begin(), lengths.end(), t.content.size()) == lengths.end()) {
            lengths.push_back(t.content.size());
            std::sort(lengths.begin(), lengths.end(), std::greater<size_t>());
        }
    };
    for (const AddedToken& t : added) add(index_plain, t), add(index_special, t);
    for (const AddedToken& t : specials) add(index_special, t);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

bool has_tokenizer_files(const std::string& dir) {
    std::error_code ec;
    for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt"})
        if (std::filesystem::exists(file_path(dir, name), ec)) return true;
    return false;
}

Tokenizer Tokenizer::load(const std::string& dir) {
    std::error_code ec;
    if (std::filesystem::exists(file_path(dir, "tokenizer.json"), ec)) {
        const std::string config_path = file_path(dir, "tokenizer_config.json");
        std::string config = std::filesystem::exists(config_path, ec) ? read_file(config_path) : std::string();
        return from_tokenizer_json(read_file(file_path(dir, "tokenizer.json")), config, dir);
    }
    std::string vocab = read_file(file_path(dir, "vocab.json"));
    std::string merges = read_file(file_path(dir, "merges.txt"));
    return from_text(vocab, merges, dir);
}

Tokenizer Tokenizer::from_text(std::string_view vocab_json, std::string_view merges_txt,
                               const std::string& origin) {
    auto impl = std::make_unique<Impl>();

    // pass 1: vocab.json -> id_bytes, symbol_id
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
    impl->symbol_id.reserve(n_vocab);
    for (const auto& [symbols, value] : entries) {
        if (!value.is_integer())
            throw LoadError(vocab_path, "token " + quote_token(symbols) + " has id of kind " + value.kind_name() +
                                            ", expected an integer");
        int64_t id = value.as_integer();
        if (id < 0 || uint64_t(id) >= n_vocab)
            throw LoadError(vocab_path, "token " + quote_token(symbols) + " has id " + std::to_string(id) +
                                            ", outside 0.." + std::to_string(int64_t(n_vocab) - 1),
                            "ids must be exactly 0..n-1 for n entries");
        if (seen[id])
            throw LoadError(vocab_path, "id " + std::to_string(id) + " is used twice (again by token " +
                                            quote_token(symbols) + ")");
        seen[id] = true;
        std::optional<std::string> bytes = symbols_to_bytes(symbols);
        if (!bytes || bytes->empty())
            throw LoadError(vocab_path, "token " + quote_token(symbols) + " (id " + std::to_string(id) +
                                            ") is not spelled with GPT-2's byte map",
                            "is this a byte-level BPE vocabulary?");
        impl->symbol_id.emplace(*bytes, TokenId(id));  // distinct keys map to distinct bytes
        impl->id_bytes[id] = std::move(*bytes);
    }
    for (int b = 0; b < 256; ++b) {
        auto it = impl->symbol_id.find(std::string(1, char(b)));
        if (it == impl->symbol_id.end())
            throw LoadError(vocab_path, "no token for the byte " + display_bytes(std::string(1, char(b))) +
                                            " (spelled " + quote_token(bytes_to_symbols(std::string(1, char(b)))) + ")",
                            "a byte-level vocabulary needs all 256 single-byte tokens");
        impl->byte_id[b] = it->second;
    }
    for (TokenId id = 0; id < TokenId(n_vocab); ++id) {
        const std::string& s = impl->id_bytes[id];
        if (s.size() > 4 && s.compare(0, 2, "<|") == 0 && s.compare(s.size() - 2, 2, "|>") == 0)
            impl->specials.push_back({s, id});
        if (s == "<|endoftext|>") impl->end_of_text = id;
    }
    impl->index_added_tokens();

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
            throw LoadError(merges_path, where() + "expected two tokens separated by one space, got " + quote_token(line));
        std::string_view sides[2] = {line.substr(0, space), line.substr(space + 1)};
        TokenId ids[2];
        std::string joined;
        for (int k = 0; k < 2; ++k) {
            std::optional<std::string> bytes = symbols_to_bytes(sides[k]);
            if (!bytes)
                throw LoadError(merges_path, where() + quote_token(sides[k]) + " is not spelled with GPT-2's byte map");
            auto it = impl->symbol_id.find(*bytes);
            if (it == impl->symbol_id.end())
                throw LoadError(merges_path, where() + quote_token(sides[k]) + " is not a token in vocab.json",
                                "are vocab.json and merges.txt from the same tokenizer?");
            ids[k] = it->second;
            joined += *bytes;
        }
        auto merged = impl->symbol_id.find(joined);
        if (merged == impl->symbol_id.end())
            throw LoadError(merges_path, where() + "the merge result " + quote_token(bytes_to_symbols(joined)) +
                                             " is not a token in vocab.json",
                            "are vocab.json and merges.txt from the same tokenizer?");
        // A repeated rule keeps its first (best) rank.
        impl->merges.emplace(Impl::pair_key(ids[0], ids[1]), Impl::Merge{rank, merged->second});
        if (rank == INT32_MAX) throw LoadError(merges_path, "too many merges");
        ++rank;
    }
    return Tokenizer(std::move(impl));
}

// Added tokens first (leftmost, then longest, like Hugging Face's AddedVocabulary), the text between
// them through encode_segment.
std::vector<TokenId> Tokenizer::encode(std::string_view text, bool allow_special) const {
    std::vector<TokenId> continuation = encode_continuation(text, allow_special);
    if (!impl_->bos) return continuation;
    std::vector<TokenId> out;
    out.reserve(continuation.size() + 1);
    out.push_back(*impl_->bos);
    out.insert(out.end(), continuation.begin(), continuation.end());
    return out;
}

std::vector<TokenId> Tokenizer::encode_continuation(std::string_view text, bool allow_special) const {
    const Impl::AddedIndex& index = allow_special ? impl_->index_special : impl_->index_plain;
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 1);
    size_t start = 0;
    if (!index.by_content.empty()) {
        for (size_t i = 0; i < text.size();) {
            TokenId hit = -1;
            size_t hit_len = 0;
            for (size_t len : index.lengths[static_cast<unsigned char>(text[i])]) {
                if (len > text.size() - i) continue;
                auto it = index.by_content.find(std::string(text.substr(i, len)));
                if (it != index.by_content.end()) {
                    hit = it->second, hit_len = len;
                    break;
                }
            }
            if (hit < 0) {
                ++i;
                continue;
            }
            impl_->encode_segment(text.substr(start, i - start), out);
            out.push_back(hit);
            start = i = i + hit_len;
        }
    }
    impl_->encode_segment(text.substr(start), out);
    return out;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids) const {
    std::string out;
    for (TokenId id : ids) out += bytes_or_id(id);
    if (impl_->decode_strip_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
    return out;
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
    if (id < 0 || size_t(id) >= impl_->id_bytes.size())
        throw UsageError("token id " + std::to_string(id) + " is not in the vocabulary (ids 0.." +
                         std::to_string(int64_t(impl_->id_bytes.size()) - 1) + ")");
    return impl_->id_bytes[id];
}

std::string Tokenizer::bytes_or_id(TokenId id) const {
    return has(id) ? impl_->id_bytes[size_t(id)] : "<id " + std::to_string(id) + ">";
}

int64_t Tokenizer::n_vocab() const { return int64_t(impl_->id_bytes.size()); }
int64_t Tokenizer::n_merges() const { return int64_t(impl_->merges.size()); }
std::optional<TokenId> Tokenizer::end_of_text() const { return impl_->end_of_text; }
std::optional<TokenId> Tokenizer::begin_of_text() const { return impl_->bos; }

// ---------------------------------------------------------------------------------------------------

std::vector<std::string_view> pretokenize(std::string_view text) {
    return split_pieces(SplitPattern::Gpt2, text);
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
