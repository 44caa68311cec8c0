// Tokenizer::from_tokenizer_json: Hugging Face tokenizer.json (+ tokenizer_config.json) onto
// Tokenizer::Impl. Only the pipelines of the families kvscope runs are accepted; anything else is
// refused by name, so a file is either tokenized exactly as Hugging Face does or not at all.
//
//   normalizer      null | NFC | Replace(" " -> "▁") | Sequence of Prepend("▁"), Replace(" " -> "▁"), NFC
//   pre_tokenizer   null | ByteLevel(use_regex: GPT-2's pattern) | Metaspace("▁", always/never, split false)
//                   | Sequence[Digits(individual_digits), ByteLevel(use_regex)] (SmolLM2)
//                   | Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)] with a regex
//                     pretokenizer.h knows | Split(" ", MergedWithPrevious) after spaces became "▁" (no-op)
//   model           BPE: vocab, merges ("a b" or ["a", "b"]), byte_fallback, ignore_merges, unk_token
//   added_tokens    matched as whole strings in the raw text (lstrip/rstrip/single_word refused; normalized only
//                   without a normalizer, where it changes nothing: GPT-2's own file marks <|endoftext|> so)
//   post_processor  null | ByteLevel | TemplateProcessing "<bos> $A" or "$A" | Sequence of those
//   decoder         ByteLevel | Metaspace | Sequence of Replace("▁" -> " "), ByteFallback, Fuse, Strip
// tokenizer_config.json: eos_token names end_of_text().
#include <algorithm>
#include <filesystem>

#include "base/errors.h"
#include "base/utf8.h"
#include "io/json.h"
#include "text/tokenizer_config.h"
#include "text/tokenizer_impl.h"

namespace kvscope {
namespace {

constexpr std::string_view k_marker = "\xe2\x96\x81";  // U+2581, SentencePiece's space

struct Reader {
    std::string path;

