#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "thread_pool.h"

#include "simd.h"

namespace kvscope {
namespace {

// Columns are split between threads in blocks of this many floats, so the split never lands inside
// a SIMD vector and every thread streams whole cache lines of the weight rows.
constexpr int64_t kColumnBlock = 64;

#if defined(__AVX512F__)

__mmask16 tail_mask(int64_t remaining) {
    return remaining >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << remaining) - 1u);
}

// y[r, n0:n0+16*CT] for RT rows: acc = 0; for k: acc = fma(x[r,k], w[k,n], acc); y = acc + bias.
// w_tile points at w[0, n0], and row k of the tile starts at w_tile + k * ldw.
template <int RT, int CT>
void tile_kn(float* y, const float* x, const float* w_tile, int64_t ldw, const float* bias, int64_t K,
             int64_t N, int64_t n0, int64_t n_end) {
    __m512 acc[RT][CT];
    __mmask16 mask[CT];
    for (int c = 0; c < CT; ++c) mask[c] = n0 + 16 * c < n_end ? tail_mask(n_end - n0 - 16 * c) : 0;
    for (int r = 0; r < RT; ++r)
        for (int c = 0; c < CT; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
        const float* wk = w_tile + k * ldw;
        __m512 wv[CT];
        for (int c = 0; c < CT; ++c) wv[c] = _mm512_maskz_loadu_ps(mask[c], wk + 16 * c);
        for (int r = 0; r < RT; ++r) {
            __m512 xv = _mm512_set1_ps(x[r * K + k]);
            for (int c = 0; c < CT; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    for (int c = 0; c < CT; ++c) {
        __m512 b = bias ? _mm512_maskz_loadu_ps(mask[c], bias + n0 + 16 * c) : _mm512_setzero_ps();
        for (int r = 0; r < RT; ++r)
            _mm512_mask_storeu_ps(y + r * N + n0 + 16 * c, mask[c], _mm512_add_ps(acc[r][c], b));
    }
}

// Few rows (decode, small batches): weight rows are streamed once, whole and in order, and every row
// of x is applied to each loaded weight vector. Accumulators for a block of columns stay in L1.
// Per output element this is the same fma chain in k order as tile_kn, so results are identical.
template <int T>
void stream_kn(float* y, const float* x, const float* w, const float* bias, int64_t K, int64_t N,
               int64_t n_begin, int64_t n_end) {
    constexpr int64_t kBlock = 512;  // columns per accumulator block: T * 2 KiB, in L1
    alignas(64) float acc[T][kBlock];
    for (int64_t b0 = n_begin; b0 < n_end; b0 += kBlock) {
        const int64_t width = std::min(kBlock, n_end - b0);
        for (int t = 0; t < T; ++t) std::memset(acc[t], 0, size_t(width) * sizeof(float));
        for (int64_t k = 0; k < K; ++k) {
            const float* wk = w + k * N + b0;
            __m512 xv[T];
            for (int t = 0; t < T; ++t) xv[t] = _mm512_set1_ps(x[t * K + k]);
            for (int64_t i = 0; i < width; i += 16) {
                const __mmask16 m = tail_mask(width - i);
                const __m512 wv = _mm512_maskz_loadu_ps(m, wk + i);
                for (int t = 0; t < T; ++t)
                    _mm512_mask_storeu_ps(acc[t] + i, m, _mm512_fmadd_ps(xv[t], wv, _mm512_maskz_loadu_ps(m, acc[t] + i)));
            }
        }
        for (int t = 0; t < T; ++t)
            for (int64_t i = 0; i < width; ++i) y[t * N + b0 + i] = acc[t][i] + (bias ? bias[b0 + i] : 0.0f);
    }
}

// Partial sums of a dot product: lane l accumulates k ≡ l (mod 16) in k order.
inline __m512 dot_lanes(const float* a, const float* b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = tail_mask(n - k);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc);
    }
    return acc;
}

template <int RT, int CT>
void tile_nk(float* y, const float* x, const float* w, const float* bias, int64_t K, int64_t N,
             int64_t n0, int64_t n_count) {
    __m512 acc[RT][CT];
    for (int r = 0; r < RT; ++r)
        for (int c = 0; c < CT; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        __mmask16 m = tail_mask(K - k);
        __m512 wv[CT];
        for (int c = 0; c < CT; ++c)
            wv[c] = c < n_count ? _mm512_maskz_loadu_ps(m, w + (n0 + c) * K + k) : _mm512_setzero_ps();
        for (int r = 0; r < RT; ++r) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + r * K + k);
            for (int c = 0; c < CT; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < RT; ++r)
        for (int c = 0; c < CT && c < n_count; ++c)
            y[r * N + n0 + c] = reduce_add(acc[r][c]) + (bias ? bias[n0 + c] : 0.0f);
}

#else  // portable fallback: the same arithmetic per element, one element at a time

template <int T>
void stream_kn(float* y, const float* x, const float* w, const float* bias, int64_t K, int64_t N,
               int64_t n_begin, int64_t n_end) {
    for (int t = 0; t < T; ++t)
        for (int64_t n = n_begin; n < n_end; ++n) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc = std::fma(x[t * K + k], w[k * N + n], acc);
            y[t * N + n] = acc + (bias ? bias[n] : 0.0f);
        }
}

