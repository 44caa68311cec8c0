// parse_tokenizer_config: the types transformers accepts, and a one-line LoadError naming the key for
// the ones it raises on (SpecialTokensMixin: "Special token eos_token has to be either str or
// AddedToken"; a chat_template list entry without "name" or "template" is a KeyError there). The
// tokenizer and the chat template read the file through it, so both refuse the same files.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "base/errors.h"
#include "io/json.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

using namespace kvscope;
using Catch::Contains;

namespace {

std::string load_error(const std::string& json) {
    try {
        parse_tokenizer_config(json, "m/tokenizer_config.json");
    } catch (const LoadError& e) {
        std::string what = e.what();
        CHECK(what.find('\n') == std::string::npos);
        CHECK(e.path == "m/tokenizer_config.json");
        return what;
    }
    FAIL("no LoadError for " << json);
    return "";
}

// A SentencePiece-style tokenizer.json: <unk>, </s> (an added special token), the 256 byte tokens.
std::string tokenizer_json() {
    std::string vocab = R"({"<unk>": 0, "</s>": 1)";
    char hex[8];
    for (int b = 0; b < 256; ++b) {
        std::snprintf(hex, sizeof hex, "<0x%02X>", b);
        vocab += ", \"" + std::string(hex) + "\": " + std::to_string(2 + b);
    }
    return R"({"normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
        "split": false}, "decoder": {"type": "Metaspace"}, "added_tokens": [{"id": 1, "content": "</s>", "special": true}],
        "model": {"type": "BPE", "vocab": )" + vocab + R"(}, "merges": [], "byte_fallback": true, "unk_token": "<unk>"}})";
}

}  // namespace

TEST_CASE("the forms Hugging Face accepts are read", "[tokenizer_config]") {
    TokenizerConfig c = parse_tokenizer_config(
        R"({"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>", "special": true},
            "pad_token": null, "additional_special_tokens": ["<x>", {"content": "<y>"}], "chat_template": "T"})",
        "m");
    CHECK(c.bos_token == "<s>");
    CHECK(c.eos_token == "</s>");
    CHECK(c.chat_template == "T");
    CHECK(c.chat_template_names.empty());
    c = parse_tokenizer_config(R"({"eos_token": null, "model_max_length": 1e30})", "m");
    CHECK(!c.eos_token);
    CHECK(!c.chat_template);
    // the list form: {name: template}, a later entry of a name replacing an earlier one
    c = parse_tokenizer_config(R"({"chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"},
                                                     {"name": "default", "template": "C"}]})",
                               "m");
    CHECK(c.chat_template == "C");
    CHECK(c.chat_template_names == std::vector<std::string>{"default", "tool_use"});
    c = parse_tokenizer_config(R"({"chat_template": [{"name": "rag", "template": "R"}]})", "m");
    CHECK(!c.chat_template);
    CHECK(c.chat_template_names == std::vector<std::string>{"rag"});
}

TEST_CASE("wrong types are refused in one line naming the key", "[tokenizer_config]") {
    CHECK_THAT(load_error(R"({"eos_token": 42})"), Contains("eos_token is a number, expected a string or an AddedToken"));
    CHECK_THAT(load_error(R"({"bos_token": true})"), Contains("bos_token is a bool"));
    CHECK_THAT(load_error(R"({"pad_token": ["<pad>"]})"), Contains("pad_token is an array"));
    CHECK_THAT(load_error(R"({"unk_token": {"special": true}})"), Contains("unk_token is an object without a string \"content\""));
    CHECK_THAT(load_error(R"({"additional_special_tokens": "<x>"})"), Contains("additional_special_tokens is a string, expected a list"));
    CHECK_THAT(load_error(R"({"additional_special_tokens": ["<x>", 7]})"), Contains("additional_special_tokens[1] is a number"));
    CHECK_THAT(load_error(R"({"chat_template": {"default": "x"}})"), Contains("chat_template is an object, expected a string or a list"));
    CHECK_THAT(load_error(R"({"chat_template": ["x"]})"), Contains("chat_template[0] is a string"));
    CHECK_THAT(load_error(R"({"chat_template": [{"template": "x"}]})"), Contains("chat_template[0] has no string \"name\""));
    CHECK_THAT(load_error(R"({"chat_template": [{"name": "default", "template": 1}]})"),
               Contains("chat_template[0] (\"default\") has no string \"template\""));
    CHECK_THAT(load_error("[]"), Contains("is a JSON array, expected an object"));
    CHECK_THAT(load_error("{"), Contains("not valid JSON"));
}

TEST_CASE("the tokenizer and the chat template refuse a wrong-typed eos_token alike", "[tokenizer_config]") {
    // before: the tokenizer ignored `"eos_token": 42` and fell back to no end of text
    CHECK(Tokenizer::from_tokenizer_json(tokenizer_json(), R"({"eos_token": "</s>"})", "m").end_of_text() == 1);
    CHECK_THROWS_WITH(Tokenizer::from_tokenizer_json(tokenizer_json(), R"({"eos_token": 42})", "m"),
                      Contains("m/tokenizer_config.json: eos_token is a number"));
    CHECK_THROWS_AS(ChatTemplate::from_config_json(
                        R"({"eos_token": 42, "chat_template": )" + json_escape(chat_template_text(ChatFamily::Qwen25)) + "}",
                        "m"),
                    LoadError);
}
