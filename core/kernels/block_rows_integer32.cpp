// The 32-weight integer formats (Q4_0, Q5_0, Q8_0) against x quantized per 32 (X8Rows, quant_blocks.h), a
// group of 4 weight rows at a time: decode, small batches, and prefill where the build has no integer panels
// (block_panels.cpp). Each block's integer is exact, so every build sums its 32 products its own way; the
// float arithmetic is block_rows.h's, four rows at a time in SSE lanes (one lane per row, the portable
// build's scalars).
//
// The weights meet x as unsigned bytes u = q + offset (Q4_0 the nibble, offset 8; Q5_0 nibble | fifth << 4,
// 16; Q8_0 q + 128 where VNNI multiplies bytes in fours), and i = Σ u · qx - offset · Σ qx, x's sum kept
// beside it. Without VNNI the bytes multiply in pairs (vpmaddubsw, saturating past 2^15): Q8_0 then meets x
// with its signs moved onto x (|q| · ±qx, at most 2 · 128 · 127), offset 0. A block of the group's rows is
// a GroupBlock: Q8_0 each row's 32 bytes in a register (RowBytes), Q4_0 and Q5_0 the rows' nibbles side by
// side in 128-bit lanes (NibbleLanes).
#include "kernels/block_rows.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/block_vectors.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

#if !KVSCOPE_PORTABLE
// Σ over each 4 bytes of w · x as 8 int32 lanes (exact).
template <BlockFormat F>
inline __m256i dot32(__m256i w, __m256i x) {
#if KVSCOPE_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#else
    const __m256i pairs = Block32<F>::kSigned ? _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w))
                                              : _mm256_maddubs_epi16(w, x);
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
#endif
}

inline __m128i sum8(__m256i a) { return _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)); }

// The group's 4 float16 scales (each block's first 2 bytes), widened.
inline __m128 group_d(const unsigned char* const (&b)[4]) {
    uint64_t halves = 0;
    for (int c = 0; c < 4; ++c) {
        uint16_t h;
        std::memcpy(&h, b[c], sizeof h);
        halves |= uint64_t(h) << (16 * c);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(halves)));
}

// A block of the group's 4 rows as they meet x: dots(xq) gives the 4 rows' Σ u · qx. Each row's 32 bytes in
// a register of its own, its 8 lanes summed apart (sum8, then sum4).
template <BlockFormat F>
struct RowBytes {
    __m256i w[4];
    explicit RowBytes(const unsigned char* const (&b)[4]) {
        for (int c = 0; c < 4; ++c) w[c] = weight_bytes<F>(b[c]);
    }
    __m128i dots(const int8_t* xq) const {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
        return sum4(sum8(dot32<F>(w[0], xv)), sum8(dot32<F>(w[1], xv)), sum8(dot32<F>(w[2], xv)), sum8(dot32<F>(w[3], xv)));
    }
};

