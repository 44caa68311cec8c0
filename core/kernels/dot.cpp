// Dot products and axpy, one pair at a time or over rows of keys or values (attention's inner loops), with
// float32 or bfloat16 rows. Each function has one section per instruction set, side by side; the AVX2
// and portable sections compute the AVX-512 section's bits: 16 lane chains over k ≡ lane (mod 16) and
// their tree sum for a dot product, one fma chain per element for axpy.
#include "kernels/dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/lanes.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

#if KVSCOPE_AVX512
// Partial sums of a dot product: lane l accumulates k ≡ l (mod 16) in k order.
template <class B>
inline __m512 dot_lanes(const float* a, const B* b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = tail_mask(n - k);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), maskz_load16(m, b + k), acc);
    }
    return acc;
}
#endif

// b / x as float32 or bfloat16 (widened exactly): the same float operations either way.
template <class B>
float dot_impl(const float* a, const B* b, int64_t n) {
#if KVSCOPE_AVX512
    return reduce_add(dot_lanes(a, b, n));
#elif KVSCOPE_AVX2
    float out[1][1];
    const float* const ar[1] = {a};
    const B* const br[1] = {b};
    nk_block<1, 1>(out, ar, br, n);
    return out[0][0];
#else
    float lanes[16] = {};
    for (int64_t k = 0; k < n; ++k) lanes[k % 16] = std::fma(a[k], as_f32(b[k]), lanes[k % 16]);
    return lane_tree_sum(lanes);
#endif
}

template <class X>
void axpy_impl(float* y, float a, const X* x, int64_t n) {
#if KVSCOPE_AVX512
    __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 r = _mm512_fmadd_ps(av, maskz_load16(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
#else
    for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, as_f32(x[i]), y[i]);
#endif
}
template <class B>
void dot_rows_impl(float* out, const float* q, const B* const* rows, int64_t n, int64_t D, float scale) {
#if KVSCOPE_AVX512
    int64_t j = 0;
    if (D == 64) {  // GPT-2's head size: q stays in registers, loads need no mask
        const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16), q2 = _mm512_loadu_ps(q + 32),
                     q3 = _mm512_loadu_ps(q + 48);
        auto lanes = [&](const B* r) {  // the same fma order per lane as dot_lanes: k = 0, 16, 32, 48
            __m512 a = _mm512_fmadd_ps(q0, load16(r), _mm512_setzero_ps());
            a = _mm512_fmadd_ps(q1, load16(r + 16), a);
            a = _mm512_fmadd_ps(q2, load16(r + 32), a);
            return _mm512_fmadd_ps(q3, load16(r + 48), a);
        };
        const __m128 scale4 = _mm_set1_ps(scale);
        for (; j + 4 <= n; j += 4)
            _mm_storeu_ps(out + j, _mm_mul_ps(reduce_add4(lanes(rows[j]), lanes(rows[j + 1]), lanes(rows[j + 2]),
                                                          lanes(rows[j + 3])), scale4));
        for (; j < n; ++j) out[j] = reduce_add(lanes(rows[j])) * scale;
        return;
    }
    for (; j + 4 <= n; j += 4) {  // four independent chains, each exactly dot_lanes's
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t k = 0; k < D; k += 16) {
            const __mmask16 m = tail_mask(D - k);
            const __m512 qv = _mm512_maskz_loadu_ps(m, q + k);
            a0 = _mm512_fmadd_ps(qv, maskz_load16(m, rows[j] + k), a0);
            a1 = _mm512_fmadd_ps(qv, maskz_load16(m, rows[j + 1] + k), a1);
            a2 = _mm512_fmadd_ps(qv, maskz_load16(m, rows[j + 2] + k), a2);
            a3 = _mm512_fmadd_ps(qv, maskz_load16(m, rows[j + 3] + k), a3);
        }
        _mm_storeu_ps(out + j, _mm_mul_ps(reduce_add4(a0, a1, a2, a3), _mm_set1_ps(scale)));
    }
    for (; j < n; ++j) out[j] = dot_impl(q, rows[j], D) * scale;
