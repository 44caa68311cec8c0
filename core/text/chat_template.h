#pragma once
// Chat templates: a conversation rendered as the text a chat model was trained on, byte for byte what
// Hugging Face's apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders from the
// model's own template, by kvscope's Jinja engine (text/jinja/, tested byte for byte against Jinja2 on the
// real templates of tests/data/chat_templates/). Any template the engine parses is accepted; one it
// refuses (a construct outside its subset, a syntax error) is refused here in the engine's one line
// (ORIGIN:LINE:COLUMN: what). `kvscope chat-template` renders a template with a conversation given as JSON.
//
//   ChatTemplate::load(dir)                     the folder's template: dir/chat_template.jinja when present
//                                               (transformers reads that file in preference to the key), else
//                                               tokenizer_config.json's chat_template — a string, or of a list of
//                                               named templates "default" (as apply_chat_template); bos_token and
//                                               eos_token from tokenizer_config.json (a string or an AddedToken
//                                               {"content": ...}; undefined without the file). Throws LoadError
//                                               (no template file at all, bad JSON, a key of the wrong type:
//                                               tokenizer_config.h) or
//                                               UsageError (no template, one the engine refuses)
//   ChatTemplate::from_config_json(text, dir)   the same from tokenizer_config.json's contents alone
//   ChatTemplate::from_text(t, bos, eos, o)     a template text; bos/eos nullopt = undefined in the template
//   family() / name()                           the four texts kvscope's tests know by heart (ChatFamily, "Qwen3"),
//                                               recognised by equality; nullopt / "chat template" for any other
//   origin()                                    the file the template came from, for messages
//   bos_token() / eos_token()                   tokenizer_config.json's ("" when null or absent)
//   set_date(y, m, d)                           the date strftime_now() formats (default: the engine's fixed
//                                               2026-01-01; the chat sets today's, as transformers reads the clock)
//   render(messages, add_generation_prompt)     the rendered text; throws UsageError (see Refused below)
//   render_turn(history, new_messages, agp)     the bytes render(history + new_messages, agp) adds after
//                                               render(history, false); UsageError when that is not a prefix
//
// Free functions:
//   chat_template_text(family)                  a known template text, byte for byte (test data)
//   encode_chat(tokenizer, rendered)            rendered text -> ids, the way apply_chat_template(tokenize=True) does
//
// What a template renders is what its text says: the engine runs it with the variables
// apply_chat_template passes (messages, add_generation_prompt, bos_token, eos_token; tools, documents and
// enable_thinking left undefined). chat_template_texts.inc holds the four texts the older tests were
// written against (Meta-Llama-3-Instruct, Qwen3, Qwen2.5-Instruct, Gemma 3) and says where each comes from.
//
// Refused (UsageError, one line, naming the message): an empty message list; a role other than system,
// user, assistant (tool results, tool calls, ipython: kvscope renders plain content strings only);
// content that is not valid UTF-8; whatever the template refuses (its raise_exception(msg), e.g. Gemma's
// "roles must alternate", or Jinja2's error on an undefined bos_token it adds to a string).
//
// Encoding the result. The rendered text already holds every special token the template writes, the
// BOS included (Llama 3's <|begin_of_text|>, Gemma's <bos>), so it is encoded with special-token
// strings matched and WITHOUT the tokenizer's automatic BOS: encode_chat() is
// tokenizer.encode_continuation(rendered, /*allow_special=*/true), which is what apply_chat_template
// (tokenize=True) does (add_special_tokens=False). Tokenizer::encode() would put a second <bos> first
// for Gemma.
//
// render_turn and the KV cache. An engine may keep the cache of the conversation so far and feed only
// the new tokens when render(history) is an unchanged prefix of the next rendering. render_turn returns
// exactly the new bytes, or refuses when the template re-renders earlier turns (Qwen3 drops the <think>
// block of an assistant turn once a user message follows it; Llama 3's rendering always ends with an
// assistant header). The chat loop (run/chat_conversation.h) then rolls the cache back to the longest
// common token prefix instead. A text prefix is a token prefix for certain only when the suffix starts
// with a special token; the chat loop compares ids where it matters.
// With an empty history the suffix is the whole rendering.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/template.h"
#include "text/tokenizer.h"

namespace kvscope {

struct ChatMessage {
    std::string role;     // "system", "user" or "assistant"
    std::string content;  // UTF-8 text
};

enum class ChatFamily { Llama3, Qwen3, Qwen25, Gemma3 };

class ChatTemplate {
public:
    static ChatTemplate load(const std::string& dir);
    static ChatTemplate from_config_json(std::string_view config_json, const std::string& dir);

    static ChatTemplate from_text(std::string_view text, std::optional<std::string> bos_token,
                                  std::optional<std::string> eos_token, const std::string& origin);

    std::optional<ChatFamily> family() const { return family_; }
    const char* name() const;                     // "Llama 3 (Meta-Llama-3-Instruct)", "Qwen3", "Qwen2.5", "Gemma 3", "chat template"
    const std::string& origin() const { return origin_; }
    const std::string& bos_token() const { return bos_token_ ? *bos_token_ : k_none_; }
    const std::string& eos_token() const { return eos_token_ ? *eos_token_ : k_none_; }
    void set_date(int year, int month, int day);

    std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
    std::string render_turn(const std::vector<ChatMessage>& history, const std::vector<ChatMessage>& new_messages,
                            bool add_generation_prompt) const;

private:
    ChatTemplate(std::optional<ChatFamily> family, std::optional<std::string> bos_token, std::optional<std::string> eos_token,
                 std::shared_ptr<const jinja::JinjaTemplate> engine, std::string origin)
        : family_(family), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)),
          engine_(std::move(engine)), origin_(std::move(origin)) {}
    inline static const std::string k_none_;
    std::optional<ChatFamily> family_;
    std::optional<std::string> bos_token_;  // nullopt: undefined in the template
    std::optional<std::string> eos_token_;
    jinja::RenderOptions options_;          // strftime_now's date
    std::shared_ptr<const jinja::JinjaTemplate> engine_;  // the template text, parsed
    std::string origin_;  // the folder (or tokenizer_config.json path) named in errors
};

std::string_view chat_template_text(ChatFamily family);
std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::string_view rendered);

}  // namespace kvscope
