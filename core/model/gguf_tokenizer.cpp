#include "model/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/errors.h"
#include "base/utf8.h"
#include "io/json.h"
#include "text/pretokenizer.h"

namespace kvscope {
namespace {

enum TokenType : int64_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct PreTokenizer {
    std::string json;
    std::string normalizer = "null";
    bool ignore_merges = false;
    bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

std::string byte_level(bool use_regex) {
    return std::string(R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": )") +
           (use_regex ? "true" : "false") + "}";
}

std::string split_then_byte_level(SplitPattern pattern) {
    return R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )" +
           json_escape(split_pattern_regex(pattern)) + R"(}, "behavior": "Isolated", "invert": false}, )" +
           byte_level(false) + "]}";
}

std::optional<PreTokenizer> pre_tokenizer_named(const std::string& name) {
    if (name == "llama-bpe" || name == "llama3" || name == "llama-v3")
        return PreTokenizer{.json = split_then_byte_level(SplitPattern::Llama3), .ignore_merges = true, .add_bos = true};
    // Qwen2's tokenizer.json composes the text (NFC) first; llama.cpp does not, so it splits "e" + U+0301
    // where Hugging Face, and kvscope, see one "é".
    if (name == "qwen2") return PreTokenizer{.json = split_then_byte_level(SplitPattern::Qwen2), .normalizer = R"({"type": "NFC"})"};
    if (name == "smollm")
        return PreTokenizer{R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, )" +
                            byte_level(true) + "]}"};
    if (name == "gpt-2") return PreTokenizer{byte_level(true)};
    return std::nullopt;
}

class Keys {
public:
    explicit Keys(const GgufFile& f) : f_(f) {}
    [[noreturn]] void fail(const std::string& what, const std::string& hint = "") const {
        throw LoadError(f_.path(), what, hint);
    }
    const GgufValue* find(const std::string& key, GgufValueType type) const {
        const GgufValue* v = f_.find(key);
        if (v && v->type != type) fail(key + " is a " + to_string(v->type) + ", expected a " + to_string(type));
        return v;
    }
    const GgufValue& array(const std::string& key, GgufValueType item) const {
        const GgufValue* v = find(key, GgufValueType::Array);
        if (!v) fail(key + " is missing", "a GGUF tokenizer needs its tokens and merges");
        if (v->item_type != item) fail(key + " holds " + to_string(v->item_type) + " items, expected " + to_string(item));
        return *v;
    }
    bool flag(const std::string& key, bool fallback) const {
        const GgufValue* v = find(key, GgufValueType::Bool);
        return v ? v->integer != 0 : fallback;
    }
    // A token id key: nullopt when absent, refused when outside the vocabulary.
    std::optional<int64_t> token_id(const std::string& key, int64_t n_tokens) const {
        const GgufValue* v = f_.find(key);
        if (!v) return std::nullopt;
        if (!v->is_integer() || v->type == GgufValueType::Bool || v->integer < 0 || v->integer >= n_tokens)
            fail(key + " must be a token id below " + std::to_string(n_tokens));
        return v->integer;
    }

private:
    const GgufFile& f_;
};

bool valid_utf8(std::string_view s) {
    char32_t cp;
    for (size_t i = 0; i < s.size();) {
        const size_t len = decode_utf8(s, i, cp);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

std::string added_token(int64_t id, const std::string& content, bool special) {
    return R"({"id": )" + std::to_string(id) + R"(, "content": )" + json_escape(content) +
           R"(, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": )" +
           (special ? "true" : "false") + "}";
}

std::string tokenizer_json(const Keys& k, const PreTokenizer& pre, const std::vector<std::string>& tokens,
                           const std::vector<int64_t>& types, const std::vector<std::string>& merges,
                           std::optional<int64_t> bos, bool add_bos) {
    std::string added, vocab;
    std::unordered_set<std::string_view> in_vocab;
    for (size_t id = 0; id < tokens.size(); ++id) {
        if (!valid_utf8(tokens[id])) k.fail("tokenizer.ggml.tokens[" + std::to_string(id) + "] is not valid UTF-8");
        const int64_t type = types.empty() ? Normal : types[id];
        if (type == Control || type == UserDefined) {
            added += (added.empty() ? "" : ", ") + added_token(int64_t(id), tokens[id], type == Control);
            continue;
        }
        if (type < Normal || type > Byte)
            k.fail("tokenizer.ggml.token_type[" + std::to_string(id) + "] is " + std::to_string(type) + ", not a token type (1..6)");
        if (!in_vocab.insert(tokens[id]).second)
            k.fail("tokenizer.ggml.tokens holds " + json_escape(tokens[id]) + " twice (again at id " + std::to_string(id) + ")");
        vocab += (vocab.empty() ? "" : ", ") + json_escape(tokens[id]) + ": " + std::to_string(id);
    }
    std::string merge_list;
    for (const std::string& m : merges) merge_list += (merge_list.empty() ? "" : ", ") + json_escape(m);
    const std::string post = add_bos ? R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": )" +
                                           json_escape(tokens[size_t(*bos)]) +
                                           R"(, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]})"
                                     : byte_level(true);
    return R"({"version": "1.0", "added_tokens": [)" + added + R"(], "normalizer": )" + pre.normalizer + R"(, "pre_tokenizer": )" + pre.json +
           R"(, "post_processor": )" + post + R"(, "decoder": )" + byte_level(true) +
           R"(, "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false, "ignore_merges": )" +
           (pre.ignore_merges ? "true" : "false") + R"(, "vocab": {)" + vocab + R"(}, "merges": [)" + merge_list + "]}}";
}

// --- SentencePiece ("llama") vocabularies ---

constexpr std::string_view k_marker = "\xe2\x96\x81";  // U+2581, SentencePiece's space
constexpr size_t k_max_piece_bytes = 4096;

std::string replace_spaces(std::string s) {
    for (size_t at = 0; (at = s.find(' ', at)) != std::string::npos; at += k_marker.size()) s.replace(at, 1, k_marker);
    return s;
}

// What llama.cpp's converter (_create_vocab_sentencepiece) does to the tokens tokenizer_config.json lists,
// undone for user-defined ones so the merges come out as Hugging Face made them: it writes their "▁" as a
// space ("pre-normalize user-defined spaces"; Gemma's "▁▁" ... pieces) and their score as -1000, where
// SentencePiece gives user-defined pieces 0.
void undo_user_defined_rewrite(std::vector<std::string>& tokens, std::vector<float>& scores, const std::vector<int64_t>& types) {
    for (size_t id = 0; id < types.size(); ++id)
        if (types[id] == UserDefined) {
            tokens[id] = replace_spaces(std::move(tokens[id]));
            scores[id] = 0;
        }
}

// The merges Hugging Face's converter makes of a SentencePiece BPE model (convert_slow_tokenizer's
// generate_merges): every split of every piece into two pieces of the vocabulary, ordered by the piece's
// score (highest first), then the left and right sides' lengths in characters (longest first); ties keep
// piece id order, and one piece's splits the order of (left id, right id). A piece of several characters
// that no split makes can never come out of BPE: the scores are then a unigram model's, refused.
std::string spm_merges_json(const Keys& k, const std::vector<std::string>& tokens, const std::vector<float>& scores,
                            const std::vector<int64_t>& types) {
    struct Split {
        int32_t left, right, left_chars, right_chars;
        float score;
    };
    std::unordered_map<std::string_view, int32_t> id_of;
    for (size_t id = 0; id < tokens.size(); ++id) id_of.emplace(tokens[id], int32_t(id));
    std::vector<Split> splits;
    std::vector<size_t> cuts;  // byte offsets of the piece's character boundaries
    for (size_t id = 0; id < tokens.size(); ++id) {
        const std::string_view piece = tokens[id];
        cuts.clear();
        char32_t cp;
        for (size_t i = 0; i < piece.size(); i += decode_utf8(piece, i, cp)) cuts.push_back(i);
        const size_t first = splits.size();
        for (size_t c = 1; c < cuts.size(); ++c) {
            auto left = id_of.find(piece.substr(0, cuts[c])), right = id_of.find(piece.substr(cuts[c]));
            if (left != id_of.end() && right != id_of.end())
                splits.push_back({left->second, right->second, int32_t(c), int32_t(cuts.size() - c), scores[id]});
        }
        if (splits.size() == first && cuts.size() > 1 && (types.empty() || types[id] == Normal))
            k.fail("tokenizer.ggml.tokens[" + std::to_string(id) + "] " + json_escape(tokens[id]) +
                       " is no two other pieces merged: a SentencePiece unigram vocabulary, which kvscope does not read",
                   "kvscope reads SentencePiece BPE vocabularies (Llama 2, Mistral, Gemma)");
        std::sort(splits.begin() + std::ptrdiff_t(first), splits.end(),
                  [](const Split& a, const Split& b) { return std::pair(a.left, a.right) < std::pair(b.left, b.right); });
    }
    std::stable_sort(splits.begin(), splits.end(), [](const Split& a, const Split& b) {
        if (a.score != b.score) return a.score > b.score;
        return std::pair(a.left_chars, a.right_chars) > std::pair(b.left_chars, b.right_chars);
    });
    std::string out;
    for (const Split& m : splits)
        out += (out.empty() ? "[" : ", [") + json_escape(tokens[size_t(m.left)]) + ", " + json_escape(tokens[size_t(m.right)]) + "]";
    return out;
}

struct SpmOptions {
    std::optional<int64_t> bos, unk;
    bool add_bos = true;           // llama.cpp's defaults for SentencePiece vocabularies
    bool add_space_prefix = true;
};

// A tokenizer.json as Hugging Face's converter writes it for a SentencePiece BPE model (Llama 2's and
// Gemma 3's files): every piece in the vocab; unknown and control pieces also special added tokens,
// user-defined ones non-special added tokens; "▁" for spaces, prepended when add_space_prefix (Llama 2's
// Prepend + Replace normalizer, Gemma's Replace only); byte_fallback when <0xNN> pieces exist.
std::string spm_tokenizer_json(const Keys& k, const std::vector<std::string>& tokens, const std::vector<float>& scores,
                               const std::vector<int64_t>& types, const SpmOptions& o) {
    std::string added, vocab;
    std::unordered_set<std::string_view> in_vocab;
    bool has_bytes = false;
    for (size_t id = 0; id < tokens.size(); ++id) {
        if (!valid_utf8(tokens[id])) k.fail("tokenizer.ggml.tokens[" + std::to_string(id) + "] is not valid UTF-8");
        if (!std::isfinite(scores[id])) k.fail("tokenizer.ggml.scores[" + std::to_string(id) + "] is not a finite number");
        // Every split of a piece is looked up (quadratic in its length); real pieces are under 100 bytes.
        if (tokens[id].size() > k_max_piece_bytes)
            k.fail("tokenizer.ggml.tokens[" + std::to_string(id) + "] is " + std::to_string(tokens[id].size()) +
                   " bytes long; kvscope reads SentencePiece pieces of at most " + std::to_string(k_max_piece_bytes));
        const int64_t type = types.empty() ? Normal : types[id];
        if (type < Normal || type > Byte)
            k.fail("tokenizer.ggml.token_type[" + std::to_string(id) + "] is " + std::to_string(type) + ", not a token type (1..6)");
        if (!in_vocab.insert(tokens[id]).second)
            k.fail("tokenizer.ggml.tokens holds " + json_escape(tokens[id]) + " twice (again at id " + std::to_string(id) + ")");
        has_bytes = has_bytes || type == Byte;
        if (type == Unknown || type == Control || type == UserDefined)
            added += (added.empty() ? "" : ", ") + added_token(int64_t(id), tokens[id], type != UserDefined);
        vocab += (vocab.empty() ? "" : ", ") + json_escape(tokens[id]) + ": " + std::to_string(id);
    }
    const std::string marker = json_escape(std::string(k_marker));
    const std::string replace = R"({"type": "Replace", "pattern": {"String": " "}, "content": )" + marker + "}";
    const std::string normalizer = o.add_space_prefix ? R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": )" +
                                                            marker + "}, " + replace + "]}"
                                                      : replace;
    const std::string post = o.add_bos ? R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": )" +
                                             json_escape(tokens[size_t(*o.bos)]) +
                                             R"(, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]})"
                                       : "null";
    const std::string decoder = R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": )" + marker +
                                R"(}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"})" +
                                (o.add_space_prefix ? R"(, {"type": "Strip", "content": " ", "start": 1, "stop": 0})" : "") + "]}";
    return R"({"version": "1.0", "added_tokens": [)" + added + R"(], "normalizer": )" + normalizer +
           R"(, "pre_tokenizer": null, "post_processor": )" + post + R"(, "decoder": )" + decoder +
           R"(, "model": {"type": "BPE", "dropout": null, "unk_token": )" + (o.unk ? json_escape(tokens[size_t(*o.unk)]) : "null") +
           R"(, "fuse_unk": true, "byte_fallback": )" + (has_bytes ? "true" : "false") + R"(, "ignore_merges": false, "vocab": {)" +
           vocab + R"(}, "merges": [)" + spm_merges_json(k, tokens, scores, types) + "]}}";
}

}  // namespace