#elif KVSCOPE_AVX2
    // Eight keys at once, each exactly dot_impl's sum (nk_block's lanes and their tree sum).
    int64_t j = 0;
    if (D % 16 == 0) {
        alignas(32) float lanes[8][16];
        for (; j + 8 <= n; j += 8) {
            for (int c0 = 0; c0 < 8; c0 += 4) {
                __m256 lo[4], hi[4];
                for (int c = 0; c < 4; ++c) lo[c] = hi[c] = _mm256_setzero_ps();
                for (int64_t k = 0; k < D; k += 16) {
                    const __m256 ql = _mm256_loadu_ps(q + k), qh = _mm256_loadu_ps(q + k + 8);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        lo[c] = _mm256_fmadd_ps(ql, load8(rows[j + c0 + c] + k), lo[c]);
                        hi[c] = _mm256_fmadd_ps(qh, load8(rows[j + c0 + c] + k + 8), hi[c]);
                    }
                }
                for (int c = 0; c < 4; ++c) {
                    _mm256_store_ps(lanes[c0 + c], lo[c]);
                    _mm256_store_ps(lanes[c0 + c] + 8, hi[c]);
                }
            }
            _mm256_storeu_ps(out + j, _mm256_mul_ps(lane_sums8(&lanes[0][0]), _mm256_set1_ps(scale)));
        }
    }
    const float* const qr[1] = {q};
    for (; j + 4 <= n; j += 4) {
        float sums[1][4];
        const B* const kr[4] = {rows[j], rows[j + 1], rows[j + 2], rows[j + 3]};
        nk_block<1, 4>(sums, qr, kr, D);
        for (int c = 0; c < 4; ++c) out[j + c] = sums[0][c] * scale;
    }
    for (; j < n; ++j) out[j] = dot_impl(q, rows[j], D) * scale;
#else
    for (int64_t j = 0; j < n; ++j) out[j] = dot_impl(q, rows[j], D) * scale;
#endif
}

#if KVSCOPE_AVX512
// dot_rows for HC <= 3 heads of head size 64 that score the same keys: each key vector is loaded (and
// widened) once for the heads, and every score is dot_rows's, operation for operation.
template <int HC, class B>
void dot_rows_heads64(float* out, int64_t out_stride, const float* q, const B* const* rows, int64_t n, float scale) {
    __m512 qv[HC][4];
#pragma GCC unroll 3
    for (int h = 0; h < HC; ++h)
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) qv[h][i] = _mm512_loadu_ps(q + h * 64 + i * 16);
    const __m128 scale4 = _mm_set1_ps(scale);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m512 acc[HC][4];  // (head, key)
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const B* r = rows[j + c];
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                __m512 kv = load16(r + i * 16);
                asm("" : "+v"(kv));  // one load for the heads, not a memory operand of each fma
#pragma GCC unroll 3
                for (int h = 0; h < HC; ++h)
                    acc[h][c] = _mm512_fmadd_ps(qv[h][i], kv, i == 0 ? _mm512_setzero_ps() : acc[h][c]);
            }
        }
