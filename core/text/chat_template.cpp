// Chat templates as C++ rules. Each render_* function below follows its Jinja text (quoted from
// chat_template_texts.inc) statement by statement, with Python's string semantics where the template
// calls a string method, because Hugging Face renders with Jinja2 on Python strings.
#include "text/chat_template.h"

#include <algorithm>
#include <filesystem>

#include "base/errors.h"
#include "base/utf8.h"
#include "io/json.h"
#include "io/read_file.h"
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

// ---- Python string semantics --------------------------------------------------------------------

// str.isspace(): the code points Python 3 calls whitespace (bidirectional class WS, B or S, or Zs).
bool python_isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// str.strip() with no argument, which Jinja2's trim filter calls. `s` is valid UTF-8 (checked first).
std::string_view py_strip(std::string_view s) {
    size_t begin = 0;
    while (begin < s.size()) {
        char32_t c = 0;
        size_t n = decode_utf8(s, begin, c);
        if (!python_isspace(c)) break;
        begin += n;
    }
    size_t end = s.size();
    while (end > begin) {
        size_t start = end - 1;  // back over continuation bytes to the code point's first byte
        while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
        char32_t c = 0;
        decode_utf8(s, start, c);
        if (!python_isspace(c)) break;
        end = start;
    }
    return s.substr(begin, end - begin);
}

// str.lstrip('\n') / rstrip('\n') / strip('\n')
std::string_view lstrip_nl(std::string_view s) {
    size_t i = s.find_first_not_of('\n');
    return i == std::string_view::npos ? std::string_view() : s.substr(i);
}
std::string_view rstrip_nl(std::string_view s) {
    size_t i = s.find_last_not_of('\n');
    return i == std::string_view::npos ? std::string_view() : s.substr(0, i + 1);
}
std::string_view strip_nl(std::string_view s) { return rstrip_nl(lstrip_nl(s)); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

std::string at(size_t i) { return "messages[" + std::to_string(i) + "]"; }

// ---- Llama 3 --------------------------------------------------------------------------------------
// {% for message in loop_messages %}
//   {% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}
//   {% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}
// {% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
// (`|` binds tighter than `+`: only the content is trimmed. add_generation_prompt is never read.)
std::string render_llama3(const std::vector<ChatMessage>& messages, const std::string& bos) {
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += bos;
        out += "<|start_header_id|>";
        out += messages[i].role;
        out += "<|end_header_id|>\n\n";
        out += py_strip(messages[i].content);
        out += "<|eot_id|>";
    }
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

// ---- Qwen3 ----------------------------------------------------------------------------------------
std::string render_qwen3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    const size_t n = messages.size();
    std::string out;
    // pass 1 (no tools): {%- if messages[0].role == 'system' %} '<|im_start|>system\n' + content + '<|im_end|>\n'
    if (messages[0].role == "system") out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";

    // pass 2: ns.last_query_index = the last user message that is not a wrapped tool response
    // (messages|length - 1 when there is none), found scanning messages[::-1].
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        const ChatMessage& m = messages[k];
        if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    // pass 3: every message
    for (size_t i = 0; i < n; ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user" || (m.role == "system" && i != 0)) {
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        } else if (m.role == "assistant") {
            // content / reasoning_content: with '</think>' in the content, the text after the last
            // '</think>' (lstrip '\n') and the text between the last '<think>' before the first
            // '</think>' and that '</think>' (rstrip then lstrip '\n')
            std::string_view content = m.content;
            std::string_view reasoning;
            const size_t first_close = content.find("</think>");
            if (first_close != std::string_view::npos) {
                const size_t last_close = content.rfind("</think>");
                std::string_view before = rstrip_nl(content.substr(0, first_close));
                const size_t open = before.rfind("<think>");
                reasoning = lstrip_nl(open == std::string_view::npos ? before : before.substr(open + 7));
                content = lstrip_nl(content.substr(last_close + 8));
            }
            out += "<|im_start|>assistant\n";
            if (i > last_query && (i == n - 1 || !reasoning.empty())) {
                out += "<think>\n";
                out += strip_nl(reasoning);
                out += "\n</think>\n\n";
                out += lstrip_nl(content);
            } else {
                out += content;
            }
            out += "<|im_end|>\n";
        }
        // a first system message was written in pass 1; render() let no other role through
    }
    // enable_thinking is not passed, so `enable_thinking is defined and enable_thinking is false` is false
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

// ---- Qwen2.5 --------------------------------------------------------------------------------------
// (no tools) a system message first, Qwen's default one when messages[0] is not a system message; then
// every user message, system message but the first, and assistant message without tool_calls as
// '<|im_start|>' + role + '\n' + content + '<|im_end|>\n'; nothing is trimmed.
std::string render_qwen25(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    std::string out = messages[0].role == "system"
                          ? "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n"
                          : "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "system" && i == 0) continue;
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

// ---- Gemma 3 --------------------------------------------------------------------------------------
std::string render_gemma3(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos,
                          const std::string& origin) {
    std::string out = bos;  // {{ bos_token }}
    // a first system message becomes first_user_prefix (content + '\n\n', not trimmed); loop_messages = messages[1:]
    const bool system_first = messages[0].role == "system";
    const std::string first_user_prefix = system_first ? messages[0].content + "\n\n" : std::string();
    const size_t offset = system_first ? 1 : 0;
    for (size_t i = offset; i < messages.size(); ++i) {
        const size_t index0 = i - offset;
        const ChatMessage& m = messages[i];
        // (message['role'] == 'user') != (loop.index0 % 2 == 0) -> raise_exception
        if ((m.role == "user") != (index0 % 2 == 0))
            throw UsageError(origin + ": Gemma 3's chat template refuses " + at(i) + " (role " + json_escape(m.role) +
                             "): Conversation roles must alternate user/assistant/user/assistant/... after an "
                             "optional first system message");
        out += "<start_of_turn>";
        out += m.role == "assistant" ? std::string("model") : m.role;
        out += "\n";
        if (index0 == 0) out += first_user_prefix;
        out += py_strip(m.content);
        out += "<end_of_turn>\n";
    }
    if (add_generation_prompt) out += "<start_of_turn>model\n";
    return out;
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
    return ChatTemplate(match->family, std::move(bos), origin);
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
    switch (family_) {
        case ChatFamily::Llama3: return render_llama3(messages, bos_token_);
        case ChatFamily::Qwen3: return render_qwen3(messages, add_generation_prompt);
        case ChatFamily::Qwen25: return render_qwen25(messages, add_generation_prompt);
        case ChatFamily::Gemma3: return render_gemma3(messages, add_generation_prompt, bos_token_, origin_);
    }
    throw std::logic_error("chat_template: unhandled ChatFamily");
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