    [[noreturn]] void fail(const std::string& what, const std::string& hint = "") const {
        throw LoadError(path, what, hint);
    }
    const Json& member(const Json& obj, std::string_view key, const std::string& where) const {
        const Json* v = obj.is_object() ? obj.find(key) : nullptr;
        if (!v) fail(where + " has no \"" + std::string(key) + "\"");
        return *v;
    }
    const std::string& string_of(const Json& obj, std::string_view key, const std::string& where) const {
        const Json& v = member(obj, key, where);
        if (!v.is_string()) fail(where + "." + std::string(key) + " is a " + v.kind_name() + ", expected a string");
        return v.as_string();
    }
    bool flag(const Json& obj, std::string_view key, bool fallback) const {
        const Json* v = obj.find(key);
        if (!v || v->is_null()) return fallback;
        if (!v->is_bool()) fail(std::string(key) + " is a " + v->kind_name() + ", expected true or false");
        return v->as_bool();
    }
    std::string type_of(const Json& step, const std::string& where) const {
        if (!step.is_object()) fail(where + " is a " + step.kind_name() + ", expected an object");
        return string_of(step, "type", where);
    }
    [[noreturn]] void unsupported(const std::string& where, const std::string& what) const {
        fail(where + " " + what + " is not supported",
             "kvscope reads the byte-level BPE of GPT-2 / Llama 3 / Qwen and the SentencePiece BPE of Llama 2 / Gemma");
    }
};

// doc's member `key`, or a null Json when it has none
const Json& part_of(const Json& doc, std::string_view key) {
    static const Json null;
    const Json* v = doc.find(key);
    return v ? *v : null;
}

// A Replace(" " -> "▁") step, as Llama 2's and Gemma's normalizers have it.
bool is_space_to_marker(const Json& step) {
    const Json* pattern = step.find("pattern");
    const Json* content = step.find("content");
    const Json* from = pattern && pattern->is_object() ? pattern->find("String") : nullptr;
    return from && from->is_string() && from->as_string() == " " && content && content->is_string() &&
           content->as_string() == k_marker;
}

struct Pipeline {
    bool byte_level = false;     // a ByteLevel pre-tokenizer
    bool sentencepiece = false;  // spaces become "▁"
};

void read_normalizer(const Reader& r, const Json& n, Tokenizer::Impl& impl, Pipeline& p) {
    if (n.is_null()) return;
    const std::string type = r.type_of(n, "normalizer");
    if (type == "Sequence") {
        const Json& steps = r.member(n, "normalizers", "normalizer");
        if (!steps.is_array()) r.fail("normalizer.normalizers is not an array");
        for (const Json& step : steps.as_array()) read_normalizer(r, step, impl, p);
    } else if (type == "NFC") {
        if (p.sentencepiece) r.unsupported("normalizer", "NFC after Replace");
        impl.nfc = true;
    } else if (type == "Prepend") {
        if (r.string_of(n, "prepend", "normalizer Prepend") != k_marker || p.sentencepiece)
            r.unsupported("normalizer", "Prepend of anything but one \"▁\" before the spaces are replaced");
        impl.prepend_marker = true;
    } else if (type == "Replace") {
        if (!is_space_to_marker(n)) r.unsupported("normalizer", "Replace other than \" \" -> \"▁\"");
        p.sentencepiece = true;
    } else {
        r.unsupported("normalizer", "\"" + type + "\"");
    }
}

void read_byte_level(const Reader& r, const Json& step, bool regex_expected) {
    if (r.flag(step, "add_prefix_space", false))
        r.unsupported("pre_tokenizer", "ByteLevel with add_prefix_space");
    if (r.flag(step, "use_regex", true) != regex_expected)
        r.unsupported("pre_tokenizer", regex_expected ? "ByteLevel without use_regex and without a Split"
                                                      : "ByteLevel with use_regex after a Split");
}

void read_pre_tokenizer(const Reader& r, const Json& pt, Tokenizer::Impl& impl, Pipeline& p) {
    if (pt.is_null()) return;
    const std::string type = r.type_of(pt, "pre_tokenizer");
    if (type == "ByteLevel") {
        read_byte_level(r, pt, true);
        impl.pattern = SplitPattern::Gpt2;
        p.byte_level = true;
    } else if (type == "Metaspace") {
        const Json* rep = pt.find("replacement");
        const Json* scheme = pt.find("prepend_scheme");
        if (!rep || !rep->is_string() || rep->as_string() != k_marker)
            r.unsupported("pre_tokenizer", "Metaspace with a replacement other than \"▁\"");
        if (scheme && !(scheme->is_string() && (scheme->as_string() == "always" || scheme->as_string() == "never")))
            r.unsupported("pre_tokenizer", "Metaspace with a prepend_scheme other than \"always\" or \"never\"");
        // Hugging Face's default is split true (a piece per "▁word"), which kvscope does not cut.
        if (r.flag(pt, "split", true)) r.unsupported("pre_tokenizer", "Metaspace with split (not \"split\": false)");
        impl.prepend_marker = scheme ? scheme->as_string() == "always" : r.flag(pt, "add_prefix_space", true);
        impl.prepend_unless_marked = true;
        p.sentencepiece = true;
    } else if (type == "Split") {
        const Json& pattern = r.member(pt, "pattern", "pre_tokenizer Split");
        const Json* text = pattern.is_object() ? pattern.find("String") : nullptr;
        const std::string behavior = r.string_of(pt, "behavior", "pre_tokenizer Split");
        // After Replace(" " -> "▁") the text has no spaces left to split at (Gemma 3).
        if (text && text->is_string() && text->as_string() == " " && p.sentencepiece && !r.flag(pt, "invert", false))
            return;
        r.unsupported("pre_tokenizer", "Split on its own (behavior " + behavior + ")");
    } else if (type == "Sequence") {
        const Json& steps = r.member(pt, "pretokenizers", "pre_tokenizer");
        if (!steps.is_array()) r.fail("pre_tokenizer.pretokenizers is not an array");
        const Json::Array& a = steps.as_array();
        if (a.size() == 1) return read_pre_tokenizer(r, a[0], impl, p);
        if (a.size() == 2 && r.type_of(a[0], "pre_tokenizer") == "Digits" && r.type_of(a[1], "pre_tokenizer") == "ByteLevel") {
            if (!r.flag(a[0], "individual_digits", false))
                r.unsupported("pre_tokenizer", "Digits without individual_digits");
            read_byte_level(r, a[1], true);
            impl.pattern = SplitPattern::Gpt2DigitsApart;
            p.byte_level = true;
            return;
        }
        if (a.size() != 2 || r.type_of(a[0], "pre_tokenizer") != "Split" || r.type_of(a[1], "pre_tokenizer") != "ByteLevel")
            r.unsupported("pre_tokenizer", "Sequence other than [Split, ByteLevel]");
        const Json& split = a[0];
        const Json& pattern = r.member(split, "pattern", "pre_tokenizer Split");
        const Json* regex = pattern.is_object() ? pattern.find("Regex") : nullptr;
        if (!regex || !regex->is_string()) r.unsupported("pre_tokenizer", "Split by a plain string");
        std::optional<SplitPattern> known = split_pattern_named(regex->as_string());
        if (!known) r.unsupported("pre_tokenizer", "Split regex " + json_escape(regex->as_string().substr(0, 80)));
        if (r.string_of(split, "behavior", "pre_tokenizer Split") != "Isolated" || r.flag(split, "invert", false))
            r.unsupported("pre_tokenizer", "Split other than behavior Isolated, invert false");
        read_byte_level(r, a[1], false);
        impl.pattern = *known;
        p.byte_level = true;
    } else {
        r.unsupported("pre_tokenizer", "\"" + type + "\"");
    }
}

void read_post_processor(const Reader& r, const Json& pp, Tokenizer::Impl& impl,
                         const std::unordered_map<std::string, TokenId>& ids) {
    if (pp.is_null()) return;
    const std::string type = r.type_of(pp, "post_processor");
    if (type == "ByteLevel") return;  // only trims offsets
    if (type == "Sequence") {
        const Json& steps = r.member(pp, "processors", "post_processor");
        if (!steps.is_array()) r.fail("post_processor.processors is not an array");
        for (const Json& step : steps.as_array()) read_post_processor(r, step, impl, ids);
        return;
    }
    if (type != "TemplateProcessing") r.unsupported("post_processor", "\"" + type + "\"");
    const Json& single = r.member(pp, "single", "post_processor");
    if (!single.is_array()) r.fail("post_processor.single is not an array");
    bool text_seen = false;
    for (const Json& piece : single.as_array()) {
        if (piece.is_object() && piece.find("Sequence")) {
            text_seen = true;
            continue;
        }
        const Json* special = piece.is_object() ? piece.find("SpecialToken") : nullptr;
        if (!special || text_seen || impl.bos)
            r.unsupported("post_processor", "template other than \"$A\" or \"<bos> $A\"");
        const std::string& name = r.string_of(*special, "id", "post_processor SpecialToken");
        auto it = ids.find(name);
        if (it == ids.end()) r.fail("post_processor adds " + json_escape(name) + ", which is not a token");
        impl.bos = it->second;
    }
}

void read_decoder(const Reader& r, const Json& d, Tokenizer::Impl& impl) {
    if (d.is_null()) return;
    const std::string type = r.type_of(d, "decoder");
    if (type == "Sequence") {
        const Json& steps = r.member(d, "decoders", "decoder");
        if (!steps.is_array()) r.fail("decoder.decoders is not an array");
        for (const Json& step : steps.as_array()) read_decoder(r, step, impl);
    } else if (type == "Strip") {
        const Json* start = d.find("start");
        const Json* stop = d.find("stop");
        const Json* content = d.find("content");
        if (!start || !start->is_integer() || start->as_integer() != 1 || !stop || !stop->is_integer() ||
            stop->as_integer() != 0 || !content || !content->is_string() || content->as_string() != " ")
            r.unsupported("decoder", "Strip other than one leading space");
        impl.decode_strip_space = true;
    } else if (type == "Metaspace") {
        impl.decode_strip_space = true;
    } else if (type != "ByteLevel" && type != "Replace" && type != "ByteFallback" && type != "Fuse") {
        r.unsupported("decoder", "\"" + type + "\"");
    }
}

// "<0x0A>" -> 0x0a
std::optional<unsigned char> byte_token(std::string_view s) {
    if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return std::nullopt;
    int v = 0;
    for (char c : s.substr(3, 2)) {
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return std::nullopt;
        v = v * 16 + d;
    }
    return static_cast<unsigned char>(v);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, from.size(), from) == 0) {
            out += to;
            i += from.size();
        } else {
            out += s[i++];
        }
    }
    return out;
}

