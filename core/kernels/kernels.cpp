#include "kernels/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/thread_pool.h"

#include "kernels/simd.h"

namespace kvscope {
namespace {

inline float as_f32(float v) { return v; }
inline float as_f32(uint16_t bf16) {
    const uint32_t bits = uint32_t(bf16) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

// Columns are split between threads in blocks of this many floats, so the split never lands inside
// a SIMD vector and every thread streams whole cache lines of the weight rows.
constexpr int64_t kColumnBlock = 64;

// matmul_kn's sums are two fma chains, over k < first_half(K) and over the rest, added at the end. Two
// threads then each stream one contiguous half of the weight matrix in decode (a column split makes
// every thread jump at each row's end and reaches only ~80% of the memory bandwidth).
inline int64_t first_half(int64_t K) { return K / 2; }

// The sum of one output's 16 lanes as a tree: lane i + lane i+8, then i + i+4, i + i+2, i + i+1, the
// pairs _mm512_reduce_add_ps adds, so every build reduces the lanes alike (float addition commutes).
inline float lane_tree_sum(const float* lanes) {
    float s[8];
    for (int i = 0; i < 8; ++i) s[i] = lanes[i] + lanes[i + 8];
    for (int i = 0; i < 4; ++i) s[i] = s[i] + s[i + 4];
    for (int i = 0; i < 2; ++i) s[i] = s[i] + s[i + 2];
    return s[0] + s[1];
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// Packed operands for prefill tiles (tile_nk_packed_span): 6 rows of x by 4 weight rows, 16 lanes per slice.
constexpr int kPackRows = 6;
constexpr int kTileAccumulators = kPackRows * 4;

#if !defined(__AVX512F__)
// AVX2: 8 floats, or 8 bfloat16 values widened exactly (the top half of a float32).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
#endif

// Float buffers aligned to 64 bytes that grow once per thread and are then reused.
float* aligned_scratch(std::vector<float>& storage, int64_t n) {
    if (int64_t(storage.size()) < n + 16) storage.resize(size_t(n + 16));
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
}

// Rows [6b, 6b + 6) of x (T, K) as (KS, 6, 16); rows past T are zero.
void pack_x_block(float* out, const float* x, int64_t T, int64_t K, int64_t KS, int64_t b) {
#if defined(__AVX512F__)
    for (int64_t s = 0; s < KS; ++s) {
        const __mmask16 m = K - s * 16 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (K - s * 16)) - 1u);
        for (int r = 0; r < kPackRows; ++r) {
            const int64_t row = b * kPackRows + r;
            _mm512_store_ps(out + (s * kPackRows + r) * 16,
                            row < T ? _mm512_maskz_loadu_ps(m, x + row * K + s * 16) : _mm512_setzero_ps());
        }
    }
    return;
#else
    const int64_t full = K / 16, rows = std::min<int64_t>(kPackRows, T - b * kPackRows);
    const float* src = x + b * kPackRows * K;
    for (int64_t s = 0; s < full; ++s)  // whole slices: two vector copies each, written in order
        for (int r = 0; r < rows; ++r) {
            float* dst = out + (s * kPackRows + r) * 16;
            _mm256_store_ps(dst, _mm256_loadu_ps(src + r * K + s * 16));
            _mm256_store_ps(dst + 8, _mm256_loadu_ps(src + r * K + s * 16 + 8));
        }
#endif
    for (int64_t s = 0; s < KS; ++s)
        for (int r = 0; r < kPackRows; ++r) {
            const int64_t k0 = s * 16, n = b * kPackRows + r < T ? std::min<int64_t>(16, K - k0) : 0;
            if (n == 16) continue;
            float* dst = out + (s * kPackRows + r) * 16;
            if (n > 0) std::memcpy(dst, x + (b * kPackRows + r) * K + k0, size_t(n) * sizeof(float));
            std::memset(dst + n, 0, size_t(16 - n) * sizeof(float));
        }
}

// Weight rows [n0, n0 + n_count) of w (N, K) as float32 (KS, 4, 16); rows past n_count are zero.
template <class Wt>
void pack_w_group(float* out, const Wt* w, int64_t K, int64_t KS, int64_t n0, int64_t n_count) {
#if defined(__AVX512F__)
    for (int c = 0; c < 4; ++c) {
        const Wt* row = w + (n0 + c) * K;
        for (int64_t s = 0; s < KS; ++s) {
            const __mmask16 m = c >= n_count ? __mmask16(0)
                                : K - s * 16 >= 16 ? __mmask16(0xFFFF)
                                                   : __mmask16((1u << (K - s * 16)) - 1u);
            __m512 v;
            if constexpr (std::is_same_v<Wt, float>) {
                v = _mm512_maskz_loadu_ps(m, row + s * 16);
            } else {  // bfloat16 widened exactly: the top half of a float32
                const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + s * 16));
                v = _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
            }
            _mm512_store_ps(out + (s * 4 + c) * 16, v);
        }
    }
    return;
#else
    const int64_t full = K / 16;  // whole slices as vectors
    for (int c = 0; c < n_count; ++c) {
        const Wt* src = w + (n0 + c) * K;
        for (int64_t s = 0; s < full; ++s) {
            float* dst = out + (s * 4 + c) * 16;
            _mm256_store_ps(dst, load8(src + s * 16));
            _mm256_store_ps(dst + 8, load8(src + s * 16 + 8));
        }
    }
#endif
    for (int64_t s = 0; s < KS; ++s)
        for (int c = 0; c < 4; ++c) {
            float* dst = out + (s * 4 + c) * 16;
            const int64_t k0 = s * 16, n = c < n_count ? std::min<int64_t>(16, K - k0) : 0;
            if (n == 16) continue;
            for (int64_t i = 0; i < n; ++i) dst[i] = as_f32(w[(n0 + c) * K + k0 + i]);
            std::memset(dst + n, 0, size_t(16 - n) * sizeof(float));
        }
}

#endif

#if defined(__AVX512F__)

__mmask16 tail_mask(int64_t remaining) {
    return remaining >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << remaining) - 1u);
}

// 16 weights as float32. bfloat16 is the top half of a float32, so widening is exact: the products
// below are float32 FMAs on the stored values (no AVX512_BF16 dot products, which would also round x).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline __m512 maskz_load16(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 maskz_load16(__mmask16 m, const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

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

// y[r, n0:n0+4] = Σ_k x[r,k]·w[n,k] for RT rows (1 or 4) and 4 weight rows; lanes hold partial sums
// over k ≡ lane (mod 16), reduced in a fixed order. Named accumulators for the reason given at tile_kn.
#define KVSCOPE_NK_ROW(r)                                                \
    if ((r) < RT) {                                                      \
        __m512 xv = _mm512_maskz_loadu_ps(m, x + (r) * K + k);           \
        __asm__("" : "+v"(xv)); /* one load, not four memory operands */ \
        a##r##0 = _mm512_fmadd_ps(xv, w0, a##r##0);                      \
        a##r##1 = _mm512_fmadd_ps(xv, w1, a##r##1);                      \
        a##r##2 = _mm512_fmadd_ps(xv, w2, a##r##2);                      \
        a##r##3 = _mm512_fmadd_ps(xv, w3, a##r##3);                      \
    }
