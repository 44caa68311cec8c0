#pragma once
// Decode and small batches on matrices of blocks: one row of x, or a few, against a group of up to 4
// weight rows. Private to core/kernels (matmul_nk.cpp).
//
//   block_rows(y, x, w, bias, K, n0, n_count)   y[n0 + c] = Σ_k x[k] · w[n0 + c][k] + bias[n0 + c], c < n_count
//   block_tile(y, x, T, w, bias, K, N, n0, n_count)   the same for T rows of x (T, K) into y (T, N), each
//                                               weight dequantized once for all T; false (nothing done)
//                                               where this build has no register kernel for the format
//
// Each sum is the float32 kernels' (matmul.h): 16 lane chains over k ≡ lane (mod 16), fma in k order, then
// lane_tree_sum and the bias, on weights dequantized exactly as dequantize_reference does (quant_blocks.h),
// so the bits are those of the dequantized float32 matrix. AVX-512 builds dequantize Q8_0, Q5_0, Q4_K and
// Q6_K in registers, 16 weights at a time; other formats, and AVX2 builds, 256 weights at a time into L1.
#include <cstdint>

#include "kernels/quant_blocks.h"

namespace kvscope {

void block_rows(float* y, const float* x, BlockMatrix w, const float* bias, int64_t K, int64_t n0, int64_t n_count);
bool block_tile(float* y, const float* x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                int64_t n_count);

}  // namespace kvscope
