// Chat templates: any template text, rendered by the Jinja engine (text/jinja/); the four texts the tests
// know by heart are recognised by equality for family() and name() only.
#include "text/chat_template.h"

#include <algorithm>
#include <optional>
#include <filesystem>

#include "base/errors.h"
#include "base/utf8.h"
#include "io/json.h"
#include "io/read_file.h"
#include "text/jinja/template.h"
#include "text/tokenizer_config.h"

namespace kvscope {

namespace {

#include "text/chat_template_texts.inc"

struct Known {
    ChatFamily family;
    std::string_view text;
    const char* name;
};
constexpr Known k_known[] = {
    {ChatFamily::Llama3, k_llama3_text, "Llama 3 (Meta-Llama-3-Instruct)"},
    {ChatFamily::Qwen3, k_qwen3_text, "Qwen3"},
    {ChatFamily::Qwen25, k_qwen25_text, "Qwen2.5"},
    {ChatFamily::Gemma3, k_gemma3_text, "Gemma 3"},
};

const Known& known(ChatFamily family) {
    for (const Known& k : k_known)
        if (k.family == family) return k;
    throw std::logic_error("chat_template: a ChatFamily without a text");
}

std::string at(size_t i) { return "messages[" + std::to_string(i) + "]"; }

std::string read_config(const std::string& path) {
    return read_file_bounded(path, k_tokenizer_file, "chat templates are read from the model folder's tokenizer_config.json");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

std::string_view chat_template_text(ChatFamily family) { return known(family).text; }

const char* ChatTemplate::name() const { return family_ ? known(*family_).name : "chat template"; }

void ChatTemplate::set_date(int year, int month, int day) {
    options_.year = year, options_.month = month, options_.day = day;
}

ChatTemplate ChatTemplate::load(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string path = (fs::path(dir) / "tokenizer_config.json").string();
    const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
    std::error_code ec;
    // transformers (tokenization_utils_base, from_pretrained) reads chat_template.jinja and lets it replace
    // tokenizer_config.json's key; the special tokens still come from tokenizer_config.json
    if (!fs::exists(jinja_path, ec)) return from_config_json(read_config(path), dir);
    TokenizerConfig config;  // without tokenizer_config.json the special tokens stay undefined
    if (fs::exists(path, ec)) config = parse_tokenizer_config(read_config(path), path);
    return from_text(read_file_bounded(jinja_path, k_tokenizer_file), config.bos_token, config.eos_token, jinja_path);
}

ChatTemplate ChatTemplate::from_config_json(std::string_view config_json, const std::string& dir) {
    const std::string origin = dir.empty() ? "tokenizer_config.json" : (std::filesystem::path(dir) / "tokenizer_config.json").string();
    const TokenizerConfig config = parse_tokenizer_config(config_json, origin);

    // chat_template: a string, or (as transformers saves several) a list of {name, template} of which
    // apply_chat_template uses "default" when no template name and no tools are passed
    std::string names;  // the list form's names, for the messages
    for (const std::string& n : config.chat_template_names) names += (names.empty() ? "" : ", ") + json_escape(n);
    if (!config.chat_template && !names.empty())
        throw UsageError(origin + ": chat_template is a list of named templates (" + names +
                         ") without a \"default\" template, the one Hugging Face's apply_chat_template uses when none is named");
    if (!config.chat_template)
        throw UsageError(origin + ": no chat_template (and no chat_template.jinja beside it), so this model has no chat "
                         "format to render");
    return from_text(*config.chat_template, config.bos_token, config.eos_token, origin);
}

ChatTemplate ChatTemplate::from_text(std::string_view text, std::optional<std::string> bos_token,
                                     std::optional<std::string> eos_token, const std::string& origin) {
    std::optional<ChatFamily> family;
    for (const Known& k : k_known)
        if (k.text == text) family = k.family;
    auto engine = std::make_shared<const jinja::JinjaTemplate>(jinja::JinjaTemplate::parse(text, origin));
    return ChatTemplate(family, std::move(bos_token), std::move(eos_token), std::move(engine), origin);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
    if (messages.empty()) throw UsageError(origin_ + ": no messages to render with its chat template");
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role != "system" && m.role != "user" && m.role != "assistant")
            throw UsageError(at(i) + " has role " + json_escape(m.role) +
                             ": kvscope renders system, user and assistant messages with plain text content only "
                             "(no tool results or tool calls)");
        for (size_t k = 0; k < m.content.size();) {
            char32_t c = 0;
            size_t len = decode_utf8(m.content, k, c);
            if (len == 0)
                throw UsageError(at(i) + " content is not valid UTF-8 (at byte " + std::to_string(k) + ")");
            k += len;
        }
    }
    std::vector<jinja::Value> list;
    for (const ChatMessage& m : messages) {
        jinja::Dict d;
        d.set("role", jinja::Value::str(m.role));
        d.set("content", jinja::Value::str(m.content));
        list.push_back(jinja::Value::dict(std::move(d)));
    }
    jinja::Dict vars;  // what apply_chat_template passes; tools and documents stay undefined
    vars.set("messages", jinja::Value::list(std::move(list)));
    vars.set("add_generation_prompt", jinja::Value::of(add_generation_prompt));
    // an unset special token is undefined, as apply_chat_template passes only the tokens the tokenizer has
    if (bos_token_) vars.set("bos_token", jinja::Value::str(*bos_token_));
    if (eos_token_) vars.set("eos_token", jinja::Value::str(*eos_token_));
    return engine_->render(vars, options_);
}

std::string ChatTemplate::render_turn(const std::vector<ChatMessage>& history, const std::vector<ChatMessage>& new_messages,
                                      bool add_generation_prompt) const {
    std::vector<ChatMessage> all = history;
    all.insert(all.end(), new_messages.begin(), new_messages.end());
    std::string full = render(all, add_generation_prompt);
    if (history.empty()) return full;
    const std::string prefix = render(history, false);
    if (full.compare(0, prefix.size(), prefix) == 0) return full.substr(prefix.size());

    const size_t differs = std::mismatch(prefix.begin(), prefix.end(), full.begin(), full.end()).first - prefix.begin();
    std::string why = "the template rendered the earlier turns differently";
    if (family_) switch (*family_) {
        case ChatFamily::Llama3:
            why = "every Llama 3 rendering ends with the assistant header, which only an assistant message continues";
            break;
        case ChatFamily::Qwen3:
            why = "Qwen3's template drops the <think> block of an assistant turn once a user message follows it, "
                  "and gives the final assistant turn an empty one only while it is last";
            break;
        case ChatFamily::Qwen25:
        case ChatFamily::Gemma3:
            why = std::string(name()) + "'s template rendered the earlier turns differently";
            break;
    }
    throw UsageError(origin_ + ": the conversation so far renders differently once these " + std::to_string(new_messages.size()) +
                     " message(s) follow (from byte " + std::to_string(differs) + " of " + std::to_string(prefix.size()) +
                     "): " + why + "; its cached tokens cannot be reused as they are, render the whole conversation");
}

std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::string_view rendered) {
    return tokenizer.encode_continuation(rendered, /*allow_special=*/true);
}

}  // namespace kvscope