#define KVSCOPE_NK_ZERO(r) __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = a##r##0, a##r##2 = a##r##0, a##r##3 = a##r##0;
#define KVSCOPE_NK_STORE(r)                                                                                \
    if ((r) < RT) _mm_mask_storeu_ps(y + (r) * N + n0, store_mask, _mm_add_ps(reduce_add4(a##r##0, a##r##1, a##r##2, a##r##3), b));

// kPaired and first_rows are the AVX2 build's (bfloat16 pairs, prefetch); the same signature everywhere.
template <int RT, class Wt, bool kPaired = false>
void tile_nk(float* y, const float* x, const Wt* w, const float* bias, int64_t K, int64_t N, int64_t n0,
             int64_t n_count, bool /*first_rows*/ = true) {
    static_assert(!kPaired, "bfloat16 pairs are the AVX2 build's");
    static_assert(RT == 1 || RT == 4, "tile_nk is written out for 1 and 4 rows");
    // Missing weight rows (past N) read row n0 again; their sums are never stored.
    const Wt* r0 = w + n0 * K;
    const Wt* r1 = w + (n0 + (n_count > 1 ? 1 : 0)) * K;
    const Wt* r2 = w + (n0 + (n_count > 2 ? 2 : 0)) * K;
    const Wt* r3 = w + (n0 + (n_count > 3 ? 3 : 0)) * K;
    KVSCOPE_NK_ZERO(0)
    KVSCOPE_NK_ZERO(1)
    KVSCOPE_NK_ZERO(2)
    KVSCOPE_NK_ZERO(3)
    // The group of rows two groups ahead, asked into L2 now. Into L1 (_MM_HINT_T0) the requests crowd
    // out the loads in flight: SmolLM2-shape decode pass, 2 threads, AMD EPYC Zen 4: fp32 22.0 -> 16.9 ms,
    // bfloat16 11.8 -> 8.7 ms with T1 (no prefetch: 18.7 / 12.7 ms).
    const Wt* ahead = w + std::max<int64_t>(0, std::min(n0 + 8, N - 4)) * K;
    // Whole steps with a constant mask (plain loads), then the partial one.
#define KVSCOPE_NK_STEP(mask)                                                                                      \
    {                                                                                                            \
        const __mmask16 m = (mask);                                                                              \
        for (int r = 0; r < 4; ++r) _mm_prefetch(reinterpret_cast<const char*>(ahead + r * K + k), _MM_HINT_T1); \
        __m512 w0 = maskz_load16(m, r0 + k), w1 = maskz_load16(m, r1 + k), w2 = maskz_load16(m, r2 + k),         \
               w3 = maskz_load16(m, r3 + k);                                                                     \
        if constexpr (RT > 1) __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3)); /* loaded once, not per row */ \
        KVSCOPE_NK_ROW(0)                                                                                        \
        KVSCOPE_NK_ROW(1)                                                                                        \
        KVSCOPE_NK_ROW(2)                                                                                        \
        KVSCOPE_NK_ROW(3)                                                                                        \
    }
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) KVSCOPE_NK_STEP(__mmask16(0xFFFF))
    if (k < K) KVSCOPE_NK_STEP(tail_mask(K - k))
#undef KVSCOPE_NK_STEP
    const __mmask8 store_mask = __mmask8((1u << n_count) - 1u);
    const __m128 b = bias ? _mm_maskz_loadu_ps(store_mask, bias + n0) : _mm_setzero_ps();
    KVSCOPE_NK_STORE(0)
    KVSCOPE_NK_STORE(1)
    KVSCOPE_NK_STORE(2)
    KVSCOPE_NK_STORE(3)
}
#undef KVSCOPE_NK_ROW
#undef KVSCOPE_NK_ZERO
#undef KVSCOPE_NK_STORE

// Decode (one row of x): tile_nk's sums, one weight row at a time, so each thread reads a single stream.
// From 2 MiB pages (huge_pages.h) the hardware prefetcher keeps up with float32 rows, and asking ahead only
// costs; bfloat16 rows arrive half as fast per instruction, and the row ~16 KiB ahead asked into L2 pays.
// Zen 4 VM, interleaved runs, tokens/s without / with the request (4 rows ahead):
//   float32   SmolLM2-135M shape: 1 thread 47-49 / 39-40, 2 threads 62-64 / 56-59
//             Qwen2.5-0.5B shape: 1 thread 12.3-12.5 / 10.8-11.3
//   bfloat16  SmolLM2-135M shape: 1 thread 75-77 / 85-88
//             Qwen2.5-0.5B shape: 1 thread 19-20 / 26-28, 2 threads 26-31 / 31-33
// (8, 16 or 32 KiB ahead: within a few % of each other.)
// Rows [n0, n0 + n_count) of a matrix of N rows; the request ahead may reach past n_count, never past N.
template <class Wt>
void rows_nk(float* y, const float* x, const Wt* w, const float* bias, int64_t K, int64_t N, int64_t n0, int64_t n_count) {
    constexpr bool kAsk = sizeof(Wt) == 2;
    const int64_t ahead_rows = std::max<int64_t>(1, (int64_t(16) << 10) / (K * int64_t(sizeof(Wt))));
    for (int64_t n = n0; n < n0 + n_count; ++n) {
        const Wt* row = w + n * K;
        const Wt* ahead = w + std::min(n + ahead_rows, N - 1) * K;
        __m512 acc = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            if constexpr (kAsk) _mm_prefetch(reinterpret_cast<const char*>(ahead + k), _MM_HINT_T1);
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), load16(row + k), acc);
        }
        if (k < K) {
            const __mmask16 m = tail_mask(K - k);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + k), maskz_load16(m, row + k), acc);
        }
        y[n] = reduce_add(acc) + (bias ? bias[n] : 0.0f);  // tile_nk adds a zero bias too
    }
}

// Many rows (prefill): tile_nk's arithmetic on packed operands. x is packed per block of 6 rows as
// (KS, 6, 16) and 4 weight rows as (KS, 4, 16), KS = ceil(K / 16), zero past K, so every load is one
// aligned vector of a sequential stream; walked in place the same tile reads ten strided rows and runs
// at half the speed. A call covers slices [s0, s0 + s_count) and continues the 24 lane accumulators
// kept in `acc` (6 rows x 4 weight rows of 16 lanes), so splitting K into spans keeps every lane's fma
// chain, and reduce_packed_tile then applies tile_nk's reduction: the sums are bitwise equal (zero
// padding adds fma(0, 0, acc), as tile_nk's masked loads do).
#define KVSCOPE_PK_LOAD(r)                                                                       \
    __m512 a##r##0 = first ? zero : _mm512_load_ps(acc + (r * 4 + 0) * 16),                      \
           a##r##1 = first ? zero : _mm512_load_ps(acc + (r * 4 + 1) * 16),                      \
           a##r##2 = first ? zero : _mm512_load_ps(acc + (r * 4 + 2) * 16),                      \
           a##r##3 = first ? zero : _mm512_load_ps(acc + (r * 4 + 3) * 16);
#define KVSCOPE_PK_ROW(r)                                                 \
    {                                                                     \
        __m512 xv = _mm512_load_ps(xs + (r) * 16);                        \
        __asm__("" : "+v"(xv)); /* one load, not four memory operands */ \
        a##r##0 = _mm512_fmadd_ps(xv, w0, a##r##0);                       \
        a##r##1 = _mm512_fmadd_ps(xv, w1, a##r##1);                       \
        a##r##2 = _mm512_fmadd_ps(xv, w2, a##r##2);                       \
        a##r##3 = _mm512_fmadd_ps(xv, w3, a##r##3);                       \
    }
