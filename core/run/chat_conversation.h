#pragma once
// A chat conversation as a KV cache holds it: the model's chat template, its tokenizer, and the messages
// rendered so far. It says which token ids each new user message appends to the cache; the Session
// (append_turn) runs them. `kvscope chat` and the window both drive a chat through this class.
//
// What each turn appends. The cache holds the conversation as the model read and wrote it: the rendering
// up to the generation prompt, then the reply's tokens as sampled (ending with the end-of-turn token when
// the model stopped there). The next turn's text is the template's rendering of [assistant reply, user
// message] after the history, with the generation prompt, the reply's own bytes and the end-of-turn token
// already in the cache taken off. The reply is rendered from a placeholder, not from its decoded text:
// templates trim or re-render replies (Qwen3 drops earlier <think> blocks), and the cache keeps what was
// generated either way; only the bytes around the reply come from the template.
//
//   open(model)              the model folder's template (tokenizer_config.json); throws UsageError /
//                            LoadError in one line when the folder has no tokenizer or no template kvscope
//                            renders, or no single end-of-turn token
//   add_system(text)         a system message before the first user message
//   tokens_for(msg, ended)   the ids `msg` (a user message) appends; `ended` = the stop token the last reply
//                            ended with (it is in the cache), nullopt when it ran out of tokens. Pure
//   add(msg)                 record `msg` as sent (after tokens_for and a successful append_turn)
//   truncate(n)              keep the first n user turns (the session stepped back across a turn or reset)
//   n_turns()                user messages added so far
//   stop_tokens()            the end of turn, then the tokenizer's end of text when it differs
//   end_of_turn()            the template's end-of-turn token id
//   chat_template()          the template
//
// The user messages of `kvscope chat --turns`: one per line, or with `jsonl` one {"role": "user",
// "content": "..."} per line ("system" only as the first message). Blank lines are skipped. A file is
// parsed whole before the first turn runs, so a bad line 2 is refused before turn 1 prints anything;
// stdin, which a person types, is parsed line by line.
//   ChatTurnParser(name, jsonl)  name = the file or "stdin", for the errors
//   parser.line(text)            the message on the next line (no '\n'), nullopt for a blank line; throws
//                                UsageError "NAME line N: ..."
//   parse_chat_turns(t, n, j)    every message of a whole file's text, all checked
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "forward/model.h"
#include "text/chat_template.h"

namespace kvscope {

class ChatTurnParser {
public:
    ChatTurnParser(std::string name, bool jsonl) : name_(std::move(name)), jsonl_(jsonl) {}
    std::optional<ChatMessage> line(std::string text);

private:
    std::string name_;
    bool jsonl_;
    int64_t line_no_ = 0;
    int64_t n_read_ = 0;  // messages returned so far
};

std::vector<ChatMessage> parse_chat_turns(std::string_view text, const std::string& name, bool jsonl);

class ChatConversation {
public:
    static ChatConversation open(std::shared_ptr<const Model> model);

    void add_system(std::string text);
    std::vector<TokenId> tokens_for(const ChatMessage& message, std::optional<TokenId> ended_with) const;
    void add(const ChatMessage& message);
    void truncate(int64_t n_user_turns);
    int64_t n_turns() const { return n_turns_; }
    const std::vector<TokenId>& stop_tokens() const { return stop_tokens_; }
    TokenId end_of_turn() const { return stop_tokens_[0]; }
    const ChatTemplate& chat_template() const { return template_; }

private:
    ChatConversation(std::shared_ptr<const Model> model, ChatTemplate t) : model_(std::move(model)), template_(std::move(t)) {}
    std::shared_ptr<const Model> model_;   // owns the tokenizer
    ChatTemplate template_;
    std::vector<ChatMessage> history_;     // rendered so far; replies stand in as kReply
    std::vector<size_t> turn_starts_;      // (n_turns) history_.size() before each user turn was added
    int64_t n_turns_ = 0;
    std::vector<TokenId> stop_tokens_;
};

}  // namespace kvscope
