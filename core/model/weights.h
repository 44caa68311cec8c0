#pragma once
// The name maps: which safetensors tensor is which weight, checked against the config.
// GPT-2's Conv1D weights keep their file layout (in, out): y = x·W + b needs no transpose.
// Llama-family nn.Linear weights keep theirs too, (out, in): y = x·Wᵀ + b reads whole rows
// (matmul_nk), so no transposed copy of the model is made. Shapes below are GPT-2 | Llama.
//
// Storage: with WeightFormat::F32 the matrices are float32 — F32 tensors copied as they are, F16/BF16
// widened once (exactly). With WeightFormat::BF16 the matrices (token embedding and lm_head, attention
// and MLP projections) are bfloat16 — BF16 tensors copied, others rounded to nearest even once — which
// halves the bytes a decode step streams; biases, norms and positions stay float32 and are used in place
// from the memory-mapped file. Kernels widen bfloat16 exactly and compute in float32.
// Placement: WeightPlacement::HugePages (the default) puts every matrix in 2 MiB pages (huge_pages.h), where
// decode reads it faster; the price is one copy at load (Qwen2.5-0.5B fp32, 2 GB: ~0.9 s on the Zen 4 VM).
// A GGUF file's quantized matrices are copied as they are (their blocks), and the mapping's pages released,
// so the process holds each matrix once; those of Q4_0, Q8_0, Q4_K and Q6_K are then packed in panels where the
// build has them (quant_blocks.h: BlockOrder), as many bytes in another order. WeightPlacement::Mapped uses matrices that need no conversion in
// place from the mapping, as before.
//
//   load_weights(config, checkpoint, format, placement)   map names (GPT-2's optionally "transformer."-prefixed),
//                                check every shape; throws LoadError naming tensor, shapes and a hint.
//                                Tensors the model does not use (buffers such as h.N.attn.bias or
//                                rotary_emb.inv_freq) are ignored, for every family.
//   load_weights(config, path, format)   the same for one .safetensors file
//   Weights::tensors             what was found, for `inspect`: name, dtype, shape
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/huge_pages.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace kvscope {

// Q = H*D, KV = K*D (Llama: query and K/V widths; GPT-2: both C).
struct LayerWeights {
    const float* ln_1_weight = nullptr;      // (C) ln_1 | input_layernorm
    const float* ln_1_bias = nullptr;        // (C) | null (RMSNorm)
    WeightRef attn_weight;      // (C, 3C) q|k|v along the output dim | unused
    const float* attn_bias = nullptr;        // (3C) or null when !qkv_bias
    WeightRef q_weight, k_weight, v_weight;  // unused | q_proj (Q, C), k_proj and v_proj (KV, C)
    const float* q_bias = nullptr;           // unused | (Q) when attention_bias
    const float* k_bias = nullptr;           // unused | (KV) when attention_bias
    const float* v_bias = nullptr;           // unused | (KV) when attention_bias
    const float* q_norm_weight = nullptr;    // unused | (D) when qk_norm (Qwen3)
    const float* k_norm_weight = nullptr;    // unused | (D) when qk_norm
    WeightRef attn_proj_weight; // (C, C) c_proj | (C, Q) o_proj
    const float* attn_proj_bias = nullptr;   // (C) | (C) when attention_bias
    const float* attn_out_norm_weight = nullptr;  // unused | (C) Gemma 3's post_attention_layernorm, on the
                                             // attention output before the residual add (sandwich_norm)
    const float* ln_2_weight = nullptr;      // (C) ln_2 | post_attention_layernorm (Gemma 3: pre_feedforward_layernorm)
    const float* ln_2_bias = nullptr;        // (C) | null
    WeightRef gate_weight;      // unused | (F, C) gate_proj
    const float* gate_bias = nullptr;        // unused | (F) when mlp_bias
    WeightRef fc_weight;        // (C, F) c_fc | (F, C) up_proj
    const float* fc_bias = nullptr;          // (F) | (F) when mlp_bias
    WeightRef fc_proj_weight;   // (F, C) c_proj | (C, F) down_proj
    const float* fc_proj_bias = nullptr;     // (C) | (C) when mlp_bias
    const float* mlp_out_norm_weight = nullptr;  // unused | (C) Gemma 3's post_feedforward_layernorm
    // Encoder-decoder models' decoder layers: cross-attention to the encoder output (null otherwise).
    const float* ln_cross_weight = nullptr;  // (C)
    const float* ln_cross_bias = nullptr;    // (C)
    WeightRef cross_q_weight;   // (C, C) queries from the decoder stream
    const float* cross_q_bias = nullptr;     // (C) or null when !qkv_bias
    WeightRef cross_kv_weight;  // (C, 2C) k|v from the encoder output
    const float* cross_kv_bias = nullptr;    // (2C) or null when !qkv_bias
    WeightRef cross_proj_weight;// (C, C)
    const float* cross_proj_bias = nullptr;  // (C)
};

struct TensorInfo {
    std::string name;
    Dtype dtype;
    std::vector<int64_t> shape;
};

struct Weights {
    WeightRef token_embedding;                  // wte (V, C)
    const float* position_embedding = nullptr;  // wpe (n_ctx, C), or the sinusoidal table; null for rotary models
    std::vector<LayerWeights> layers;           // L (decoder layers of an encoder-decoder model)
    std::vector<LayerWeights> encoder_layers;   // E, encoder-decoder models only ("encoder.h.{i}.")
    const float* encoder_ln_f_weight = nullptr; // (C) "encoder.ln_f", when final_layer_norm
    const float* encoder_ln_f_bias = nullptr;   // (C)
    const float* ln_f_weight = nullptr;         // (C) or null when !final_layer_norm; Llama: model.norm
    const float* ln_f_bias = nullptr;           // (C)
    WeightRef lm_head_weight;                   // (V, C); the same storage as token_embedding when tied
    const float* lm_head_bias = nullptr;        // (V) or null

    std::vector<TensorInfo> tensors;            // every tensor used, in file order
    int64_t n_parameters = 0;                   // elements of the tensors used
    int64_t file_bytes = 0;                     // all weight files together
    int64_t converted_bytes = 0;                // conversions made at load (dtype, misaligned data); plain
                                                // copies into 2 MiB pages are matrices->used()
    int64_t matrix_bytes = 0;                   // bytes of the matrices as stored for computing
    int64_t matrix_elements = 0;                // their weights (blocks: 4.5-8.5 bits a weight)

    std::shared_ptr<const Checkpoint> checkpoint;  // keeps the mappings alive
    std::vector<std::vector<float>> owned;      // converted vectors (biases, norms) and the sinusoidal table
    bool bf16 = false;                          // matrices stored as bfloat16
    std::array<int64_t, kBlockFormats> block_matrices{};    // per BlockFormat: matrices kept as a GGUF file's blocks,
                                                // copied as they are or in the mapping (how they are computed: matmul.h)
    int64_t panel_matrices = 0;                 // of those, packed in panels at load (quant_blocks.h: BlockOrder)
    int64_t blocks_total() const;               // all of them
    std::string blocks_text() const;            // "7 Q4_K, 2 Q6_K", or "" 
    std::string panels_text() const;            // "96 of them in panels of 16 rows (Q4_K)", or ""
    std::shared_ptr<HugePageArena> matrices;    // the matrices copied or converted at load
    bool mapped = false;                        // WeightPlacement::Mapped: matrices that need no conversion
                                                // (a GGUF file's blocks too) point into the file's mapping
};

enum class WeightFormat { F32, BF16 };
const char* to_string(WeightFormat f);  // "f32" | "bf16"

enum class WeightPlacement { HugePages, Mapped };

Weights load_weights(const ModelConfig& config, std::shared_ptr<const Checkpoint> checkpoint,
                     WeightFormat format = WeightFormat::F32, WeightPlacement placement = WeightPlacement::HugePages);
Weights load_weights(const ModelConfig& config, const std::string& safetensors_path,
                     WeightFormat format = WeightFormat::F32, WeightPlacement placement = WeightPlacement::HugePages);

// The token embedding row of `id` as float32 (exact for every storage). (C)
void embedding_row(const Weights& w, int64_t C, int64_t id, float* out);

// PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(t / 10000^(2i/C)); (n_ctx, C)
std::vector<float> sinusoidal_positions(int64_t n_ctx, int64_t C);

}  // namespace kvscope