#define KVSCOPE_PK_SAVE(r)                                  \
    _mm512_store_ps(acc + (r * 4 + 0) * 16, a##r##0);       \
    _mm512_store_ps(acc + (r * 4 + 1) * 16, a##r##1);       \
    _mm512_store_ps(acc + (r * 4 + 2) * 16, a##r##2);       \
    _mm512_store_ps(acc + (r * 4 + 3) * 16, a##r##3);

// acc (24, 16) out, and in unless `first` (then the sums start at zero); x_slices (s_count, 6, 16) and
// w_slices (s_count, 4, 16); all 64-byte aligned.
void tile_nk_packed_span(float* acc, const float* x_slices, const float* w_slices, int64_t s_count, bool first) {
    const __m512 zero = _mm512_setzero_ps();
    KVSCOPE_PK_LOAD(0)
    KVSCOPE_PK_LOAD(1)
    KVSCOPE_PK_LOAD(2)
    KVSCOPE_PK_LOAD(3)
    KVSCOPE_PK_LOAD(4)
    KVSCOPE_PK_LOAD(5)
    for (int64_t s = 0; s < s_count; ++s) {
        const float* ws = w_slices + s * 64;
        const float* xs = x_slices + s * 16 * kPackRows;
        const __m512 w0 = _mm512_load_ps(ws), w1 = _mm512_load_ps(ws + 16), w2 = _mm512_load_ps(ws + 32),
                     w3 = _mm512_load_ps(ws + 48);
        KVSCOPE_PK_ROW(0)
        KVSCOPE_PK_ROW(1)
        KVSCOPE_PK_ROW(2)
        KVSCOPE_PK_ROW(3)
        KVSCOPE_PK_ROW(4)
        KVSCOPE_PK_ROW(5)
    }
    KVSCOPE_PK_SAVE(0)
    KVSCOPE_PK_SAVE(1)
    KVSCOPE_PK_SAVE(2)
    KVSCOPE_PK_SAVE(3)
    KVSCOPE_PK_SAVE(4)
    KVSCOPE_PK_SAVE(5)
}
#undef KVSCOPE_PK_LOAD
#undef KVSCOPE_PK_ROW
#undef KVSCOPE_PK_SAVE

// y rows [0, n_rows) at columns [n0, n0 + n_count) from a finished tile's accumulators, reduced as tile_nk does.
void reduce_packed_tile(float* y, const float* acc, const float* bias, int64_t n_rows, int64_t N, int64_t n0,
                        int64_t n_count) {
    const __mmask8 m = __mmask8((1u << n_count) - 1u);
    const __m128 b = bias ? _mm_maskz_loadu_ps(m, bias + n0) : _mm_setzero_ps();
    for (int r = 0; r < n_rows; ++r) {
        const float* a = acc + r * 4 * 16;
        const __m128 sums = reduce_add4(_mm512_load_ps(a), _mm512_load_ps(a + 16), _mm512_load_ps(a + 32), _mm512_load_ps(a + 48));
        _mm_mask_storeu_ps(y + r * N + n0, m, _mm_add_ps(sums, b));
    }
}

#else  // portable fallback: the same arithmetic per element, one element at a time

#if defined(__AVX2__) && defined(__FMA__)
// CPUs with AVX2 but not AVX-512 (AMD Zen 2/3, and VMs that hide AVX-512): the portable sums below, 16
// lane chains per output, computed as two 8-lane vectors; each output's lanes are then added as the
// same tree (lane_tree_sum), so both builds give the same bits.

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

// The tree sums (lane_tree_sum) of 4 outputs' 16 lanes, lanes[c][0..15], 32-byte aligned: each level
// adds whole vectors, the halves of two outputs sharing one add from the second level on.
inline __m128 lane_tree_sums4(const float (*lanes)[16]) {
    __m256 v[4];
    for (int c = 0; c < 4; ++c) v[c] = _mm256_add_ps(_mm256_load_ps(lanes[c]), _mm256_load_ps(lanes[c] + 8));  // i + i+8
    // lane i + i+4: (output 0 | output 1) and (2 | 3)
    const __m256 s01 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20), _mm256_permute2f128_ps(v[0], v[1], 0x31));
    const __m256 s23 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20), _mm256_permute2f128_ps(v[2], v[3], 0x31));
    // lane i + i+2: (0, 0, 2, 2 | 1, 1, 3, 3)
    const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
    // lane 0 + lane 1: (0, 2, 0, 2 | 1, 3, 1, 3)
    const __m256 u = _mm256_add_ps(_mm256_shuffle_ps(t, t, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(t, t, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// The tree sums of 8 outputs' 16 lanes from their two halves (lo[i] = lanes 0..7 of output i, hi[i] =
// lanes 8..15), outputs 0..7 in order. Outputs i and i + 4 share the adds from the second level on.
inline __m256 lane_tree_sums8(const __m256 (&lo)[8], const __m256 (&hi)[8]) {
    __m256 v[8];
    for (int i = 0; i < 8; ++i) v[i] = _mm256_add_ps(lo[i], hi[i]);  // lane i + i+8
    __m256 s[4];  // lane i + i+4: (output i | output i + 4)
    for (int i = 0; i < 4; ++i)
        s[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[i], v[i + 4], 0x20), _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
    // lane i + i+2: (0, 0, 1, 1 | 4, 4, 5, 5) and (2, 2, 3, 3 | 6, 6, 7, 7)
    const __m256 t01 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 t23 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
    // lane 0 + lane 1: (0, 1, 2, 3 | 4, 5, 6, 7)
    return _mm256_add_ps(_mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The tree sums of P groups of 8 outputs' 16 lanes, acc (P, 8, 16), 32-byte aligned.
template <int P>
inline void lane_sums8(__m256 (&sums)[P], const float* acc) {
    for (int p = 0; p < P; ++p) {
        __m256 lo[8], hi[8];
        for (int i = 0; i < 8; ++i) {
            lo[i] = _mm256_load_ps(acc + (p * 8 + i) * 16);
            hi[i] = _mm256_load_ps(acc + (p * 8 + i) * 16 + 8);
        }
        sums[p] = lane_tree_sums8(lo, hi);
    }
}

inline __m256 lane_sums8(const float* acc) {
    __m256 sums[1];
    lane_sums8<1>(sums, acc);
    return sums[0];
}

// out[r][c] = Σ_k xr[r][k]·wr[c][k] with lane l summing k ≡ l (mod 16) in k order, then the lanes'
// tree sum. The last K % 16 values go through zero-padded copies: a padded lane adds fma(0, 0, acc) = acc.
//
// Paired (bfloat16 weights, K % 16 == 0, x deinterleaved by deinterleave16): 16 weights come in one load,
// the even-indexed ones widened by a shift and the odd ones by a mask, so `lo` lane i holds k ≡ 2i and
// `hi` lane i k ≡ 2i + 1 (mod 16); they are interleaved back before the sum. The same chains in fewer
// instructions than two 8-value widenings.
template <int R, int C, class Wt, bool kPaired = false>
inline void nk_block(float (&out)[R][C], const float* const (&xr)[R], const Wt* const (&wr)[C], int64_t K,
                     const Wt* const* ahead = nullptr) {
    __m256 lo[R][C], hi[R][C];
    // Rows to ask for while these stream (decode: the weight group two ahead), one cache line per step,
    // into L2 (as tile_nk's AVX-512 prefetch; AVX2 build on the Zen 4 VM: fp32 21.4 -> 16.5 ms per pass).
    auto prefetch = [&](int64_t k) {
        if (ahead)
            for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(ahead[c] + k), _MM_HINT_T1);
    };
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
    auto step = [&](const float* const (&xs)[R], int64_t xk, auto&& w_at) {
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
            const auto [wl, wh] = w_at(c);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                lo[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[r] + xk), wl, lo[r][c]);
                hi[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[r] + xk + 8), wh, hi[r][c]);
            }
        }
    };
    const int64_t K16 = K / 16 * 16;
    if constexpr (kPaired) {
        static_assert(std::is_same_v<Wt, uint16_t>, "pairs are bfloat16 weights");
        const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
        for (int64_t k = 0; k < K; k += 16) {
            prefetch(k);
            step(xr, k, [&](int c) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[c] + k));
                return std::pair{_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), _mm256_castsi256_ps(_mm256_and_si256(v, high))};
            });
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) {
                const __m256 a = _mm256_unpacklo_ps(lo[r][c], hi[r][c]), b = _mm256_unpackhi_ps(lo[r][c], hi[r][c]);
                lo[r][c] = _mm256_permute2f128_ps(a, b, 0x20);
                hi[r][c] = _mm256_permute2f128_ps(a, b, 0x31);
            }
    } else {
        for (int64_t k = 0; k < K16; k += 16) {
            prefetch(k);
            step(xr, k, [&](int c) { return std::pair{load8(wr[c] + k), load8(wr[c] + k + 8)}; });
        }
    }
    if (!kPaired && K16 < K) {
        alignas(32) float xt[R][16] = {}, wt[C][16] = {};
        const float* xp[R];
        for (int r = 0; r < R; ++r) {
            for (int64_t k = K16; k < K; ++k) xt[r][k - K16] = xr[r][k];
            xp[r] = xt[r];
        }
        for (int c = 0; c < C; ++c)
            for (int64_t k = K16; k < K; ++k) wt[c][k - K16] = as_f32(wr[c][k]);
        step(xp, 0, [&](int c) { return std::pair{_mm256_load_ps(wt[c]), _mm256_load_ps(wt[c] + 8)}; });
    }
    alignas(32) float lanes[R * C][16];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            _mm256_store_ps(lanes[r * C + c], lo[r][c]);
            _mm256_store_ps(lanes[r * C + c] + 8, hi[r][c]);
        }
    if constexpr (R * C == 4) {
        alignas(16) float sums[4];
        _mm_store_ps(sums, lane_tree_sums4(lanes));
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) out[r][c] = sums[r * C + c];
    } else {
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) out[r][c] = lane_tree_sum(lanes[r * C + c]);
    }
}

