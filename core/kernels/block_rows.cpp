// Decode on matrices of blocks: a group of 4 weight rows, their chains side by side (one row's chain alone
// waits on its fma latency), the bytes 16 KiB past the group asked for as it goes: the blocks stream from
// the file's mapping in 4 KiB pages, where the hardware prefetcher stops at every page. Q8_0, one matrix
// K 576 x N 49152 (32 MB) from memory, AMD EPYC Zen 5: 1 thread 7.9 GB/s without the request, 27.4 with it.
// Into L1 where it holds 48 KiB (unlike float32 rows, whose loads the requests crowd out: tile_nk), else into L2
// (read_ahead.h).
#include "kernels/block_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/block_vectors.h"
#include "kernels/lanes.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

#if KVSCOPE_AVX512
// The group's 4 float16 scales at byte `at` of their blocks, each widened and broadcast to 16 lanes: one
// conversion for the 4, then one shuffle each, where each row's own took three. Widening the weights' bytes
// keeps the shuffle unit busy, so what else uses it counts: one matrix K 2048 x N 8192 in cache, AMD EPYC
// Zen 5, 1 thread: Q8_0 77 -> 83 GFLOP/s. (Embedded broadcasts from a copy on the stack stall on the store: 60.)
inline void group_scales(const GroupRows& g, int64_t at, __m512 (&d)[4]) {
    uint64_t halves = 0;
    for (int c = 0; c < 4; ++c) {
        uint16_t h;
        std::memcpy(&h, g.r[c] + at, sizeof h);
        halves |= uint64_t(h) << (16 * c);
    }
    const __m512 four = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(halves))));
    d[0] = _mm512_broadcastss_ps(_mm512_castps512_ps128(four));
    for (int c = 1; c < 4; ++c) d[c] = _mm512_permutexvar_ps(_mm512_set1_epi32(c), four);
}

// y[n0 + c] = reduce_add(acc[c]) + bias, c < n_count (reduce_add4 has reduce_add's bits; indexing acc with
// n_count instead would keep the sums in memory through the loop).
inline void store_sums(float* y, const __m512 (&acc)[4], const float* bias, int64_t n0, int64_t n_count) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, reduce_add4(acc[0], acc[1], acc[2], acc[3]));
    for (int c = 0; c < n_count; ++c) y[n0 + c] = sums[c] + (bias ? bias[n0 + c] : 0.0f);
}

// y[n0 + c] = x · row c, each weight float(q) · d, or fma(float(q), d, m) with a minimum, as the reference
// makes it, 16 lanes per row. Group: a format's 4 blocks at byte `at` of the group's rows (kBytes each), q(c, v)
// row c's integers of weights 16v .. 16v + 15 as floats, kMin whether a float16 minimum follows d.
template <class Group>
void rows_in_registers(float* y, const float* x, const std::byte* w, const float* bias, int64_t K, int64_t n0, int64_t n_count) {
    const int64_t KB = K / 32;
    const GroupRows g(w, KB * Group::kBytes, n0, n_count);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 d[4], m[4];
    for (int64_t b = 0; b < KB; ++b) {
        const int64_t at = b * Group::kBytes;
        g.ask_ahead(at, Group::kBytes);
        group_scales(g, at, d);
        if constexpr (Group::kMin) group_scales(g, at + 2, m);
        const Group blocks(g, at);
        for (int v = 0; v < 2; ++v) {
            const __m512 xv = _mm512_loadu_ps(x + 32 * b + 16 * v);
            for (int c = 0; c < 4; ++c) {
                const __m512 q = blocks.q(c, v);
                const __m512 weights = Group::kMin ? _mm512_fmadd_ps(q, d[c], m[c]) : _mm512_mul_ps(q, d[c]);
                acc[c] = _mm512_fmadd_ps(xv, weights, acc[c]);
            }
        }
    }
    store_sums(y, acc, bias, n0, n_count);
}

