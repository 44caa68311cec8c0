// matmul_kn: y(T, N) = x(T, K) · w(K, N) + bias, the Conv1D layout (GPT-2's projections), float32 or
// bfloat16 weights. Each output is two fma chains, over k < K/2 and over the rest, added, then the bias.
// Per instruction set, side by side, the two kernels the driver at the end calls:
//   stream_kn<T>   few rows (decode, small batches): one fma chain per output over a run of k, no bias
//   tile_kn<RT>    many rows (prefill): RT rows x 64 columns from a packed (K, 64) weight tile, both
//                  chains and the bias
// The AVX2 and portable variants compute the AVX-512 build's sums, operation for operation.
#include "kernels/matmul.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/lanes.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

// Columns are split between threads in blocks of this many floats, so the split never lands inside
// a SIMD vector and every thread streams whole cache lines of the weight rows.
constexpr int64_t kColumnBlock = 64;

// matmul_kn's sums are two fma chains, over k < first_half(K) and over the rest, added at the end. Two
// threads then each stream one contiguous half of the weight matrix in decode (a column split makes
// every thread jump at each row's end and reaches only ~80% of the memory bandwidth).
inline int64_t first_half(int64_t K) { return K / 2; }

#if KVSCOPE_AVX512
// y[r, n0:n0+64] for RT rows (1 or 6): acc = 0; for k: acc = fma(x[r,k], w[k,n], acc); y = acc + bias.
// w_tile is a packed (K, 64) tile, zero beyond the matrix's last column, so its loads need no mask.
// The accumulators are named variables, not an array: GCC keeps an array of vectors in memory and
// stores every accumulator on every iteration, which halves the speed.
#define KVSCOPE_ROW_FMA(r)                                        \
    {                                                             \
        const __m512 xv = _mm512_set1_ps(x[(r) * K + k]);         \
        a##r##0 = _mm512_fmadd_ps(xv, w0, a##r##0);               \
        a##r##1 = _mm512_fmadd_ps(xv, w1, a##r##1);               \
        a##r##2 = _mm512_fmadd_ps(xv, w2, a##r##2);               \
        a##r##3 = _mm512_fmadd_ps(xv, w3, a##r##3);               \
    }