template <int RT, int CT>
void tile_kn(float* y, const float* x, const float* w_tile, int64_t ldw, const float* bias, int64_t K,
             int64_t N, int64_t n0, int64_t n_end) {
    for (int r = 0; r < RT; ++r)
        for (int64_t n = n0; n < std::min(n_end, n0 + 16 * CT); ++n) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc = std::fma(x[r * K + k], w_tile[k * ldw + (n - n0)], acc);
            y[r * N + n] = acc + (bias ? bias[n] : 0.0f);
        }
}

template <int RT, int CT>
void tile_nk(float* y, const float* x, const float* w, const float* bias, int64_t K, int64_t N,
             int64_t n0, int64_t n_count) {
    for (int r = 0; r < RT; ++r)
        for (int c = 0; c < CT && c < n_count; ++c)
            y[r * N + n0 + c] = dot(x + r * K, w + (n0 + c) * K, K) + (bias ? bias[n0 + c] : 0.0f);
}

#endif

// Rows in blocks of RT (the tail one at a time), columns [n_begin, n_end) in tiles of 16*CT. Each
// weight tile (K, 16*CT) is first copied into a contiguous buffer: walked in place it would touch a
// new page every few cache lines, and every row block walks it again.
template <int RT, int CT>
void rows_kn(float* y, const float* x, const float* w, const float* bias, int64_t T, int64_t K, int64_t N,
             int64_t n_begin, int64_t n_end) {
    constexpr int64_t W = 16 * CT;
    thread_local std::vector<float> packed;  // (K, W); grows once per thread, then reused
    if (int64_t(packed.size()) < K * W) packed.resize(size_t(K * W));
    for (int64_t n0 = n_begin; n0 < n_end; n0 += W) {
        const int64_t width = std::min(W, n_end - n0);
        for (int64_t k = 0; k < K; ++k) {
            std::memcpy(packed.data() + k * W, w + k * N + n0, size_t(width) * sizeof(float));
            std::memset(packed.data() + k * W + width, 0, size_t(W - width) * sizeof(float));
        }
        int64_t t = 0;
        for (; t + RT <= T; t += RT)
            tile_kn<RT, CT>(y + t * N, x + t * K, packed.data(), W, bias, K, N, n0, n_end);
        for (; t < T; ++t) tile_kn<1, CT>(y + t * N, x + t * K, packed.data(), W, bias, K, N, n0, n_end);
    }
}

}  // namespace