// Q4_1, Q5_1: a row's 16 bytes widened once for its 32 weights (low nibbles, then high), Q5_1's fifth bits met
// in one masked addition (nibble_integers). Against widening the bytes for each 16 weights, with the fifth bits
// apart (Q5_0's, when it ran in float32): 48 -> 58 GFLOP/s (as above).
template <BlockFormat F>
struct NibbleGroup {
    static constexpr int64_t kBytes = NibbleLayout<F>::kBytes;
    static constexpr bool kMin = NibbleLayout<F>::kMin;
    __m512i packed[4];
    uint32_t high[4];
    NibbleGroup(const GroupRows& g, int64_t at) {
        for (int c = 0; c < 4; ++c) {
            packed[c] = bytes_as_int32(g.r[c] + at + NibbleLayout<F>::kQsAt);
            high[c] = nibble_high<F>(g.r[c] + at);
        }
    }
    __m512 q(int c, int v) const { return _mm512_cvtepi32_ps(nibble_integers<F>(packed[c], high[c], v)); }
};

// Decode on Q4_1 and Q5_1, a group's 4 rows in registers.
template <BlockFormat F>
void rows32(float* y, const float* x, const std::byte* w, const float* bias, int64_t K, int64_t n0, int64_t n_count) {
    rows_in_registers<NibbleGroup<F>>(y, x, w, bias, K, n0, n_count);
}

