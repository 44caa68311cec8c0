// Prefill and batches on the 32-weight integer formats (Q4_0, Q5_0, Q8_0), and every T where the matrix is in
// panels from load (below): a panel of weight rows packed once, its rows in the lanes of two registers, then
// every row of x against it, a tile of rows at a time. Block by block each (x row, weight row) pair sums its 32
// products exactly in an int32 lane (4 bytes of u per lane against 4 of x's, broadcast), then takes
// block_rows.h's float step, acc = fma(d · dx, float(i), acc): the bits of integer_rows32
// (block_rows_integer32.cpp, whose offsets this file shares: i = Σ u · qx - offset · Σ qx). Against the packed
// float32 kernel on the dequantized weights (matmul_nk.cpp): more multiplies per instruction and no per-block
// horizontal sums. One matrix K 2048 x N 1024 in cache, 512 rows of x, AMD EPYC Zen 4, 1 thread, ms: AVX-512 VNNI
// (32 rows, vpdpbusd) Q8_0 23.0 -> 7.3; the AVX2 build (16 rows, vpmaddubsw then vpmaddwd) Q8_0 26.0 -> 20.7,
// Q4_0 33.4 -> 17.7, Q5_0 28.1 -> 16.4.
//
// A matrix in BlockOrder::Panels (quant_blocks.h) was packed once at load (pack_panels), so every T runs
// here, decode too, on the panels in place: Q8_0 in byte panels (the bytes packing makes), Q4_0 in nibble
// panels, each block's 16 bytes of a row in 4 runs of 4 whose low nibbles are weights 4g .. 4g + 3 and high
// nibbles 16 + 4g .., split in registers. Both keep the scales as float16: the file's bytes, in another order.
#include "kernels/block_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/block_vectors.h"
#include "kernels/read_ahead.h"
#include "kernels/simd.h"