// pass 1: the model kind first (a WordPiece or Unigram file is refused as that, not for its pipeline),
// then the pipeline around the model; returns "model"
const Json& read_pipeline(const Reader& r, const Json& doc, Tokenizer::Impl& t) {
    const Json& model = r.member(doc, "model", "tokenizer.json");
    const std::string model_type = model.is_object() && model.find("type") ? r.string_of(model, "type", "model") : "BPE";
    if (model_type != "BPE") r.unsupported("model type", "\"" + model_type + "\"");
    Pipeline p;
    read_normalizer(r, part_of(doc, "normalizer"), t, p);
    read_pre_tokenizer(r, part_of(doc, "pre_tokenizer"), t, p);
    if (p.byte_level == p.sentencepiece)
        r.unsupported("the pipeline", p.byte_level ? "of ByteLevel with \"▁\" spaces"
                                                   : "without a ByteLevel pre-tokenizer or \"▁\" spaces");
    if (p.byte_level && t.prepend_marker) r.unsupported("normalizer", "Prepend with ByteLevel");
    t.model = p.byte_level ? Tokenizer::Impl::Model::ByteLevel : Tokenizer::Impl::Model::SentencePiece;
    return model;
}

// The model's options kvscope refuses (it reads none of them), then ignore_merges.
void read_model_options(const Reader& r, const Json& model, Tokenizer::Impl& t) {
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const Json* v = model.find(key);
        if (v && !v->is_null() && !(v->is_string() && v->as_string().empty()))
            r.unsupported("model", std::string(key) + " " + json_escape(v->is_string() ? v->as_string() : ""));
    }
    if (const Json* dropout = model.find("dropout"); dropout && !dropout->is_null())
        r.unsupported("model", "dropout");
    t.ignore_merges = r.flag(model, "ignore_merges", false);
}