#if KVSCOPE_AVX512 && KVSCOPE_VNNI
// Q4_0 and Q5_0 with AVX-512 VNNI: the 4 rows' 16 bytes of nibbles in one register (row c in 128-bit lane c),
// the low nibbles (weights 0-15) and the high (16-31) against x's two halves broadcast to every lane, then
// each lane's 4 int32 summed in place. Unpacking each row's nibbles into 32 bytes and summing its 8 lanes
// apart (RowBytes) took twice the instructions. One matrix K 2048 x N 512 (in L2), 1 row of x, 1 thread,
// Intel Xeon family 6 model 167, us: Q4_0 44.1 -> 30.3, Q5_0 56.8 -> 42.9 (4 rows of x: 114.4 -> 80.2, 129.4 ->
// 87.1). Q8_0 this way (two registers of 4 rows' 16 bytes) was no faster: 36.4 -> 36.2.
template <BlockFormat F>
struct NibbleLanes {
    __m512i lo, hi;
    explicit NibbleLanes(const unsigned char* const (&b)[4]) {
        using Layout = NibbleLayout<F>;
        __m512i qs = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0] + Layout::kQsAt)));
        qs = _mm512_inserti32x4(qs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1] + Layout::kQsAt)), 1);
        qs = _mm512_inserti32x4(qs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[2] + Layout::kQsAt)), 2);
        qs = _mm512_inserti32x4(qs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[3] + Layout::kQsAt)), 3);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        lo = _mm512_and_si512(qs, low4), hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4);
        if constexpr (Layout::kHigh) {  // fifth bit k of row c: weight k's 16, byte 16c + k % 16 of lo or hi
            uint64_t low_bits = 0, high_bits = 0;
            for (int c = 0; c < 4; ++c) {
                uint32_t h;
                std::memcpy(&h, b[c] + Layout::kHighAt, sizeof h);
                low_bits |= uint64_t(h & 0xFFFF) << (16 * c);
                high_bits |= uint64_t(h >> 16) << (16 * c);
            }
            const __m512i sixteen = _mm512_set1_epi8(16);
            lo = _mm512_mask_add_epi8(lo, __mmask64(low_bits), lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, __mmask64(high_bits), hi, sixteen);
        }
    }
    __m128i dots(const int8_t* xq) const {
        const __m512i x_lo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq)));
        const __m512i x_hi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16)));
        __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, x_lo), hi, x_hi);
        p = _mm512_add_epi32(p, _mm512_shuffle_epi32(p, _MM_PERM_BADC));
        p = _mm512_add_epi32(p, _mm512_shuffle_epi32(p, _MM_PERM_CDAB));
        return _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), p));
    }
};
#else
// Q4_0 and Q5_0 with AVX2: NibbleLanes two rows to a register (rows 0 and 1, 2 and 3 in its 128-bit lanes), the
// bytes multiplied in pairs (vpmaddubsw: at most 2 · 31 · 127 a pair, the low and high nibbles' pairs added
// below 2^15), then the pairs (vpmaddwd), each lane's 4 int32 summed in place. One matrix K 2048 x N 512 (in
// L2), 1 row of x, 1 thread, the AVX2 build on Intel Xeon family 6 model 167, us: Q4_0 45.2 -> 32.3, Q5_0
// 60.2 -> 56.5 (4 rows of x: 132.9 -> 91.0, 147.3 -> 125.4).
template <BlockFormat F>
struct NibbleLanes {
    __m256i lo[2], hi[2];
    explicit NibbleLanes(const unsigned char* const (&b)[4]) {
        using Layout = NibbleLayout<F>;
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        for (int h = 0; h < 2; ++h) {
            const __m256i qs = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(b[2 * h + 1] + Layout::kQsAt),
                                                   reinterpret_cast<const __m128i*>(b[2 * h] + Layout::kQsAt));
            lo[h] = _mm256_and_si256(qs, low4), hi[h] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), low4);
            if constexpr (Layout::kHigh) {  // fifth bit k of a row: weight k's 16
                uint32_t h0, h1;
                std::memcpy(&h0, b[2 * h] + Layout::kHighAt, sizeof h0);
                std::memcpy(&h1, b[2 * h + 1] + Layout::kHighAt, sizeof h1);
                lo[h] = _mm256_or_si256(lo[h], fifth_sixteens((h0 & 0xFFFF) | h1 << 16));
                hi[h] = _mm256_or_si256(hi[h], fifth_sixteens(h0 >> 16 | (h1 & 0xFFFF0000)));
            }
        }
    }
    __m128i dots(const int8_t* xq) const {
        const __m256i x_lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq)));
        const __m256i x_hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16)));
        __m256i p[2];
        for (int h = 0; h < 2; ++h)
            p[h] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo[h], x_lo), _mm256_maddubs_epi16(hi[h], x_hi)), _mm256_set1_epi16(1));
        // {r0 | r1} and {r2 | r3}, 4 lanes a row: pairs, then halves, then the two 128-bit lanes side by side
        const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi32(p[0], p[1]), _mm256_unpackhi_epi32(p[0], p[1]));
        const __m256i r = _mm256_add_epi32(a, _mm256_shuffle_epi32(a, _MM_SHUFFLE(1, 0, 3, 2)));  // {r0 r2 r0 r2 | r1 r3 r1 r3}
        return _mm_unpacklo_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    }
};
#endif
template <BlockFormat F>
using GroupBlock = std::conditional_t<F == BlockFormat::Q8_0, RowBytes<F>, NibbleLanes<F>>;