std::optional<GgufTokenizerFiles> gguf_tokenizer_files(const GgufFile& file) {
    const Keys k(file);
    const GgufValue* model = k.find("tokenizer.ggml.model", GgufValueType::String);
    if (!model || model->text == "none" || model->text == "no_vocab") return std::nullopt;
    const bool sentencepiece = model->text == "llama";
    if (!sentencepiece && model->text != "gpt2")
        k.fail("tokenizer.ggml.model is \"" + model->text + "\", a tokenizer kvscope does not read from GGUF",
               "kvscope reads byte-level BPE (\"gpt2\") and SentencePiece BPE (\"llama\") GGUF vocabularies");
    const GgufValue* pre_name = k.find("tokenizer.ggml.pre", GgufValueType::String);
    const std::optional<PreTokenizer> pre = pre_tokenizer_named(pre_name ? pre_name->text : "");
    if (!sentencepiece && !pre)
        k.fail(pre_name ? "tokenizer.ggml.pre is \"" + pre_name->text + "\", a pre-tokenizer kvscope does not know"
                        : "tokenizer.ggml.pre is missing (llama.cpp then guesses; kvscope does not)",
               "kvscope knows llama-bpe, qwen2, smollm and gpt-2");
    if (sentencepiece && pre_name && pre_name->text != "default")
        k.fail("tokenizer.ggml.pre is \"" + pre_name->text + "\" for a SentencePiece vocabulary", "kvscope knows \"default\"");

    std::vector<std::string> tokens = k.array("tokenizer.ggml.tokens", GgufValueType::String).texts;
    if (tokens.empty()) k.fail("tokenizer.ggml.tokens is empty");
    std::vector<int64_t> types;
    if (file.find("tokenizer.ggml.token_type")) {
        const GgufValue& t = k.array("tokenizer.ggml.token_type", GgufValueType::I32);
        if (t.integers.size() != tokens.size())
            k.fail("tokenizer.ggml.token_type has " + std::to_string(t.integers.size()) + " entries for " +
                   std::to_string(tokens.size()) + " tokens");
        types = t.integers;
    }
    const int64_t n = int64_t(tokens.size());
    const std::optional<int64_t> bos = k.token_id("tokenizer.ggml.bos_token_id", n);
    const std::optional<int64_t> eos = k.token_id("tokenizer.ggml.eos_token_id", n);
    const bool add_bos = k.flag("tokenizer.ggml.add_bos_token", sentencepiece || pre->add_bos);
    if (add_bos && !bos) k.fail("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing");
    if (k.flag("tokenizer.ggml.add_eos_token", false))
        k.fail("tokenizer.ggml.add_eos_token is true", "kvscope's tokenizers never append an end-of-text token");

    GgufTokenizerFiles out;
    if (sentencepiece) {
        const GgufValue& s = k.array("tokenizer.ggml.scores", GgufValueType::F32);
        if (s.reals.size() != tokens.size())
            k.fail("tokenizer.ggml.scores has " + std::to_string(s.reals.size()) + " entries for " + std::to_string(n) + " tokens");
        std::vector<float> scores(s.reals.begin(), s.reals.end());
        SpmOptions o{.bos = bos, .unk = k.token_id("tokenizer.ggml.unknown_token_id", n), .add_bos = add_bos,
                     .add_space_prefix = k.flag("tokenizer.ggml.add_space_prefix", true)};
        if (!o.unk)
            for (size_t id = 0; id < types.size() && !o.unk; ++id)
                if (types[id] == Unknown) o.unk = int64_t(id);
        undo_user_defined_rewrite(tokens, scores, types);
        out.tokenizer_json = spm_tokenizer_json(k, tokens, scores, types, o);
    } else {
        const std::vector<std::string>& merges = k.array("tokenizer.ggml.merges", GgufValueType::String).texts;
        // JSON text cannot carry these bytes: written out they would become U+FFFD, a different merge
        for (size_t i = 0; i < merges.size(); ++i)
            if (!valid_utf8(merges[i])) k.fail("tokenizer.ggml.merges[" + std::to_string(i) + "] is not valid UTF-8");
        out.tokenizer_json = tokenizer_json(k, *pre, tokens, types, merges, bos, add_bos);
    }
    std::string& c = out.tokenizer_config_json;
    c = R"({"add_bos_token": )" + std::string(add_bos ? "true" : "false");
    if (bos) c += R"(, "bos_token": )" + json_escape(tokens[size_t(*bos)]);
    if (eos) c += R"(, "eos_token": )" + json_escape(tokens[size_t(*eos)]);
    if (const GgufValue* t = k.find("tokenizer.chat_template", GgufValueType::String)) {
        if (!valid_utf8(t->text)) k.fail("tokenizer.chat_template is not valid UTF-8");
        c += R"(, "chat_template": )" + json_escape(t->text);
    }
    c += "}";
    return out;
}

Tokenizer gguf_tokenizer(const GgufTokenizerFiles& files, const std::string& path) {
    try {
        return Tokenizer::from_tokenizer_json(files.tokenizer_json, files.tokenizer_config_json, "");
    } catch (const LoadError& e) {
        throw LoadError(path, "its tokenizer (the tokenizer.* keys, read as tokenizer.json): " + e.what_is_wrong, e.hint);
    }
}

std::optional<Tokenizer> gguf_file_tokenizer(const std::string& path) {
    const std::optional<GgufTokenizerFiles> files = gguf_tokenizer_files(GgufFile(path));
    if (!files) return std::nullopt;
    return gguf_tokenizer(*files, path);
}

}  // namespace kvscope