#define KVSCOPE_ROW_ZERO(r) __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = a##r##0, a##r##2 = a##r##0, a##r##3 = a##r##0;
#define KVSCOPE_ROW_PARK(r)                                                \
    {                                                                       \
        float* yr = y + (r) * N + n0;                                       \
        _mm512_mask_storeu_ps(yr, m0, a##r##0);                             \
        _mm512_mask_storeu_ps(yr + 16, m1, a##r##1);                        \
        _mm512_mask_storeu_ps(yr + 32, m2, a##r##2);                        \
        _mm512_mask_storeu_ps(yr + 48, m3, a##r##3);                        \
        a##r##0 = a##r##1 = a##r##2 = a##r##3 = zero;                       \
    }
#define KVSCOPE_ROW_STORE(r)                                                                                 \
    {                                                                                                        \
        float* yr = y + (r) * N + n0;                                                                        \
        _mm512_mask_storeu_ps(yr, m0, _mm512_add_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(m0, yr), a##r##0), b0)); \
        _mm512_mask_storeu_ps(yr + 16, m1,                                                                   \
                              _mm512_add_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(m1, yr + 16), a##r##1), b1)); \
        _mm512_mask_storeu_ps(yr + 32, m2,                                                                   \
                              _mm512_add_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(m2, yr + 32), a##r##2), b2)); \
        _mm512_mask_storeu_ps(yr + 48, m3,                                                                   \
                              _mm512_add_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(m3, yr + 48), a##r##3), b3)); \
    }

template <int RT>
void tile_kn(float* y, const float* x, const float* w_tile, const float* bias, int64_t K, int64_t N, int64_t n0,
             int64_t n_end) {
    static_assert(RT == 1 || RT == 6, "tile_kn is written out for 1 and 6 rows");
    const __mmask16 m0 = tail_mask(n_end - n0), m1 = n0 + 16 < n_end ? tail_mask(n_end - n0 - 16) : 0,
                    m2 = n0 + 32 < n_end ? tail_mask(n_end - n0 - 32) : 0,
                    m3 = n0 + 48 < n_end ? tail_mask(n_end - n0 - 48) : 0;
    const int64_t half = first_half(K);
    KVSCOPE_ROW_ZERO(0)
    KVSCOPE_ROW_ZERO(1)
    KVSCOPE_ROW_ZERO(2)
    KVSCOPE_ROW_ZERO(3)
    KVSCOPE_ROW_ZERO(4)
    KVSCOPE_ROW_ZERO(5)
    auto chain = [&](int64_t k_begin, int64_t k_end) {
        for (int64_t k = k_begin; k < k_end; ++k) {
            const float* wk = w_tile + k * 64;
            const __m512 w0 = _mm512_loadu_ps(wk), w1 = _mm512_loadu_ps(wk + 16), w2 = _mm512_loadu_ps(wk + 32),
                         w3 = _mm512_loadu_ps(wk + 48);
            KVSCOPE_ROW_FMA(0)
            if constexpr (RT == 6) {
                KVSCOPE_ROW_FMA(1)
                KVSCOPE_ROW_FMA(2)
                KVSCOPE_ROW_FMA(3)
                KVSCOPE_ROW_FMA(4)
                KVSCOPE_ROW_FMA(5)
            }
        }
    };
    // First half's sums wait in y (the registers are all taken), then y = (first + second) + bias.
    chain(0, half);
    const __m512 zero = _mm512_setzero_ps();
    KVSCOPE_ROW_PARK(0)
    if constexpr (RT == 6) {
        KVSCOPE_ROW_PARK(1)
        KVSCOPE_ROW_PARK(2)
        KVSCOPE_ROW_PARK(3)
        KVSCOPE_ROW_PARK(4)
        KVSCOPE_ROW_PARK(5)
    }
    chain(half, K);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias + n0) : zero,
                 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + n0 + 16) : zero,
                 b2 = bias ? _mm512_maskz_loadu_ps(m2, bias + n0 + 32) : zero,
                 b3 = bias ? _mm512_maskz_loadu_ps(m3, bias + n0 + 48) : zero;
    KVSCOPE_ROW_STORE(0)
    if constexpr (RT == 6) {
        KVSCOPE_ROW_STORE(1)
        KVSCOPE_ROW_STORE(2)
        KVSCOPE_ROW_STORE(3)
        KVSCOPE_ROW_STORE(4)
        KVSCOPE_ROW_STORE(5)
    }
}
#undef KVSCOPE_ROW_FMA
#undef KVSCOPE_ROW_ZERO
#undef KVSCOPE_ROW_PARK
#undef KVSCOPE_ROW_STORE

// Few rows (decode, small batches): out(T, N)[n_begin, n_end) = the fma chain over the k_count weight
// rows w (each N long) in order, no bias. Every row of x is applied to each loaded weight vector, and
// the accumulators for a block of columns stay in L1.
template <int T, class Wt>
void stream_kn(float* out, const float* x, int64_t x_stride, const Wt* w, int64_t k_count, int64_t N,
               int64_t n_begin, int64_t n_end) {
    // Columns per accumulator block: for one row a whole GPT-2-sized weight row, so a thread reads its
    // rows as one contiguous run; with more rows narrower, so that the T accumulator rows (24 KiB in
    // all) stay in L1: at 8 rows x 8 KiB they spilled to L2 and batch 8 ran at two thirds of batch 1's
    // weight bandwidth.
    constexpr int64_t kBlock = T == 1 ? 4096 : T == 2 ? 2048 : (6144 / T) & ~int64_t(15);  // 64-byte rows
    constexpr int64_t kPrefetchRows = 4;
    alignas(64) static thread_local float acc[T][kBlock];
    for (int64_t b0 = n_begin; b0 < n_end; b0 += kBlock) {
        const int64_t width = std::min(kBlock, n_end - b0);
        const int64_t full = width & ~int64_t(15);
        const __mmask16 tail = tail_mask(width - full);
        // Ask for rows ahead where it pays: a block narrower than the row jumps at each row's end, which
        // the hardware prefetcher does not follow, and over whole rows bfloat16 weights read at 24 GB/s
        // without it and 34 with it (twice the loop work per cache line of float32, which needs no help).
        const bool prefetch = width < N || sizeof(Wt) == 2;
        for (int t = 0; t < T; ++t) std::memset(acc[t], 0, size_t(width) * sizeof(float));
        // U weight rows per pass: each accumulator is loaded and stored once per U fmas, and U rows stream
        // side by side. Each element's chain still runs over k in ascending order.
        auto pass = [&]<int U>(int64_t k) {
            const Wt* wk = w + k * N + b0;
            __m512 xv[U][T];
            for (int u = 0; u < U; ++u)
                for (int t = 0; t < T; ++t) xv[u][t] = _mm512_set1_ps(x[t * x_stride + k + u]);
            const bool ask = prefetch && k + U + kPrefetchRows <= k_count;
            for (int64_t i = 0; i < full; i += 16) {
                __m512 wv[U];
                for (int u = 0; u < U; ++u) {
                    if (ask) _mm_prefetch(reinterpret_cast<const char*>(wk + (kPrefetchRows + u) * N + i), _MM_HINT_T0);
                    wv[u] = load16(wk + u * N + i);
                }
                for (int t = 0; t < T; ++t) {
                    __m512 a = _mm512_load_ps(acc[t] + i);
                    for (int u = 0; u < U; ++u) a = _mm512_fmadd_ps(xv[u][t], wv[u], a);
                    _mm512_store_ps(acc[t] + i, a);
                }
            }
            if (full < width) {
                __m512 wv[U];
                for (int u = 0; u < U; ++u) wv[u] = maskz_load16(tail, wk + u * N + full);
                for (int t = 0; t < T; ++t) {
                    __m512 a = _mm512_maskz_load_ps(tail, acc[t] + full);
                    for (int u = 0; u < U; ++u) a = _mm512_fmadd_ps(xv[u][t], wv[u], a);
                    _mm512_mask_store_ps(acc[t] + full, tail, a);
                }
            }
        };
        constexpr int U = T <= 2 ? 4 : 2;
        int64_t k = 0;
        for (; k + U <= k_count; k += U) pass.template operator()<U>(k);
        for (; k < k_count; ++k) pass.template operator()<1>(k);
        for (int t = 0; t < T; ++t) std::memcpy(out + t * N + b0, acc[t], size_t(width) * sizeof(float));
    }
}

#elif KVSCOPE_AVX2
// CPUs with AVX2 but not AVX-512 (AMD Zen 2/3, and VMs that hide AVX-512): the portable chains, 8 columns
// per vector.

// out(T, N)[n_begin, n_end) = the fma chain over the k_count weight rows in k order, no bias: each
// element's chain as the portable loop runs it, 8 columns at a time (k outer, so the weight rows stream).
template <int T, class Wt>
void stream_kn(float* out, const float* x, int64_t x_stride, const Wt* w, int64_t k_count, int64_t N,
               int64_t n_begin, int64_t n_end) {
    constexpr int64_t kBlock = T == 1 ? 4096 : T == 2 ? 2048 : (6144 / T) & ~int64_t(7);
    alignas(32) static thread_local float acc[T][kBlock];
    for (int64_t b0 = n_begin; b0 < n_end; b0 += kBlock) {
        const int64_t width = std::min(kBlock, n_end - b0), full = width & ~int64_t(7);
        for (int t = 0; t < T; ++t) std::memset(acc[t], 0, size_t(width) * sizeof(float));
        for (int64_t k = 0; k < k_count; ++k) {
            const Wt* wk = w + k * N + b0;
            __m256 xv[T];
            for (int t = 0; t < T; ++t) xv[t] = _mm256_set1_ps(x[t * x_stride + k]);
            for (int64_t i = 0; i < full; i += 8) {
                const __m256 wv = load8(wk + i);
                for (int t = 0; t < T; ++t)
                    _mm256_store_ps(acc[t] + i, _mm256_fmadd_ps(xv[t], wv, _mm256_load_ps(acc[t] + i)));
            }
            for (int64_t i = full; i < width; ++i)
                for (int t = 0; t < T; ++t) acc[t][i] = std::fma(x[t * x_stride + k], as_f32(wk[i]), acc[t][i]);
        }
        for (int t = 0; t < T; ++t) std::memcpy(out + t * N + b0, acc[t], size_t(width) * sizeof(float));
    }
}

// y[r, n0:n0+64) from the packed (K, 64) tile: first = the fma chain over k < K/2, second = over the rest,
// y = (first + second) + bias, per element as the portable loop; 2 rows x 32 columns at a time (8 chains).
template <int RT>
void tile_kn(float* y, const float* x, const float* w_tile, const float* bias, int64_t K, int64_t N, int64_t n0,
             int64_t n_end) {
    const int64_t half = first_half(K);
    for (int r0 = 0; r0 < RT; r0 += 2) {
        const int rows = std::min(2, RT - r0);
        for (int c0 = 0; c0 < 64 && n0 + c0 < n_end; c0 += 32) {
            __m256 first[2][4], second[2][4];
            auto chain = [&](__m256 (&acc)[2][4], int64_t k_begin, int64_t k_end) {
                for (int r = 0; r < 2; ++r)
                    for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_setzero_ps();
                for (int64_t k = k_begin; k < k_end; ++k) {
                    const float* wk = w_tile + k * 64 + c0;
                    const __m256 w0 = _mm256_loadu_ps(wk), w1 = _mm256_loadu_ps(wk + 8), w2 = _mm256_loadu_ps(wk + 16),
                                 w3 = _mm256_loadu_ps(wk + 24);
                    for (int r = 0; r < rows; ++r) {
                        const __m256 xv = _mm256_set1_ps(x[(r0 + r) * K + k]);
                        acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
                        acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
                        acc[r][2] = _mm256_fmadd_ps(xv, w2, acc[r][2]);
                        acc[r][3] = _mm256_fmadd_ps(xv, w3, acc[r][3]);
                    }
                }
            };
            chain(first, 0, half);
            chain(second, half, K);
            for (int r = 0; r < rows; ++r)
                for (int v = 0; v < 4; ++v) {
                    alignas(32) float sum[8];
                    _mm256_store_ps(sum, _mm256_add_ps(first[r][v], second[r][v]));
                    for (int i = 0; i < 8; ++i) {
                        const int64_t n = n0 + c0 + v * 8 + i;
                        if (n < n_end) y[(r0 + r) * N + n] = sum[i] + (bias ? bias[n] : 0.0f);
                    }
                }
        }
    }
}

#else  // portable: the same arithmetic per element, one element at a time
template <int T, class Wt>
void stream_kn(float* out, const float* x, int64_t x_stride, const Wt* w, int64_t k_count, int64_t N,
               int64_t n_begin, int64_t n_end) {
    for (int t = 0; t < T; ++t)
        for (int64_t n = n_begin; n < n_end; ++n) {
            float acc = 0.0f;
            for (int64_t k = 0; k < k_count; ++k) acc = std::fma(x[t * x_stride + k], as_f32(w[k * N + n]), acc);
            out[t * N + n] = acc;
        }
}

template <int RT>
void tile_kn(float* y, const float* x, const float* w_tile, const float* bias, int64_t K, int64_t N, int64_t n0,
             int64_t n_end) {
    const int64_t half = first_half(K);
    for (int r = 0; r < RT; ++r)
        for (int64_t n = n0; n < std::min(n_end, n0 + 64); ++n) {
            float first = 0.0f, second = 0.0f;
            for (int64_t k = 0; k < half; ++k) first = std::fma(x[r * K + k], w_tile[k * 64 + (n - n0)], first);
            for (int64_t k = half; k < K; ++k) second = std::fma(x[r * K + k], w_tile[k * 64 + (n - n0)], second);
            y[r * N + n] = (first + second) + (bias ? bias[n] : 0.0f);
        }
}
#endif

// Rows in blocks of 6 (the tail one at a time), columns [n_begin, n_end) in tiles of 64. Each weight
// tile (K, 64) is first copied into a contiguous buffer: walked in place it would touch a new page
// every few cache lines, and every row block walks it again.
template <class Wt>
void rows_kn(float* y, const float* x, const Wt* w, const float* bias, int64_t T, int64_t K, int64_t N,
             int64_t n_begin, int64_t n_end) {
    constexpr int64_t W = 64;
    thread_local std::vector<float> packed;  // (K, W); grows once per thread, then reused
    if (int64_t(packed.size()) < K * W) packed.resize(size_t(K * W));
    for (int64_t n0 = n_begin; n0 < n_end; n0 += W) {
        const int64_t width = std::min(W, n_end - n0);
        for (int64_t k = 0; k < K; ++k) {
            float* row = packed.data() + k * W;
            for (int64_t i = 0; i < width; ++i) row[i] = as_f32(w[k * N + n0 + i]);
            std::memset(row + width, 0, size_t(W - width) * sizeof(float));
        }
        int64_t t = 0;
        for (; t + 6 <= T; t += 6) tile_kn<6>(y + t * N, x + t * K, packed.data(), bias, K, N, n0, n_end);
        for (; t < T; ++t) tile_kn<1>(y + t * N, x + t * K, packed.data(), bias, K, N, n0, n_end);
    }
}

template <int T, class Wt>
void stream_rows(float* out, const float* x, int64_t K, const Wt* w, int64_t k_begin, int64_t k_end, int64_t N,
                 int64_t n_begin, int64_t n_end) {
    stream_kn<T, Wt>(out, x + k_begin, K, w + k_begin * N, k_end - k_begin, N, n_begin, n_end);
}

template <class Wt>
void matmul_kn_impl(float* y, const float* x, const Wt* w, const float* bias, int64_t T, int64_t K, int64_t N) {
    const int64_t n_blocks = (N + kColumnBlock - 1) / kColumnBlock;
    const int64_t n_threads = ThreadPool::global().n_threads();
    if (T <= 8) {
        // Memory-bound. Tasks are (half of k, column range): with two threads each streams one half of
        // the matrix as one contiguous run. The first half's sums go to y, the second's to `second`.
        thread_local std::vector<float> second_storage;  // (T, N); grows once per calling thread
        if (int64_t(second_storage.size()) < T * N) second_storage.resize(size_t(T * N));
        float* second = second_storage.data();
        const int64_t half = first_half(K);
        const int64_t n_ranges = std::min(n_blocks, std::max<int64_t>(1, (n_threads + 1) / 2));
        ThreadPool::global().parallel_for(2 * n_ranges, [&](int64_t task) {
            const int64_t part = task / n_ranges, range = task % n_ranges;
            const int64_t n_begin = n_blocks * range / n_ranges * kColumnBlock;
            const int64_t n_end = std::min(N, n_blocks * (range + 1) / n_ranges * kColumnBlock);
            float* out = part == 0 ? y : second;
            const int64_t k_begin = part == 0 ? 0 : half, k_end = part == 0 ? half : K;
            switch (T) {
                case 1: stream_rows<1, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
                case 2: stream_rows<2, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
                case 3: stream_rows<3, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
                case 4: stream_rows<4, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
                case 5: stream_rows<5, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
                case 6: stream_rows<6, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
                case 7: stream_rows<7, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
                default: stream_rows<8, Wt>(out, x, K, w, k_begin, k_end, N, n_begin, n_end); break;
            }
        });
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) y[t * N + n] = (y[t * N + n] + second[t * N + n]) + (bias ? bias[n] : 0.0f);
        return;
    }
    // A few contiguous column ranges per thread: each thread streams its own part of every weight row.
    const int64_t n_tasks = std::min(n_blocks, n_threads * 4);
    ThreadPool::global().parallel_for(n_tasks, [&](int64_t task) {
        int64_t b0 = n_blocks * task / n_tasks, b1 = n_blocks * (task + 1) / n_tasks;
        int64_t n_begin = b0 * kColumnBlock, n_end = std::min(N, b1 * kColumnBlock);
        rows_kn<Wt>(y, x, w, bias, T, K, N, n_begin, n_end);  // compute-bound: 6x64 register tiles
    });
}

}  // namespace

void matmul_kn(float* y, const float* x, WeightRef w, const float* bias, int64_t T, int64_t K, int64_t N) {
    assert(!w.blocks.data && "matrices of blocks are stored (N, K): matmul_nk's");
    if (w.f32) matmul_kn_impl(y, x, w.f32, bias, T, K, N);
    else matmul_kn_impl(y, x, w.bf16, bias, T, K, N);
}

}  // namespace kvscope
