#pragma once
// The GPT-2 name map: which safetensors tensor is which weight, checked against the config.
// F32 tensors are used in place from the memory-mapped file; F16/BF16 are converted to float32 once.
// Conv1D weights keep their file layout (in, out): y = x·W + b needs no transpose.
//
//   load_weights(config, path)   open model.safetensors, map names (optionally "transformer."-prefixed),
//                                check every shape; throws LoadError naming tensor, shapes and a hint
//   Weights::tensors             what was found, for `inspect`: name, dtype, shape
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "safetensors.h"

namespace kvscope {

struct LayerWeights {
    const float* ln_1_weight = nullptr;      // (C)
    const float* ln_1_bias = nullptr;        // (C)
    const float* attn_weight = nullptr;      // (C, 3C) q|k|v along the output dim
    const float* attn_bias = nullptr;        // (3C) or null when !qkv_bias
    const float* attn_proj_weight = nullptr; // (C, C)
    const float* attn_proj_bias = nullptr;   // (C)
    const float* ln_2_weight = nullptr;      // (C)
    const float* ln_2_bias = nullptr;        // (C)
    const float* fc_weight = nullptr;        // (C, F)
    const float* fc_bias = nullptr;          // (F)
    const float* fc_proj_weight = nullptr;   // (F, C)
    const float* fc_proj_bias = nullptr;     // (C)
};

struct TensorInfo {
    std::string name;
    Dtype dtype;
    std::vector<int64_t> shape;
};

struct Weights {
    const float* token_embedding = nullptr;     // wte (V, C)
    const float* position_embedding = nullptr;  // wpe (n_ctx, C), or the sinusoidal table
    std::vector<LayerWeights> layers;           // L
    const float* ln_f_weight = nullptr;         // (C) or null when !final_layer_norm
    const float* ln_f_bias = nullptr;           // (C)
    const float* lm_head_weight = nullptr;      // (V, C); == token_embedding when tied
    const float* lm_head_bias = nullptr;        // (V) or null

    std::vector<TensorInfo> tensors;            // every tensor used, in file order
    int64_t n_parameters = 0;                   // elements of the tensors used
    int64_t file_bytes = 0;
    int64_t converted_bytes = 0;                // float32 copies made (F16/BF16 or misaligned F32)

    std::shared_ptr<SafetensorsFile> file;      // keeps the mapping alive
    std::vector<std::vector<float>> owned;      // converted tensors and the sinusoidal table
};

Weights load_weights(const ModelConfig& config, const std::string& safetensors_path);

// PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(t / 10000^(2i/C)); (n_ctx, C)
std::vector<float> sinusoidal_positions(int64_t n_ctx, int64_t C);

}  // namespace kvscope
