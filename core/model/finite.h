#pragma once
// Finite checks: a NaN or an infinity must never become a token. Weights are scanned once at load
// (weights.cpp), each step's residual stream and logits after the forward pass (model.cpp). The scans
// test exponent bits only (all ones = NaN or ±inf), so they vectorise and never trap.
//
//   first_non_finite(data, dtype, n)   index of the first NaN/±inf among n F32, F16 or BF16 values
//                                      (any alignment), or -1 when all are finite; a block dtype: n
//                                      weights in whole blocks, non-finite with their block's scales
//   all_finite(x, n)                   no NaN or ±inf among n floats
#include <cstddef>
#include <cstdint>

#include "model/safetensors.h"

namespace kvscope {

int64_t first_non_finite(const std::byte* data, Dtype dtype, int64_t n);
bool all_finite(const float* x, int64_t n);

}  // namespace kvscope
