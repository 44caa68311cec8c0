#pragma once
// tokenizer_config.json as Hugging Face's tokenizer reads it, with the same type rules, so a file
// transformers refuses is refused here too instead of having a key silently ignored. The tokenizer
// (eos_token) and the chat template (bos_token, chat_template) both read it through this one parser.
//
//   parse_tokenizer_config(text, origin)  the keys below; throws LoadError (exit 1) naming the key for
//                                         invalid JSON or a value of the wrong type
//   TokenizerConfig::bos_token/eos_token  the token's text: a string or an AddedToken object's "content";
//                                         nullopt when absent or null
//   TokenizerConfig::chat_template        the template apply_chat_template uses without a name: the string,
//                                         or the list entry named "default"; nullopt when none
//   TokenizerConfig::chat_template_names  the list form's names in file order (empty for a string)
//
// Types, as transformers checks them (SpecialTokensMixin.__init__ raises TypeError "Special token
// eos_token has to be either str or AddedToken"; __init__ turns a chat_template list into
// {entry["name"]: entry["template"]}, a later entry of a name replacing an earlier one):
//   bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token
//                          string | {"content": string, ...} | null
//   additional_special_tokens   list of the above | null
//   chat_template          string | [{"name": string, "template": string}, ...] | null
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

struct TokenizerConfig {
    std::optional<std::string> bos_token, eos_token;
    std::optional<std::string> chat_template;
    std::vector<std::string> chat_template_names;
};

TokenizerConfig parse_tokenizer_config(std::string_view text, const std::string& origin);

}  // namespace kvscope