#pragma GCC unroll 3
        for (int h = 0; h < HC; ++h)
            _mm_storeu_ps(out + h * out_stride + j,
                          _mm_mul_ps(reduce_add4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), scale4));
    }
    for (; j < n; ++j)
        for (int h = 0; h < HC; ++h) {
            __m512 a = _mm512_setzero_ps();
            for (int i = 0; i < 4; ++i) a = _mm512_fmadd_ps(qv[h][i], load16(rows[j] + i * 16), a);
            out[h * out_stride + j] = reduce_add(a) * scale;
        }
}
#elif KVSCOPE_AVX2
// dot_rows for HC <= 3 heads that score the same keys (D % 16 == 0), 8 keys at a time. Each score's 16
// lane chains are walked as two passes, one per 8-lane half, so a pass keeps HC x 4 accumulators and the
// HC query vectors in registers and loads each key vector once for the heads: 7 loads for 12 fmas at
// HC = 3, against 10 for 8 scoring one head at a time. Every score is dot_rows's: the same chains, then
// lane_sums8's tree sum. Zen 3 VM, SmolLM2 shape (3 heads per K/V head), 2 threads: a 2000-token
// prefill 6.8-7.1 -> 6.2-6.9 s; decode unchanged (its keys come from memory).
template <int HC, class B>
void dot_rows_heads8(float* out, int64_t out_stride, const float* q, const B* const* rows, int64_t n, int64_t D,
                     float scale) {
    alignas(32) float lanes[HC][8][16];  // (head, key, lane)
    const __m256 scale8 = _mm256_set1_ps(scale);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        for (int c0 = 0; c0 < 8; c0 += 4)
            for (int64_t half = 0; half < 16; half += 8) {
                __m256 acc[HC][4];
                for (int h = 0; h < HC; ++h)
                    for (int c = 0; c < 4; ++c) acc[h][c] = _mm256_setzero_ps();
                for (int64_t k = half; k < D; k += 16) {
                    __m256 qv[HC];
#pragma GCC unroll 3
                    for (int h = 0; h < HC; ++h) qv[h] = _mm256_loadu_ps(q + h * D + k);
                    if constexpr (HC == 3) asm("" : "+x"(qv[0]), "+x"(qv[1]), "+x"(qv[2]));  // held for the 4 keys
                    else asm("" : "+x"(qv[0]), "+x"(qv[1]));
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        __m256 kv = load8(rows[j + c0 + c] + k);
                        asm("" : "+x"(kv));  // one load for the heads
#pragma GCC unroll 3
                        for (int h = 0; h < HC; ++h) acc[h][c] = _mm256_fmadd_ps(qv[h], kv, acc[h][c]);
                    }
                }
                for (int h = 0; h < HC; ++h)
                    for (int c = 0; c < 4; ++c) _mm256_store_ps(lanes[h][c0 + c] + half, acc[h][c]);
            }
        for (int h = 0; h < HC; ++h) _mm256_storeu_ps(out + h * out_stride + j, _mm256_mul_ps(lane_sums8(&lanes[h][0][0]), scale8));
    }
    if (j < n)
        for (int h = 0; h < HC; ++h) dot_rows_impl(out + h * out_stride + j, q + h * D, rows + j, n - j, D, scale);
}
#endif

template <class B>
void dot_rows_heads_impl(float* out, int64_t out_stride, const float* q, int64_t G, const B* const* rows, int64_t n,
                         int64_t D, float scale) {
#if KVSCOPE_AVX512
    if (D == 64) {
        for (int64_t g = 0; g < G; g += 3) {
            float* o = out + g * out_stride;
            switch (std::min<int64_t>(3, G - g)) {
                case 1: dot_rows_heads64<1>(o, out_stride, q + g * 64, rows, n, scale); break;
                case 2: dot_rows_heads64<2>(o, out_stride, q + g * 64, rows, n, scale); break;
                default: dot_rows_heads64<3>(o, out_stride, q + g * 64, rows, n, scale); break;
            }
        }
        return;
    }
#elif KVSCOPE_AVX2
    if (D % 16 == 0 && G > 1) {
        for (int64_t g = 0; g < G; g += 3) {
            float* o = out + g * out_stride;
            switch (std::min<int64_t>(3, G - g)) {
                case 1: dot_rows_impl(o, q + g * D, rows, n, D, scale); break;
                case 2: dot_rows_heads8<2>(o, out_stride, q + g * D, rows, n, D, scale); break;
                default: dot_rows_heads8<3>(o, out_stride, q + g * D, rows, n, D, scale); break;
            }
        }
        return;
    }
#endif
    for (int64_t g = 0; g < G; ++g) dot_rows_impl(out + g * out_stride, q + g * D, rows, n, D, scale);
}