void matmul_kn(float* y, const float* x, const float* w, const float* bias, int64_t T, int64_t K, int64_t N) {
    const int64_t n_blocks = (N + kColumnBlock - 1) / kColumnBlock;
    const int64_t n_threads = ThreadPool::global().n_threads();
    if (T <= 8) {
        // Memory-bound: one contiguous column range per thread, so each streams its half of every row.
        const int64_t n_tasks = std::min(n_blocks, n_threads);
        ThreadPool::global().parallel_for(n_tasks, [&](int64_t task) {
            const int64_t n_begin = n_blocks * task / n_tasks * kColumnBlock;
            const int64_t n_end = std::min(N, n_blocks * (task + 1) / n_tasks * kColumnBlock);
            for (int64_t t0 = 0; t0 < T;) {
                const int64_t rows = T - t0;
                const float* xt = x + t0 * K;
                float* yt = y + t0 * N;
                switch (rows) {
                    case 1: stream_kn<1>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                    case 2: stream_kn<2>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                    case 3: stream_kn<3>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                    case 4: stream_kn<4>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                    case 5: stream_kn<5>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                    case 6: stream_kn<6>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                    case 7: stream_kn<7>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                    default: stream_kn<8>(yt, xt, w, bias, K, N, n_begin, n_end); break;
                }
                t0 += rows;
            }
        });
        return;
    }
    // A few contiguous column ranges per thread: each thread streams its own part of every weight row.
    const int64_t n_tasks = std::min(n_blocks, n_threads * 4);
    ThreadPool::global().parallel_for(n_tasks, [&](int64_t task) {
        int64_t b0 = n_blocks * task / n_tasks, b1 = n_blocks * (task + 1) / n_tasks;
        int64_t n_begin = b0 * kColumnBlock, n_end = std::min(N, b1 * kColumnBlock);
        rows_kn<6, 4>(y, x, w, bias, T, K, N, n_begin, n_end);  // compute-bound: 6x64 register tiles
    });
}

void matmul_nk(float* y, const float* x, const float* w, const float* bias, int64_t T, int64_t K, int64_t N) {
    constexpr int CT = 4;
    const int64_t n_groups = (N + CT - 1) / CT;
    const int64_t n_threads = ThreadPool::global().n_threads();
    const int64_t n_tasks = std::min(n_groups, n_threads * 8);
    ThreadPool::global().parallel_for(n_tasks, [&](int64_t task) {
        int64_t g0 = n_groups * task / n_tasks, g1 = n_groups * (task + 1) / n_tasks;
        for (int64_t g = g0; g < g1; ++g) {
            int64_t n0 = g * CT, count = std::min<int64_t>(CT, N - n0);
            int64_t t = 0;
            for (; t + 4 <= T; t += 4) tile_nk<4, CT>(y + t * N, x + t * K, w, bias, K, N, n0, count);
            for (; t < T; ++t) tile_nk<1, CT>(y + t * N, x + t * K, w, bias, K, N, n0, count);
        }
    });
}

float dot(const float* a, const float* b, int64_t n) {
#if defined(__AVX512F__)
    return reduce_add(dot_lanes(a, b, n));
#else
    float lanes[16] = {};
    for (int64_t k = 0; k < n; ++k) lanes[k % 16] = std::fma(a[k], b[k], lanes[k % 16]);
    float s = 0.0f;
    for (float l : lanes) s += l;
    return s;
#endif
}

void axpy(float* y, float a, const float* x, int64_t n) {
#if defined(__AVX512F__)
    __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 r = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
#else
    for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
#endif
}

void layer_norm(float* y, const float* x, const float* gain, const float* bias, int64_t T, int64_t C,
                float eps) {
    for (int64_t t = 0; t < T; ++t) {
        const float* xr = x + t * C;
        float* yr = y + t * C;
        // Double accumulators: the statistics are then exact to float precision whatever C is.
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) sum += xr[c];
        const double mean = sum / double(C);
        double sq = 0.0;
        for (int64_t c = 0; c < C; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
        const float inv_std = float(1.0 / std::sqrt(sq / double(C) + double(eps)));
        const float mean_f = float(mean);
        for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mean_f) * inv_std * gain[c] + bias[c];
    }
}

void gelu_tanh(float* x, int64_t n) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
    }
}

void gelu_erf(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.7071067811865476f));
}

void relu(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

}  // namespace kvscope
