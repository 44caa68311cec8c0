#include "run/chat_conversation.h"

#include <filesystem>

#include "base/errors.h"
#include "io/json.h"

namespace kvscope {
namespace {

const std::string kReply = "kvscope-reply";  // stands in for each reply in the rendered history

// The template's end-of-turn marker, which a reply is decoded until.
const char* end_of_turn_text(ChatFamily family) {
    switch (family) {
        case ChatFamily::Llama3: return "<|eot_id|>";
        case ChatFamily::Qwen3:
        case ChatFamily::Qwen25: return "<|im_end|>";
        case ChatFamily::Gemma3: return "<end_of_turn>";
    }
    return "";
}

}  // namespace

ChatConversation ChatConversation::open(std::shared_ptr<const Model> model) {
    const Tokenizer* tok = model->tokenizer();
    if (!tok) throw UsageError(model->dir() + " has no tokenizer files: a chat needs them to render and encode messages");
    if (!std::filesystem::exists(std::filesystem::path(model->dir()) / "tokenizer_config.json"))
        throw UsageError(model->dir() + " has no tokenizer_config.json, so no chat template: a chat needs an "
                         "instruction-tuned model's folder (" + std::string(chat_templates_rendered()) + ")");
    ChatConversation c(model, ChatTemplate::load(model->dir()));
    const std::string eot = end_of_turn_text(c.template_.family());
    const std::vector<TokenId> eot_ids = encode_chat(*tok, eot);
    if (eot_ids.size() != 1)
        throw UsageError(model->dir() + ": the tokenizer has no single token for " + eot +
                         ", the chat template's end of turn, so a reply could never end there");
    c.stop_tokens_ = eot_ids;
    if (auto eos = tok->end_of_text(); eos && *eos != eot_ids[0]) c.stop_tokens_.push_back(*eos);
    return c;
}

void ChatConversation::add_system(std::string text) {
    if (n_turns_ > 0 || !history_.empty()) throw UsageError("a system message comes once, before the first user message");
    history_.push_back({"system", std::move(text)});
}

std::vector<TokenId> ChatConversation::tokens_for(const ChatMessage& message, std::optional<TokenId> ended_with) const {
    const Tokenizer& tok = *model_->tokenizer();
    if (n_turns_ == 0) {
        std::vector<ChatMessage> h = history_;
        h.push_back(message);
        return encode_chat(tok, template_.render(h, true));
    }
    // The generation prompt is in the cache already: what render(history, true) adds to render(history, false).
    const std::string asked = template_.render(history_, true), closed = template_.render(history_, false);
    const bool extends = asked.compare(0, closed.size(), closed) == 0;
    const std::string generation_prompt = extends ? asked.substr(closed.size()) : "";
    const std::string added = template_.render_turn(history_, {{"assistant", kReply}, message}, true);
    if (!extends || added.compare(0, generation_prompt.size() + kReply.size(), generation_prompt + kReply) != 0)
        throw UsageError(std::string(template_.name()) + "'s template does not render a reply right after its generation "
                         "prompt: kvscope cannot continue this conversation in the cache");
    std::string text = added.substr(generation_prompt.size() + kReply.size());
    // The end-of-turn token the reply stopped at is in the cache already.
    if (ended_with) {
        const std::string& stop = tok.token_bytes(*ended_with);
        if (text.compare(0, stop.size(), stop) == 0) text.erase(0, stop.size());
    }
    return encode_chat(tok, text);
}

void ChatConversation::add(const ChatMessage& message) {
    turn_starts_.push_back(history_.size());
    if (n_turns_ > 0) history_.push_back({"assistant", kReply});
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