// x (n floats, n % 16 == 0) as nk_block's pairs read it: per 16 values, the 8 even-indexed then the 8 odd.
void deinterleave16(float* out, const float* x, int64_t n) {
    for (int64_t s = 0; s < n; s += 16)
        for (int i = 0; i < 8; ++i) {
            out[s + i] = x[s + 2 * i];
            out[s + 8 + i] = x[s + 2 * i + 1];
        }
}

template <int RT, class Wt, bool kPaired = false>
void tile_nk(float* y, const float* x, const Wt* w, const float* bias, int64_t K, int64_t N, int64_t n0,
             int64_t n_count, bool first_rows = true) {
    // Missing weight rows (past N) read row n0 again; their sums are never stored.
    const Wt* const rows[4] = {w + n0 * K, w + (n0 + (n_count > 1 ? 1 : 0)) * K, w + (n0 + (n_count > 2 ? 2 : 0)) * K,
                               w + (n0 + (n_count > 3 ? 3 : 0)) * K};
    // The group two ahead is asked for while the first rows of x stream this one from memory; later rows
    // find it in cache. SmolLM2-shape matrices, 1 thread, AMD EPYC VM: bfloat16 decode 10.1 -> 12.8 GB/s,
    // 8 rows in fp32 76 -> 64 ms per pass; fp32 decode unchanged (15 GB/s).
    const Wt* const ahead_base = w + std::max<int64_t>(0, std::min(n0 + 8, N - 4)) * K;
    const Wt* const ahead[4] = {ahead_base, ahead_base + K, ahead_base + 2 * K, ahead_base + 3 * K};
    const Wt* const* pf = first_rows && N >= 4 ? ahead : nullptr;
    auto store = [&](int r, int c, float sum) {
        if (c < n_count) y[r * N + n0 + c] = sum + (bias ? bias[n0 + c] : 0.0f);
    };
    if constexpr (RT == 1) {
        float out[1][4];
        const float* const xr[1] = {x};
        nk_block<1, 4, Wt, kPaired>(out, xr, rows, K, pf);
        for (int c = 0; c < 4; ++c) store(0, c, out[0][c]);
    } else {
        // 2 rows x 2 weight rows at a time: 8 accumulators, the other registers for loads (16 in all).
        for (int r0 = 0; r0 < RT; r0 += 2)
            for (int c0 = 0; c0 < 4; c0 += 2) {
                float out[2][2];
                const float* const xr[2] = {x + r0 * K, x + (r0 + 1) * K};
                const Wt* const wr[2] = {rows[c0], rows[c0 + 1]};
                nk_block<2, 2, Wt, kPaired>(out, xr, wr, K, r0 == 0 && pf ? pf + c0 : nullptr);
                for (int r = 0; r < 2; ++r)
                    for (int c = 0; c < 2; ++c) store(r0 + r, c0 + c, out[r][c]);
            }
    }
}

// Decode (one row of x, K % 16 == 0): tile_nk<1>'s sums, one weight row at a time, so each thread reads a
// single stream; bfloat16 rows also ask for the row 32 KiB ahead into L2. Rows past n_count are not read;
// their lanes stay zero and are never stored. AMD EPYC Zen 3 VM (AVX2), SmolLM2-135M shape, tokens/s
// against tile_nk<1>'s four rows at once with the group two ahead asked for:
//   float32   1 thread 31 -> 35-36, 2 threads 51-53 -> 53-56 (asking 4-16 KiB ahead: 48-52)
//   bfloat16  1 thread 51-52 -> 57 without asking, 61-63 at 16 KiB, 65 at 32 KiB;
//             2 threads 83-88 -> 90-95 without, 96-107 at 16-32 KiB
// Two rows at once (two streams, twice the fma chains) gave bfloat16 86-89 with 2 threads.
template <class Wt, bool kPaired>
void group_rows(float* y, const float* x, const Wt* w, const float* bias, int64_t K, int64_t N, int64_t n0,
                int64_t n_count) {
    constexpr int64_t ahead_bytes = sizeof(Wt) == 2 ? int64_t(32) << 10 : 0;
    const int64_t ahead_rows = std::max<int64_t>(1, ahead_bytes / (K * int64_t(sizeof(Wt))));
    const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
    alignas(32) float lanes[4][16] = {};
    for (int64_t c = 0; c < n_count; ++c) {
        const Wt* row = w + (n0 + c) * K;
        const Wt* ahead = w + std::min(n0 + c + ahead_rows, N - 1) * K;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (int64_t k = 0; k < K; k += 16) {
            if constexpr (ahead_bytes != 0) _mm_prefetch(reinterpret_cast<const char*>(ahead + k), _MM_HINT_T1);
            if constexpr (kPaired) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k));
                lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), lo);
                hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_castsi256_ps(_mm256_and_si256(v, high)), hi);
            } else {
                lo = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), load8(row + k), lo);
                hi = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), load8(row + k + 8), hi);
            }
        }
        if constexpr (kPaired) {  // even, odd -> lane order
            const __m256 a = _mm256_unpacklo_ps(lo, hi), b = _mm256_unpackhi_ps(lo, hi);
            lo = _mm256_permute2f128_ps(a, b, 0x20);
            hi = _mm256_permute2f128_ps(a, b, 0x31);
        }
        _mm256_store_ps(lanes[c], lo);
        _mm256_store_ps(lanes[c] + 8, hi);
    }
    alignas(16) float sums[4];
    _mm_store_ps(sums, lane_tree_sums4(lanes));
    for (int64_t j = 0; j < n_count; ++j) y[n0 + j] = sums[j] + (bias ? bias[n0 + j] : 0.0f);
}

// A few rows of x (batched decode, 2 or 3 at a time) by the 4 weight rows of a group, over k in [k0, k1)
// (k0, k1 multiples of 16): the 16 lanes of each output are walked as two passes, one per 8-lane half, so
// a pass keeps R x 4 accumulators (12 at most) and the R x vectors in registers, and loads each weight
// vector once for its R fmas (16 registers for R = 3): 7 loads for 12 fmas. Zen 3 VM (AVX2), 1 thread,
// 8 rows, float32 K 576, weights in L2: 42-51 GFLOP/s -> 57-64 with the x vectors loaded per row and
// each weight folded into its fmas (15 loads). The weights of the second pass come from L1. Each step
// prefetches its share of the group ahead (group_rows_batched). acc holds the chains between spans: a
// pass after the first span continues from the stored sums, which is the same fma sequence. Paired
// bfloat16 rows (nk_block) take the even values in the first pass and the odd in the second, and are
// interleaved back before the sum.
template <int R, int H, class Wt, bool kPaired, bool kFirst>
inline void rows_half_pass(float* acc, const float* const (&xr)[R], const Wt* const (&wr)[4], int64_t k0,
                           int64_t k1, const char*& ahead, int64_t ahead_step) {
    __m256 a[R][4];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < 4; ++c) a[r][c] = kFirst ? _mm256_setzero_ps() : _mm256_load_ps(acc + (r * 4 + c) * 16 + H * 8);
    const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
    for (int64_t k = k0; k < k1; k += 16) {
        _mm_prefetch(ahead, _MM_HINT_T1);
        if (ahead_step > 64) _mm_prefetch(ahead + 64, _MM_HINT_T1);
        ahead += ahead_step;
        __m256 xv[R];
#pragma GCC unroll 3
        for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(xr[r] + k + H * 8);
        // Held for the 4 columns, or GCC folds a load into every fma. One asm for all: one per element
        // leaves a dead store of each to the stack.
        if constexpr (R == 3) asm("" : "+x"(xv[0]), "+x"(xv[1]), "+x"(xv[2]));
        else asm("" : "+x"(xv[0]), "+x"(xv[1]));
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            __m256 wv;
            if constexpr (kPaired) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[c] + k));
                wv = _mm256_castsi256_ps(H == 0 ? _mm256_slli_epi32(v, 16) : _mm256_and_si256(v, high));
            } else {
                wv = load8(wr[c] + k + H * 8);
            }
            asm("" : "+x"(wv));  // one load for the R fmas
