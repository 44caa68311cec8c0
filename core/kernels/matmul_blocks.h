#pragma once
// matmul_nk_shared on matrices of blocks, private to core/kernels: matmul_blocks.cpp chooses the kernel for each
// format and row count; matmul_nk.cpp lends it the float32 kernels that Q4_1 and Q5_1 run on.
//   matmul_nk_blocks(x, T, K, targets)          y = x · wᵀ + bias for each target, every one a matrix of blocks
//   block_prefill(x, T, K, targets)             prefill (T >= kPrefillRows; not in the portable build) on the
//                                               targets' exact float copies in matmul_nk's packed panels
//   block_batch_group(x, T, K, target, n0, count)  a small batch by one group of 4 weight rows from n0
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/matmul.h"

namespace kvscope {

constexpr size_t kMaxSharedTargets = 4;  // matrices in one fork of matmul_nk_shared
constexpr int64_t kPrefillRows = 24;     // from this many rows of x on, prefill: packed panels of 6 rows of x

void matmul_nk_blocks(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets);
void block_prefill(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets);
void block_batch_group(const float* x, int64_t T, int64_t K, const MatmulTarget& target, int64_t n0, int64_t count);

}  // namespace kvscope
