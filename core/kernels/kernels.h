#pragma once
// Numeric kernels of the forward pass. Outputs first, sizes explicit, nothing allocated inside.
//
// Every kernel computes each output element with one fixed sequence of float operations that does not
// depend on how many rows are processed together, on tiling, or on threads. So a row computed in a
// 1-token decode step is bit-for-bit the row computed in a 500-token prefill or a full recompute:
// cached, uncached, chunked and batched runs agree exactly, not just within a tolerance.
//
//   WeightRef                           a weight matrix stored as float32 or as bfloat16 (exactly one set);
//                                       bfloat16 weights are widened exactly and multiplied in float32
//   matmul_kn(y, x, w, bias, T, K, N)   y(T,N) = x(T,K) · w(K,N) + bias(N)   (HF Conv1D layout); each sum
//                                       is two fma chains, over k < K/2 and over the rest, then added
//   matmul_nk(y, x, w, bias, T, K, N)   y(T,N) = x(T,K) · w(N,K)ᵀ + bias(N)  (lm_head / tied wte)
//   matmul_nk_shared(x, T, K, targets)  matmul_nk for several matrices that read the same x (q, k, v; gate,
//                                       up) in one fork of the thread pool: the same bits as one call each
//   dot(a, b, n)                        Σ a[i]·b[i], 16 interleaved partial sums, fixed reduction
//   axpy(y, a, x, n)                    y[i] = fma(a, x[i], y[i])
//   dot_rows(out, q, rows, n, D, scale) out[j] = dot(q, rows[j], D) · scale for j < n: the same sums as dot,
//                                       four rows at a time and without a call per row
//   dot_rows_heads(out, out_stride, q, G, rows, n, D, scale)
//                                       dot_rows for G heads (q (G, D), head g's scores at out + g·out_stride)
//                                       over the same rows, each row loaded once for up to 3 heads
//   axpy_rows(y, a, rows, n, D)         axpy(y, a[j], rows[j], D) for j = 0..n-1 in order, y kept in
//                                       registers: the same fma chain per element as n axpy calls
//   axpy_rows_heads(y, a, a_stride, G, rows, n, D)
//                                       axpy_rows for G <= 4 heads at once: y (G, D), head g's weights at
//                                       a + g·a_stride; each row loaded once, every y element's chain as axpy_rows
//   max_of(x, n)                        the largest of x[0..n) (n >= 1): exact in any order
//   exp_in_place(x, n)                  x[i] = e^x[i] for x[i] <= 0 (softmax), within ~2 ulp; each element
//                                       depends only on its own value
//   layer_norm(y, x, g, b, T, C, eps)   per row; y may alias x
//   rms_norm(y, x, g, T, C, eps)        per row y = g · (x · 1/sqrt(mean(x²) + eps)): the weight after the
//                                       normalisation (HF LlamaRMSNorm); y may alias x
//   gelu_tanh / gelu_erf / relu / silu(x, n)   in place
//   multiply(y, x, n)                   y[i] *= x[i] (the gate of a gated MLP)
#include <cstdint>
#include <span>

namespace kvscope {

struct WeightRef {
    const float* f32 = nullptr;
    const uint16_t* bf16 = nullptr;
    WeightRef() = default;
    WeightRef(const float* w) : f32(w) {}  // NOLINT: a float matrix is a WeightRef
    WeightRef(const uint16_t* w) : bf16(w) {}  // NOLINT
    bool empty() const { return !f32 && !bf16; }
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
float dot(const float* a, const float* b, int64_t n);
float dot(const float* a, const uint16_t* b_bf16, int64_t n);    // b widened exactly: same result as on floats
void axpy(float* y, float a, const float* x, int64_t n);
void axpy(float* y, float a, const uint16_t* x_bf16, int64_t n); // x widened exactly
void dot_rows(float* out, const float* q, const float* const* rows, int64_t n, int64_t D, float scale);
void dot_rows(float* out, const float* q, const uint16_t* const* rows_bf16, int64_t n, int64_t D, float scale);
void dot_rows_heads(float* out, int64_t out_stride, const float* q, int64_t G, const float* const* rows, int64_t n,
                    int64_t D, float scale);
void dot_rows_heads(float* out, int64_t out_stride, const float* q, int64_t G, const uint16_t* const* rows_bf16,
                    int64_t n, int64_t D, float scale);
void axpy_rows(float* y, const float* a, const float* const* rows, int64_t n, int64_t D);
void axpy_rows(float* y, const float* a, const uint16_t* const* rows_bf16, int64_t n, int64_t D);
void axpy_rows_heads(float* y, const float* a, int64_t a_stride, int64_t G, const float* const* rows, int64_t n, int64_t D);
void axpy_rows_heads(float* y, const float* a, int64_t a_stride, int64_t G, const uint16_t* const* rows_bf16, int64_t n,
                     int64_t D);
float max_of(const float* x, int64_t n);
void exp_in_place(float* x, int64_t n);
void layer_norm(float* y, const float* x, const float* gain, const float* bias, int64_t T, int64_t C,
                float eps);
void gelu_tanh(float* x, int64_t n);
void gelu_erf(float* x, int64_t n);
void relu(float* x, int64_t n);
void rms_norm(float* y, const float* x, const float* gain, int64_t T, int64_t C, float eps);
void silu(float* x, int64_t n);
void multiply(float* y, const float* x, int64_t n);

}  // namespace kvscope