// Every token as written, by id: model.vocab and added_tokens (which also fill t.specials and t.added).
struct TokenIds {
    std::unordered_map<std::string, TokenId> content_id;  // every token as written, for names in the files
    std::vector<std::optional<std::string>> id_text;       // (n_vocab) as written in the file
};

TokenIds claim_ids(const Reader& r, const Json& vocab, const Json* added_json, bool identity_normalizer,
                   Tokenizer::Impl& t) {
    TokenIds out;
    auto claim = [&](const std::string& text, int64_t id, const char* where) {
        if (id < 0 || id >= INT32_MAX) r.fail(std::string(where) + " token " + json_escape(text) + " has id " + std::to_string(id));
        if (size_t(id) >= out.id_text.size()) out.id_text.resize(size_t(id) + 1);
        if (out.id_text[id] && *out.id_text[id] != text)
            r.fail("id " + std::to_string(id) + " is both " + json_escape(*out.id_text[id]) + " and " + json_escape(text));
        out.id_text[id] = text;
        out.content_id.emplace(text, TokenId(id));
    };
    for (const auto& [text, value] : vocab.as_object()) {
        if (!value.is_integer()) r.fail("model.vocab token " + json_escape(text) + " has an id of kind " + value.kind_name());
        claim(text, value.as_integer(), "model.vocab");
    }
    if (added_json) {
        for (const Json& a : added_json->as_array()) {
            const std::string& content = r.string_of(a, "content", "added token");
            const Json& id = r.member(a, "id", "added token " + json_escape(content));
            if (!id.is_integer()) r.fail("added token " + json_escape(content) + " has an id of kind " + id.kind_name());
            for (const char* key : {"lstrip", "rstrip", "single_word", "normalized"})
                if (r.flag(a, key, false) && !(identity_normalizer && std::string_view(key) == "normalized"))
                    r.unsupported("added token " + json_escape(content), std::string("with ") + key);
            claim(content, id.as_integer(), "added_tokens");
            Tokenizer::Impl::AddedToken token{content, TokenId(id.as_integer())};
            (r.flag(a, "special", false) ? t.specials : t.added).push_back(std::move(token));
        }
    }
    return out;
}