namespace kvscope {

#if !KVSCOPE_PORTABLE
namespace {

// Runs of 4 weights in a panel's block: 8, or 4 of nibbles (Q4_0 in panels from load); then `rows` float16
// scales. The same bytes as the rows' blocks where rows is the ISA's kRows.
constexpr int64_t panel_runs(bool nibbles) { return nibbles ? 4 : 8; }
constexpr int64_t panel_block_bytes(bool nibbles, int64_t rows) { return panel_runs(nibbles) * 4 * rows + 2 * rows; }

// u[i] holds 8 int32 of row i; afterwards u[g] holds int32 g of rows 0 .. 7.
inline void transpose8(__m256i (&u)[8]) {
    __m256i pairs[8], quads[8];
    for (int i = 0; i < 8; i += 2) {  // {a0 b0 a1 b1 | a4 b4 a5 b5}, {a2 b2 a3 b3 | a6 b6 a7 b7}
        pairs[i] = _mm256_unpacklo_epi32(u[i], u[i + 1]);
        pairs[i + 1] = _mm256_unpackhi_epi32(u[i], u[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // int32 0 | 4, 1 | 5, 2 | 6, 3 | 7 of 4 rows
        quads[i] = _mm256_unpacklo_epi64(pairs[i], pairs[i + 2]);
        quads[i + 1] = _mm256_unpackhi_epi64(pairs[i], pairs[i + 2]);
        quads[i + 2] = _mm256_unpacklo_epi64(pairs[i + 1], pairs[i + 3]);
        quads[i + 3] = _mm256_unpackhi_epi64(pairs[i + 1], pairs[i + 3]);
    }
    for (int g = 0; g < 4; ++g) {
        u[g] = _mm256_permute2x128_si256(quads[g], quads[g + 4], 0x20);
        u[g + 4] = _mm256_permute2x128_si256(quads[g], quads[g + 4], 0x31);
    }
}

// A panel of `rows` weight rows from `first` (n_count of them real, the others zero; each row row_bytes long,
// blocks of block_bytes). Block s of the panel: 8 runs of 4 bytes, each `rows` lanes of one run (row r in lane
// r), then the rows' scales d as float16. block(b, u, d) gives the block at b as its 32 bytes and scale.
// Packed 8 blocks at a time, 8 rows at a time within them (a block of each row, its 8 runs transposed in
// registers and stored as 8 runs of 8 lanes), so the 8 blocks' part of the panel (9 KiB) stays in L1; each
// row's next 8 blocks are asked into L1 as it goes, and the next panel's bytes into L2, a share per 8 blocks,
// since the loads of the 32 rows' blocks would each wait on memory (the panel's rows are one contiguous run
// of the matrix). One matrix K 2048 x N 16384 from memory, 8 rows of x, AMD EPYC Zen 4, 1 thread, Q8_0:
// block by block without requests 8710 us, row by row over all the blocks (each row's stores spread over
// the whole panel) 10419, in runs of 8 blocks 8953, with the requests 6798. Each run of a row stored by
// itself (8 stores of 4 bytes a block) bounded a batch of 8 where the matrix is in the last-level cache:
// Intel Xeon family 6 model 167, K 2048 x N 16384, 8 rows, 1 thread, us, in cache Q8_0 6949 -> 4002,
// Q4_0 5768 -> 3556, Q5_0 7168 -> 3705; from memory Q8_0 8060 -> 5424 (512 rows: unchanged).
template <class Block>
void pack_rows(unsigned char* panel, int64_t K, int64_t n_count, int64_t rows, const unsigned char* first, int64_t row_bytes,
               int64_t block_bytes, const Block& block) {
    constexpr int64_t kChunk = 8;
    const int64_t KB = K / 32, panel_block = panel_block_bytes(false, rows);
    const int64_t chunks = (KB + kChunk - 1) / kChunk, ahead = (rows * row_bytes + chunks - 1) / chunks;
    const char* next_panel = reinterpret_cast<const char*>(first + rows * row_bytes);
    for (int64_t s0 = 0; s0 < KB; s0 += kChunk) {
        const int64_t s1 = std::min(KB, s0 + kChunk);
        for (int64_t at = s0 / kChunk * ahead; at < (s0 / kChunk + 1) * ahead; at += 64) _mm_prefetch(next_panel + at, _MM_HINT_T1);
        for (int64_t r0 = 0; r0 < rows; r0 += 8) {
            const int64_t real = std::clamp<int64_t>(n_count - r0, 0, 8);
            for (int64_t r = r0; r < r0 + real; ++r) {
                const auto* row = reinterpret_cast<const char*>(first + r * row_bytes);
                for (int64_t at = s1 * block_bytes; at < std::min(KB, s1 + kChunk) * block_bytes; at += 64) _mm_prefetch(row + at, _MM_HINT_T0);
            }
            for (int64_t s = s0; s < s1; ++s) {
                unsigned char* out = panel + s * panel_block;
                __m256i u[8];
                for (int i = 0; i < 8; ++i) {  // each d stored as it comes: 8 stores read back as one would not forward
                    u[i] = _mm256_setzero_si256();
                    uint16_t d = 0;
                    if (i < real) block(first + (r0 + i) * row_bytes + s * block_bytes, u[i], d);
                    std::memcpy(out + 32 * rows + 2 * (r0 + i), &d, sizeof d);
                }
                transpose8(u);
                for (int g = 0; g < 8; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * (rows * g + r0)), u[g]);
            }
        }
    }
}

}  // namespace
#endif

#if KVSCOPE_AVX512 && KVSCOPE_VNNI
namespace {

// A panel's block: runs of 4 weights (8, or 4 of nibbles), each two registers of 16 rows' 4 bytes (row 16v + j
// in lane j of register v), then the 32 rows' scales d as float16.
constexpr int64_t kRows = 32;
constexpr int kTileRows = 6;

const ReadAhead kAhead = read_ahead();  // decode asks for the stream ahead, into L2 (read_ahead.h)

// Rows t0 .. t0 + TR - 1 of x against the packed panel: y's columns [n0, n0 + n_count). With one or two rows
// of x, each half's int32 sums go in two chains (even and odd runs) added at the block's end: one chain
// would wait on vpdpbusd's latency in decode.
template <BlockFormat F, bool Nibbles, int TR>
void panel_tile(float* y, int64_t N, const X8Rows& x, int64_t t0, const unsigned char* panel, int64_t K, const float* bias, int64_t n0,
                int64_t n_count) {
    constexpr int64_t kRuns = panel_runs(Nibbles), kBlockBytes = panel_block_bytes(Nibbles, kRows);
    constexpr int kChains = TR <= 2 ? 2 : 1;
    const int64_t KB = K / 32;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[TR][2];
#pragma GCC unroll 8
    for (int t = 0; t < TR; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    const int8_t* xq = x.q + t0 * K;
    for (int64_t s = 0; s < KB; ++s) {
        const unsigned char* block = panel + s * kBlockBytes;
        if constexpr (TR <= 2) {  // decode
            const char* ahead = reinterpret_cast<const char*>(block) + (Nibbles ? kAhead.nibble_panels_one_row : kAhead.byte_panels_one_row);
            for (int64_t at = 0; at < kBlockBytes; at += 64) _mm_prefetch(ahead + at, _MM_HINT_T1);
        }
        __m512i dots[kChains][TR][2];
#pragma GCC unroll 8
        for (int t = 0; t < TR; ++t) {
            dots[0][t][0] = dots[0][t][1] = _mm512_set1_epi32(-Block32<F>::kOffset * x.sums[(t0 + t) * KB + s]);
            if constexpr (kChains == 2) dots[1][t][0] = dots[1][t][1] = _mm512_setzero_si512();
        }
        auto dot = [&](int chain, __m512i w0, __m512i w1, int64_t k) {
#pragma GCC unroll 8
            for (int t = 0; t < TR; ++t) {
                int32_t four;
                std::memcpy(&four, xq + t * K + 32 * s + k, sizeof four);
                const __m512i xb = _mm512_set1_epi32(four);
                dots[chain][t][0] = _mm512_dpbusd_epi32(dots[chain][t][0], w0, xb);
                dots[chain][t][1] = _mm512_dpbusd_epi32(dots[chain][t][1], w1, xb);
            }
        };
#pragma GCC unroll 8
        for (int g = 0; g < kRuns; ++g) {
            const __m512i w0 = _mm512_loadu_si512(block + g * 128), w1 = _mm512_loadu_si512(block + g * 128 + 64);
            if constexpr (Nibbles) {
                dot(g % kChains, _mm512_and_si512(w0, low), _mm512_and_si512(w1, low), 4 * g);
                dot((g + 1) % kChains, _mm512_and_si512(_mm512_srli_epi16(w0, 4), low), _mm512_and_si512(_mm512_srli_epi16(w1, 4), low), 16 + 4 * g);
            } else {
                dot(g % kChains, w0, w1, 4 * g);
            }
        }
        if constexpr (kChains == 2) {
#pragma GCC unroll 8
            for (int t = 0; t < TR; ++t)
                for (int h = 0; h < 2; ++h) dots[0][t][h] = _mm512_add_epi32(dots[0][t][h], dots[1][t][h]);
        }
        const unsigned char* scales = block + kRuns * 4 * kRows;
        const __m512 d0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
        const __m512 d1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32)));
#pragma GCC unroll 8
        for (int t = 0; t < TR; ++t) {
            const __m512 dx = _mm512_set1_ps(x.d[(t0 + t) * KB + s]);
            acc[t][0] = _mm512_fmadd_ps(_mm512_mul_ps(d0, dx), _mm512_cvtepi32_ps(dots[0][t][0]), acc[t][0]);
            acc[t][1] = _mm512_fmadd_ps(_mm512_mul_ps(d1, dx), _mm512_cvtepi32_ps(dots[0][t][1]), acc[t][1]);
        }
    }
    const __mmask16 m0 = __mmask16(n_count >= 16 ? 0xFFFF : (1u << n_count) - 1);
    const __mmask16 m1 = __mmask16(n_count >= 32 ? 0xFFFF : n_count <= 16 ? 0 : (1u << (n_count - 16)) - 1);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias + n0) : _mm512_setzero_ps();
    const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + n0 + 16) : _mm512_setzero_ps();
    for (int t = 0; t < TR; ++t) {
        float* row = y + (t0 + t) * N + n0;
        _mm512_mask_storeu_ps(row, m0, _mm512_add_ps(acc[t][0], b0));
        _mm512_mask_storeu_ps(row + 16, m1, _mm512_add_ps(acc[t][1], b1));
    }
}

}  // namespace