// R rows of x (y and x: rows K and N apart) by the group's weight rows, two at a time: each vector of weights
// is dequantized once for all R rows (R x 2 chains in registers), so a batch pays the dequantizing once per
// weight, as decode does. Each output's chain is decode's: the same bits.
template <class Block, int R>
void tile_in_registers(float* y, const float* x, const std::byte* w, const float* bias, int64_t K, int64_t N,
                       int64_t n0, int64_t n_count) {
    const int64_t KB = K / Block::kElements;
    const GroupRows g(w, KB * Block::kBytes, n0, n_count);
    for (int c0 = 0; c0 < n_count; c0 += 2) {
        __m512 acc[R][2];
        for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        for (int64_t b = 0; b < KB; ++b) {
            if (c0 == 0) g.ask_ahead(b * Block::kBytes, Block::kBytes);
            Block block[2];
            for (int c = 0; c < 2; ++c) block[c].load(g.r[c0 + c] + b * Block::kBytes);
            const float* xb = x + b * Block::kElements;
#pragma GCC unroll 16
            for (int v = 0; v < Block::kElements / 16; ++v) {
                const __m512 w0 = block[0].weights(v), w1 = block[1].weights(v);
#pragma GCC unroll 8
                for (int r = 0; r < R; ++r) {
                    __m512 xv = _mm512_loadu_ps(xb + r * K + 16 * v);
                    asm("" : "+v"(xv));  // one load for both rows: GCC folds it into each fma, and loads bound the loop
                    acc[r][0] = _mm512_fmadd_ps(xv, w0, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(xv, w1, acc[r][1]);
                }
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < 2 && c0 + c < n_count; ++c)
                y[r * N + n0 + c0 + c] = reduce_add(acc[r][c]) + (bias ? bias[n0 + c0 + c] : 0.0f);
    }
}

// All T rows, 8 at a time (the tail as one call of its size).
template <class Block>
void tile_rows(float* y, const float* x, int64_t T, const std::byte* w, const float* bias, int64_t K, int64_t N,
               int64_t n0, int64_t n_count) {
    for (int64_t t = 0; t < T; t += 8) {
        float* yt = y + t * N;
        const float* xt = x + t * K;
        switch (std::min<int64_t>(8, T - t)) {
            case 1: tile_in_registers<Block, 1>(yt, xt, w, bias, K, N, n0, n_count); break;
            case 2: tile_in_registers<Block, 2>(yt, xt, w, bias, K, N, n0, n_count); break;
            case 3: tile_in_registers<Block, 3>(yt, xt, w, bias, K, N, n0, n_count); break;
            case 4: tile_in_registers<Block, 4>(yt, xt, w, bias, K, N, n0, n_count); break;
            case 5: tile_in_registers<Block, 5>(yt, xt, w, bias, K, N, n0, n_count); break;
            case 6: tile_in_registers<Block, 6>(yt, xt, w, bias, K, N, n0, n_count); break;
            case 7: tile_in_registers<Block, 7>(yt, xt, w, bias, K, N, n0, n_count); break;
            default: tile_in_registers<Block, 8>(yt, xt, w, bias, K, N, n0, n_count); break;
        }
    }
}

#elif KVSCOPE_AVX2
// Decode as rows_through_l1 computes it (chains lo: lanes 0-7 of every 16 weights, hi: 8-15; fma in k order,
// then lane_tree_sum), on the weights made in registers instead of stored to L1 and loaded back: 8 at a time
// from their bytes, as the reference makes them. Row by row within a block, so 8 chains and one row's values
// fit AVX2's 16 registers.

// y[n0 + c] = lane_tree_sum of row c's chains + bias, c < n_count.
void store_chain_sums(float* y, const __m256 (&lo)[4], const __m256 (&hi)[4], const float* bias, int64_t n0, int64_t n_count) {
    alignas(32) float lanes[16];
    for (int c = 0; c < n_count; ++c) {
        _mm256_store_ps(lanes, lo[c]);
        _mm256_store_ps(lanes + 8, hi[c]);
        y[n0 + c] = lane_tree_sum(lanes) + (bias ? bias[n0 + c] : 0.0f);
    }
}

// The 32-weight formats: `bytes(block, q)` gives a block's 32 small integers as bytes (q[0] weights 0-15,
// q[1] 16-31), each weight q · d, or with a minimum (kMin, a float16 after d) fma(q, d, m).
template <int kBytes, bool kMin, class Bytes>
void rows_in_registers(float* y, const float* x, const std::byte* w, const float* bias, int64_t K, int64_t n0, int64_t n_count,
                       const Bytes& bytes) {
    const int64_t KB = K / 32;
    const GroupRows g(w, KB * kBytes, n0, n_count);
    __m256 lo[4], hi[4];
    for (int c = 0; c < 4; ++c) lo[c] = hi[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < KB; ++b) {
        const int64_t at = b * kBytes;
        g.ask_ahead(at, kBytes);
        const float* xb = x + 32 * b;
        for (int c = 0; c < 4; ++c) {
            const unsigned char* block = g.r[c] + at;
            const __m256 d = _mm256_set1_ps(half(block)), m = kMin ? _mm256_set1_ps(half(block + 2)) : _mm256_setzero_ps();
            auto widen = [&](__m128i q) {
                const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                return kMin ? _mm256_fmadd_ps(qf, d, m) : _mm256_mul_ps(qf, d);
            };
            __m128i q[2];
            bytes(block, q);
            for (int v = 0; v < 2; ++v) {
                lo[c] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 16 * v), widen(q[v]), lo[c]);
                hi[c] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + 16 * v + 8), widen(_mm_srli_si128(q[v], 8)), hi[c]);
            }
        }
    }
    store_chain_sums(y, lo, hi, bias, n0, n_count);
}

template <BlockFormat F>
void rows32(float* y, const float* x, const std::byte* w, const float* bias, int64_t K, int64_t n0, int64_t n_count) {
    rows_in_registers<NibbleLayout<F>::kBytes, NibbleLayout<F>::kMin>(y, x, w, bias, K, n0, n_count, nibble_bytes<F>);
}
#endif