template <class X>
void axpy_rows_impl(float* y, const float* a, const X* const* rows, int64_t n, int64_t D) {
#if KVSCOPE_AVX512
    for (int64_t d = 0; d < D; d += 64) {
        const __mmask16 m0 = tail_mask(D - d), m1 = d + 16 < D ? tail_mask(D - d - 16) : 0,
                        m2 = d + 32 < D ? tail_mask(D - d - 32) : 0, m3 = d + 48 < D ? tail_mask(D - d - 48) : 0;
        __m512 y0 = _mm512_maskz_loadu_ps(m0, y + d), y1 = _mm512_maskz_loadu_ps(m1, y + d + 16),
               y2 = _mm512_maskz_loadu_ps(m2, y + d + 32), y3 = _mm512_maskz_loadu_ps(m3, y + d + 48);
        for (int64_t j = 0; j < n; ++j) {
            const __m512 av = _mm512_set1_ps(a[j]);
            const X* x = rows[j] + d;
            y0 = _mm512_fmadd_ps(av, maskz_load16(m0, x), y0);
            y1 = _mm512_fmadd_ps(av, maskz_load16(m1, x + 16), y1);
            y2 = _mm512_fmadd_ps(av, maskz_load16(m2, x + 32), y2);
            y3 = _mm512_fmadd_ps(av, maskz_load16(m3, x + 48), y3);
        }
        _mm512_mask_storeu_ps(y + d, m0, y0);
        _mm512_mask_storeu_ps(y + d + 16, m1, y1);
        _mm512_mask_storeu_ps(y + d + 32, m2, y2);
        _mm512_mask_storeu_ps(y + d + 48, m3, y3);
    }
#else
    for (int64_t j = 0; j < n; ++j) axpy_impl(y, a[j], rows[j], D);
#endif
}

// axpy_rows for G heads: per 64-wide column block, G x 4 accumulators; each row's 4 vectors loaded once.
template <int G, class X>
void axpy_rows_heads_impl(float* y, const float* a, int64_t a_stride, const X* const* rows, int64_t n, int64_t D) {
#if KVSCOPE_AVX512
    for (int64_t d = 0; d < D; d += 64) {
        const __mmask16 m[4] = {tail_mask(D - d), d + 16 < D ? tail_mask(D - d - 16) : __mmask16(0),
                                d + 32 < D ? tail_mask(D - d - 32) : __mmask16(0),
                                d + 48 < D ? tail_mask(D - d - 48) : __mmask16(0)};
        __m512 acc[G][4];
        for (int g = 0; g < G; ++g)
            for (int c = 0; c < 4; ++c) acc[g][c] = _mm512_maskz_loadu_ps(m[c], y + g * D + d + c * 16);
        for (int64_t j = 0; j < n; ++j) {
            const X* x = rows[j] + d;
            const __m512 v0 = maskz_load16(m[0], x), v1 = maskz_load16(m[1], x + 16), v2 = maskz_load16(m[2], x + 32),
                         v3 = maskz_load16(m[3], x + 48);
            for (int g = 0; g < G; ++g) {
                const __m512 av = _mm512_set1_ps(a[g * a_stride + j]);
                acc[g][0] = _mm512_fmadd_ps(av, v0, acc[g][0]);
                acc[g][1] = _mm512_fmadd_ps(av, v1, acc[g][1]);
                acc[g][2] = _mm512_fmadd_ps(av, v2, acc[g][2]);
                acc[g][3] = _mm512_fmadd_ps(av, v3, acc[g][3]);
            }
        }
        for (int g = 0; g < G; ++g)
            for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(y + g * D + d + c * 16, m[c], acc[g][c]);
    }
#elif KVSCOPE_AVX2
    // Per 32-wide column block, G x 4 accumulators kept in registers over the rows; every element's chain
    // is axpy's, row after row. Three heads go in one pass, their weights and each value vector held in
    // registers (12 + 3 + 1 = 16): passes of 2 and 1 heads left the 1-head pass waiting on its 4 fma
    // chains. Zen 3 VM, SmolLM2 shape, 2 threads: a 2000-token prefill 6.2-6.8 -> 5.8-6.3 s (attention of
    // 3 heads against 2000 keys in L2, 1 thread: 28 -> 23 ns per key); decode unchanged.
    auto column_tail = [&](int g_begin, int g_end, int64_t d) {  // the last D % 32 columns, element by element
        for (int g = g_begin; g < g_end; ++g)
            for (int64_t j = 0; j < n; ++j)
                for (int64_t i = d; i < D; ++i) y[g * D + i] = std::fma(a[g * a_stride + j], as_f32(rows[j][i]), y[g * D + i]);
    };
    if constexpr (G == 3) {
        int64_t d = 0;
        for (; d + 32 <= D; d += 32) {
            __m256 acc[3][4];
            for (int g = 0; g < 3; ++g)
                for (int c = 0; c < 4; ++c) acc[g][c] = _mm256_loadu_ps(y + g * D + d + c * 8);
            for (int64_t j = 0; j < n; ++j) {
                const X* x = rows[j] + d;
                __m256 av[3] = {_mm256_set1_ps(a[j]), _mm256_set1_ps(a[a_stride + j]), _mm256_set1_ps(a[2 * a_stride + j])};
                asm("" : "+x"(av[0]), "+x"(av[1]), "+x"(av[2]));  // held for the 4 value vectors
#pragma GCC unroll 4
                for (int c = 0; c < 4; ++c) {
                    __m256 v = load8(x + c * 8);
                    asm("" : "+x"(v));  // one load for the 3 heads
#pragma GCC unroll 3
                    for (int g = 0; g < 3; ++g) acc[g][c] = _mm256_fmadd_ps(av[g], v, acc[g][c]);
                }
            }
            for (int g = 0; g < 3; ++g)
                for (int c = 0; c < 4; ++c) _mm256_storeu_ps(y + g * D + d + c * 8, acc[g][c]);
        }
        column_tail(0, 3, d);
        return;
    }
    for (int g0 = 0; g0 < G; g0 += 2) {
        const int heads = std::min(2, G - g0);
        int64_t d = 0;
        for (; d + 32 <= D; d += 32) {
            __m256 acc[2][4];
            for (int g = 0; g < heads; ++g)
                for (int c = 0; c < 4; ++c) acc[g][c] = _mm256_loadu_ps(y + (g0 + g) * D + d + c * 8);
            for (int64_t j = 0; j < n; ++j) {
                const X* x = rows[j] + d;
                const __m256 v0 = load8(x), v1 = load8(x + 8), v2 = load8(x + 16), v3 = load8(x + 24);
                for (int g = 0; g < heads; ++g) {
                    const __m256 av = _mm256_set1_ps(a[(g0 + g) * a_stride + j]);
                    acc[g][0] = _mm256_fmadd_ps(av, v0, acc[g][0]);
                    acc[g][1] = _mm256_fmadd_ps(av, v1, acc[g][1]);
                    acc[g][2] = _mm256_fmadd_ps(av, v2, acc[g][2]);
                    acc[g][3] = _mm256_fmadd_ps(av, v3, acc[g][3]);
                }
            }
            for (int g = 0; g < heads; ++g)
                for (int c = 0; c < 4; ++c) _mm256_storeu_ps(y + (g0 + g) * D + d + c * 8, acc[g][c]);
        }
        column_tail(g0, g0 + heads, d);
    }
#else
    for (int g = 0; g < G; ++g) axpy_rows_impl(y + g * D, a + g * a_stride, rows, n, D);
#endif
}

