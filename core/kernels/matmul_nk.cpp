// matmul_nk: y(T, N) = x(T, K) · w(N, K)ᵀ + bias, the Linear layout (Llama-family projections, lm_head
// and tied embeddings), float32, bfloat16 or ggml's blocks, several matrices that read the same x in one fork
// (matmul_nk_shared). Each output is tile_nk's: 16 lane chains over k ≡ lane (mod 16), then their tree
// sum (lane_tree_sum, _mm512_reduce_add_ps's order), then the bias; every path below gives those bits.
//
// The file, top to bottom: what all builds share; the kernels of each instruction set side by side
// (AVX-512, AVX2, portable); the walk over groups of 4 weight rows that small batches use; then one
// strategy per instruction set (matmul_nk_impl: which kernel for prefill, decode and small batches).
#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/block_rows.h"
#include "kernels/matmul_blocks.h"
#include "kernels/lanes.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {


template <class Wt>
struct NkTarget {
    float* y;         // (T, N)
    const Wt* w;      // (N, K)
    const float* bias;  // (N) or null
    int64_t N;
};

// Rows [n0, n0 + count) of a matrix of blocks (N, K) as float32 (count, K), the reference dequantizer's
// bits (quant_blocks.h), so any kernel given these rows computes the bits it computes on the dequantized matrix.
void dequantize_rows(float* out, BlockMatrix w, int64_t K, int64_t n0, int64_t count) {
    const BlockLayout layout = block_layout(w.format);
    const int64_t row_bytes = K / layout.elements * layout.bytes;
    for (int64_t c = 0; c < count; ++c) dequantize_blocks(w.format, w.data + (n0 + c) * row_bytes, K, out + c * K);
}

// A thread's float copy of one group of 4 rows of blocks, with 8 rows of zeros after them: the float kernels
// given a group at n0 = 0 ask the rows 8 to 11 after it into cache (tile_nk, group_rows_batched).
float* block_group_scratch(int64_t K) {
    thread_local std::vector<float> storage;
    if (int64_t(storage.size()) < 12 * K) storage.assign(size_t(12 * K), 0.0f);
    return storage.data();
}

#if !KVSCOPE_PORTABLE
// Packed operands for prefill tiles (tile_nk_packed_span): 6 rows of x by 4 weight rows, 16 lanes per slice.
constexpr int kPackRows = 6;
constexpr int kTileAccumulators = kPackRows * 4;
constexpr int64_t kMaxPanelGroups = 16;  // groups of 4 weight rows in a prefill panel (matmul_nk_packed)
static_assert(kPrefillRows == 4 * kPackRows);

// Where a tile's last span puts its sums: y rows [0, n_rows) at columns [n0, n0 + n_count).
struct TileOut {
    float* y;
    const float* bias;
    int64_t n_rows, N, n0, n_count;
};

// Float buffers aligned to 64 bytes that grow once per thread and are then reused.
inline float* aligned_scratch(std::vector<float>& storage, int64_t n) {
    if (int64_t(storage.size()) < n + 16) storage.resize(size_t(n + 16));
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
}
#endif

#if KVSCOPE_AVX512
// Rows [6b, 6b + 6) of x (T, K) as (KS, 6, 16); rows past T are zero.
void pack_x_block(float* out, const float* x, int64_t T, int64_t K, int64_t KS, int64_t b) {
    for (int64_t s = 0; s < KS; ++s) {
        const __mmask16 m = K - s * 16 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (K - s * 16)) - 1u);
        for (int r = 0; r < kPackRows; ++r) {
            const int64_t row = b * kPackRows + r;
            _mm512_store_ps(out + (s * kPackRows + r) * 16,
                            row < T ? _mm512_maskz_loadu_ps(m, x + row * K + s * 16) : _mm512_setzero_ps());
        }
    }
}

// Weight rows [n0, n0 + n_count) of w (N, K) as float32 (KS, 4, 16); rows past n_count are zero.
template <class Wt>
void pack_w_group(float* out, const Wt* w, int64_t K, int64_t KS, int64_t n0, int64_t n_count) {
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
}

