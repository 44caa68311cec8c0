#include "model/gguf_tokenizer.h"

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

}  // namespace

std::optional<GgufTokenizerFiles> gguf_tokenizer_files(const GgufFile& file) {
    const Keys k(file);
    const GgufValue* model = k.find("tokenizer.ggml.model", GgufValueType::String);
    if (!model || model->text == "none" || model->text == "no_vocab") return std::nullopt;
    if (model->text != "gpt2")
        k.fail("tokenizer.ggml.model is \"" + model->text + "\", a tokenizer kvscope does not read from GGUF yet",
               model->text == "llama" ? "kvscope reads byte-level BPE (\"gpt2\") GGUF vocabularies, not SentencePiece ones"
                                      : "kvscope reads byte-level BPE (\"gpt2\") GGUF vocabularies");
    const GgufValue* pre_name = k.find("tokenizer.ggml.pre", GgufValueType::String);
    const std::optional<PreTokenizer> pre = pre_tokenizer_named(pre_name ? pre_name->text : "");
    if (!pre)
        k.fail(pre_name ? "tokenizer.ggml.pre is \"" + pre_name->text + "\", a pre-tokenizer kvscope does not know"
                        : "tokenizer.ggml.pre is missing (llama.cpp then guesses; kvscope does not)",
               "kvscope knows llama-bpe, qwen2, smollm and gpt-2");

    const std::vector<std::string>& tokens = k.array("tokenizer.ggml.tokens", GgufValueType::String).texts;
    if (tokens.empty()) k.fail("tokenizer.ggml.tokens is empty");
    std::vector<int64_t> types;
    if (file.find("tokenizer.ggml.token_type")) {
        const GgufValue& t = k.array("tokenizer.ggml.token_type", GgufValueType::I32);
        if (t.integers.size() != tokens.size())
            k.fail("tokenizer.ggml.token_type has " + std::to_string(t.integers.size()) + " entries for " +
                   std::to_string(tokens.size()) + " tokens");
        types = t.integers;
    }
    const std::vector<std::string>& merges = k.array("tokenizer.ggml.merges", GgufValueType::String).texts;
    const int64_t n = int64_t(tokens.size());
    const std::optional<int64_t> bos = k.token_id("tokenizer.ggml.bos_token_id", n);
    const std::optional<int64_t> eos = k.token_id("tokenizer.ggml.eos_token_id", n);
    const bool add_bos = k.flag("tokenizer.ggml.add_bos_token", pre->add_bos);
    if (add_bos && !bos) k.fail("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing");
    if (k.flag("tokenizer.ggml.add_eos_token", false))
        k.fail("tokenizer.ggml.add_eos_token is true", "kvscope's tokenizers never append an end-of-text token");

    GgufTokenizerFiles out;
    out.tokenizer_json = tokenizer_json(k, *pre, tokens, types, merges, bos, add_bos);
    std::string& c = out.tokenizer_config_json;
    c = R"({"add_bos_token": )" + std::string(add_bos ? "true" : "false");
    if (bos) c += R"(, "bos_token": )" + json_escape(tokens[size_t(*bos)]);
    if (eos) c += R"(, "eos_token": )" + json_escape(tokens[size_t(*eos)]);
    if (const GgufValue* t = k.find("tokenizer.chat_template", GgufValueType::String))
        c += R"(, "chat_template": )" + json_escape(t->text);
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