template <class X>
void axpy_rows_heads_dispatch(float* y, const float* a, int64_t a_stride, int64_t G, const X* const* rows, int64_t n,
                              int64_t D) {
    switch (G) {
        case 1: axpy_rows_heads_impl<1>(y, a, a_stride, rows, n, D); break;
        case 2: axpy_rows_heads_impl<2>(y, a, a_stride, rows, n, D); break;
        case 3: axpy_rows_heads_impl<3>(y, a, a_stride, rows, n, D); break;
        default: axpy_rows_heads_impl<4>(y, a, a_stride, rows, n, D); break;
    }
}

// dot_rows_heads for R query rows (row r: q[r] (G, D), its head g's scores at out[r] + g·out_stride) that score
// the same keys. With AVX-512 and D = 64, 4 keys (16 vectors) are held in registers for the R × G query heads,
// whose vectors come from L1: a prefill's keys come from L2 once per R rows instead of once per row. Every
// score is dot_rows_heads64's: the same 16 lane chains, then reduce_add4 (reduce_add for the last n % 4).
template <class B>
void dot_rows_block_impl(float* const* out, int64_t out_stride, const float* const* q, int64_t R, int64_t G,
                         const B* const* rows, int64_t n, int64_t D, float scale) {
#if KVSCOPE_AVX512
    if (D == 64) {
        const __m128 scale4 = _mm_set1_ps(scale);
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            __m512 k[4][4];  // (key, 16 of its 64 values)
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c)
#pragma GCC unroll 4
                for (int i = 0; i < 4; ++i) k[c][i] = load16(rows[j + c] + i * 16);
            for (int64_t r = 0; r < R; ++r)
                for (int64_t g = 0; g < G; ++g) {
                    const float* qh = q[r] + g * 64;
                    __m512 acc[4];
#pragma GCC unroll 4
                    for (int i = 0; i < 4; ++i) {
                        __m512 qv = _mm512_loadu_ps(qh + i * 16);
                        asm("" : "+v"(qv));  // one load for the 4 keys, not a memory operand of each fma
#pragma GCC unroll 4
                        for (int c = 0; c < 4; ++c) acc[c] = _mm512_fmadd_ps(qv, k[c][i], i == 0 ? _mm512_setzero_ps() : acc[c]);
                    }
                    _mm_storeu_ps(out[r] + g * out_stride + j, _mm_mul_ps(reduce_add4(acc[0], acc[1], acc[2], acc[3]), scale4));
                }
        }
        if (j < n)
            for (int64_t r = 0; r < R; ++r) dot_rows_heads_impl(out[r] + j, out_stride, q[r], G, rows + j, n - j, D, scale);
        return;
    }