#elif !KVSCOPE_PORTABLE
// AVX2 (and AVX-512 without VNNI): 16 weight rows in two registers of 8 lanes, 3 rows of x at a time; the bytes
// multiply in pairs (vpmaddubsw), then the pairs (vpmaddwd). Q8_0 keeps its signed q in the panel (Block32)
// and moves its signs onto x's broadcast bytes (|q| · ±qx: no saturation).
namespace {

constexpr int64_t kRows = 16;
constexpr int kTileRows = 3;

// A panel's block: runs of 4 weights (8, or 4 of nibbles), each two registers of 8 rows' 4 bytes, then the 16
// rows' d as float16.
template <BlockFormat F, bool Nibbles, int TR>
void panel_tile(float* y, int64_t N, const X8Rows& x, int64_t t0, const unsigned char* panel, int64_t K, const float* bias, int64_t n0,
                int64_t n_count) {
    constexpr int64_t kRuns = panel_runs(Nibbles), kBlockBytes = panel_block_bytes(Nibbles, kRows);
    const int64_t KB = K / 32;
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0F);
    __m256 acc[TR][2];
#pragma GCC unroll 8
    for (int t = 0; t < TR; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    const int8_t* xq = x.q + t0 * K;
    for (int64_t s = 0; s < KB; ++s) {
        const unsigned char* block = panel + s * kBlockBytes;
        if constexpr (TR <= 2)  // decode: the stream 4 KiB ahead into L2, as the AVX-512 tile on Intel
            for (int64_t at = 0; at < kBlockBytes; at += 64) _mm_prefetch(reinterpret_cast<const char*>(block) + 4096 + at, _MM_HINT_T1);
        __m256i dots[TR][2];
#pragma GCC unroll 8
        for (int t = 0; t < TR; ++t) dots[t][0] = dots[t][1] = _mm256_set1_epi32(-Block32<F>::kOffset * x.sums[(t0 + t) * KB + s]);
        auto dot = [&](__m256i w0, __m256i w1, int64_t k) {
#pragma GCC unroll 8
            for (int t = 0; t < TR; ++t) {
                int32_t four;
                std::memcpy(&four, xq + t * K + 32 * s + k, sizeof four);
                const __m256i xb = _mm256_set1_epi32(four);
                __m256i p0, p1;
                if constexpr (Block32<F>::kSigned) {
                    p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(w0), _mm256_sign_epi8(xb, w0));
                    p1 = _mm256_maddubs_epi16(_mm256_abs_epi8(w1), _mm256_sign_epi8(xb, w1));
                } else {
                    p0 = _mm256_maddubs_epi16(w0, xb);
                    p1 = _mm256_maddubs_epi16(w1, xb);
                }
                dots[t][0] = _mm256_add_epi32(dots[t][0], _mm256_madd_epi16(p0, ones));
                dots[t][1] = _mm256_add_epi32(dots[t][1], _mm256_madd_epi16(p1, ones));
            }
        };
#pragma GCC unroll 8
        for (int g = 0; g < kRuns; ++g) {
            const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + g * 64));
            const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + g * 64 + 32));
            if constexpr (Nibbles) {
                dot(_mm256_and_si256(w0, low), _mm256_and_si256(w1, low), 4 * g);
                dot(_mm256_and_si256(_mm256_srli_epi16(w0, 4), low), _mm256_and_si256(_mm256_srli_epi16(w1, 4), low), 16 + 4 * g);
            } else {
                dot(w0, w1, 4 * g);
            }
        }
        const unsigned char* scales = block + kRuns * 4 * kRows;
        const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
        const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16)));
