#pragma once
// A GGUF model file as the parts a model folder gives, so everything after loading is the same code:
// the ModelConfig config.json would give (built from the `{arch}.*` keys and parsed by the folder's own
// parser), and a Checkpoint holding each tensor under its Hugging Face name and layout.
//
//   open_gguf_model(path)       throws LoadError naming the file and the key, tensor or type at fault
//   summarize_types(tensors)    the file's types at a glance: per type the tensors and weights it holds, most
//                               weights first, and the bits per weight of the whole file (block scales included)
//
// What llama.cpp's converter changed is undone here, one named function per change: tensor names
// (blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight, blk.N.attn_qkv.weight -> h.N.attn.c_attn.weight,
// ...); dimensions stored innermost first; for the "llama" architecture the rows of Q and K permuted so
// that each head's rotary pairs sit side by side (unpermute_rows; Qwen2, Qwen3 and Gemma 3 files keep
// Hugging Face's halves); Gemma's norm weights stored as 1 + weight (undo_norm_shift); GPT-2's Conv1D
// matrices c_attn, c_proj, c_fc stored transposed (transpose), and output.weight written as a copy of the
// embedding (tied again when the bytes match); the vocabulary size taken from token_embd; no output.weight
// means tied embeddings. F32 / F16 / BF16 tensors are used in place from the mapping unless one of those
// changes applies; quantized matrices stay in the file's blocks (kernels/quant_blocks.h), but for GPT-2's
// transposed ones; other quantized tensors are dequantized to float32 once — --dtype bf16 rounds them all.
// Architectures: llama (Llama, SmolLM2, TinyLlama, Mistral without a window), qwen2, qwen3, gemma3 (its
// window, pattern, local rope base and query scale: llama.cpp's defaults unless the keys
// attention.sliding_window_pattern, rope.freq_base_swa, attention.scale say otherwise), gpt2. Linear rope
// scaling (rope.scaling.type + factor) is read, and for llama Llama 3's scaling as the converter writes it:
// rope_freqs.weight, one divisor per frequency (RopeScaling::Frequencies). Anything else (another
// architecture, other rope scaling, rope_freqs beside rope.scaling keys, a tensor kvscope does not know or
// cannot read) is refused by name.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gguf_quants.h"
#include "model/gguf_tokenizer.h"

namespace kvscope {

// One tensor as the file stores it, for `inspect` and the Model panel.
struct GgufTensorSummary {
    std::string name;             // llama.cpp's name: blk.0.attn_v.weight
    std::string hf_name;          // what kvscope calls it: model.layers.0.self_attn.v_proj.weight; "" for
                                  // rope_freqs.weight, read into config.rope rather than used as a weight
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> shape;   // outer to inner
};

struct GgufModel {
    std::string architecture;     // general.architecture
    ModelConfig config;
    std::shared_ptr<const Checkpoint> checkpoint;
    std::vector<GgufTensorSummary> tensors;  // file order
    std::optional<GgufTokenizerFiles> tokenizer;  // nullopt: the file carries no tokenizer
};

GgufModel open_gguf_model(const std::string& path);

struct GgufTypeShare {
    GgmlType type = GgmlType::F32;
    int64_t tensors = 0, weights = 0;
};

struct GgufTypeSummary {
    std::vector<GgufTypeShare> types;     // most weights first
    int64_t weights = 0;                  // every tensor's elements
    double bits_per_weight = 0;           // the tensors' bytes in the file x 8 / weights
};

GgufTypeSummary summarize_types(const std::vector<GgufTensorSummary>& tensors);

}  // namespace kvscope