// Rows of blocks packed as the float32 ones, from their exact float copy.
void pack_w_group(float* out, BlockMatrix w, int64_t K, int64_t KS, int64_t n0, int64_t n_count) {
    float* rows = block_group_scratch(K);
    dequantize_rows(rows, w, K, n0, n_count);
    pack_w_group(out, static_cast<const float*>(rows), K, KS, 0, n_count);
}

// y[r, n0:n0+4] = Σ_k x[r,k]·w[n,k] for RT rows (1 or 4) and 4 weight rows; lanes hold partial sums
// over k ≡ lane (mod 16), reduced in a fixed order. Named accumulators for the reason given at tile_kn (matmul_kn.cpp).
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
        if constexpr (!kAsk)  // four steps of the chain a turn: a loop of one fma ran 6 % slower where it crossed 64 bytes
            for (; k + 64 <= K; k += 64)
#pragma GCC unroll 4
                for (int64_t i = k; i < k + 64; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load16(row + i), acc);
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
// chain, and the last span applies tile_nk's reduction: the sums are bitwise equal (zero padding adds
// fma(0, 0, acc), as tile_nk's masked loads do).
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

#define KVSCOPE_PK_FINISH(r)                                                                             \
    if ((r) < out->n_rows)                                                                               \
        _mm_mask_storeu_ps(out->y + (r) * out->N + out->n0, m,                                           \
                           _mm_add_ps(reduce_add4(a##r##0, a##r##1, a##r##2, a##r##3), b));

// acc (24, 16) in unless `first` (then the sums start at zero); x_slices (s_count, 6, 16) and w_slices
// (s_count, 4, 16); all 64-byte aligned. Without `out` the sums go back to acc; with it the span is the
// tile's last and they are reduced into y from registers, as tile_nk does.
void tile_nk_packed_span(float* acc, const float* x_slices, const float* w_slices, int64_t s_count, bool first,
                         const TileOut* out = nullptr) {
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
    if (out) {
        const __mmask8 m = __mmask8((1u << out->n_count) - 1u);
        const __m128 b = out->bias ? _mm_maskz_loadu_ps(m, out->bias + out->n0) : _mm_setzero_ps();
        KVSCOPE_PK_FINISH(0)
        KVSCOPE_PK_FINISH(1)
        KVSCOPE_PK_FINISH(2)
        KVSCOPE_PK_FINISH(3)
        KVSCOPE_PK_FINISH(4)
        KVSCOPE_PK_FINISH(5)
        return;
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
#undef KVSCOPE_PK_FINISH

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

// The rows group_rows_batched takes at once in the AVX2 build; here none (tile_nk takes them all).
template <class Wt, bool kPaired>
int64_t batched_group_rows(float*, const float*, int64_t, const Wt*, const float*, int64_t, int64_t, int64_t, int64_t) {
    return 0;
}

#elif KVSCOPE_AVX2
// CPUs with AVX2 but not AVX-512 (AMD Zen 2/3, and VMs that hide AVX-512): the portable sums below, 16
// lane chains per output, computed as two 8-lane vectors; each output's lanes are then added as the
// same tree (lane_tree_sum), so both builds give the same bits.

// Rows [6b, 6b + 6) of x (T, K) as (KS, 6, 16); rows past T are zero.
void pack_x_block(float* out, const float* x, int64_t T, int64_t K, int64_t KS, int64_t b) {
    const int64_t full = K / 16, rows = std::min<int64_t>(kPackRows, T - b * kPackRows);
    const float* src = x + b * kPackRows * K;
    for (int64_t s = 0; s < full; ++s)  // whole slices: two vector copies each, written in order
        for (int r = 0; r < rows; ++r) {
            float* dst = out + (s * kPackRows + r) * 16;
            _mm256_store_ps(dst, _mm256_loadu_ps(src + r * K + s * 16));
            _mm256_store_ps(dst + 8, _mm256_loadu_ps(src + r * K + s * 16 + 8));
        }
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
    const int64_t full = K / 16;  // whole slices as vectors
    for (int c = 0; c < n_count; ++c) {
        const Wt* src = w + (n0 + c) * K;
        for (int64_t s = 0; s < full; ++s) {
            float* dst = out + (s * 4 + c) * 16;
            _mm256_store_ps(dst, load8(src + s * 16));
            _mm256_store_ps(dst + 8, load8(src + s * 16 + 8));
        }
    }
    for (int64_t s = 0; s < KS; ++s)
        for (int c = 0; c < 4; ++c) {
            float* dst = out + (s * 4 + c) * 16;
            const int64_t k0 = s * 16, n = c < n_count ? std::min<int64_t>(16, K - k0) : 0;
            if (n == 16) continue;
            for (int64_t i = 0; i < n; ++i) dst[i] = as_f32(w[(n0 + c) * K + k0 + i]);
            std::memset(dst + n, 0, size_t(16 - n) * sizeof(float));
        }
}

// Rows of blocks packed as the float32 ones, from their exact float copy.
void pack_w_group(float* out, BlockMatrix w, int64_t K, int64_t KS, int64_t n0, int64_t n_count) {
    float* rows = block_group_scratch(K);
    dequantize_rows(rows, w, K, n0, n_count);
    pack_w_group(out, static_cast<const float*>(rows), K, KS, 0, n_count);
}

// x (n floats, n % 16 == 0) as nk_block's pairs read it: per 16 values, the 8 even-indexed then the 8 odd.
void deinterleave16(float* out, const float* x, int64_t n) {
    for (int64_t s = 0; s < n; s += 16)
        for (int i = 0; i < 8; ++i) {
            out[s + i] = x[s + 2 * i];
            out[s + 8 + i] = x[s + 2 * i + 1];
        }
}

// tile_nk's sums through nk_block: RT rows of x by the 4 weight rows at n0. first_rows: these are the
// first rows to read the group (they stream it from memory), so they ask for the group two ahead.
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

// acc (24, 16) out, and in unless `first`; x_slices (s_count, 6, 16), w_slices (s_count, 4, 16); 32-byte
// aligned. With `out` (the tile's last span) the sums are then reduced into y.
void tile_nk_packed_span(float* acc, const float* x_slices, const float* w_slices, int64_t s_count, bool first,
                         const TileOut* out = nullptr) {
    packed_half_pass<0, 0>(acc, x_slices, w_slices, s_count, first);
    packed_half_pass<0, 1>(acc, x_slices, w_slices, s_count, first);
    packed_half_pass<2, 0>(acc, x_slices, w_slices, s_count, first);
    packed_half_pass<2, 1>(acc, x_slices, w_slices, s_count, first);
    if (out) reduce_packed_tile(out->y, acc, out->bias, out->n_rows, out->N, out->n0, out->n_count);
}

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

// Batched decode in the AVX2 build: all T rows of a group in group_rows_batched when it applies
// (returns T, the rows done), else none (tile_nk takes them).
// Past 8 rows, paired bfloat16 spends more on widening each weight twice (once per pass) than it saves
// (16 rows, 1 thread: 79 ms per pass over tile_nk's 2 x 2 blocks, 87 here). float32 goes 3 rows at a
// time; bfloat16 2 at a time (3 for an odd tail): its weights come as 16 values per load, and fewer
// accumulators leave registers for them. Zen 3 VM (AVX2), 2 threads, tokens/s in blocks of 3 / 2:
// SmolLM2-135M shape batch 8 208-219 / 261-265, batch 4 191-199 / 245-257, Qwen2.5-0.5B batch 8 54-67 /
// 69-76; float32 batch 8 202-206 / 188-190. With the x vectors held in registers, bfloat16 in blocks of 3
// still loses (one matmul, K 576 x N 1536, 8 rows: 160-168 us against 116-122 in blocks of 2).
template <class Wt, bool kPaired>
int64_t batched_group_rows(float* y, const float* x, int64_t T, const Wt* w, const float* bias, int64_t K, int64_t N,
                           int64_t n0, int64_t n_count) {
    if (T > 1 && K % 16 == 0 && (!kPaired || T <= 8)) {
        group_rows_batched<kPaired ? 2 : 3, Wt, kPaired>(y, x, T, w, bias, K, N, n0, n_count);
        return T;
    }
    return 0;
}

#else  // portable: the same arithmetic per element, one element at a time
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

template <class Wt, bool kPaired>
int64_t batched_group_rows(float*, const float*, int64_t, const Wt*, const float*, int64_t, int64_t, int64_t, int64_t) {
    return 0;
}
#endif

#if !KVSCOPE_PORTABLE
// Prefill (T >= 4 * kPackRows): packed operands, for every target of one fork. Wt: float, uint16_t or
// BlockMatrix (pack_w_group's overloads take the matrix a target points to).
template <class Wt>
auto weights_of(const NkTarget<Wt>& t) {
    if constexpr (std::is_same_v<Wt, BlockMatrix>) return *t.w;
    else return t.w;
}

template <class Wt>
void matmul_nk_packed(const float* x, int64_t T, int64_t K, std::span<const NkTarget<Wt>> targets) {
    constexpr int CT = 4;
    // x packed once for every target (the last block padded with zero rows). Each target's rows are cut
    // into panels of G groups of 4 weight rows, numbered one target after the other; each thread takes a
    // run of panels (parallel_ranges, stealing single panels at the end), packs a panel once (the weights
    // leave memory once per matmul) and runs every block of 6 rows of x over it, K in spans of at most
    // 768: the block's span (18 KiB) stays in L1 across the panel's groups, whose spans (12 KiB each) come
    // from the panel in L2. Each block of x comes from L2 or L3 once per panel, so larger panels waste
    // less: G is 16 or 12 where the fork has at least 8 such panels per thread to balance (the last panel
    // leaves a thread idle for up to its time) and a panel fits in 512 KiB, else 8.
    // (SmolLM2-135M shape, 512-token prefill, 2 threads, AMD EPYC Zen 5 VM: 2 % faster than with G = 8;
    // one matmul of K 576 x N 1536: G 16 computes at 80 % of the FMA peak, 8 at 77 %.)
    constexpr int64_t kMaxSpanSlices = 48;
    const int64_t n_threads = ThreadPool::global().n_threads();
    int64_t total_rows = 0;
    for (const NkTarget<Wt>& t : targets) total_rows += t.N;
    int64_t panel_groups_max = 8;
    for (int64_t g : {kMaxPanelGroups, int64_t(12)})
        if (total_rows >= g * CT * 8 * n_threads && g * CT * K * int64_t(sizeof(float)) <= (int64_t(512) << 10)) {
            panel_groups_max = g;
            break;
        }
    const int64_t panel_rows = panel_groups_max * CT;
    std::array<int64_t, kMaxSharedTargets + 1> first_panel{};  // target j's panels: [first_panel[j], first_panel[j + 1])
    for (size_t j = 0; j < targets.size(); ++j) first_panel[j + 1] = first_panel[j] + (targets[j].N + panel_rows - 1) / panel_rows;
    const int64_t n_panels = first_panel[targets.size()];
    const int64_t KS = (K + 15) / 16, n_blocks = (T + kPackRows - 1) / kPackRows, block_floats = KS * 16 * kPackRows;
    const int64_t n_spans = (KS + kMaxSpanSlices - 1) / kMaxSpanSlices;  // of equal length: no short tail
    thread_local std::vector<float> x_storage;
    float* x_packed = aligned_scratch(x_storage, n_blocks * block_floats);  // (ceil(T / 6), KS, 6, 16)
    ThreadPool::global().parallel_for(n_blocks, [&](int64_t b) { pack_x_block(x_packed + b * block_floats, x, T, K, KS, b); });
    // Panel p's target and first weight row.
    auto locate = [&](int64_t p, size_t& j, int64_t& n0) {
        j = 0;
        while (p >= first_panel[j + 1]) ++j;
        n0 = (p - first_panel[j]) * panel_rows;
    };
    ThreadPool::global().parallel_ranges(n_panels, 1, [&](int64_t p0, int64_t p1) {
        thread_local std::vector<float> panel_storage;
        float* panel = aligned_scratch(panel_storage, panel_groups_max * KS * 64);             // (G, KS, 4, 16)
        alignas(64) float acc[kMaxPanelGroups * kTileAccumulators * 16];                    // (16, 24, 16)
        for (int64_t p = p0; p < p1; ++p) {
            size_t j;
            int64_t p_n0;
            locate(p, j, p_n0);
            const NkTarget<Wt>& t = targets[j];
            const int64_t N = t.N, panel_groups = std::min(panel_groups_max, (N - p_n0 + CT - 1) / CT);
            auto n0_of = [&](int64_t i) { return p_n0 + i * CT; };
            auto count_of = [&](int64_t i) { return std::min<int64_t>(CT, N - n0_of(i)); };
            for (int64_t i = 0; i < panel_groups; ++i) pack_w_group(panel + i * KS * 64, weights_of(t), K, KS, n0_of(i), count_of(i));
            for (int64_t b = 0; b < n_blocks; ++b) {
                const float* xb = x_packed + b * block_floats;
                const int64_t rows = std::min<int64_t>(kPackRows, T - b * kPackRows);
                for (int64_t sp = 0; sp < n_spans; ++sp) {
                    const int64_t s0 = KS * sp / n_spans, span = KS * (sp + 1) / n_spans - s0;
                    for (int64_t i = 0; i < panel_groups; ++i) {
                        const TileOut out{t.y + b * kPackRows * N, t.bias, rows, N, n0_of(i), count_of(i)};
                        tile_nk_packed_span(acc + i * kTileAccumulators * 16, xb + s0 * 16 * kPackRows,
                                            panel + i * KS * 64 + s0 * 64, span, sp == 0, sp + 1 == n_spans ? &out : nullptr);
                    }
                }
            }
        }
    });
}
#endif

// Small batches (and decode where no decode kernel applies): every target's groups of 4 weight rows,
// numbered one target after the other, are split between the tasks of one fork: q, k and v (or gate and
// up) cost one fork, and the small k and v matrices no longer pay a fork's fixed cost each. Each group's
// tiles are those of a single matmul. xs is x, or in the AVX2 build's paired bfloat16 path x deinterleaved.
template <class Wt, bool kPaired>
void tile_groups(const float* xs, int64_t T, int64_t K, std::span<const NkTarget<Wt>> targets) {
    constexpr int CT = 4;
    std::array<int64_t, kMaxSharedTargets + 1> first_group{};  // target j's groups: [first_group[j], first_group[j + 1])
    for (size_t j = 0; j < targets.size(); ++j) first_group[j + 1] = first_group[j] + (targets[j].N + CT - 1) / CT;
    const int64_t n_groups = first_group[targets.size()];
    // Each thread streams its own run of groups, then takes ~128 KiB pieces of weights from the end of the
    // other's (parallel_ranges), as decode does. Against two fixed tasks per thread, Zen 3 VM (AVX2), 2
    // threads, batch 8 tokens/s: SmolLM2-135M shape float32 212-232 -> 223-235, bfloat16 250-276 -> 269-283.
    const int64_t piece_groups = std::max<int64_t>(1, (int64_t(128) << 10) / (CT * K * int64_t(sizeof(Wt))));
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
            int64_t t = batched_group_rows<Wt, kPaired>(y, xs, T, w, bias, K, N, n0, count);
            for (; t + 4 <= T; t += 4) tile_nk<4, Wt, kPaired>(y + t * N, xs + t * K, w, bias, K, N, n0, count, t == 0);
            for (; t < T; ++t) tile_nk<1, Wt, kPaired>(y + t * N, xs + t * K, w, bias, K, N, n0, count, t == 0);
        }
    };
    ThreadPool::global().parallel_ranges(n_groups, piece_groups, run_groups);
}

}  // namespace

// A small batch (T rows of x) by one group of a float-dotted matrix of blocks: the build's register kernel,
// else the group's float copy through tile_groups' kernels, laid at n0 = 0 with y and the bias shifted to it.
void block_batch_group(const float* x, int64_t T, int64_t K, const MatmulTarget& target, int64_t n0, int64_t count) {
    const int64_t N = target.N;
    const BlockMatrix& w = target.w.blocks;
    if (block_tile(target.y, x, T, w, target.bias, K, N, n0, count)) return;
    float* rows = block_group_scratch(K);  // (4, K), then 8 rows of zeros
    dequantize_rows(rows, w, K, n0, count);
    float* y = target.y + n0;
    const float* bias = target.bias ? target.bias + n0 : nullptr;
    int64_t t = batched_group_rows<float, false>(y, x, T, rows, bias, K, N, 0, count);
    for (; t + 4 <= T; t += 4) tile_nk<4, float>(y + t * N, x + t * K, rows, bias, K, N, 0, count, t == 0);
    for (; t < T; ++t) tile_nk<1, float>(y + t * N, x + t * K, rows, bias, K, N, 0, count, t == 0);
}

// Prefill on float-dotted matrices of blocks: their exact float copy in the packed panels.
void block_prefill(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets) {
#if !KVSCOPE_PORTABLE
    std::array<NkTarget<BlockMatrix>, kMaxSharedTargets> typed;
    for (size_t j = 0; j < targets.size(); ++j) typed[j] = {targets[j].y, &targets[j].w.blocks, targets[j].bias, targets[j].N};
    matmul_nk_packed(x, T, K, std::span<const NkTarget<BlockMatrix>>(typed.data(), targets.size()));
#else
    (void)x, (void)T, (void)K, (void)targets;
#endif
}

namespace {

// matmul_nk of up to kMaxSharedTargets matrices with the same storage: which kernel runs, per instruction set.
#if KVSCOPE_AVX512
template <class Wt>
void matmul_nk_impl(const float* x, int64_t T, int64_t K, std::span<const NkTarget<Wt>> targets) {
    if (T >= 4 * kPackRows) {  // prefill
        matmul_nk_packed(x, T, K, targets);
        return;
    }
    if (T == 1) {
        decode_rows(x, K, targets);
        return;
    }
    tile_groups<Wt, false>(x, T, K, targets);
}

#elif KVSCOPE_AVX2
template <class Wt>
void matmul_nk_impl(const float* x, int64_t T, int64_t K, std::span<const NkTarget<Wt>> targets) {
    if (T >= 4 * kPackRows) {  // prefill
        matmul_nk_packed(x, T, K, targets);
        return;
    }
    if constexpr (std::is_same_v<Wt, uint16_t>) {
        if (K % 16 == 0) {  // bfloat16 decode: x deinterleaved once, for nk_block's pairs
            thread_local std::vector<float> xd_storage;
            float* xd = aligned_scratch(xd_storage, T * K);
            deinterleave16(xd, x, T * K);
            if (T == 1) decode_groups<Wt, true>(xd, K, targets);
            else tile_groups<Wt, true>(xd, T, K, targets);
            return;
        }
    }
    if (T == 1) {
        decode_groups<Wt, false>(x, K, targets);
        return;
    }
    tile_groups<Wt, false>(x, T, K, targets);
}

#else
template <class Wt>
void matmul_nk_impl(const float* x, int64_t T, int64_t K, std::span<const NkTarget<Wt>> targets) {
    tile_groups<Wt, false>(x, T, K, targets);
}
#endif

}  // namespace

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
    const bool all_blocks = std::all_of(targets.begin(), targets.end(), [](const MatmulTarget& t) { return t.w.blocks.data; });
    if (all_blocks) {  // of one format or several (Q4_K_M files mix Q4_K and Q6_K): one fork
        for ([[maybe_unused]] const MatmulTarget& t : targets) assert(K % block_layout(t.w.blocks.format).elements == 0 && "a row is whole blocks");
        matmul_nk_blocks(x, T, K, targets);
        return;
    }
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

}  // namespace kvscope