// Any format, any build: 256 weights of each row at a time dequantized into L1 (dequantize_blocks), then
// the build's chains over them.
void rows_through_l1(float* y, const float* x, BlockMatrix w, const float* bias, int64_t K, int64_t n0, int64_t n_count) {
    constexpr int64_t kChunk = 256;
    const BlockLayout layout = block_layout(w.format);
    const GroupRows g(w.data, K / layout.elements * layout.bytes, n0, n_count);
    alignas(64) float chunk[4][kChunk];  // (row, weight)
    alignas(64) float lanes[4][16] = {};
#if KVSCOPE_AVX512
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
#elif KVSCOPE_AVX2
    __m256 lo[4], hi[4];
    for (int c = 0; c < 4; ++c) lo[c] = hi[c] = _mm256_setzero_ps();
#endif
    for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
        const int64_t len = std::min(kChunk, K - k0), at = k0 / layout.elements * layout.bytes;
        g.ask_ahead(at, len / layout.elements * layout.bytes);
        for (int c = 0; c < 4; ++c) dequantize_blocks(w.format, reinterpret_cast<const std::byte*>(g.r[c] + at), len, chunk[c]);
        for (int64_t i = 0; i < len; i += 16) {
#if KVSCOPE_AVX512
            const __m512 xv = _mm512_loadu_ps(x + k0 + i);
            for (int c = 0; c < 4; ++c) acc[c] = _mm512_fmadd_ps(xv, _mm512_load_ps(chunk[c] + i), acc[c]);
#elif KVSCOPE_AVX2
            const __m256 x0 = _mm256_loadu_ps(x + k0 + i), x1 = _mm256_loadu_ps(x + k0 + i + 8);
            for (int c = 0; c < 4; ++c) {
                lo[c] = _mm256_fmadd_ps(x0, _mm256_load_ps(chunk[c] + i), lo[c]);
                hi[c] = _mm256_fmadd_ps(x1, _mm256_load_ps(chunk[c] + i + 8), hi[c]);
            }
#else
            for (int c = 0; c < 4; ++c)
                for (int l = 0; l < 16; ++l) lanes[c][l] = std::fma(x[k0 + i + l], chunk[c][i + l], lanes[c][l]);
#endif
        }
    }
#if KVSCOPE_AVX512
    for (int c = 0; c < n_count; ++c) y[n0 + c] = reduce_add(acc[c]) + (bias ? bias[n0 + c] : 0.0f);
    return;
#elif KVSCOPE_AVX2
    for (int c = 0; c < 4; ++c) {
        _mm256_store_ps(lanes[c], lo[c]);
        _mm256_store_ps(lanes[c] + 8, hi[c]);
    }
#endif
    for (int64_t c = 0; c < n_count; ++c) y[n0 + c] = lane_tree_sum(lanes[c]) + (bias ? bias[n0 + c] : 0.0f);
}

}  // namespace

void block_rows(float* y, const float* x, BlockMatrix w, const float* bias, int64_t K, int64_t n0, int64_t n_count) {
#if !KVSCOPE_PORTABLE
    switch (w.format) {
        case BlockFormat::Q4_1: return rows32<BlockFormat::Q4_1>(y, x, w.data, bias, K, n0, n_count);
        case BlockFormat::Q5_1: return rows32<BlockFormat::Q5_1>(y, x, w.data, bias, K, n0, n_count);
        default: break;
    }
#endif
    rows_through_l1(y, x, w, bias, K, n0, n_count);
}

bool block_tile(float* y, const float* x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                int64_t n_count) {
#if KVSCOPE_AVX512
    switch (w.format) {
        case BlockFormat::Q4_1: return tile_rows<Q4_1Block>(y, x, T, w.data, bias, K, N, n0, n_count), true;
        case BlockFormat::Q5_1: return tile_rows<Q5_1Block>(y, x, T, w.data, bias, K, N, n0, n_count), true;
        default: break;
    }
#else
    (void)y, (void)x, (void)T, (void)w, (void)bias, (void)K, (void)N, (void)n0, (void)n_count;
#endif
    return false;
}

}  // namespace kvscope
