#pragma once
// A GGUF file's tokenizer (the `tokenizer.*` keys llama.cpp's converter writes) as the two files a
// Hugging Face folder would carry, tokenizer.json and tokenizer_config.json, so the one tokenizer.json
// reader (text/tokenizer.h) tokenizes both and nothing downstream knows where the vocabulary came from.
//
//   gguf_tokenizer_files(file)    nullopt when the file has no tokenizer.ggml.model (or "none"); throws
//                                 LoadError naming the file and the key at fault
//   gguf_tokenizer(files, path)   the Tokenizer of those files; what the tokenizer.json reader refuses is
//                                 said about the GGUF file `path` and its tokenizer keys
//   gguf_file_tokenizer(path)     both for a file on disk, without reading any tensor; nullopt: no tokenizer
//
// What the keys become (llama.cpp's src/llama-vocab.cpp reads them the same way):
//   tokenizer.ggml.model "gpt2"   a byte-level BPE model: tokens -> vocab (id = index), merges as written.
//                        "llama"  a SentencePiece BPE model as Hugging Face's converter writes its tokenizer.json
//                                 (Llama 2, Mistral, Gemma): every token in the vocab, merges made from the
//                                 tokenizer.ggml.scores (each split of a piece into two pieces, ranked by the
//                                 piece's score), byte_fallback on the <0xNN> (type 6) tokens, spaces as "▁",
//                                 one "▁" in front when tokenizer.ggml.add_space_prefix (default true; Gemma
//                                 writes false). A piece no two others make (a unigram vocabulary) is refused.
//                                 Undone from llama.cpp's converter: user-defined tokens get their "▁" back
//                                 (it writes spaces) and SentencePiece's score 0 (it writes -1000).
//                                 Other models are refused by name.
//   tokenizer.ggml.token_type     3 (control) -> an added token, special; 4 (user defined) -> an added
//                                 token, not special (matched in any text); 1, 2, 5, 6 -> the vocab
//                                 (SentencePiece: 2 (unknown) is also special, the unk_token)
//   tokenizer.ggml.pre            SentencePiece: "default" or absent. Byte-level BPE: the pre-tokenizer: llama-bpe / llama3 / llama-v3 -> Split(Llama 3's regex)
//                                 + ByteLevel, ignore_merges (whole pieces found in the vocab are kept);
//                                 qwen2 -> NFC, then Split(Qwen2's regex) + ByteLevel (as Qwen's tokenizer.json;
//                                 llama.cpp skips the NFC); smollm ->
//                                 Digits(individual) + ByteLevel(GPT-2's regex); gpt-2 -> ByteLevel.
//                                 Any other name (or none) is refused: its rules differ.
//   tokenizer.ggml.add_bos_token  "<bos> $A" when true (default: true for SentencePiece and the Llama 3
//                                 pre-tokenizer, as llama.cpp), "$A" otherwise; add_eos_token true is refused
//   tokenizer.ggml.bos/eos_token_id   tokenizer_config.json's bos_token / eos_token
//   tokenizer.chat_template       tokenizer_config.json's chat_template
#include <optional>
#include <string>

#include "model/gguf.h"
#include "text/tokenizer.h"

namespace kvscope {

struct GgufTokenizerFiles {
    std::string tokenizer_json;
    std::string tokenizer_config_json;
};

std::optional<GgufTokenizerFiles> gguf_tokenizer_files(const GgufFile& file);
Tokenizer gguf_tokenizer(const GgufTokenizerFiles& files, const std::string& path);
std::optional<Tokenizer> gguf_file_tokenizer(const std::string& path);

}  // namespace kvscope
