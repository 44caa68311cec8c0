// Decode on matrices of blocks: a group of 4 weight rows, their chains side by side (one row's chain alone
// waits on its fma latency), the bytes 16 KiB past the group asked into L2 as it goes: the blocks stream from
// the file's mapping in 4 KiB pages, where the hardware prefetcher stops at every page. Q8_0, one matrix
// K 576 x N 49152 (32 MB) from memory, AMD EPYC Zen 5: 1 thread 7.9 GB/s without the request, 27.4 with it.
#include "kernels/block_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/lanes.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

// The group's rows (a missing row reads row n0 again; its sum is never stored).
struct GroupRows {
    const unsigned char* r[4];
    const char* ahead;  // 16 KiB past the group's first byte
    GroupRows(const std::byte* w, int64_t row_bytes, int64_t n0, int64_t n_count) {
        for (int c = 0; c < 4; ++c) r[c] = reinterpret_cast<const unsigned char*>(w) + (n0 + (c < n_count ? c : 0)) * row_bytes;
        ahead = reinterpret_cast<const char*>(w + n0 * row_bytes) + (16 << 10);
    }
    // The group's bytes [4 at, 4 (at + bytes)) ahead, as the rows' [at, at + bytes) are read.
    void ask_ahead(int64_t at, int64_t bytes) const {
#if !KVSCOPE_PORTABLE
        for (int64_t p = 0; p < 4 * bytes; p += 64) _mm_prefetch(ahead + 4 * at + p, _MM_HINT_T1);
#else
        (void)at, (void)bytes;
#endif
    }
};

#if KVSCOPE_AVX512
float half(const unsigned char* p) { return half_to_f32(uint16_t(p[0] | p[1] << 8)); }
__m512i bytes_as_int32(const unsigned char* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// One block of a row as 16-weight vectors, exactly the reference's values: weights(v) = weights 16v..16v+15.
struct Q8_0Block {
    static constexpr int kElements = 32, kBytes = 34;
    const unsigned char* b;
    __m512 d;
    void load(const unsigned char* block) { b = block, d = _mm512_set1_ps(half(block)); }
    __m512 weights(int v) const {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * v));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
    }
};

// (q | fifth bit << 4) - 16, times d; the fifth bits of weights 16v.. are bits 16v.. of the 32 after d.
struct Q5_0Block {
    static constexpr int kElements = 32, kBytes = 22;
    const unsigned char* b;
    __m512 d;
    uint32_t high;
    void load(const unsigned char* block) {
        b = block, d = _mm512_set1_ps(half(block));
        std::memcpy(&high, block + 2, 4);
    }
    __m512 weights(int v) const {
        const __m512i bytes = bytes_as_int32(b + 6);
        const __m512i nibbles = v == 0 ? _mm512_and_si512(bytes, _mm512_set1_epi32(15)) : _mm512_srli_epi32(bytes, 4);
        const __m512i q = _mm512_mask_or_epi32(nibbles, __mmask16(high >> (16 * v)), nibbles, _mm512_set1_epi32(16));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(16))), d);
    }
};

// q · (d · scale_j) - dmin · min_j per 32 weights j; the eight 6-bit pairs unpacked four bytes at a time
// (the same values as quant_blocks.cpp's scale_min), the products exact, so computed 8 at a time.
struct Q4_KBlock {
    static constexpr int kElements = 256, kBytes = 144;
    const unsigned char* b;
    alignas(32) float dl[8], ml[8];
    void load(const unsigned char* block) {
        b = block;
        uint32_t u[4];
        std::memcpy(u, block + 4, 12);
        const uint32_t low_mins = u[1] & 0x3F3F3F3Fu;
        u[3] = ((u[2] >> 4) & 0x0F0F0F0Fu) | (((u[1] >> 6) & 0x03030303u) << 4);  // mins 4-7
        u[1] = (u[2] & 0x0F0F0F0Fu) | (((u[0] >> 6) & 0x03030303u) << 4);         // scales 4-7
        u[0] &= 0x3F3F3F3Fu;                                                        // scales 0-3
        u[2] = low_mins;                                                            // mins 0-3
        const __m256 scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(u))));
        const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(u + 2))));
        _mm256_store_ps(dl, _mm256_mul_ps(_mm256_set1_ps(half(block)), scales));
        _mm256_store_ps(ml, _mm256_mul_ps(_mm256_set1_ps(half(block + 2)), mins));
        asm("" : "+m"(dl), "+m"(ml));  // read back from memory (broadcast loads), see Q6_KBlock
    }
    // Run v / 4, low (v / 2 even) or high nibbles of its bytes 16 (v % 2)..; q · dl is exact, so the fused
    // q · dl - ml rounds once, as the reference's two operations do. Looking w up in a table of each 32
    // weights' 16 values (vpermps) instead measured the same: AMD EPYC Zen 5, one matrix K 1536 x N 16384
    // from memory, 1 thread 65 GFLOP/s either way.
    __m512 weights(int v) const {
        const __m512i bytes = bytes_as_int32(b + 16 + 32 * (v / 4) + 16 * (v % 2));
        const __m512i q = (v / 2) % 2 == 0 ? _mm512_and_si512(bytes, _mm512_set1_epi32(15)) : _mm512_srli_epi32(bytes, 4);
        const int j = v / 2;
        return _mm512_fmsub_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(dl[j]), _mm512_set1_ps(ml[j]));
    }
};

