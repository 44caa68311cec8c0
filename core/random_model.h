#pragma once
// Model folders with seeded random weights, for benchmarks at real shapes without a download
// (e.g. GPT-2 124M: V=50257, P=1024, C=768, L=12, H=12).
//
//   gpt2_small_config()                     GPT-2 124M's config
//   write_random_model(dir, config, seed)   config.json + model.safetensors (F32), N(0, 0.02) matrices,
//                                           layer norms near 1; same bytes for the same seed
#include <cstdint>
#include <string>

#include "config.h"

namespace kvscope {

ModelConfig gpt2_small_config();
void write_random_model(const std::string& dir, const ModelConfig& config, uint64_t seed);

}  // namespace kvscope
