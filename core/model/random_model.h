#pragma once
// Model folders with seeded random weights, for benchmarks at real shapes without a download
// (e.g. GPT-2 124M: V=50257, P=1024, C=768, L=12, H=12).
//
//   gpt2_small_config()                     GPT-2 124M's config
//   bench_shape_config(name)                a named real model's config: "gpt2" (GPT-2 124M),
//                                           "smollm2-135m", "qwen2.5-0.5b"; nullopt for other names
//   write_random_model(dir, config, seed)   config.json + model.safetensors (F32), N(0, 0.02) matrices,
//                                           norms near 1, Hugging Face tensor names and layouts of the
//                                           config's family; same bytes for the same seed
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

namespace kvscope {

ModelConfig gpt2_small_config();
std::optional<ModelConfig> bench_shape_config(const std::string& name);
const std::vector<std::string>& bench_shape_names();  // the names bench_shape_config knows, in order
void write_random_model(const std::string& dir, const ModelConfig& config, uint64_t seed);

}  // namespace kvscope