// id_bytes, symbol_id and byte_id from the tokens as written; every id 0..n-1 has a token, and a
// byte-level (or byte_fallback) vocabulary has all 256 bytes.
void fill_token_bytes(const Reader& r, const Json& vocab, const std::vector<std::optional<std::string>>& id_text,
                      bool byte_fallback, Tokenizer::Impl& t) {
    using Model = Tokenizer::Impl::Model;
    const size_t n_vocab = id_text.size();
    t.id_bytes.resize(n_vocab);
    t.byte_id.fill(-1);
    std::vector<bool> from_model(n_vocab, false);
    for (const auto& [text, value] : vocab.as_object()) from_model[value.as_integer()] = true;
    for (size_t id = 0; id < n_vocab; ++id) {
        if (!id_text[id]) r.fail("no token has id " + std::to_string(id), "ids must be exactly 0..n-1");
        const std::string& text = *id_text[id];
        if (!from_model[id]) {
            t.id_bytes[id] = text;  // an added token stands for its content
            continue;
        }
        if (t.model == Model::ByteLevel) {
            std::optional<std::string> bytes = symbols_to_bytes(text);
            if (!bytes || bytes->empty())
                r.fail("model.vocab token " + json_escape(text) + " is not spelled with GPT-2's byte map",
                       "a ByteLevel pre-tokenizer needs a byte-level vocabulary");
            t.symbol_id.emplace(*bytes, TokenId(id));
            if (bytes->size() == 1) t.byte_id[static_cast<unsigned char>((*bytes)[0])] = TokenId(id);
            t.id_bytes[id] = std::move(*bytes);
        } else {
            t.symbol_id.emplace(text, TokenId(id));
            std::optional<unsigned char> b = byte_token(text);
            if (b && byte_fallback) t.byte_id[*b] = TokenId(id);
            t.id_bytes[id] = b ? std::string(1, char(*b)) : replace_all(text, k_marker, " ");
        }
    }
    if (t.model == Model::ByteLevel || byte_fallback) {
        for (int b = 0; b < 256; ++b)
            if (t.byte_id[b] < 0)
                r.fail("model.vocab has no token for the byte " + display_bytes(std::string(1, char(b))),
                       t.model == Model::ByteLevel ? "a byte-level vocabulary needs all 256 single-byte tokens"
                                                   : "byte_fallback needs all 256 <0xNN> tokens");
    }
}

// pass 2: model.vocab and added_tokens -> id_bytes, symbol_id, byte_id, unk; returns content_id
std::unordered_map<std::string, TokenId> read_vocab(const Reader& r, const Json& doc, const Json& model,
                                                    Tokenizer::Impl& t) {
    read_model_options(r, model, t);
    const bool byte_fallback = r.flag(model, "byte_fallback", false);
    const Json& vocab = r.member(model, "vocab", "model");
    if (!vocab.is_object()) r.fail("model.vocab is a " + std::string(vocab.kind_name()) + ", expected an object");
    const Json* added_json = doc.find("added_tokens");
    if (added_json && !added_json->is_array()) r.fail("added_tokens is not an array");

    // matching the normalized text is matching the raw text when no normalizer changes it
    TokenIds ids = claim_ids(r, vocab, added_json, part_of(doc, "normalizer").is_null(), t);
    fill_token_bytes(r, vocab, ids.id_text, byte_fallback, t);
    const bool sentencepiece = t.model == Tokenizer::Impl::Model::SentencePiece;
    const Json* unk = model.find("unk_token");
    if (sentencepiece && unk && unk->is_string()) {
        auto it = t.symbol_id.find(unk->as_string());
        if (it == t.symbol_id.end()) r.fail("model.unk_token " + json_escape(unk->as_string()) + " is not in model.vocab");
        t.unk = it->second;
    }
    if (sentencepiece && !byte_fallback && !t.unk)
        r.unsupported("model", "without byte_fallback or unk_token (some text could not be encoded)");
    return std::move(ids.content_id);
}

