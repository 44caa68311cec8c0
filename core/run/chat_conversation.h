#pragma once
// A chat conversation as a KV cache holds it: the model's chat template, its tokenizer, and the messages
// rendered so far. It says which token ids each new user message appends to the cache — and, when the
// template re-renders earlier turns, how much of the cache stays; the Session (append_turn, with keep when it rolls back)
// runs them. `kvscope chat` and the window both drive a chat through this class.
//
// What each turn appends. The cache holds the conversation as the model read and wrote it: the rendering
// up to the generation prompt, then the reply's tokens as sampled (ending with a stop token when the model
// stopped there). The next turn renders the whole conversation, the replies as their decoded text (what
// transformers' chat loops pass back), with the generation prompt:
//   1. the rendering starts with the text the cache holds (the previous rendering with its generation
//      prompt, the reply's text, the stop token it ended with): only the rest is encoded and appended
//      (an append; every earlier row reused)
//   2. otherwise (the template re-rendered an earlier turn: Qwen3 drops a reply's <think> block once a
//      user message follows; Llama 3 trims a reply; a reply ended at a stop token the template does not
//      write there) the whole rendering is encoded and the cache keeps the longest common token prefix
//      of it and the conversation's tokens; the rest is prefilled (a rollback; ChatTurn::keep says where)
// The reply's tokens are never re-encoded: the cache keeps them as sampled, as the model wrote them (a
// fresh encoding of their text may cut it differently). Bytes that are not valid UTF-8 (sampling may stop
// inside a character) reach the template as U+FFFD, one per bad byte, as str content must be.
//
// The tokens that end a reply (stop_tokens), from the model folder, in this order, each once:
//   1. the template's end of turn: the probe conversation [user "kvscope-probe-user", assistant
//      "kvscope-probe-reply"] rendered without the generation prompt; the first token after the reply's
//      text when it is a special token (encoded only with special tokens allowed: <|eot_id|>, <|im_end|>,
//      <end_of_turn>); none when the template cannot render the probe or writes plain text there
//   2. generation_config.json's eos_token_id (an int or a list of ints), the ids the tokenizer has
//   3. tokenizer_config.json's eos_token (Tokenizer::end_of_text())
// None found: open() refuses in one line (a reply could never end). end_of_turn() is the first.
//
//   open(model)              the model folder's template (chat_template.h load); throws UsageError /
//                            LoadError in one line when the folder has no tokenizer, no template the
//                            engine renders, or no stop token
//   add_system(text)         a system message before the first user message
//   next_turn(msg, conv, reply)   what `msg` (a user message) does to the cache: ChatTurn below. conv = the
//                            session's tokens (prompt then generated), reply = the last reply's tokens
//                            (its generated part; empty for the first turn). Pure
//   add(msg, reply)          record `msg` as sent and the reply before it (after next_turn and a successful
//                            append_turn, keep)
//   truncate(n)              keep the first n user turns (the session stepped back across a turn or reset)
//   n_turns()                user messages added so far
//   reply(k)                 the text of user turn k's reply as rendered (k < n_turns() - 1)
//   stop_tokens()            the list above
//   end_of_turn()            stop_tokens()[0]
//   chat_template()          the template; chat_template_mut() to set its date
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

struct ChatTurn {
    std::vector<TokenId> ids;       // to prefill after the kept positions
    int64_t keep = 0;               // positions of the conversation that stay in the cache
    bool rolled_back = false;       // keep < the conversation's length: the template re-rendered earlier turns
};

class ChatConversation {
public:
    static ChatConversation open(std::shared_ptr<const Model> model);

    void add_system(std::string text);
    ChatTurn next_turn(const ChatMessage& message, const std::vector<TokenId>& conversation,
                       const std::vector<TokenId>& reply) const;
    void add(const ChatMessage& message, const std::vector<TokenId>& reply);
    void truncate(int64_t n_user_turns);
    int64_t n_turns() const { return n_turns_; }
    const std::string& reply(int64_t k) const { return history_[turn_starts_[size_t(k) + 1]].content; }
    const std::vector<TokenId>& stop_tokens() const { return stop_tokens_; }
    TokenId end_of_turn() const { return stop_tokens_[0]; }
    const ChatTemplate& chat_template() const { return template_; }
    ChatTemplate& chat_template_mut() { return template_; }

private:
    ChatConversation(std::shared_ptr<const Model> model, ChatTemplate t) : model_(std::move(model)), template_(std::move(t)) {}
    std::shared_ptr<const Model> model_;   // owns the tokenizer
    ChatTemplate template_;
    std::string reply_text(const std::vector<TokenId>& reply) const;  // without a final stop token, valid UTF-8
    std::vector<ChatMessage> history_;     // rendered so far, the replies as their decoded text
    std::vector<size_t> turn_starts_;      // (n_turns) history_.size() before each user turn was added
    int64_t n_turns_ = 0;
    std::vector<TokenId> stop_tokens_;
};

}  // namespace kvscope
