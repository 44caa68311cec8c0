#pragma once
// Matrix multiplies (matmul_kn.cpp, matmul_nk.cpp). Outputs first, sizes explicit, nothing allocated
// inside (scratch buffers grow once per thread). Each output element's float operations are fixed,
// whatever T, the tiling or the threads (kernels.h).
//
//   WeightRef                           a weight matrix stored as float32, bfloat16 or Q8_0 blocks (exactly one
//                                       set); bfloat16 weights are widened exactly, Q8_0 weights dequantized
//                                       exactly (q · d: an 8-bit integer times a float16 scale fits a float32),
//                                       and multiplied in float32: a Q8_0 matrix gives the bits of its
//                                       dequantized float32 copy. Q8_0 only in matmul_nk (K % 32 == 0)
//   matmul_kn(y, x, w, bias, T, K, N)   y(T,N) = x(T,K) · w(K,N) + bias(N)   (HF Conv1D layout); each sum
//                                       is two fma chains, over k < K/2 and over the rest, then added
//   matmul_nk(y, x, w, bias, T, K, N)   y(T,N) = x(T,K) · w(N,K)ᵀ + bias(N)  (lm_head / tied wte)
//   matmul_nk_shared(x, T, K, targets)  matmul_nk for several matrices that read the same x (q, k, v; gate,
//                                       up) in one fork of the thread pool: the same bits as one call each
#include <cstdint>
#include <span>

namespace kvscope {

// One Q8_0 block as GGUF files store it (ggml's block_q8_0): 32 weights w = q[i] · d. A row of a Q8_0
// matrix (N, K) is K / 32 blocks, in the file's order; blocks sit at any byte offset (34 bytes each).
struct BlockQ8_0 {
    uint16_t d;     // the scale, float16 bits
    int8_t q[32];
};
static_assert(sizeof(BlockQ8_0) == 34, "a Q8_0 block is 34 bytes, packed as in the file");

struct WeightRef {
    const float* f32 = nullptr;
    const uint16_t* bf16 = nullptr;
    const BlockQ8_0* q8_0 = nullptr;
    WeightRef() = default;
    WeightRef(const float* w) : f32(w) {}  // NOLINT: a float matrix is a WeightRef
    WeightRef(const uint16_t* w) : bf16(w) {}  // NOLINT
    WeightRef(const BlockQ8_0* w) : q8_0(w) {}  // NOLINT
    bool empty() const { return !f32 && !bf16 && !q8_0; }
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