// (q - 32) · (d · scale): weights 128 run + 32 k + l take nibble k / 2 of ql[64 run + 32 (k % 2) + l] and bits
// 2k, 2k + 1 of qh[32 run + l]; the scale of weights 16 i.. is scale i. A run's 128 q - 32 are made as bytes,
// 64 at a time (low nibbles are weights 0-63 of the run, high ones 64-127), then widened 16 at a time:
// against making each vector's q from its bytes, one matrix K 1536 x N 16384 from memory, AMD EPYC Zen 5,
// 1 thread: 39 -> 48 GFLOP/s.
struct Q6_KBlock {
    static constexpr int kElements = 256, kBytes = 210;
    alignas(64) int8_t q[256];
    alignas(64) float s[16];
    void load(const unsigned char* block) {
        const __m512 scales = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192))));
        _mm512_store_ps(s, _mm512_mul_ps(_mm512_set1_ps(half(block + 208)), scales));
        const __m512i nibble = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3), thirty_two = _mm512_set1_epi8(32);
        for (int run = 0; run < 2; ++run) {
            const __m512i ql = _mm512_loadu_si512(block + 64 * run);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 128 + 32 * run)));
            // bits 2k, 2k + 1 of qh for k = 0 | 1 (weights 0-63) and k = 2 | 3 (64-127), moved to bits 4 and 5
            auto top = [&](int k) {
                const __m512i shifts = _mm512_inserti64x4(_mm512_set1_epi16(short(2 * k)), _mm256_set1_epi16(short(2 * k + 2)), 1);
                return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shifts), three), 4);
            };
            const __m512i low = _mm512_or_si512(_mm512_and_si512(ql, nibble), top(0));
            const __m512i high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble), top(2));
            _mm512_store_si512(q + 128 * run, _mm512_sub_epi8(low, thirty_two));
            _mm512_store_si512(q + 128 * run + 64, _mm512_sub_epi8(high, thirty_two));
        }
        // Read back from memory: kept in registers, GCC fetches each scale with a permute and each 16 bytes
        // with an extract, and the shuffle unit, not the arithmetic, bounds the loop.
        asm("" : "+m"(q), "+m"(s));
    }
    __m512 weights(int v) const {
        const __m512i qv = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * v)));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(qv), _mm512_set1_ps(s[v]));
    }
};

template <class Block>
void rows_in_registers(float* y, const float* x, const std::byte* w, const float* bias, int64_t K, int64_t n0, int64_t n_count) {
    const int64_t KB = K / Block::kElements;
    const GroupRows g(w, KB * Block::kBytes, n0, n_count);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    // A super-block's scales (and Q6_K's bytes) are unpacked one block ahead, so their stores have left for
    // L1 before the loop reads them. One matrix K 2048 x N 16384 from memory, AMD EPYC Zen 5, 1 thread: Q6_K
    // 53 -> 57 GFLOP/s, Q4_K 65 either way; the 32-weight formats lost (Q8_0 76 -> 51), so they unpack in place.
    constexpr int kAhead = Block::kElements == 256 ? 1 : 0;
    Block blocks[2][4];
    for (int c = 0; c < 4 * kAhead; ++c) blocks[0][c].load(g.r[c]);
    for (int64_t b = 0; b < KB; ++b) {
        g.ask_ahead(b * Block::kBytes, Block::kBytes);
        Block* block = blocks[b % 2 * kAhead];
        if (b + kAhead < KB)
            for (int c = 0; c < 4; ++c) blocks[(b + kAhead) % 2 * kAhead][c].load(g.r[c] + (b + kAhead) * Block::kBytes);
        const float* xb = x + b * Block::kElements;
#pragma GCC unroll 16
        for (int v = 0; v < Block::kElements / 16; ++v) {
            const __m512 xv = _mm512_loadu_ps(xb + 16 * v);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) acc[c] = _mm512_fmadd_ps(xv, block[c].weights(v), acc[c]);
        }
    }
    for (int c = 0; c < n_count; ++c) y[n0 + c] = reduce_add(acc[c]) + (bias ? bias[n0 + c] : 0.0f);
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
                    const __m512 xv = _mm512_loadu_ps(xb + r * K + 16 * v);
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
#if KVSCOPE_AVX512
    switch (w.format) {
        case BlockFormat::Q8_0: return rows_in_registers<Q8_0Block>(y, x, w.data, bias, K, n0, n_count);
        case BlockFormat::Q5_0: return rows_in_registers<Q5_0Block>(y, x, w.data, bias, K, n0, n_count);
        case BlockFormat::Q4_K: return rows_in_registers<Q4_KBlock>(y, x, w.data, bias, K, n0, n_count);
        case BlockFormat::Q6_K: return rows_in_registers<Q6_KBlock>(y, x, w.data, bias, K, n0, n_count);
        default: break;
    }
#endif
    rows_through_l1(y, x, w, bias, K, n0, n_count);
}

bool block_tile(float* y, const float* x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                int64_t n_count) {
#if KVSCOPE_AVX512
    switch (w.format) {
        case BlockFormat::Q8_0: return tile_rows<Q8_0Block>(y, x, T, w.data, bias, K, N, n0, n_count), true;
        case BlockFormat::Q5_0: return tile_rows<Q5_0Block>(y, x, T, w.data, bias, K, N, n0, n_count), true;
        case BlockFormat::Q4_K: return tile_rows<Q4_KBlock>(y, x, T, w.data, bias, K, N, n0, n_count), true;
        case BlockFormat::Q6_K: return tile_rows<Q6_KBlock>(y, x, T, w.data, bias, K, N, n0, n_count), true;
        default: break;
    }
#else
    (void)y, (void)x, (void)T, (void)w, (void)bias, (void)K, (void)N, (void)n0, (void)n_count;
#endif
    return false;
}

}  // namespace kvscope