#pragma GCC unroll 3
            for (int r = 0; r < R; ++r) a[r][c] = _mm256_fmadd_ps(xv[r], wv, a[r][c]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < 4; ++c) _mm256_store_ps(acc + (r * 4 + c) * 16 + H * 8, a[r][c]);
}

// All T rows of x (batched decode, K % 16 == 0) by the group of 4 weight rows at n0: blocks of kRows rows
// (an odd tail of 3 or 2), K in spans so that a span of x and of the group stay in L1 across the blocks.
// Every step of every pass prefetches an even share of the group two ahead, walked front to back, so
// those reads spread over all of the group's arithmetic. Zen 3 VM (AVX2), 2 threads, 8 rows streamed from
// memory, us, 3 interleaved rounds, against the group's rows shared among the first four passes: float32
// K 576 x N 1536 223-244 -> 185-198, bfloat16 163-187 -> 138-164 (both changes together: the 2026-11-27
// Zen 3 log in docs/benchmarks.md's git history).
// Each output's chains and lane tree sum are nk_block's: the same bits as tile_nk.
template <int kRows, class Wt, bool kPaired>
void group_rows_batched(float* y, const float* x, int64_t T, const Wt* w, const float* bias, int64_t K, int64_t N,
                        int64_t n0, int64_t n_count) {
    constexpr int kMaxRows = 4 * kPackRows;
    const Wt* const rows[4] = {w + n0 * K, w + (n0 + (n_count > 1 ? 1 : 0)) * K, w + (n0 + (n_count > 2 ? 2 : 0)) * K,
                               w + (n0 + (n_count > 3 ? 3 : 0)) * K};
    int block_rows[kMaxRows] = {}, n_blocks = 0;  // kRows at a time, the tail as 3, 2 + 2 or 3 + 2 (T >= 2)
    for (int64_t left = T; left > 0;) {
        const int r = left == 3 || (left == 5 && kRows == 3) ? 3 : left == 4 && kRows == 3 ? 2 : int(std::min<int64_t>(kRows, left));
        block_rows[n_blocks++] = r;
        left -= r;
    }
    const char* ahead = reinterpret_cast<const char*>(w + std::max<int64_t>(0, std::min(n0 + 8, N - 4)) * K);
    const int64_t ahead_bytes = 4 * K * int64_t(sizeof(Wt)), steps = 2 * n_blocks * (K / 16);
    const int64_t ahead_step = N >= 4 ? ahead_bytes / steps : 0;  // <= 128: two prefetches a step at most
    // Every pass re-reads the group's weights, so a group past half of L1 goes in spans of ~256 values.
    // Zen 3 VM (AVX2), 2 threads, 8 rows, one matmul streamed from memory, us: float32 K 1536 x N 576
    // 203-205 -> 143-152, K 4864 x N 896 1117-1152 -> 743-783; bfloat16 K 4864 838-881 -> 611-668;
    // 4 rows, float32 K 1536 118 -> 93. Spans of smaller groups (K 576, 896) gave nothing or lost.
    const int64_t KS = K / 16, n_spans = 4 * K * int64_t(sizeof(Wt)) > (16 << 10) ? (KS + 15) / 16 : 1;
    alignas(32) float acc[kMaxRows * 4][16];  // (output t * 4 + c, lane)
    for (int64_t sp = 0; sp < n_spans; ++sp) {
        const int64_t k0 = KS * sp / n_spans * 16, k1 = KS * (sp + 1) / n_spans * 16;
        int64_t t = 0;
        for (int b = 0; b < n_blocks; t += block_rows[b], ++b) {
            for (int h = 0; h < 2; ++h) {
                float* a = &acc[t * 4][0];
                auto pass = [&]<int R>() {
                    const float* xr[R];
                    for (int r = 0; r < R; ++r) xr[r] = x + (t + r) * K;
                    if (k0 == 0) {
                        if (h == 0) rows_half_pass<R, 0, Wt, kPaired, true>(a, xr, rows, k0, k1, ahead, ahead_step);
                        else rows_half_pass<R, 1, Wt, kPaired, true>(a, xr, rows, k0, k1, ahead, ahead_step);
                    } else {
                        if (h == 0) rows_half_pass<R, 0, Wt, kPaired, false>(a, xr, rows, k0, k1, ahead, ahead_step);
                        else rows_half_pass<R, 1, Wt, kPaired, false>(a, xr, rows, k0, k1, ahead, ahead_step);
                    }
                };
                if (block_rows[b] == 3) pass.template operator()<3>();
                else pass.template operator()<2>();
            }
        }
    }
    if constexpr (kPaired)
        for (int64_t o = 0; o < T * 4; ++o) {  // even, odd -> lane order
            float* lanes = acc[o];
            const __m256 e = _mm256_load_ps(lanes), od = _mm256_load_ps(lanes + 8);
            const __m256 a = _mm256_unpacklo_ps(e, od), b = _mm256_unpackhi_ps(e, od);
            _mm256_store_ps(lanes, _mm256_permute2f128_ps(a, b, 0x20));
            _mm256_store_ps(lanes + 8, _mm256_permute2f128_ps(a, b, 0x31));
        }
    for (int64_t t = 0; t < T; ++t) {
        alignas(16) float sums[4];
        _mm_store_ps(sums, lane_tree_sums4(acc + t * 4));  // outputs (t, 0..3)
        for (int c = 0; c < n_count; ++c) y[t * N + n0 + c] = sums[c] + (bias ? bias[n0 + c] : 0.0f);
    }
}