#pragma GCC unroll 8
        for (int t = 0; t < TR; ++t) {
            const __m256 dx = _mm256_set1_ps(x.d[(t0 + t) * KB + s]);
            acc[t][0] = _mm256_fmadd_ps(_mm256_mul_ps(d0, dx), _mm256_cvtepi32_ps(dots[t][0]), acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(_mm256_mul_ps(d1, dx), _mm256_cvtepi32_ps(dots[t][1]), acc[t][1]);
        }
    }
    for (int t = 0; t < TR; ++t) {
        alignas(32) float out[kRows];
        _mm256_store_ps(out, acc[t][0]);
        _mm256_store_ps(out + 8, acc[t][1]);
        float* row = y + (t0 + t) * N + n0;
        for (int c = 0; c < n_count; ++c) row[c] = out[c] + (bias ? bias[n0 + c] : 0.0f);
    }
}

}  // namespace
#endif

#if !KVSCOPE_PORTABLE
namespace {

constexpr int64_t panel_block_bytes(bool nibbles) { return panel_block_bytes(nibbles, kRows); }

// Rows [n0, n0 + n_count) (n_count <= kRows; the others zero) of w (N, K) packed as (K / 32) byte panel blocks.
template <BlockFormat F>
void pack_panel(unsigned char* panel, const std::byte* w, int64_t K, int64_t n0, int64_t n_count) {
    const int64_t row_bytes = K / 32 * Block32<F>::kBytes;
    const auto* first = reinterpret_cast<const unsigned char*>(w) + n0 * row_bytes;
    pack_rows(panel, K, n_count, kRows, first, row_bytes, Block32<F>::kBytes, [](const unsigned char* b, __m256i& u, uint16_t& d) {
        u = weight_bytes<F>(b);
        std::memcpy(&d, b, sizeof d);
    });
}

// kRows whole Q4_0 rows from n0 as (K / 32) nibble panel blocks: run g of row r is the row's quant bytes
// 4g .. 4g + 3, at 4 (g kRows + r); the scales after the 4 runs.
void pack_nibble_panel(unsigned char* panel, const std::byte* w, int64_t K, int64_t n0) {
    constexpr int64_t kBlock = 18;
    const int64_t KB = K / 32, row_bytes = KB * kBlock;
    for (int64_t r = 0; r < kRows; ++r) {
        const auto* row = reinterpret_cast<const unsigned char*>(w) + (n0 + r) * row_bytes;
        for (int64_t s = 0; s < KB; ++s) {
            unsigned char* out = panel + s * panel_block_bytes(true);
            const unsigned char* b = row + s * kBlock;
            for (int64_t g = 0; g < 4; ++g) std::memcpy(out + 4 * (g * kRows + r), b + 2 + 4 * g, 4);
            std::memcpy(out + panel_runs(true) * 4 * kRows + 2 * r, b, 2);
        }
    }
}

// One tile of `rows` rows of x from t0 (1 <= rows <= R).
template <BlockFormat F, bool Nibbles, int R>
void tile_of(float* y, int64_t N, const X8Rows& x, int64_t t0, int64_t rows, const unsigned char* panel, int64_t K, const float* bias,
             int64_t n0, int64_t n_count) {
    if (rows == R) return panel_tile<F, Nibbles, R>(y, N, x, t0, panel, K, bias, n0, n_count);
    if constexpr (R > 1) tile_of<F, Nibbles, R - 1>(y, N, x, t0, rows, panel, K, bias, n0, n_count);
}

// T rows of x in tiles of kTileRows, the last two sharing what is left evenly: a batch of 8 runs as 4 + 4, not
// 6 + 2, whose 2-row tile multiplies at two thirds of the others' rate (each row's sums are its own: the same
// bits either way). AMD EPYC Zen 4 (family 25 model 17), Q8_0, K 2048 x N 256 in L2, one thread, medians of 5-7,
// us: 2 rows 9.6, 4 rows 15.9, 6 rows 22.8; 8 rows 33.0-33.8 as 6 + 2, 30.6-31.4 as 4 + 4; 7 rows 31.2-32.7 as
// 6 + 1, 26.9-28.3 as 4 + 3. Tiles of 5 for every row in a prefill of 512 were no faster than those of 6.
template <BlockFormat F, bool Nibbles>
void tiles_of(float* y, const X8Rows& x, int64_t T, const unsigned char* panel, const float* bias, int64_t K, int64_t N, int64_t n0,
              int64_t n_count) {
    const int64_t whole = std::max<int64_t>(0, (T + kTileRows - 1) / kTileRows - 2) * kTileRows;  // all but the last two tiles
    for (int64_t t = 0; t < whole; t += kTileRows) panel_tile<F, Nibbles, kTileRows>(y, N, x, t, panel, K, bias, n0, n_count);
    const int64_t rest = T - whole, first = rest > kTileRows ? (rest + 1) / 2 : rest;
    tile_of<F, Nibbles, kTileRows>(y, N, x, whole, first, panel, K, bias, n0, n_count);
    if (rest > first) tile_of<F, Nibbles, kTileRows>(y, N, x, whole + first, rest - first, panel, K, bias, n0, n_count);
}

// A matrix in rows: the panel packed for this call, then every row of x against it.
template <BlockFormat F>
void panels_of(float* y, const X8Rows& x, int64_t T, const std::byte* w, const float* bias, int64_t K, int64_t N, int64_t n0,
               int64_t n_count) {
    thread_local std::vector<unsigned char> storage;
    const size_t bytes = size_t(K / 32 * panel_block_bytes(false) + 64);
    if (storage.size() < bytes) storage.resize(bytes);
    auto* panel = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
    pack_panel<F>(panel, w, K, n0, n_count);
    tiles_of<F, false>(y, x, T, panel, bias, K, N, n0, n_count);
}

}  // namespace

