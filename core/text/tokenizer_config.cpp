#include "text/tokenizer_config.h"

#include "base/errors.h"
#include "io/json.h"

namespace kvscope {
namespace {

constexpr const char* k_special_keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

std::string a_kind(const Json& v) {
    return (v.is_array() || v.is_object() ? "an " : "a ") + std::string(v.kind_name());
}

// A special token's text, or nullopt for null; anything else is what transformers raises TypeError for.
std::optional<std::string> special_token(const Json& v, const std::string& key, const std::string& origin) {
    if (v.is_null()) return std::nullopt;
    if (v.is_string()) return v.as_string();
    const Json* content = v.is_object() ? v.find("content") : nullptr;
    if (content && content->is_string()) return content->as_string();
    throw LoadError(origin, key + " is " + (v.is_object() ? std::string("an object without a string \"content\"")
                                                             : a_kind(v)) +
                                ", expected a string or an AddedToken object {\"content\": \"...\"}",
                    "Hugging Face's tokenizer refuses it too: a special token is a str or AddedToken");
}

}  // namespace

TokenizerConfig parse_tokenizer_config(std::string_view text, const std::string& origin) {
    Json config;
    try {
        config = Json::parse(text);
    } catch (const JsonError& e) {
        throw LoadError(origin, std::string("not valid JSON: ") + e.what() + " (at byte " + std::to_string(e.offset) + ")");
    }
    if (!config.is_object()) throw LoadError(origin, std::string("is a JSON ") + config.kind_name() + ", expected an object");

    TokenizerConfig out;
    for (const char* key : k_special_keys) {
        const Json* v = config.find(key);
        if (!v) continue;
        std::optional<std::string> token = special_token(*v, key, origin);
        if (std::string_view(key) == "bos_token") out.bos_token = std::move(token);
        if (std::string_view(key) == "eos_token") out.eos_token = std::move(token);
    }
    if (const Json* extra = config.find("additional_special_tokens"); extra && !extra->is_null()) {
        if (!extra->is_array())
            throw LoadError(origin, "additional_special_tokens is " + a_kind(*extra) + ", expected a list",
                            "Hugging Face's tokenizer refuses it too");
        for (size_t i = 0; i < extra->as_array().size(); ++i)
            special_token(extra->as_array()[i], "additional_special_tokens[" + std::to_string(i) + "]", origin);
    }

    const Json* tpl = config.find("chat_template");
    if (!tpl || tpl->is_null()) return out;
    if (tpl->is_string()) {
        out.chat_template = tpl->as_string();
        return out;
    }
    if (!tpl->is_array())
        throw LoadError(origin, "chat_template is " + a_kind(*tpl) +
                                    ", expected a string or a list of {\"name\": ..., \"template\": ...}");
    const Json::Array& list = tpl->as_array();
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string at = "chat_template[" + std::to_string(i) + "]";
        if (!list[i].is_object())
            throw LoadError(origin, at + " is " + a_kind(list[i]) + ", expected {\"name\": ..., \"template\": ...}");
        const Json* name = list[i].find("name");
        const Json* text_of = list[i].find("template");
        if (!name || !name->is_string()) throw LoadError(origin, at + " has no string \"name\"");
        if (!text_of || !text_of->is_string())
            throw LoadError(origin, at + " (" + json_escape(name->as_string()) + ") has no string \"template\"");
        bool seen = false;
        for (const std::string& n : out.chat_template_names) seen |= n == name->as_string();
        if (!seen) out.chat_template_names.push_back(name->as_string());
        if (name->as_string() == "default") out.chat_template = text_of->as_string();  // the last one, as in a dict
    }
    return out;
}

}  // namespace kvscope
