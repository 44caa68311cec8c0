#pragma once
// Dot products and axpy, one at a time or over rows of keys and values: the inner loops of attention
// (attention.h builds one query row on them), in dot.cpp. Rows are float32 or bfloat16, widened exactly:
// the same result as on the floats.
//
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
//   dot_rows_block(out, out_stride, q, R, G, rows, n, D, scale)
//                                       dot_rows_heads for R query rows (q[r] (G, D), scores at out[r]) over
//                                       the same rows, each row loaded once for the R · G heads (D = 64)
//   axpy_rows_block(y, a, a_stride, R, G, rows, n, D)
//                                       axpy_rows_heads for R rows (y[r] (G, D), weights at a[r]), each row
//                                       loaded once for up to 12 (row, head) pairs (D % 32 == 0)
#include <cstdint>

namespace kvscope {

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
void dot_rows_block(float* const* out, int64_t out_stride, const float* const* q, int64_t R, int64_t G, const float* const* rows,
                    int64_t n, int64_t D, float scale);
void dot_rows_block(float* const* out, int64_t out_stride, const float* const* q, int64_t R, int64_t G,
                    const uint16_t* const* rows_bf16, int64_t n, int64_t D, float scale);
void axpy_rows_block(float* const* y, const float* const* a, int64_t a_stride, int64_t R, int64_t G, const float* const* rows,
                     int64_t n, int64_t D);
void axpy_rows_block(float* const* y, const float* const* a, int64_t a_stride, int64_t R, int64_t G,
                     const uint16_t* const* rows_bf16, int64_t n, int64_t D);

}  // namespace kvscope