bool integer_panels(float* y, const X8Rows& x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                    int64_t n_count) {
    if (w.order == BlockOrder::Panels) {  // packed at load: panel n0 / kRows, kRows whole rows
        const bool nibbles = w.format == BlockFormat::Q4_0;
        const auto* panel = reinterpret_cast<const unsigned char*>(w.data) + n0 / kRows * (K / 32) * panel_block_bytes(nibbles);
        if (nibbles) tiles_of<BlockFormat::Q4_0, true>(y, x, T, panel, bias, K, N, n0, n_count);
        else tiles_of<BlockFormat::Q8_0, false>(y, x, T, panel, bias, K, N, n0, n_count);
        return true;
    }
    switch (w.format) {
        case BlockFormat::Q4_0: panels_of<BlockFormat::Q4_0>(y, x, T, w.data, bias, K, N, n0, n_count); return true;
        case BlockFormat::Q5_0: panels_of<BlockFormat::Q5_0>(y, x, T, w.data, bias, K, N, n0, n_count); return true;
        case BlockFormat::Q8_0: panels_of<BlockFormat::Q8_0>(y, x, T, w.data, bias, K, N, n0, n_count); return true;
        default: return false;
    }
}
int64_t integer_panel_rows() { return kRows; }

int64_t panel_rows(BlockFormat f) {
    if (f == BlockFormat::Q4_0 || f == BlockFormat::Q8_0) return kRows;
    return super_block_panel_rows(f);
}