#endif
    for (int64_t r = 0; r < R; ++r) dot_rows_heads_impl(out[r], out_stride, q[r], G, rows, n, D, scale);
}

#if KVSCOPE_AVX512
// NV (row, head) pairs' outputs, 32 columns from d, against the same value rows: 2 · NV accumulators
// over the rows, each value vector loaded once for them; every element's chain is axpy's, row after row.
template <int NV, class X>
void axpy_rows_columns32(float* const* y, const float* const* a, const X* const* rows, int64_t n, int64_t d) {
    __m512 acc[NV][2];
#pragma GCC unroll 12
    for (int v = 0; v < NV; ++v)
        for (int c = 0; c < 2; ++c) acc[v][c] = _mm512_loadu_ps(y[v] + d + c * 16);
    for (int64_t j = 0; j < n; ++j) {
        __m512 x0 = load16(rows[j] + d), x1 = load16(rows[j] + d + 16);
        asm("" : "+v"(x0), "+v"(x1));  // one load for the NV pairs
#pragma GCC unroll 12
        for (int v = 0; v < NV; ++v) {
            const __m512 av = _mm512_set1_ps(a[v][j]);
            acc[v][0] = _mm512_fmadd_ps(av, x0, acc[v][0]);
            acc[v][1] = _mm512_fmadd_ps(av, x1, acc[v][1]);
        }
    }
#pragma GCC unroll 12
    for (int v = 0; v < NV; ++v)
        for (int c = 0; c < 2; ++c) _mm512_storeu_ps(y[v] + d + c * 16, acc[v][c]);
}
#endif

// axpy_rows_heads for R rows of G heads (row r: y[r] (G, D), head g's weights at a[r] + g·a_stride) over the
// same value rows. With AVX-512 and D % 32 == 0 the (row, head) pairs go 12 at a time, 32 columns a pass:
// each value vector is loaded once for 12 pairs (a prefill's values come from L2 once per R rows), and every
// element's chain is axpy's, row after row, as axpy_rows_heads computes it.
template <class X>
void axpy_rows_block_impl(float* const* y, const float* const* a, int64_t a_stride, int64_t R, int64_t G,
                          const X* const* rows, int64_t n, int64_t D) {
#if KVSCOPE_AVX512
    if (D % 32 == 0 && R * G <= 64) {
        float* ys[64];
        const float* as[64];
        int64_t nv = 0;
        for (int64_t r = 0; r < R; ++r)
            for (int64_t g = 0; g < G; ++g, ++nv) ys[nv] = y[r] + g * D, as[nv] = a[r] + g * a_stride;
        for (int64_t v0 = 0; v0 < nv; v0 += 12)
            for (int64_t d = 0; d < D; d += 32) {
                float* const* yv = ys + v0;
                const float* const* av = as + v0;
                switch (std::min<int64_t>(12, nv - v0)) {
                    case 1: axpy_rows_columns32<1>(yv, av, rows, n, d); break;
                    case 2: axpy_rows_columns32<2>(yv, av, rows, n, d); break;
                    case 3: axpy_rows_columns32<3>(yv, av, rows, n, d); break;
                    case 4: axpy_rows_columns32<4>(yv, av, rows, n, d); break;
                    case 5: axpy_rows_columns32<5>(yv, av, rows, n, d); break;
                    case 6: axpy_rows_columns32<6>(yv, av, rows, n, d); break;
                    case 7: axpy_rows_columns32<7>(yv, av, rows, n, d); break;
                    case 8: axpy_rows_columns32<8>(yv, av, rows, n, d); break;
                    case 9: axpy_rows_columns32<9>(yv, av, rows, n, d); break;
                    case 10: axpy_rows_columns32<10>(yv, av, rows, n, d); break;
                    case 11: axpy_rows_columns32<11>(yv, av, rows, n, d); break;
                    default: axpy_rows_columns32<12>(yv, av, rows, n, d); break;
                }
            }
        return;
    }
#endif
    for (int64_t r = 0; r < R; ++r)
        for (int64_t g0 = 0; g0 < G; g0 += 4)
            axpy_rows_heads_dispatch(y[r] + g0 * D, a[r] + g0 * a_stride, a_stride, std::min<int64_t>(4, G - g0), rows, n, D);
}
}  // namespace

