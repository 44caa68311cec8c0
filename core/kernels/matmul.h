#pragma once
// Matrix multiplies (matmul_kn.cpp, matmul_nk.cpp). Outputs first, sizes explicit, nothing allocated
// inside (scratch buffers grow once per thread). Each output element's float operations are fixed,
// whatever T, the tiling or the threads (kernels.h).
//
//   WeightRef                           a weight matrix stored as float32, bfloat16 or ggml's blocks (exactly
//                                       one set); bfloat16 weights are widened exactly; blocks of Q4_1 and
//                                       Q5_1 dequantized as the reference does (quant_blocks.h) and multiplied
//                                       in float32 (the bits of their dequantized float32 copy), the others
//                                       dotted in integers against x quantized to 8 bits (block_rows.h).
//                                       Blocks only in matmul_nk (K a multiple of the format's elements)
//   matmul_kn(y, x, w, bias, T, K, N)   y(T,N) = x(T,K) · w(K,N) + bias(N)   (HF Conv1D layout); each sum
//                                       is two fma chains, over k < K/2 and over the rest, then added
//   matmul_nk(y, x, w, bias, T, K, N)   y(T,N) = x(T,K) · w(N,K)ᵀ + bias(N)  (lm_head / tied wte)
//   matmul_nk_shared(x, T, K, targets)  matmul_nk for several matrices that read the same x (q, k, v; gate,
//                                       up) in one fork of the thread pool: the same bits as one call each
#include <cstdint>
#include <span>

#include "kernels/quant_blocks.h"

namespace kvscope {

struct WeightRef {
    const float* f32 = nullptr;
    const uint16_t* bf16 = nullptr;
    BlockMatrix blocks;
    WeightRef() = default;
    WeightRef(const float* w) : f32(w) {}  // NOLINT: a float matrix is a WeightRef
    WeightRef(const uint16_t* w) : bf16(w) {}  // NOLINT
    WeightRef(BlockMatrix w) : blocks(w) {}  // NOLINT
    bool empty() const { return !f32 && !bf16 && !blocks.data; }
};

void matmul_kn(float* y, const float* x, WeightRef w, const float* bias, int64_t T, int64_t K, int64_t N);
void matmul_nk(float* y, const float* x, WeightRef w, const float* bias, int64_t T, int64_t K, int64_t N);
struct MatmulTarget {
    float* y;            // (T, N)
    WeightRef w;         // (N, K)
    const float* bias;   // (N) or null
    int64_t N;
};
void matmul_nk_shared(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets);

}  // namespace kvscope