// Many rows (prefill): the AVX-512 build's packed tile (6 rows of x by 4 weight rows, x packed as
// (KS, 6, 16) and the weights as (KS, 4, 16)) with nk_block's arithmetic: each output keeps 16 lane
// chains, here walked as two passes over K, one per 8-lane half, so a pass needs 6 x 2 accumulators.
// Splitting the lanes or K into spans leaves every chain as it was: the sums equal tile_nk's bits.
template <int C0, int H>
inline void packed_half_pass(float* acc, const float* x_slices, const float* w_slices, int64_t s_count, bool first) {
    __m256 a[kPackRows][2];
#pragma GCC unroll 6
    for (int r = 0; r < kPackRows; ++r)
        for (int c = 0; c < 2; ++c)
            a[r][c] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + (r * 4 + C0 + c) * 16 + H * 8);
    for (int64_t s = 0; s < s_count; ++s) {
        const float* ws = w_slices + s * 64 + C0 * 16 + H * 8;
        const float* xs = x_slices + s * 16 * kPackRows + H * 8;
        const __m256 w0 = _mm256_load_ps(ws), w1 = _mm256_load_ps(ws + 16);
#pragma GCC unroll 6
        for (int r = 0; r < kPackRows; ++r) {
            __m256 xv = _mm256_load_ps(xs + r * 16);
            asm("" : "+x"(xv));  // one load for both fmas: GCC would fold it into each, and loads are the limit
            a[r][0] = _mm256_fmadd_ps(xv, w0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(xv, w1, a[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < kPackRows; ++r)
        for (int c = 0; c < 2; ++c) _mm256_store_ps(acc + (r * 4 + C0 + c) * 16 + H * 8, a[r][c]);
}

// acc (24, 16) out, and in unless `first`; x_slices (s_count, 6, 16), w_slices (s_count, 4, 16); 32-byte aligned.
void tile_nk_packed_span(float* acc, const float* x_slices, const float* w_slices, int64_t s_count, bool first) {
    packed_half_pass<0, 0>(acc, x_slices, w_slices, s_count, first);
    packed_half_pass<0, 1>(acc, x_slices, w_slices, s_count, first);
    packed_half_pass<2, 0>(acc, x_slices, w_slices, s_count, first);
    packed_half_pass<2, 1>(acc, x_slices, w_slices, s_count, first);
}

// y rows [0, n_rows) at columns [n0, n0 + n_count) from a finished tile's accumulators, two rows of 4
// outputs at a time.
void reduce_packed_tile(float* y, const float* acc, const float* bias, int64_t n_rows, int64_t N, int64_t n0,
                        int64_t n_count) {
    alignas(32) float b[8] = {};
    for (int c = 0; c < n_count; ++c) b[c] = b[c + 4] = bias ? bias[n0 + c] : 0.0f;
    static_assert(kPackRows == 6, "three pairs of rows");
    __m256 sums[3];  // outputs (2p, 0..3) then (2p + 1, 0..3)
    lane_sums8<3>(sums, acc);
    for (int p = 0; p < 3 && 2 * p < n_rows; ++p) {
        const __m256 out = _mm256_add_ps(sums[p], _mm256_load_ps(b));
        const int64_t r0 = 2 * p;
        if (n_count == 4 && r0 + 2 <= n_rows) {  // the common whole tile: two stores
            _mm_storeu_ps(y + r0 * N + n0, _mm256_castps256_ps128(out));
            _mm_storeu_ps(y + (r0 + 1) * N + n0, _mm256_extractf128_ps(out, 1));
            continue;
        }
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, out);
        for (int r = 0; r < 2 && r0 + r < n_rows; ++r)
            for (int c = 0; c < n_count; ++c) y[(r0 + r) * N + n0 + c] = lanes[r * 4 + c];
    }
}
#else
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

template <int RT, class Wt, bool kPaired = false>
void tile_nk(float* y, const float* x, const Wt* w, const float* bias, int64_t K, int64_t N, int64_t n0,
             int64_t n_count, bool /*first_rows*/ = true) {
    static_assert(!kPaired, "bfloat16 pairs are the AVX2 build's");
    for (int r = 0; r < RT; ++r)
        for (int c = 0; c < n_count; ++c) {
            float lanes[16] = {};
            for (int64_t k = 0; k < K; ++k)
                lanes[k % 16] = std::fma(x[r * K + k], as_f32(w[(n0 + c) * K + k]), lanes[k % 16]);
            y[r * N + n0 + c] = lane_tree_sum(lanes) + (bias ? bias[n0 + c] : 0.0f);
        }
}
#endif

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

}  // namespace

namespace {

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

constexpr size_t kMaxSharedTargets = 4;

template <class Wt>
struct NkTarget {
    float* y;         // (T, N)
    const Wt* w;      // (N, K)
    const float* bias;  // (N) or null
    int64_t N;
};

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// Prefill (T >= 4 * kPackRows): packed operands.
template <class Wt>
void matmul_nk_packed(float* y, const float* x, const Wt* w, const float* bias, int64_t T, int64_t K, int64_t N) {
    constexpr int CT = 4;
    const int64_t n_groups = (N + CT - 1) / CT;
    const int64_t n_threads = ThreadPool::global().n_threads();
    // x packed once (the last block padded with zero rows). Each task then takes panels of up to 8
    // groups of 4 weight rows, packs a panel once (the weights leave memory once per matmul) and runs
    // every block of 6 rows of x over it, K in spans of at most 768: the block's span (18 KiB) stays
    // in L1 across the panel's groups, whose spans (12 KiB each) come from the panel in L2.
    constexpr int64_t kPanelGroups = 8, kMaxSpanSlices = 48;
    const int64_t KS = (K + 15) / 16, n_blocks = (T + kPackRows - 1) / kPackRows, block_floats = KS * 16 * kPackRows;
    const int64_t n_spans = (KS + kMaxSpanSlices - 1) / kMaxSpanSlices;  // of equal length: no short tail
    thread_local std::vector<float> x_storage;
    float* x_packed = aligned_scratch(x_storage, n_blocks * block_floats);  // (ceil(T / 6), KS, 6, 16)
    ThreadPool::global().parallel_for(n_blocks, [&](int64_t b) { pack_x_block(x_packed + b * block_floats, x, T, K, KS, b); });
    const int64_t n_panels = (n_groups + kPanelGroups - 1) / kPanelGroups;
    const int64_t n_panel_tasks = std::min(n_panels, n_threads * 4);
    ThreadPool::global().parallel_for(n_panel_tasks, [&](int64_t task) {
        thread_local std::vector<float> panel_storage, acc_storage;
        float* panel = aligned_scratch(panel_storage, kPanelGroups * KS * 64);              // (8, KS, 4, 16)
        float* acc = aligned_scratch(acc_storage, kPanelGroups * kTileAccumulators * 16);  // (8, 24, 16)
        const int64_t task_g0 = n_groups * task / n_panel_tasks, task_g1 = n_groups * (task + 1) / n_panel_tasks;
        for (int64_t g0 = task_g0; g0 < task_g1; g0 += kPanelGroups) {
            const int64_t panel_groups = std::min(kPanelGroups, task_g1 - g0);
            auto n0_of = [&](int64_t i) { return (g0 + i) * CT; };
            auto count_of = [&](int64_t i) { return std::min<int64_t>(CT, N - n0_of(i)); };
            for (int64_t i = 0; i < panel_groups; ++i) pack_w_group(panel + i * KS * 64, w, K, KS, n0_of(i), count_of(i));
            for (int64_t b = 0; b < n_blocks; ++b) {
                const float* xb = x_packed + b * block_floats;
                for (int64_t sp = 0; sp < n_spans; ++sp) {
                    const int64_t s0 = KS * sp / n_spans, span = KS * (sp + 1) / n_spans - s0;
                    for (int64_t i = 0; i < panel_groups; ++i)
                        tile_nk_packed_span(acc + i * kTileAccumulators * 16, xb + s0 * 16 * kPackRows,
                                            panel + i * KS * 64 + s0 * 64, span, sp == 0);
                }
                const int64_t rows = std::min<int64_t>(kPackRows, T - b * kPackRows);
                for (int64_t i = 0; i < panel_groups; ++i)
                    reduce_packed_tile(y + b * kPackRows * N, acc + i * kTileAccumulators * 16, bias, rows, N,
                                       n0_of(i), count_of(i));
            }
        }
    });
}
#endif

#if defined(__AVX512F__)
// Decode: every target's rows, numbered one target after the other. Each thread streams its own run of
// rows, then takes ~32 KiB pieces from the end of the other's (parallel_ranges). With fixed tasks (two per
// thread) the calling thread spent 2.7 % of a bfloat16 SmolLM2-shape decode waiting for the other at the
// joins, 0.9 % this way (perf samples, 2 threads, AMD EPYC Zen 4 VM; float32 decode 1.07x, bfloat16 1.01x
// in interleaved runs).
template <class Wt>
void decode_rows(const float* x, int64_t K, std::span<const NkTarget<Wt>> targets) {
    std::array<int64_t, kMaxSharedTargets + 1> first_row{};  // target j's rows: [first_row[j], first_row[j + 1])
    for (size_t j = 0; j < targets.size(); ++j) first_row[j + 1] = first_row[j] + targets[j].N;
    const int64_t piece_rows = std::max<int64_t>(1, (int64_t(32) << 10) / (K * int64_t(sizeof(Wt))));
    ThreadPool::global().parallel_ranges(first_row[targets.size()], piece_rows, [&](int64_t begin, int64_t end) {
        for (size_t j = 0; j < targets.size() && begin < end; ++j) {
            if (begin >= first_row[j + 1]) continue;
            const NkTarget<Wt>& t = targets[j];
            const int64_t stop = std::min(end, first_row[j + 1]);
            rows_nk(t.y, x, t.w, t.bias, K, t.N, begin - first_row[j], stop - begin);
            begin = stop;
        }
    });
}
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
// Decode: every target's groups of 4 weight rows, numbered one target after the other. Each thread streams
// its own run of groups, then takes ~32 KiB pieces from the end of the other's (parallel_ranges), as the
// AVX-512 build's decode_rows does with single rows.
template <class Wt, bool kPaired>
void decode_groups(const float* x, int64_t K, std::span<const NkTarget<Wt>> targets) {
    constexpr int CT = 4;
    std::array<int64_t, kMaxSharedTargets + 1> first_group{};  // target j's groups: [first_group[j], first_group[j + 1])
    for (size_t j = 0; j < targets.size(); ++j) first_group[j + 1] = first_group[j] + (targets[j].N + CT - 1) / CT;
    const int64_t piece_groups = std::max<int64_t>(1, (int64_t(32) << 10) / (CT * K * int64_t(sizeof(Wt))));
    ThreadPool::global().parallel_ranges(first_group[targets.size()], piece_groups, [&](int64_t begin, int64_t end) {
        size_t j = 0;
        for (int64_t g = begin; g < end; ++g) {
            while (g >= first_group[j + 1]) ++j;
            const NkTarget<Wt>& t = targets[j];
            const int64_t n0 = (g - first_group[j]) * CT;
            if (K % 16 == 0) group_rows<Wt, kPaired>(t.y, x, t.w, t.bias, K, t.N, n0, std::min<int64_t>(CT, t.N - n0));
            else tile_nk<1, Wt, kPaired>(t.y, x, t.w, t.bias, K, t.N, n0, std::min<int64_t>(CT, t.N - n0));
        }
    });
}
#endif

// Every target's groups of 4 weight rows, numbered one target after the other, are split between the
// tasks of one fork: q, k and v (or gate and up) of a decode step cost one fork, and the small k and v
// matrices no longer pay a fork's fixed cost each. Each group's tiles are those of a single matmul.
template <class Wt>
void matmul_nk_impl(const float* x, int64_t T, int64_t K, std::span<const NkTarget<Wt>> targets) {
    constexpr int CT = 4;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    if (T >= 4 * kPackRows) {
        for (const NkTarget<Wt>& t : targets) matmul_nk_packed(t.y, x, t.w, t.bias, T, K, t.N);
        return;
    }
#endif
#if defined(__AVX512F__)
    if (T == 1) {
        decode_rows(x, K, targets);
        return;
    }
#endif
    std::array<int64_t, kMaxSharedTargets + 1> first_group{};  // target j's groups: [first_group[j], first_group[j + 1])
    for (size_t j = 0; j < targets.size(); ++j) first_group[j + 1] = first_group[j] + (targets[j].N + CT - 1) / CT;
    const int64_t n_groups = first_group[targets.size()];
    // Each thread streams its own run of groups, then takes ~128 KiB pieces of weights from the end of the
    // other's (parallel_ranges), as decode does. Against two fixed tasks per thread, Zen 3 VM (AVX2), 2
    // threads, batch 8 tokens/s: SmolLM2-135M shape float32 212-232 -> 223-235, bfloat16 250-276 -> 269-283.
    const int64_t piece_groups = std::max<int64_t>(1, (int64_t(128) << 10) / (CT * K * int64_t(sizeof(Wt))));
    auto run_tiles = [&]<bool kPaired>(const float* xs) {
        auto run_groups = [&](int64_t g0, int64_t g1) {
            size_t j = 0;
            for (int64_t g = g0; g < g1; ++g) {
                while (g >= first_group[j + 1]) ++j;
                const NkTarget<Wt>& target = targets[j];
                float* y = target.y;
                const Wt* w = target.w;
                const float* bias = target.bias;
                const int64_t N = target.N;
                int64_t n0 = (g - first_group[j]) * CT, count = std::min<int64_t>(CT, N - n0);
                int64_t t = 0;
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
                // Past 8 rows, paired bfloat16 spends more on widening each weight twice (once per pass)
                // than it saves (16 rows, 1 thread: 79 ms per pass over tile_nk's 2 x 2 blocks, 87 here).
                // float32 goes 3 rows at a time; bfloat16 2 at a time (3 for an odd tail): its weights
                // come as 16 values per load, and fewer accumulators leave registers for them. Zen 3 VM
                // (AVX2), 2 threads, tokens/s in blocks of 3 / 2: SmolLM2-135M shape batch 8 208-219 /
                // 261-265, batch 4 191-199 / 245-257, Qwen2.5-0.5B batch 8 54-67 / 69-76; float32 batch 8
                // 202-206 / 188-190. With the x vectors held in registers, bfloat16 in blocks of 3 still
                // loses (one matmul, K 576 x N 1536, 8 rows: 160-168 us against 116-122 in blocks of 2).
                if (T > 1 && K % 16 == 0 && (!kPaired || T <= 8)) {
                    group_rows_batched<kPaired ? 2 : 3, Wt, kPaired>(y, xs, T, w, bias, K, N, n0, count);
                    t = T;
                }
#endif
                for (; t + 4 <= T; t += 4) tile_nk<4, Wt, kPaired>(y + t * N, xs + t * K, w, bias, K, N, n0, count, t == 0);
                for (; t < T; ++t) tile_nk<1, Wt, kPaired>(y + t * N, xs + t * K, w, bias, K, N, n0, count, t == 0);
            }
        };
        ThreadPool::global().parallel_ranges(n_groups, piece_groups, run_groups);
    };
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
    if constexpr (std::is_same_v<Wt, uint16_t>) {
        if (K % 16 == 0) {  // bfloat16 decode: x deinterleaved once, for nk_block's pairs
            thread_local std::vector<float> xd_storage;
            float* xd = aligned_scratch(xd_storage, T * K);
            deinterleave16(xd, x, T * K);
            if (T == 1) decode_groups<Wt, true>(xd, K, targets);
            else run_tiles.template operator()<true>(xd);
            return;
        }
    }
    if (T == 1) {
        decode_groups<Wt, false>(x, K, targets);
        return;
    }
#endif
    run_tiles.template operator()<false>(x);
}

}  // namespace

void matmul_kn(float* y, const float* x, WeightRef w, const float* bias, int64_t T, int64_t K, int64_t N) {
    if (w.f32) matmul_kn_impl(y, x, w.f32, bias, T, K, N);
    else matmul_kn_impl(y, x, w.bf16, bias, T, K, N);
}

void matmul_nk(float* y, const float* x, WeightRef w, const float* bias, int64_t T, int64_t K, int64_t N) {
    const MatmulTarget target{y, w, bias, N};
    matmul_nk_shared(x, T, K, {&target, 1});
}

void matmul_nk_shared(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets) {
    if (targets.size() > kMaxSharedTargets) {
        matmul_nk_shared(x, T, K, targets.first(kMaxSharedTargets));
        matmul_nk_shared(x, T, K, targets.subspan(kMaxSharedTargets));
        return;
    }
    const bool all_f32 = std::all_of(targets.begin(), targets.end(), [](const MatmulTarget& t) { return t.w.f32; });
    const bool all_bf16 = std::all_of(targets.begin(), targets.end(), [](const MatmulTarget& t) { return t.w.bf16; });
    if (!all_f32 && !all_bf16) {  // mixed storage: one fork per matrix
        for (const MatmulTarget& t : targets) matmul_nk_shared(x, T, K, {&t, 1});
        return;
    }
    auto run = [&]<class Wt>(const Wt* WeightRef::*weights) {
        std::array<NkTarget<Wt>, kMaxSharedTargets> typed;  // no allocation on the decode path
        for (size_t j = 0; j < targets.size(); ++j) typed[j] = {targets[j].y, targets[j].w.*weights, targets[j].bias, targets[j].N};
        matmul_nk_impl<Wt>(x, T, K, std::span<const NkTarget<Wt>>(typed.data(), targets.size()));
    };
    if (all_f32) run(&WeightRef::f32);
    else run(&WeightRef::bf16);
}

namespace {
// b / x as float32 or bfloat16 (widened exactly): the same float operations either way.
template <class B>
float dot_impl(const float* a, const B* b, int64_t n) {
#if defined(__AVX512F__)
    return reduce_add(dot_lanes(a, b, n));
#elif defined(__AVX2__) && defined(__FMA__)
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
#if defined(__AVX512F__)
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
#if defined(__AVX512F__)
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
#elif defined(__AVX2__) && defined(__FMA__)
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

#if defined(__AVX512F__)
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
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
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
#if defined(__AVX512F__)
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
#elif defined(__AVX2__) && defined(__FMA__)
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
#if defined(__AVX512F__)
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
#if defined(__AVX512F__)
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
#elif defined(__AVX2__) && defined(__FMA__)
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
}  // namespace


float dot(const float* a, const float* b, int64_t n) { return dot_impl(a, b, n); }
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
float dot(const float* a, const uint16_t* b, int64_t n) { return dot_impl(a, b, n); }
void axpy(float* y, float a, const float* x, int64_t n) { axpy_impl(y, a, x, n); }
void axpy(float* y, float a, const uint16_t* x, int64_t n) { axpy_impl(y, a, x, n); }

#if defined(__AVX512F__)
namespace {
// e^x = 2^n · e^r with n = round(x / ln 2), r = x - n·ln 2 in [-ln2/2, ln2/2] (ln 2 split in two parts
// so r is exact); e^r from its Taylor polynomial to degree 7 (error < 2e-8 on that interval).
inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // below this e^x is 0 in float anyway
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
}  // namespace
#elif defined(__AVX2__) && defined(__FMA__)
namespace {
// exp16's arithmetic on 8 lanes, with the same bits: the same range reduction and polynomial, and p·2^n
// as p·2^a·2^b (a = n >> 1, b = n − a), each factor a normal float so the product rounds once, as
// scalef does (to a subnormal, or to +inf past e^88.7). x is capped at 100 so 2^a and 2^b exist.
inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(100.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i a = _mm256_srai_epi32(ni, 1), b = _mm256_sub_epi32(ni, a);
    auto pow2 = [](__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); };
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2(a)), pow2(b));
}
// Lanes [i, i + count) of x through f (8 at a time; the last partial vector through a padded copy).
template <class F>
inline void map8(float* x, int64_t i0, int64_t i1, F&& f) {
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) _mm256_storeu_ps(x + i, f(_mm256_loadu_ps(x + i)));
    if (i < i1) {
        alignas(32) float tail[8] = {};
        std::memcpy(tail, x + i, size_t(i1 - i) * sizeof(float));
        _mm256_store_ps(tail, f(_mm256_load_ps(tail)));
        std::memcpy(x + i, tail, size_t(i1 - i) * sizeof(float));
    }
}
}  // namespace
#endif

