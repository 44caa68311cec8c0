#pragma once
// Decode and small batches on matrices of blocks: one row of x, or a few, against a group of up to 4
// weight rows. Private to core/kernels (matmul_blocks.cpp).
//
//   block_rows(y, x, w, bias, K, n0, n_count)   y[n0 + c] = Σ_k x[k] · w[n0 + c][k] + bias[n0 + c], c < n_count
//   block_tile(y, x, T, w, bias, K, N, n0, n_count)   the same for T rows of x (T, K) into y (T, N), each
//                                               weight dequantized once for all T; false (nothing done)
//                                               where this build has no register kernel for the format
//
//   integer_rows(y, xq, T, w, bias, K, N, n0, n_count)
//                                             y (T, N) rows [n0, n0 + n_count) for the T rows of x quantized
//                                             as Q8_K (xq: T x K / 256 blocks), w of a K format
//   integer_rows32(y, x8, T, w, bias, K, N, n0, n_count)
//                                             the same for Q4_0, Q5_0 and Q8_0 against x quantized per 32
//                                             (X8Rows, quant_blocks.h), a group of up to 4 rows
//   integer_panels(y, x8, T, w, bias, K, N, n0, n_count)
//                                             integer_rows32's bits for a panel of up to integer_panel_rows()
//                                             weight rows (32 with AVX-512 VNNI, else 16; 0: the portable build
//                                             has none, and returns false), packed once for all T rows of x, or
//                                             read in place where w is in BlockOrder::Panels (any T, decode too)
//   super_block_panels(y, xq, T, w, bias, K, N, n0, n_count)
//                                             integer_rows' bits for a panel of super_block_panel_rows(f) rows of
//                                             a K-format matrix in BlockOrder::Panels (Q4_K, Q6_K: AVX-512 VNNI),
//                                             every T; false (nothing done) for any other matrix
//   pack_super_block_panels, super_block_panel_row   pack_panels and panel_row_blocks (quant_blocks.h) for those
//
// Each sum of Q4_1 and Q5_1 (block_rows, block_tile) is the float32 kernels' (matmul.h): 16 lane chains over k ≡ lane (mod 16),
// fma in k order, then lane_tree_sum and the bias, on weights dequantized exactly as dequantize_reference does (quant_blocks.h),
// so the bits are those of the dequantized float32 matrix. Q4_1 and Q5_1 are dequantized in registers, 16
// weights at a time (AVX-512; AVX2 decode 8 at a time, its batches through a group's float copy); the portable
// build dequantizes 256 weights at a time into L1.
//
// Q4_0, Q5_0 and Q8_0 are dotted in integers too, against x quantized per 32 values (X8Rows: integers qx,
// scale dx and the sum of the qx per block), each block b of a row an exact int32 (|i| <= 32 · 128 · 127):
//   i = Σ_(k in b) q_k · qx_k,   acc = fma(d · dx, float(i), acc)
// from acc = 0 over the blocks in order, then y = acc + bias.
//
// The K formats are dotted as llama.cpp dots them, in integers against x quantized to 8 bits (Q8KBlock,
// quant_blocks.h), each super-block s of a row an exact int32 (the weights' small integers q, sub-block
// scales sc and mins m; x's integers qx, scale dx and sums):
//   Q4_K, Q5_K   i = Σ_j sc_j · Σ_(k in j) q_k · qx_k,   m = Σ_j m_j · Σ_(k in j) qx_k   (32 weights j)
//                acc = fma(d · dx, float(i), acc),  then acc = fma(-(dmin · dx), float(m), acc)
//   Q6_K         i = Σ_g sc_g · Σ_(k in g) (q_k - 32) · qx_k                           (16 weights g)
//                acc = fma(d · dx, float(i), acc)
// from acc = 0 over the super-blocks in order, then y = acc + bias. Every build gives these bits, for any
// T: a row computed in decode is the row computed in prefill. Against the float32 product on the
// dequantized weights the difference is x's rounding to 8 bits (docs/models.md states it per type).
#include <cstdint>

#include "kernels/quant_blocks.h"

namespace kvscope {

void block_rows(float* y, const float* x, BlockMatrix w, const float* bias, int64_t K, int64_t n0, int64_t n_count);
void integer_rows(float* y, const Q8KBlock* xq, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                  int64_t n_count);
void integer_rows32(float* y, const X8Rows& x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                    int64_t n_count);
bool integer_panels(float* y, const X8Rows& x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                    int64_t n_count);
int64_t integer_panel_rows();
bool super_block_panels(float* y, const Q8KBlock* xq, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                        int64_t n_count);
int64_t super_block_panel_rows(BlockFormat f);
void pack_super_block_panels(std::byte* w, BlockFormat f, int64_t N, int64_t K);
void super_block_panel_row(std::byte* out, BlockFormat f, const std::byte* panels, int64_t K, int64_t row);
bool block_tile(float* y, const float* x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                int64_t n_count);

}  // namespace kvscope
