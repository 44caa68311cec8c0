#pragma once
// What the block kernels share, private to core/kernels (in an anonymous namespace, as lanes.h):
//   Q8_0Block .. Q6_KBlock   one block of a format as 16-weight vectors, exactly the reference dequantizer's
//                            values (quant_blocks.h): load(bytes), then weights(v) = weights 16v .. 16v + 15;
//                            the AVX-512 build's dequantize_blocks (quant_blocks.cpp) uses them all, its float
//                            batch kernels (block_rows.cpp) the 32-weight formats'; decode makes a group's 4
//                            rows of those at once; Q4_0, Q5_0, Q8_0 and the K formats are dotted in integers
//   NibbleLayout<F>          where Q4_0, Q4_1, Q5_0 and Q5_1 keep their minimum, fifth bits and nibbles
//   Block32<F>, weight_bytes  Q4_0, Q5_0 and Q8_0 as the integer kernels meet x (offsets, bytes)
//   GroupRows                a group of 4 weight rows, the bytes ahead of it asked into L1 or L2 (read_ahead.h)
//   fifth_sixteens, nibble_unsigned; AVX2: bytes16, low_nibbles, high_nibbles, nibble_bytes   a block's small integers as bytes
//   scale_min                a K super-block's j-th (scale, min) pair
//   sum4, store_rows         4 rows' int32 lanes summed; R rows of x's 4-row sums stored with the bias
#include <cstdint>
#include <cstring>

#include "kernels/lanes.h"
#include "kernels/quant_blocks.h"
#include "kernels/read_ahead.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

// The group's rows (a missing row reads row n0 again; its sum is never stored).
struct GroupRows {
    const unsigned char* r[4];
    const char* ahead;  // 16 KiB past the group's first byte
    bool into_l1 = read_ahead().rows_into_l1;
    GroupRows(const std::byte* w, int64_t row_bytes, int64_t n0, int64_t n_count) {
        for (int c = 0; c < 4; ++c) r[c] = reinterpret_cast<const unsigned char*>(w) + (n0 + (c < n_count ? c : 0)) * row_bytes;
        ahead = reinterpret_cast<const char*>(w + n0 * row_bytes) + (16 << 10);
    }
    // The group's bytes [4 at, 4 (at + bytes)) ahead, as the rows' [at, at + bytes) are read.
    void ask_ahead(int64_t at, int64_t bytes) const {
#if !KVSCOPE_PORTABLE
        const char* from = ahead + 4 * at;
        if (into_l1)
            for (int64_t p = 0; p < 4 * bytes; p += 64) _mm_prefetch(from + p, _MM_HINT_T0);
        else
            for (int64_t p = 0; p < 4 * bytes; p += 64) _mm_prefetch(from + p, _MM_HINT_T1);
#else
        (void)at, (void)bytes;
#endif
    }
};