void axpy_rows_heads(float* y, const float* a, int64_t a_stride, int64_t G, const float* const* rows, int64_t n, int64_t D) {
    axpy_rows_heads_dispatch(y, a, a_stride, G, rows, n, D);
}
void axpy_rows_heads(float* y, const float* a, int64_t a_stride, int64_t G, const uint16_t* const* rows, int64_t n,
                     int64_t D) {
    axpy_rows_heads_dispatch(y, a, a_stride, G, rows, n, D);
}

float max_of(const float* x, int64_t n) {
#if defined(__AVX512F__)
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, tail_mask(n - i), x + i));
    return _mm512_reduce_max_ps(m);
#else
    auto scan = [](const float* v, int64_t count, float m) {
        for (int64_t i = 0; i < count; ++i) m = v[i] > m ? v[i] : m;
        return m;
    };
#if defined(__AVX2__)
    // Sixteen lanes of the scan's step, x > m ? x : m (max_ps with x first), then the lanes and the tail
    // scanned: the scan's value, since equal floats have equal bits except +0 and -0, and a zero maximum
    // is rescanned for the scan's sign. The scan's serial chain took 3 % of a 2000-token prefill.
    if (n >= 16) {
        __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
            m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
        }
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, _mm256_max_ps(m1, m0));
        const float m = scan(x + i, n - i, scan(lanes, 8, -INFINITY));
        if (m != 0.0f) return m;
    }