// R rows of x (from row t0) by the group's 4 weight rows.
template <BlockFormat F, int R>
void rows_for_tokens(float* y, int64_t N, const X8Rows& x, int64_t t0, const GroupRows& g, int64_t KB, int64_t n0, int64_t n_count,
                     const float* bias, bool ask) {
    constexpr int64_t bytes = Block32<F>::kBytes;
    __m128 acc[R];
    for (int t = 0; t < R; ++t) acc[t] = _mm_setzero_ps();
    for (int64_t s = 0; s < KB; ++s) {
        if (ask) g.ask_ahead(s * bytes, bytes);
        const unsigned char* const b[4] = {g.r[0] + s * bytes, g.r[1] + s * bytes, g.r[2] + s * bytes, g.r[3] + s * bytes};
        const GroupBlock<F> block(b);
        const __m128 d = group_d(b);
        for (int t = 0; t < R; ++t) {
            const int64_t at = (t0 + t) * KB + s;
            __m128i dots = block.dots(x.q + 32 * at);
            if constexpr (Block32<F>::kOffset != 0) dots = _mm_sub_epi32(dots, _mm_set1_epi32(Block32<F>::kOffset * x.sums[at]));
            acc[t] = _mm_fmadd_ps(_mm_mul_ps(d, _mm_set1_ps(x.d[at])), _mm_cvtepi32_ps(dots), acc[t]);
        }
    }
    store_rows<R>(y + t0 * N, N, acc, n0, n_count, bias);
}

#else
// Portable: the integers one at a time (the reference for the others), weight by weight from the layout.
template <BlockFormat F>
int32_t block_integer(const unsigned char* b, const int8_t* xq) {
    int32_t sum = 0;
    for (int k = 0; k < 32; ++k) {
        int q = 0;
        if constexpr (F == BlockFormat::Q8_0) {
            q = static_cast<signed char>(b[2 + k]);
        } else {
            const unsigned char* qs = b + (F == BlockFormat::Q5_0 ? 6 : 2);
            q = k < 16 ? qs[k] & 15 : qs[k - 16] >> 4;
            if constexpr (F == BlockFormat::Q5_0) q = (q | (b[2 + k / 8] >> (k % 8) & 1) << 4) - 16;
            else q -= 8;
        }
        sum += q * xq[k];
    }
    return sum;
}

template <BlockFormat F>
void rows_for_token(float* y, const X8Rows& x, int64_t t, const GroupRows& g, int64_t KB, int64_t n0, int64_t n_count, const float* bias) {
    for (int c = 0; c < n_count; ++c) {
        float acc = 0.0f;
        for (int64_t s = 0; s < KB; ++s) {
            const unsigned char* b = g.r[c] + s * Block32<F>::kBytes;
            const int64_t at = t * KB + s;
            acc = std::fma(half(b) * x.d[at], float(block_integer<F>(b, x.q + 32 * at)), acc);
        }
        y[n0 + c] = acc + (bias ? bias[n0 + c] : 0.0f);
    }
}
#endif

template <BlockFormat F>
void integer_rows32_of(float* y, const X8Rows& x, int64_t T, const std::byte* w, const float* bias, int64_t K, int64_t N, int64_t n0,
                       int64_t n_count) {
    const int64_t KB = K / 32;
    const GroupRows g(w, KB * Block32<F>::kBytes, n0, n_count);
    int64_t t = 0;
#if !KVSCOPE_PORTABLE
    for (; t + 4 <= T; t += 4) rows_for_tokens<F, 4>(y, N, x, t, g, KB, n0, n_count, bias, t == 0);
    for (; t < T; ++t) rows_for_tokens<F, 1>(y, N, x, t, g, KB, n0, n_count, bias, t == 0);
#else
    for (; t < T; ++t) rows_for_token<F>(y + t * N, x, t, g, KB, n0, n_count, bias);
#endif
}

}  // namespace

void integer_rows32(float* y, const X8Rows& x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                    int64_t n_count) {
    switch (w.format) {
        case BlockFormat::Q4_0: return integer_rows32_of<BlockFormat::Q4_0>(y, x, T, w.data, bias, K, N, n0, n_count);
        case BlockFormat::Q5_0: return integer_rows32_of<BlockFormat::Q5_0>(y, x, T, w.data, bias, K, N, n0, n_count);
        case BlockFormat::Q8_0: return integer_rows32_of<BlockFormat::Q8_0>(y, x, T, w.data, bias, K, N, n0, n_count);
        default: break;
    }
}

}  // namespace kvscope