void pack_panels(std::byte* w, BlockFormat f, int64_t N, int64_t K) {
    if (super_block_panel_rows(f) > 0) return pack_super_block_panels(w, f, N, K);
    const bool nibbles = f == BlockFormat::Q4_0;
    const int64_t panel_bytes = K / 32 * panel_block_bytes(nibbles);  // kRows rows' bytes
    ThreadPool::global().parallel_for(N / kRows, [&](int64_t p) {
        thread_local std::vector<unsigned char> panel;
        panel.resize(size_t(panel_bytes));
        if (nibbles) pack_nibble_panel(panel.data(), w, K, p * kRows);
        else pack_panel<BlockFormat::Q8_0>(panel.data(), w, K, p * kRows, kRows);
        std::memcpy(w + p * panel_bytes, panel.data(), size_t(panel_bytes));
    });
}

void panel_row_blocks(std::byte* out, BlockFormat f, const std::byte* panels, int64_t K, int64_t row) {
    if (super_block_panel_rows(f) > 0) return super_block_panel_row(out, f, panels, K, row);
    const bool nibbles = f == BlockFormat::Q4_0;
    const int64_t KB = K / 32, block_bytes = panel_block_bytes(nibbles), runs = panel_runs(nibbles), r = row % kRows;
    const auto* panel = reinterpret_cast<const unsigned char*>(panels) + row / kRows * KB * block_bytes;
    auto* to = reinterpret_cast<unsigned char*>(out);
    for (int64_t s = 0; s < KB; ++s, to += nibbles ? 18 : 34) {
        const unsigned char* b = panel + s * block_bytes;
        std::memcpy(to, b + runs * 4 * kRows + 2 * r, 2);
        for (int64_t g = 0; g < runs; ++g) std::memcpy(to + 2 + 4 * g, b + 4 * (g * kRows + r), 4);
        if (!nibbles && Block32<BlockFormat::Q8_0>::kOffset == 128)
            for (int j = 0; j < 32; ++j) to[2 + j] ^= 0x80;  // u = q + 128 back to q
    }
}

#else
void panel_row_blocks(std::byte*, BlockFormat, const std::byte*, int64_t, int64_t) {}
bool integer_panels(float*, const X8Rows&, int64_t, BlockMatrix, const float*, int64_t, int64_t, int64_t, int64_t) { return false; }
int64_t integer_panel_rows() { return 0; }
int64_t panel_rows(BlockFormat) { return 0; }
void pack_panels(std::byte*, BlockFormat, int64_t, int64_t) {}
#endif

}  // namespace kvscope