// pass 3: model.merges -> merges
void read_merges(const Reader& r, const Json& model, Tokenizer::Impl& t) {
    const Json& merges = r.member(model, "merges", "model");
    if (!merges.is_array()) r.fail("model.merges is not an array");
    int32_t rank = 0;
    for (const Json& m : merges.as_array()) {
        const std::string where = "model.merges[" + std::to_string(rank) + "]";
        std::string sides[2];
        if (m.is_string()) {
            const std::string& s = m.as_string();
            size_t space = s.find(' ');
            if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
                r.fail(where + " " + json_escape(s) + " is not two tokens separated by one space");
            sides[0] = s.substr(0, space), sides[1] = s.substr(space + 1);
        } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() && m.as_array()[1].is_string()) {
            sides[0] = m.as_array()[0].as_string(), sides[1] = m.as_array()[1].as_string();
        } else {
            r.fail(where + " is neither \"left right\" nor [\"left\", \"right\"]");
        }
        TokenId ids[2];
        std::string joined;
        for (int k = 0; k < 2; ++k) {
            std::string key = sides[k];
            if (t.model == Tokenizer::Impl::Model::ByteLevel) {
                std::optional<std::string> bytes = symbols_to_bytes(key);
                if (!bytes) r.fail(where + " " + json_escape(key) + " is not spelled with GPT-2's byte map");
                key = std::move(*bytes);
            }
            auto it = t.symbol_id.find(key);
            if (it == t.symbol_id.end()) r.fail(where + " " + json_escape(sides[k]) + " is not in model.vocab");
            ids[k] = it->second;
            joined += key;
        }
        auto merged = t.symbol_id.find(joined);
        if (merged == t.symbol_id.end()) r.fail(where + " the merge result of " + json_escape(sides[0] + sides[1]) + " is not in model.vocab");
        t.merges.emplace(Tokenizer::Impl::pair_key(ids[0], ids[1]), Tokenizer::Impl::Merge{rank, merged->second});
        if (rank == INT32_MAX) r.fail("too many merges");
        ++rank;
    }
}

// pass 4b: which token ends a text: tokenizer_config.json's eos_token, else <|endoftext|> if there is one
void read_end_of_text(std::string_view config_json, const std::string& origin,
                      const std::unordered_map<std::string, TokenId>& content_id, Tokenizer::Impl& t) {
    namespace fs = std::filesystem;
    if (!config_json.empty()) {
        const Reader c{origin.empty() ? "tokenizer_config.json" : (fs::path(origin) / "tokenizer_config.json").string()};
        const TokenizerConfig config = parse_tokenizer_config(config_json, c.path);
        if (const std::optional<std::string>& eos = config.eos_token) {
            auto it = content_id.find(*eos);
            if (it == content_id.end()) c.fail("eos_token " + json_escape(*eos) + " is not a token of tokenizer.json");
            t.end_of_text = it->second;
        }
    }
    if (!t.end_of_text) {
        auto it = content_id.find("<|endoftext|>");
        if (it != content_id.end()) t.end_of_text = it->second;
    }
}

}  // namespace

Tokenizer Tokenizer::from_tokenizer_json(std::string_view tokenizer_json, std::string_view config_json,
                                         const std::string& origin) {
    namespace fs = std::filesystem;
    const Reader r{origin.empty() ? "tokenizer.json" : (fs::path(origin) / "tokenizer.json").string()};
    Json doc;
    try {
        doc = Json::parse(tokenizer_json);
    } catch (const JsonError& e) {
        r.fail(std::string("not valid JSON: ") + e.what() + " (at byte " + std::to_string(e.offset) + ")");
    }
    if (!doc.is_object()) r.fail(std::string("expected an object, found ") + doc.kind_name());
    auto impl = std::make_unique<Impl>();
    Impl& t = *impl;

    const Json& model = read_pipeline(r, doc, t);                                     // pass 1
    const std::unordered_map<std::string, TokenId> content_id = read_vocab(r, doc, model, t);  // pass 2
    read_merges(r, model, t);                                                         // pass 3
    // pass 4: what encode() adds, how decode() ends, which token ends a text
    read_post_processor(r, part_of(doc, "post_processor"), t, content_id);
    read_decoder(r, part_of(doc, "decoder"), t);
    read_end_of_text(config_json, origin, content_id, t);
    t.index_added_tokens();
    return Tokenizer(std::move(impl));
}

}  // namespace kvscope