float dot(const float* a, const float* b, int64_t n) { return dot_impl(a, b, n); }
float dot(const float* a, const uint16_t* b, int64_t n) { return dot_impl(a, b, n); }
void axpy(float* y, float a, const float* x, int64_t n) { axpy_impl(y, a, x, n); }
void axpy(float* y, float a, const uint16_t* x, int64_t n) { axpy_impl(y, a, x, n); }
void dot_rows(float* out, const float* q, const float* const* rows, int64_t n, int64_t D, float scale) {
    dot_rows_impl(out, q, rows, n, D, scale);
}
void dot_rows(float* out, const float* q, const uint16_t* const* rows, int64_t n, int64_t D, float scale) {
    dot_rows_impl(out, q, rows, n, D, scale);
}
void dot_rows_heads(float* out, int64_t out_stride, const float* q, int64_t G, const float* const* rows, int64_t n,
                    int64_t D, float scale) {
    dot_rows_heads_impl(out, out_stride, q, G, rows, n, D, scale);
}
void dot_rows_heads(float* out, int64_t out_stride, const float* q, int64_t G, const uint16_t* const* rows, int64_t n,
                    int64_t D, float scale) {
    dot_rows_heads_impl(out, out_stride, q, G, rows, n, D, scale);
}
void axpy_rows(float* y, const float* a, const float* const* rows, int64_t n, int64_t D) { axpy_rows_impl(y, a, rows, n, D); }
void axpy_rows(float* y, const float* a, const uint16_t* const* rows, int64_t n, int64_t D) {
    axpy_rows_impl(y, a, rows, n, D);
}
void axpy_rows_heads(float* y, const float* a, int64_t a_stride, int64_t G, const float* const* rows, int64_t n, int64_t D) {
    axpy_rows_heads_dispatch(y, a, a_stride, G, rows, n, D);
}
void axpy_rows_heads(float* y, const float* a, int64_t a_stride, int64_t G, const uint16_t* const* rows, int64_t n,
                     int64_t D) {
    axpy_rows_heads_dispatch(y, a, a_stride, G, rows, n, D);
}

void dot_rows_block(float* const* out, int64_t out_stride, const float* const* q, int64_t R, int64_t G, const float* const* rows,
                    int64_t n, int64_t D, float scale) {
    dot_rows_block_impl(out, out_stride, q, R, G, rows, n, D, scale);
}
void dot_rows_block(float* const* out, int64_t out_stride, const float* const* q, int64_t R, int64_t G,
                    const uint16_t* const* rows, int64_t n, int64_t D, float scale) {
    dot_rows_block_impl(out, out_stride, q, R, G, rows, n, D, scale);
}
void axpy_rows_block(float* const* y, const float* const* a, int64_t a_stride, int64_t R, int64_t G, const float* const* rows,
                     int64_t n, int64_t D) {
    axpy_rows_block_impl(y, a, a_stride, R, G, rows, n, D);
}
void axpy_rows_block(float* const* y, const float* const* a, int64_t a_stride, int64_t R, int64_t G,
                     const uint16_t* const* rows, int64_t n, int64_t D) {
    axpy_rows_block_impl(y, a, a_stride, R, G, rows, n, D);
}

}  // namespace kvscope