#endif
    return scan(x, n, -INFINITY);
#endif
}

void exp_in_place(float* x, int64_t n) {
#if defined(__AVX512F__)
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    map8(x, 0, n, exp8);
#else
    for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
#endif
}

namespace {
// Element-wise work on long arrays (a prefill's T x 3072 MLP activations) is split over the threads in
// whole SIMD vectors; each element still depends only on its own value.
template <class F>
void for_spans(int64_t n, F&& span) {
    constexpr int64_t kSpan = 16384;
    if (n <= kSpan) return span(0, n);
    const int64_t n_tasks = (n + kSpan - 1) / kSpan;
    ThreadPool::global().parallel_for(n_tasks, [&](int64_t t) { span(t * kSpan, std::min(n, (t + 1) * kSpan)); });
}
}  // namespace

void layer_norm(float* y, const float* x, const float* gain, const float* bias, int64_t T, int64_t C,
                float eps) {
    auto rows = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
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
    };
    constexpr int64_t kRowsPerTask = 16;
    if (T < 2 * kRowsPerTask) return rows(0, T);
    ThreadPool::global().parallel_for((T + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
        rows(task * kRowsPerTask, std::min(T, (task + 1) * kRowsPerTask));
    });
}

// 0.5·v·(1 + tanh(u)) = v / (1 + e^(-2u)), u = sqrt(2/pi)·(v + 0.044715·v³): the same function written
// without the cancellation 1 + tanh(u) suffers for negative u.
void gelu_tanh(float* x, int64_t n) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    for_spans(n, [&](int64_t i0, int64_t i1) {
#if defined(__AVX512F__)
        const __m512 c3 = _mm512_set1_ps(0.044715f), minus_2k = _mm512_set1_ps(-2.0f * k), one = _mm512_set1_ps(1.0f);
        for (int64_t i = i0; i < i1; i += 16) {
            const __mmask16 m = tail_mask(i1 - i);
            const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(c3, v), _mm512_mul_ps(v, v), v);  // v + c·v³
            // capped below where exp16's range reduction would meet infinity; e^150 is +inf already
            const __m512 e = exp16(_mm512_min_ps(_mm512_mul_ps(minus_2k, inner), _mm512_set1_ps(150.0f)));
            _mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(v, _mm512_add_ps(one, e)));
        }
#elif defined(__AVX2__) && defined(__FMA__)
        const __m256 c3 = _mm256_set1_ps(0.044715f), minus_2k = _mm256_set1_ps(-2.0f * k), one = _mm256_set1_ps(1.0f);
        map8(x, i0, i1, [&](__m256 v) {
            const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(c3, v), _mm256_mul_ps(v, v), v);  // v + c·v³
            return _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_mul_ps(minus_2k, inner))));
        });
#else
        for (int64_t i = i0; i < i1; ++i) {
            const float v = x[i];
            x[i] = v / (1.0f + std::exp(-2.0f * k * std::fma(0.044715f * v, v * v, v)));
        }
#endif
    });
}

void gelu_erf(float* x, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.7071067811865476f));
    });
}

void relu(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// Statistics in double, like layer_norm; the row is scaled first and the weight multiplied after, the
// order of LlamaRMSNorm.forward (weight * (x * rsqrt(variance + eps))).
void rms_norm(float* y, const float* x, const float* gain, int64_t T, int64_t C, float eps) {
    auto rows = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* xr = x + t * C;
            float* yr = y + t * C;
            double sq = 0.0;
            for (int64_t c = 0; c < C; ++c) sq += double(xr[c]) * double(xr[c]);
            const float inv_rms = float(1.0 / std::sqrt(sq / double(C) + double(eps)));
            for (int64_t c = 0; c < C; ++c) yr[c] = gain[c] * (xr[c] * inv_rms);
        }
    };
    constexpr int64_t kRowsPerTask = 16;
    if (T < 2 * kRowsPerTask) return rows(0, T);
    ThreadPool::global().parallel_for((T + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
        rows(task * kRowsPerTask, std::min(T, (task + 1) * kRowsPerTask));
    });
}

// v · sigmoid(v) = v / (1 + e^(-v)).
void silu(float* x, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) {
#if defined(__AVX512F__)
        // x / (1 + e^-x) with exp16: e^-x overflows to infinity below x = -88.7 (x / inf = -0, as the
        // function tends to) and is 0 above x = 104 (x / 1 = x).
        for (int64_t i = i0; i < i1; i += 16) {
            const __mmask16 m = tail_mask(i1 - i);
            const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
            _mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
        }
#elif defined(__AVX2__) && defined(__FMA__)
        map8(x, i0, i1, [](__m256 v) {
            return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), v))));
        });
#else
        for (int64_t i = i0; i < i1; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
#endif
    });
}

void multiply(float* y, const float* x, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] *= x[i];
    });
}

}  // namespace kvscope