// The j-th (scale, min) pair of a Q4_K / Q5_K super-block: eight 6-bit pairs in 12 bytes. Pairs 0-3 sit in
// the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 take their low 4 bits from bytes 8-11 and
// their top 2 bits from the spare top bits of bytes 0-3 (scales) and 4-7 (mins).
inline void scale_min(const unsigned char* s, int j, int& scale, int& min) {
    if (j < 4) {
        scale = s[j] & 63;
        min = s[j + 4] & 63;
    } else {
        scale = (s[j + 4] & 0x0F) | (s[j - 4] >> 6) << 4;
        min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

// The float16 at p (little-endian, any alignment) as float32, exactly.
inline float half(const unsigned char* p) { return half_to_f32(uint16_t(p[0] | p[1] << 8)); }

// The 32-weight nibble formats' layout (quant_blocks.h): a minimum after d (Q4_1, Q5_1), 32 fifth bits after
// the scales (Q5_0, Q5_1), then 16 bytes of nibbles, the low ones weights 0-15.
template <BlockFormat F>
struct NibbleLayout {
    static constexpr bool kMin = F == BlockFormat::Q4_1 || F == BlockFormat::Q5_1;
    static constexpr bool kHigh = F == BlockFormat::Q5_0 || F == BlockFormat::Q5_1;
    static constexpr int kHighAt = kMin ? 4 : 2, kQsAt = kHighAt + (kHigh ? 4 : 0), kBytes = kQsAt + 16;
};

// The 32-weight integer formats (block_rows.h) as their kernels meet x: a block's 32 weights as bytes
// u = q + kOffset (Q4_0 the nibble, offset 8; Q5_0 nibble | fifth << 4, 16; Q8_0 q + 128 where VNNI multiplies
// bytes in fours), and i = Σ u · qx - kOffset · Σ qx. Without VNNI the bytes multiply in pairs (vpmaddubsw,
// saturating past 2^15), so Q8_0 keeps its signed q (kSigned, offset 0) for its signs to move onto x.
template <BlockFormat F>
struct Block32 {
    static_assert(F == BlockFormat::Q4_0 || F == BlockFormat::Q5_0 || F == BlockFormat::Q8_0);
    static constexpr int64_t kBytes = F == BlockFormat::Q8_0 ? 34 : F == BlockFormat::Q5_0 ? 22 : 18;
    static constexpr bool kSigned = F == BlockFormat::Q8_0 && !KVSCOPE_VNNI;
    static constexpr int32_t kOffset = F == BlockFormat::Q8_0 ? (kSigned ? 0 : 128) : F == BlockFormat::Q5_0 ? 16 : 8;
};

#if !KVSCOPE_PORTABLE
// {Σ lanes of a0, .., Σ lanes of a3} for 4 vectors of 4 int32 (exact: any order), by unpacking in pairs:
// phaddd is 3 operations on Zen and this is 6 for all three of its.
inline __m128i sum4(__m128i a0, __m128i a1, __m128i a2, __m128i a3) {
    const __m128i a01 = _mm_add_epi32(_mm_unpacklo_epi32(a0, a1), _mm_unpackhi_epi32(a0, a1));
    const __m128i a23 = _mm_add_epi32(_mm_unpacklo_epi32(a2, a3), _mm_unpackhi_epi32(a2, a3));
    return _mm_add_epi32(_mm_unpacklo_epi64(a01, a23), _mm_unpackhi_epi64(a01, a23));
}
// y[t * N + n0 + c] = the sums of R rows of x (4 lanes each) and the bias, for the group's n_count rows.
template <int R>
void store_rows(float* y, int64_t N, const __m128 (&acc)[R], int64_t n0, int64_t n_count, const float* bias) {
    for (int t = 0; t < R; ++t) {
        alignas(16) float out[4];
        _mm_store_ps(out, acc[t]);
        for (int c = 0; c < n_count; ++c) y[t * N + n0 + c] = out[c] + (bias ? bias[n0 + c] : 0.0f);
    }
}
// Byte j of 32: 16 where bit j of bits is set, else 0 (a Q5 block's fifth bits as the bytes they add). Byte j
// takes byte j / 8 of the bits (vpshufb within each half) and tests its bit j % 8.
inline __m256i fifth_sixteens(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                                                  2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}
// A nibble block's small integers as unsigned bytes, weights 0-31 in order: the nibble, or with fifth bits
// nibble | fifth << 4 (Q4_0 and Q5_0 less 8 and 16 make the weight's integer).
template <BlockFormat F>
inline __m256i nibble_unsigned(const unsigned char* b) {
    using Layout = NibbleLayout<F>;
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + Layout::kQsAt));
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, _mm_set1_epi8(0x0F))),
                                        _mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(0x0F)), 1);
    if constexpr (Layout::kHigh) {
        uint32_t high;
        std::memcpy(&high, b + Layout::kHighAt, sizeof high);
        v = _mm256_or_si256(v, fifth_sixteens(high));
    }
    return v;
}
// A Q4_0, Q5_0 or Q8_0 block's 32 weights as the bytes that meet x (Block32).
template <BlockFormat F>
inline __m256i weight_bytes(const unsigned char* b) {
    if constexpr (F == BlockFormat::Q8_0) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
        return Block32<F>::kSigned ? q : _mm256_xor_si256(q, _mm256_set1_epi8(char(0x80)));
    } else {
        return nibble_unsigned<F>(b);
    }
}
#endif

#if KVSCOPE_AVX512
// The eight 6-bit (scale, min) pairs of a Q4_K / Q5_K super-block, as bytes: scales 0-7, then mins 0-7
// (scale_min's values), made in a register: a copy through the stack stalls a store-to-load
// forward per super-block (Q4_K, one matrix K 2048 x N 16384, AMD EPYC Zen 5, 1 thread: 95 -> 121 GFLOP/s).
// The 32-bit words u0, u1, u2 of the 12 bytes become {u0 & 3F.., (u2 & 0F..) | (u0 >> 6 & 03..) << 4,
// u1 & 3F.., (u2 >> 4 & 0F..) | (u1 >> 6 & 03..) << 4}. Reads 4 bytes past the 12 (the block goes on).
inline __m128i scales_and_mins(const unsigned char* s) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                      _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
    const __m128i high = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(b, 6), _mm_setr_epi32(0, 0x03030303, 0, 0x03030303)), 4);
    return _mm_or_si128(low, high);
}

