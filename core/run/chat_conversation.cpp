#include "run/chat_conversation.h"

#include <algorithm>
#include <filesystem>

#include "base/errors.h"
#include "base/utf8.h"
#include "io/json.h"
#include "io/read_file.h"
#include "text/tokenizer_config.h"

namespace kvscope {
namespace {

const std::string k_probe_user = "kvscope-probe-user", k_probe_reply = "kvscope-probe-reply";

// Rule 1 of the header: the special token the template writes right after a reply's text, if any.
std::optional<TokenId> template_end_of_turn(const ChatTemplate& t, const Tokenizer& tok) {
    std::string text;
    try {
        text = t.render({{"user", k_probe_user}, {"assistant", k_probe_reply}}, false);
    } catch (const UsageError&) {
        return std::nullopt;  // the template refuses the probe (a required system message, ...): rules 2 and 3
    }
    const size_t at = text.find(k_probe_reply);
    if (at == std::string::npos) return std::nullopt;
    const std::string after = text.substr(at + k_probe_reply.size());
    const std::vector<TokenId> ids = encode_chat(tok, after);
    if (ids.empty()) return std::nullopt;
    const std::string& bytes = tok.token_bytes(ids[0]);
    // special: one token only when special tokens are matched, not as plain text
    if (tok.encode_continuation(bytes, false) == std::vector<TokenId>{ids[0]}) return std::nullopt;
    return ids[0];
}

// Rule 2: generation_config.json's eos_token_id, an int or a list of ints; absent file or key: none.
std::vector<TokenId> generation_config_eos(const std::string& dir, const Tokenizer& tok) {
    const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return {};
    Json j;
    try {
        j = Json::parse(read_file_bounded(path.string(), k_tokenizer_file));
    } catch (const JsonError& e) {
        throw LoadError(path.string(), std::string("not valid JSON: ") + e.what());
    }
    const Json* eos = j.is_object() ? j.find("eos_token_id") : nullptr;
    if (!eos || eos->is_null()) return {};
    std::vector<const Json*> items;
    if (eos->is_array())
        for (const Json& e : eos->as_array()) items.push_back(&e);
    else
        items.push_back(eos);
    std::vector<TokenId> out;
    for (const Json* e : items) {
        if (!e->is_integer())
            throw LoadError(path.string(), "eos_token_id is not an int or a list of ints",
                            "transformers' GenerationConfig wants token ids there");
        const int64_t id = e->as_integer();
        if (id >= 0 && id < tok.n_vocab()) out.push_back(TokenId(id));
    }
    return out;
}

// Bytes as str content: each byte that does not start a well-formed UTF-8 sequence becomes U+FFFD.
std::string valid_utf8(const std::string& bytes) {
    std::string out;
    for (size_t k = 0; k < bytes.size();) {
        char32_t c = 0;
        const size_t len = decode_utf8(bytes, k, c);
        if (len == 0) {
            append_utf8(out, 0xFFFD);
            ++k;
        } else {
            out.append(bytes, k, len);
            k += len;
        }
    }
    return out;
}

}  // namespace

ChatConversation ChatConversation::open(std::shared_ptr<const Model> model) {
    const Tokenizer* tok = model->tokenizer();
    if (!tok) throw UsageError(model->dir() + " has no tokenizer files: a chat needs them to render and encode messages");
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool gguf = !model->gguf_tensors().empty();
    if (gguf && !parse_tokenizer_config(model->gguf_tokenizer_config(), model->dir()).chat_template)
        throw UsageError(model->dir() + " has no tokenizer.chat_template, so no chat template: a chat needs an "
                         "instruction-tuned model's file");
    if (!gguf && !fs::exists(fs::path(model->dir()) / "tokenizer_config.json", ec) &&
        !fs::exists(fs::path(model->dir()) / "chat_template.jinja", ec))
        throw UsageError(model->dir() + " has no tokenizer_config.json or chat_template.jinja, so no chat template: a chat "
                         "needs an instruction-tuned model's folder");
    ChatConversation c(model, gguf ? ChatTemplate::from_config_json(model->gguf_tokenizer_config(), model->dir())
                                   : ChatTemplate::load(model->dir()));
    std::vector<TokenId> stops;
    auto add = [&](TokenId id) {
        if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
    };
    if (std::optional<TokenId> eot = template_end_of_turn(c.template_, *tok)) add(*eot);
    for (TokenId id : generation_config_eos(model->dir(), *tok)) add(id);
    if (std::optional<TokenId> eos = tok->end_of_text()) add(*eos);
    if (stops.empty())
        throw UsageError(model->dir() + ": no token ends a reply: the chat template writes no special token after a "
                         "reply, and neither generation_config.json's eos_token_id nor tokenizer_config.json's eos_token "
                         "names one the tokenizer has");
    c.stop_tokens_ = std::move(stops);
    return c;
}

void ChatConversation::add_system(std::string text) {
    if (n_turns_ > 0 || !history_.empty()) throw UsageError("a system message comes once, before the first user message");
    history_.push_back({"system", std::move(text)});
}

std::string ChatConversation::reply_text(const std::vector<TokenId>& reply) const {
    std::vector<TokenId> shown = reply;
    if (!shown.empty() && std::find(stop_tokens_.begin(), stop_tokens_.end(), shown.back()) != stop_tokens_.end()) shown.pop_back();
    return valid_utf8(model_->tokenizer()->decode(shown));
}

ChatTurn ChatConversation::next_turn(const ChatMessage& message, const std::vector<TokenId>& conversation,
                                     const std::vector<TokenId>& reply) const {
    const Tokenizer& tok = *model_->tokenizer();
    std::vector<ChatMessage> h = history_;
    if (n_turns_ == 0) {
        h.push_back(message);
        return {encode_chat(tok, template_.render(h, true)), 0, false};
    }
    const std::string r = reply_text(reply);
    h.push_back({"assistant", r});
    h.push_back(message);
    const std::string full = template_.render(h, true);
    // 1. the cache's text: the previous rendering up to its generation prompt, the reply, its stop token
    const bool stopped = !reply.empty() && std::find(stop_tokens_.begin(), stop_tokens_.end(), reply.back()) != stop_tokens_.end();
    std::string held = template_.render(history_, true) + r;
    if (stopped) held += tok.token_bytes(reply.back());
    if (full.size() > held.size() && full.compare(0, held.size(), held) == 0)
        return {encode_chat(tok, std::string_view(full).substr(held.size())), int64_t(conversation.size()), false};
    // 2. re-rendered: keep the longest common token prefix
    const std::vector<TokenId> ids = encode_chat(tok, full);
    size_t keep = 0;
    while (keep < ids.size() && keep < conversation.size() && ids[keep] == conversation[keep]) ++keep;
    if (keep == ids.size()) --keep;  // something must be prefilled to predict from
    return {std::vector<TokenId>(ids.begin() + int64_t(keep), ids.end()), int64_t(keep), keep < conversation.size()};
}

void ChatConversation::add(const ChatMessage& message, const std::vector<TokenId>& reply) {
    turn_starts_.push_back(history_.size());
    if (n_turns_ > 0) history_.push_back({"assistant", reply_text(reply)});
    history_.push_back(message);
    ++n_turns_;
}

void ChatConversation::truncate(int64_t n_user_turns) {
    if (n_user_turns < 0 || n_user_turns >= n_turns_) return;
    history_.resize(turn_starts_[size_t(n_user_turns)]);
    turn_starts_.resize(size_t(n_user_turns));
    n_turns_ = n_user_turns;
}

// ---------------------------------------------------------------------------------------------------
// Turns files

std::optional<ChatMessage> ChatTurnParser::line(std::string text) {
    ++line_no_;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) return std::nullopt;
    if (!jsonl_) {
        ++n_read_;
        return ChatMessage{"user", std::move(text)};
    }
    const std::string where = name_ + " line " + std::to_string(line_no_);
    Json j;
    try {
        j = Json::parse(text);
    } catch (const JsonError& e) {
        throw UsageError(where + ": not valid JSON: " + e.what());
    }
    const Json* role = j.is_object() ? j.find("role") : nullptr;
    const Json* content = j.is_object() ? j.find("content") : nullptr;
    if (!role || !role->is_string() || !content || !content->is_string())
        throw UsageError(where + ": expected {\"role\": \"user\", \"content\": \"...\"}");
    if (role->as_string() != "user" && !(role->as_string() == "system" && n_read_ == 0))
        throw UsageError(where + ": role \"" + role->as_string() +
                         "\": the turns are user messages (a system message only as the first line)");
    ++n_read_;
    return ChatMessage{role->as_string(), content->as_string()};
}

std::vector<ChatMessage> parse_chat_turns(std::string_view text, const std::string& name, bool jsonl) {
    ChatTurnParser parser(name, jsonl);
    std::vector<ChatMessage> out;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        if (std::optional<ChatMessage> m = parser.line(std::string(text.substr(start, end - start)))) out.push_back(std::move(*m));
        start = end + 1;
    }
    return out;
}

}  // namespace kvscope
