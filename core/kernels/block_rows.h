#pragma once
// Decode on matrices of blocks (matmul_nk_impl's T == 1 case): one row of x against a group of up to 4
// weight rows. Private to core/kernels (matmul_nk.cpp).
//
//   block_rows(y, x, w, bias, K, n0, n_count)   y[n0 + c] = Σ_k x[k] · w[n0 + c][k] + bias[n0 + c], c < n_count
//
// Each sum is the float32 kernels' (matmul.h): 16 lane chains over k ≡ lane (mod 16), fma in k order, then
// lane_tree_sum and the bias, on weights dequantized exactly as dequantize_reference does (quant_blocks.h),
// so the bits are those of the dequantized float32 matrix. AVX-512 builds dequantize Q8_0, Q5_0, Q4_K and
// Q6_K in registers, 16 weights at a time; other formats, and AVX2 builds, 256 weights at a time into L1.
#include <cstdint>

#include "kernels/quant_blocks.h"

namespace kvscope {

void block_rows(float* y, const float* x, BlockMatrix w, const float* bias, int64_t K, int64_t n0, int64_t n_count);

}  // namespace kvscope