inline __m512i bytes_as_int32(const unsigned char* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

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

// A nibble block's small integers q(v) of weights 16v.. as int32, from its bytes widened once (bytes) and its
// fifth bits (high): Q4_0 the nibble - 8; Q5_0 (nibble | fifth << 4) - 16 as the nibble less 16 where the bit
// is clear (one masked subtraction: high holds the bits inverted); Q5_1 the nibble plus 16 where it is set.
template <BlockFormat F>
inline __m512i nibble_integers(__m512i bytes, uint32_t high, int v) {
    __m512i q = v == 0 ? _mm512_and_si512(bytes, _mm512_set1_epi32(15)) : _mm512_srli_epi32(bytes, 4);
    const __mmask16 bits = __mmask16(high >> (16 * v));
    if constexpr (F == BlockFormat::Q4_0) q = _mm512_sub_epi32(q, _mm512_set1_epi32(8));
    if constexpr (F == BlockFormat::Q5_0) q = _mm512_mask_sub_epi32(q, bits, q, _mm512_set1_epi32(16));
    if constexpr (F == BlockFormat::Q5_1) q = _mm512_mask_add_epi32(q, bits, q, _mm512_set1_epi32(16));
    return q;
}
// The fifth bits as nibble_integers takes them (0 without them).
template <BlockFormat F>
inline uint32_t nibble_high(const unsigned char* block) {
    uint32_t high = 0;
    if constexpr (NibbleLayout<F>::kHigh) std::memcpy(&high, block + NibbleLayout<F>::kHighAt, sizeof high);
    return F == BlockFormat::Q5_0 ? ~high : high;
}

// Q4_0, Q4_1, Q5_0, Q5_1: q · d (exact), or with a minimum fma(q, d, m) (q · d is exact, so one rounding, as
// the reference's two operations); the bytes widened once for the block's 32 weights.
template <BlockFormat F>
struct NibbleBlock {
    using Layout = NibbleLayout<F>;
    static constexpr int kElements = 32, kBytes = Layout::kBytes;
    __m512i bytes;
    __m512 d, m;
    uint32_t high;
    void load(const unsigned char* block) {
        bytes = bytes_as_int32(block + Layout::kQsAt);
        d = _mm512_set1_ps(half(block));
        if constexpr (Layout::kMin) m = _mm512_set1_ps(half(block + 2));
        high = nibble_high<F>(block);
    }
    __m512 weights(int v) const {
        const __m512 q = _mm512_cvtepi32_ps(nibble_integers<F>(bytes, high, v));
        if constexpr (Layout::kMin) return _mm512_fmadd_ps(q, d, m);
        else return _mm512_mul_ps(q, d);
    }
};
using Q4_0Block = NibbleBlock<BlockFormat::Q4_0>;
using Q4_1Block = NibbleBlock<BlockFormat::Q4_1>;
using Q5_0Block = NibbleBlock<BlockFormat::Q5_0>;
using Q5_1Block = NibbleBlock<BlockFormat::Q5_1>;

// q · (d · scale_j) - dmin · min_j per 32 weights j; the eight 6-bit pairs unpacked in a register
// (scales_and_mins), the products exact, so computed 8 at a time.
struct Q4_KBlock {
    static constexpr int kElements = 256, kBytes = 144;
    const unsigned char* b;
    alignas(32) float dl[8], ml[8];
    void load(const unsigned char* block) {
        b = block;
        const __m128i scales_mins = scales_and_mins(block + 4);
        const __m256 scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scales_mins));
        const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scales_mins, 8)));
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

#elif KVSCOPE_AVX2
inline __m128i bytes16(const unsigned char* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m128i low_nibbles(__m128i v) { return _mm_and_si128(v, _mm_set1_epi8(0x0F)); }
inline __m128i high_nibbles(__m128i v) { return _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F)); }

// A nibble block's small integers as bytes, q[0] weights 0-15, q[1] 16-31: Q4_0 q - 8, Q4_1 q, Q5_0
// (q | fifth << 4) - 16, Q5_1 q | fifth << 4.
template <BlockFormat F>
inline void nibble_bytes(const unsigned char* b, __m128i (&q)[2]) {
    __m256i v = nibble_unsigned<F>(b);
    if constexpr (!NibbleLayout<F>::kMin) v = _mm256_sub_epi8(v, _mm256_set1_epi8(NibbleLayout<F>::kHigh ? 16 : 8));
    q[0] = _mm256_castsi256_si128(v);
    q[1] = _mm256_extracti128_si256(v, 1);
}
#endif

}  // namespace
}  // namespace kvscope
