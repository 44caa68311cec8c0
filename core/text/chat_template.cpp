// Chat templates: the four known texts are recognised by equality (for family(), name() and the chat
// loop's end-of-turn text) and rendered, like any template, by the Jinja engine (text/jinja/).
#include "text/chat_template.h"

#include <algorithm>
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

// Gemma 3's template raises unless roles alternate user/assistant after an optional first system message;
// kvscope says which message breaks the rule before the engine renders.
void check_gemma3_roles(const std::vector<ChatMessage>& messages, const std::string& origin) {
    const size_t offset = messages[0].role == "system" ? 1 : 0;
    for (size_t i = offset; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if ((m.role == "user") != ((i - offset) % 2 == 0))
            throw UsageError(origin + ": Gemma 3's chat template refuses " + at(i) + " (role " + json_escape(m.role) +
                             "): Conversation roles must alternate user/assistant/user/assistant/... after an "
                             "optional first system message");
    }
}

std::string read_config(const std::string& path) {
    return read_file_bounded(path, k_tokenizer_file, "chat templates are read from the model folder's tokenizer_config.json");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

std::string_view chat_template_text(ChatFamily family) { return known(family).text; }

const char* chat_templates_rendered() {
    static const std::string list = [] {
        std::string s;
        for (const Known& k : k_known) s += (s.empty() ? "" : ", ") + std::string(k.name);
        return s;
    }();
    return list.c_str();
}

const char* ChatTemplate::name() const { return known(family_).name; }

ChatTemplate ChatTemplate::load(const std::string& dir) {
    const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
    return from_config_json(read_config(path), dir);
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
    if (!config.chat_template) {
        std::error_code ec;
        const bool jinja_file = !dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / "chat_template.jinja", ec);
        throw UsageError(origin + ": no chat_template, so this model has no chat format to render" +
                         (jinja_file ? std::string(" (chat_template.jinja beside it is not read)") : std::string()));
    }
    const std::string& text = *config.chat_template;

    const Known* match = nullptr;
    for (const Known& k : k_known)
        if (k.text == text) match = &k;
    if (!match) {
        // name the known text it shares the longest beginning with, when that is long enough to mean an edit
        size_t best = 0;
        const Known* closest = nullptr;
        for (const Known& k : k_known) {
            size_t common = std::mismatch(text.begin(), text.begin() + std::min(text.size(), k.text.size()), k.text.begin()).first -
                            text.begin();
            if (common > best) best = common, closest = &k;
        }
        std::string near;
        if (closest && best >= 64)
            near = "; its first " + std::to_string(best) + " bytes equal " + closest->name + "'s, then it differs";
        const std::string size = std::to_string(text.size()) + (text.size() == 1 ? " byte" : " bytes");
        const std::string which = names.empty() ? "chat_template (" + size + ")"
                                                : "chat_template \"default\" (" + size + "; the list names " + names + ")";
        throw UsageError(origin + ": " + which + " is not one kvscope renders; it renders exactly the templates of " +
                         chat_templates_rendered() + ", recognised by their full text" + near);
    }

    // bos_token: a string, an AddedToken object {"content": ...}, or null
    const bool bos_set = config.bos_token.has_value();
    std::string bos = config.bos_token.value_or("");
    if (match->family == ChatFamily::Llama3 && !bos_set)
        // Jinja2 raises on bos_token + content with bos_token undefined
        throw UsageError(origin + ": the Llama 3 chat template writes bos_token first, but bos_token is not set");
    std::string eos = config.eos_token.value_or("");
    auto engine = std::make_shared<const jinja::JinjaTemplate>(jinja::JinjaTemplate::parse(text, origin));
    return ChatTemplate(match->family, std::move(bos), std::move(eos), std::move(engine), origin);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
    if (messages.empty()) throw UsageError(origin_ + ": no messages to render with the " + name() + " chat template");
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
    if (family_ == ChatFamily::Gemma3) check_gemma3_roles(messages, origin_);
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
    vars.set("bos_token", jinja::Value::str(bos_token_));
    vars.set("eos_token", jinja::Value::str(eos_token_));
    return engine_->render(vars);
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
    std::string why;
    switch (family_) {
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
