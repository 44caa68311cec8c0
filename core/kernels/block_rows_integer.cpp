// The K formats against x as Q8_K (block_rows.h, integer_rows): each super-block's sum of weight integer ×
// x integer is exact in 32 bits, so the order the integers are added in does not matter, and every build adds
// them its own way; the float arithmetic is the few operations per super-block stated in block_rows.h,
// four rows at a time in SSE lanes (one lane per row: the same operations as the portable build's scalars).
//
// Per 64 weights the AVX-512 build forms the weight bytes in one register and sums their products with x's
// bytes in fours (vpdpbusd: u8 × s8, each int32 lane within int16: |4 · 63 · 127| < 2^15); two such registers
// are packed to int16 and added times their sub-blocks' scales (vpdpwssd): 3 multiplies per 128 weights where
// a vpmaddubsw and a vpdpwssd per 64 took 4. AVX2 multiplies in pairs (vpmaddubsw: u8 × s8 -> s16, no
// saturation: |q| <= 63, |qx| <= 127), then by the scale (vpmaddwd), 32 at a time.
#include "kernels/block_rows.h"

#include <cmath>
#include <cstring>

#include "kernels/block_vectors.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

// Where a format keeps its float16 scales, and whether it has mins.
template <BlockFormat F>
struct KFormat {
    static constexpr bool kMins = F != BlockFormat::Q6_K;
    static constexpr bool kFifth = F == BlockFormat::Q5_K;
    static constexpr int kBytes = F == BlockFormat::Q4_K ? 144 : F == BlockFormat::Q5_K ? 176 : 210;
    static constexpr int kD = F == BlockFormat::Q6_K ? 208 : 0;  // d; dmin follows it in Q4_K and Q5_K
};

#if !KVSCOPE_PORTABLE
inline __m128i x_sums32(const Q8KBlock& x) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.sums32)); }

// The float arithmetic of one super-block for 4 rows, one per lane: acc = fma(d · dx, i, acc), then for the
// formats with mins acc = fma(-(dmin · dx), m, acc) (fnmadd: -(a · b) + c, rounded once, as std::fma(-a, b, c)).
template <BlockFormat F>
struct GroupScales {
    __m128 d, dmin;
    GroupScales(__m128 d_rows, __m128 dmin_rows) : d(d_rows), dmin(dmin_rows) {}
    // Q6_K's d of each row (the formats with mins take theirs from GroupHeads, which reads them with the pairs)
    explicit GroupScales(const unsigned char* const (&b)[4]) {
        static_assert(!KFormat<F>::kMins);
        constexpr int at = KFormat<F>::kD;
        d = _mm_setr_ps(half(b[0] + at), half(b[1] + at), half(b[2] + at), half(b[3] + at));
    }
    // words: each row's (d, dmin) as float16s, widened at once (exact)
    void widen(__m128i words) {
        const __m256 both = _mm256_cvtph_ps(words);
        const __m128 lo = _mm256_castps256_ps128(both), hi = _mm256_extractf128_ps(both, 1);
        d = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        dmin = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    }
    // dots: the 4 rows' i; m: their m (Q4_K, Q5_K).
    __m128 add(__m128 acc, const Q8KBlock& x, __m128i dots, __m128i m) const {
        const __m128 x_scale = _mm_set1_ps(x.d);
        acc = _mm_fmadd_ps(_mm_mul_ps(d, x_scale), _mm_cvtepi32_ps(dots), acc);
        if constexpr (KFormat<F>::kMins) acc = _mm_fnmadd_ps(_mm_mul_ps(dmin, x_scale), _mm_cvtepi32_ps(m), acc);
        return acc;
    }
};

#endif

#if KVSCOPE_AVX512 && defined(__AVX512BW__)
// acc + Σ over pairs of a · b per int32 lane, a and b int16.
inline __m512i add_words(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}
// Σ over each 4 bytes of w · x per int32 lane: w unsigned, x signed (without VNNI: in pairs, then the pairs).
inline __m512i fours(__m512i w, __m512i x) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
#else
    return _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1));
#endif
}
// acc + two registers' fours (w0 · x0, w1 · x1) times their scales: the fours packed to int16 (exact: within
// int16), 128-bit lane L holding w0's int32 lanes 4L.. in words 0-3 and w1's in words 4-7, each word pair
// met with its scale pair.
inline __m512i add_runs(__m512i acc, __m512i w0, __m512i x0, __m512i w1, __m512i x1, __m512i scales) {
    return add_words(acc, _mm512_packs_epi32(fours(w0, x0), fours(w1, x1)), scales);
}
// The scales for add_runs as vpermw indices: 128-bit lane L's words 0-3 take word first[L], words 4-7 second[L].
inline __m512i run_scale_index(const int (&first)[4], const int (&second)[4]) {
    auto two = [](int word) { return word * 0x10001; };
    return _mm512_setr_epi32(two(first[0]), two(first[0]), two(second[0]), two(second[0]), two(first[1]), two(first[1]),
                             two(second[1]), two(second[1]), two(first[2]), two(first[2]), two(second[2]), two(second[2]),
                             two(first[3]), two(first[3]), two(second[3]), two(second[3]));
}
inline __m512i lo_hi_shifts(int lo, int hi) { return _mm512_setr_epi64(lo, lo, lo, lo, hi, hi, hi, hi); }
inline __m512i bytes32_twice(const unsigned char* p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// The 16 int32 lanes of each of 4 vectors summed, as {row 0, .., row 3} (exact integers: any order). Pairs of
// lanes are interleaved and added twice, so each 128 bits hold a partial sum of every row, then the 4 quarters.
inline __m128i sum16x4(const __m512i (&a)[4]) {
    const __m512i a01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    const __m512i a23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    const __m512i q = _mm512_add_epi32(_mm512_unpacklo_epi64(a01, a23), _mm512_unpackhi_epi64(a01, a23));
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(q), _mm512_extracti64x4_epi64(q, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
// a[t][c]'s 16 lanes summed into lane 4t + c (exact integers: any order): each t's rows interleaved and added
// as in sum16x4, so quarter L of q[t] holds a partial sum of every row, then the 4 x 4 quarters transposed
// and added.
inline __m512i sum16x16(const __m512i (&a)[4][4]) {
    __m512i q[4];
    for (int t = 0; t < 4; ++t) {
        const __m512i a01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[t][0], a[t][1]), _mm512_unpackhi_epi32(a[t][0], a[t][1]));
        const __m512i a23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[t][2], a[t][3]), _mm512_unpackhi_epi32(a[t][2], a[t][3]));
        q[t] = _mm512_add_epi32(_mm512_unpacklo_epi64(a01, a23), _mm512_unpackhi_epi64(a01, a23));
    }
    // s01: quarters (q0: 0 + 2, 1 + 3, q1: 0 + 2, 1 + 3); s23 the same for q2, q3
    const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[0], q[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                         _mm512_shuffle_i32x4(q[0], q[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[2], q[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                         _mm512_shuffle_i32x4(q[2], q[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// GroupScales::add for 4 rows of x at once, lane 4t + c row c against x's row t: the same operations, lane by lane.
template <BlockFormat F>
struct QuadScales {
    __m512 d, dmin;
    QuadScales(__m128 d_rows, __m128 dmin_rows) : d(_mm512_broadcast_f32x4(d_rows)), dmin(_mm512_broadcast_f32x4(dmin_rows)) {}
    // x: x's row 0's block, the others KB blocks apart; m: the rows' m (Q4_K, Q5_K)
    __m512 add(__m512 acc, const Q8KBlock* x, int64_t KB, __m512i dots, __m512i m) const {
        __m512 x_scale = _mm512_set1_ps(x[0].d);
        x_scale = _mm512_mask_broadcastss_ps(x_scale, 0x00F0, _mm_load_ss(&x[KB].d));
        x_scale = _mm512_mask_broadcastss_ps(x_scale, 0x0F00, _mm_load_ss(&x[2 * KB].d));
        x_scale = _mm512_mask_broadcastss_ps(x_scale, 0xF000, _mm_load_ss(&x[3 * KB].d));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(d, x_scale), _mm512_cvtepi32_ps(dots), acc);
        if constexpr (KFormat<F>::kMins) acc = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, x_scale), _mm512_cvtepi32_ps(m), acc);
        return acc;
    }
};

// The heads of a Q4_K / Q5_K super-block in the group's 4 rows, unpacked together: each row's first 16 bytes
// (d and dmin, then the 12 bytes of (scale, min) pairs) in a 128-bit lane, scales_and_mins' operations done
// on the 4 lanes at once, the pairs widened to int16, and the 4 rows' mins met with x's sums in two multiplies.
// Against each row's own unpacking and a multiply and a sum of 4 vectors for the mins: one matrix K 2048 x N 1024
// in cache, AMD EPYC Zen 5, 1 thread, Q4_K decode 31.3 -> 28.5 us (134 -> 147 GFLOP/s); 8 rows of x unchanged.
template <BlockFormat F>
struct GroupHeads {
    __m512i words[2];  // int16: row 2i in words 0-15 of words[i], row 2i + 1 in 16-31; each scales 0-7, mins 0-7
    GroupScales<F> floats{_mm_setzero_ps(), _mm_setzero_ps()};

    explicit GroupHeads(const unsigned char* const (&b)[4]) {
        auto head = [&](int c) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[c])); };
        __m512i h = _mm512_castsi128_si512(head(0));
        for (int c = 1; c < 4; ++c) h = _mm512_inserti32x4(h, head(c), c);
        // 32-bit words 1, 2, 3 of a lane are scales_and_mins' u0, u1, u2 (word 0: d and dmin)
        const __m512i a = _mm512_shuffle_epi32(h, _MM_PERM_ENUM(_MM_SHUFFLE(3, 2, 3, 1)));  // u0, u2, u1, u2
        const __m512i u = _mm512_shuffle_epi32(h, _MM_PERM_ENUM(_MM_SHUFFLE(2, 2, 1, 1)));  // u0, u0, u1, u1
        const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(a, _mm512_set4_epi32(4, 0, 0, 0)),
                                             _mm512_set4_epi32(0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F));
        const __m512i high = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 6), _mm512_set4_epi32(0x03030303, 0, 0x03030303, 0)), 4);
        const __m512i pairs = _mm512_or_si512(low, high);  // per lane: scales 0-7, then mins 0-7, as bytes
        words[0] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(pairs));
        words[1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(pairs, 1));
        floats.widen(_mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), h)));
    }
    // Row c's scales for its run r, one per pair of weights: int16 lanes 0-15 scale 2r, 16-31 scale 2r + 1.
    __m512i run_scales(int c, int r) const {
        const short at = short(16 * (c % 2) + 2 * r);
        return _mm512_permutexvar_epi16(_mm512_inserti64x4(_mm512_set1_epi16(at), _mm256_set1_epi16(short(at + 1)), 1), words[c / 2]);
    }
    // Row c's scales for its runs 2p and 2p + 1 as add_runs meets them: a run's int32 lanes 0-7 are its low
    // nibbles (scale 2r), 8-15 its high (2r + 1).
    __m512i scales(int c, int p) const {
        const int at = 16 * (c % 2) + 4 * p;
        return _mm512_permutexvar_epi16(run_scale_index({at, at, at + 1, at + 1}, {at + 2, at + 2, at + 3, at + 3}), words[c / 2]);
    }
    // The 4 rows' m against x's block: each row's mins (its lane's words 8-15) met with x's sums of 32 there.
    __m128i mins_dot(const Q8KBlock& x) const {
        const __m512i sums = _mm512_maskz_broadcast_i32x4(0xF0F0, x_sums32(x));
        const __m512i p = _mm512_madd_epi16(words[0], sums), q = _mm512_madd_epi16(words[1], sums);
        __m512i rows = _mm512_shuffle_i32x4(p, q, _MM_SHUFFLE(3, 1, 3, 1));  // lane c: row c's 4 partial sums
        rows = _mm512_add_epi32(rows, _mm512_shuffle_epi32(rows, _MM_PERM_ENUM(_MM_SHUFFLE(1, 0, 3, 2))));
        rows = _mm512_add_epi32(rows, _mm512_shuffle_epi32(rows, _MM_PERM_ENUM(_MM_SHUFFLE(2, 3, 0, 1))));
        return _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), rows));
    }
    // mins_dot for 4 rows of x (KB blocks apart) at once, lane 4t + c: row c's m against x's row t. Each of
    // the 4 steps meets a pair of mins (row c's 32-bit word 4 + k of its half) with x's sums there.
    __m512i mins_dot4(const Q8KBlock* x, int64_t KB) const {
        __m512i sums = _mm512_castsi128_si512(x_sums32(x[0]));  // quarter t: x's row t's 8 sums of 32
        sums = _mm512_inserti32x4(sums, x_sums32(x[KB]), 1);
        sums = _mm512_inserti32x4(sums, x_sums32(x[2 * KB]), 2);
        sums = _mm512_inserti32x4(sums, x_sums32(x[3 * KB]), 3);
        auto step = [&]<int k>(__m512i m) {
            const __m512i at = _mm512_setr_epi32(4 + k, 12 + k, 20 + k, 28 + k, 4 + k, 12 + k, 20 + k, 28 + k, 4 + k, 12 + k,
                                                 20 + k, 28 + k, 4 + k, 12 + k, 20 + k, 28 + k);
            return add_words(m, _mm512_permutex2var_epi32(words[0], at, words[1]), _mm512_shuffle_epi32(sums, _MM_PERM_ENUM(k * 0x55)));
        };
        const __m512i m = step.template operator()<0>(_mm512_setzero_si512());
        return step.template operator()<3>(step.template operator()<2>(step.template operator()<1>(m)));
    }
};

// One row's super-block unpacked into registers: w[i] the weight bytes that meet x's bytes 64i..64i+63,
// scales[p] the int16 scales add_runs meets w[2p] and w[2p + 1] with, and for Q6_K offset_scales, what x's
// sums of 16 meet for the offset of 32 (Q4_K and Q5_K meet them with the group's mins).
//   Q4_K, Q5_K   run r (weights 64r..) is the low nibbles of its 32 bytes, then their high nibbles: scale 2r
//                for its int32 lanes 0-7, 2r + 1 for 8-15
//   Q6_K         per run n of 128 weights, the low nibbles of its 64 ql bytes with bits (0, 1 | 2, 3) of its
//                32 qh bytes are weights 0-63, the high nibbles with bits (4, 5 | 6, 7) weights 64-127; int32
//                lane j of w[2n + h] is weights 128n + 64h + 4j.., of scale 8n + 4h + j / 4
template <BlockFormat F>
struct RowBlock {
    __m512i w[4], scales[2];
    __m512i offset_scales;  // Q6_K: -32 · each of the 16 scales as int16 (|32 · 128| < 2^15), words 16-31 zero

    // heads: the group's (Q4_K, Q5_K), c: the row's place in it
    void load(const unsigned char* b, const GroupHeads<F>* heads, int c) {
        const __m512i nibble = _mm512_set1_epi8(15);
        if constexpr (F == BlockFormat::Q6_K) {
            const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
            offset_scales = _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(scales16, 5)));
            const __m512i all = _mm512_zextsi256_si512(scales16), three = _mm512_set1_epi8(3);
            for (int n = 0; n < 2; ++n) {
                const __m512i ql = _mm512_loadu_si512(b + 64 * n), qh = bytes32_twice(b + 128 + 32 * n);
                auto top = [&](int k) {  // bits 2k, 2k + 1 (weights 0-31), 2k + 2, 2k + 3 (32-63), moved to bits 4 and 5
                    return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, lo_hi_shifts(2 * k, 2 * k + 2)), three), 4);
                };
                w[2 * n] = _mm512_or_si512(_mm512_and_si512(ql, nibble), top(0));
                w[2 * n + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble), top(2));
                const int g = 8 * n;
                scales[n] = _mm512_permutexvar_epi16(run_scale_index({g, g + 1, g + 2, g + 3}, {g + 4, g + 5, g + 6, g + 7}), all);
            }
        } else {
            const unsigned char* qs = b + (KFormat<F>::kFifth ? 48 : 16);
            for (int r = 0; r < 4; ++r) {
                w[r] = _mm512_and_si512(_mm512_srlv_epi64(bytes32_twice(qs + 32 * r), lo_hi_shifts(0, 4)), nibble);
                if constexpr (KFormat<F>::kFifth) {
                    const __m512i shifted = _mm512_srlv_epi64(bytes32_twice(b + 16), lo_hi_shifts(2 * r, 2 * r + 1));
                    const __m512i fifth = _mm512_and_si512(shifted, _mm512_set1_epi8(1));
                    w[r] = _mm512_or_si512(w[r], _mm512_slli_epi16(fifth, 4));
                }
            }
            for (int p = 0; p < 2; ++p) scales[p] = heads->scales(c, p);
        }
    }
    // The super-block's integer against x's block, in 16 lanes to be summed (Q6_K: q - 32 as q, less 32 ·
    // each 16 values' sum of x · their scale).
    __m512i dots(const Q8KBlock& x) const {
        __m512i acc = _mm512_setzero_si512();
        for (int p = 0; p < 2; ++p)
            acc = add_runs(acc, w[2 * p], _mm512_load_si512(x.q + 128 * p), w[2 * p + 1], _mm512_load_si512(x.q + 128 * p + 64), scales[p]);
        return less_offsets(acc, x);
    }
    // dots for one row of x, Q4_K and Q5_K: a vpmaddubsw and a vpdpwssd per run, each run's scales permuted
    // apart (no saturation: |q| <= 31, |qx| <= 127). add_runs' fewer multiplies run faster in cache but read
    // memory slower: one matrix K 2048 x N 8192, AMD EPYC Zen 5, 1 thread, 280 us from memory against 268 here
    // (in cache 26.8 against 28.6 us for N 1024); 1B Q4_K_M decode 1.03x this way on 2 threads.
    __m512i dots_by_run(const Q8KBlock& x, const GroupHeads<F>& heads, int c) const {
        __m512i acc = _mm512_setzero_si512();
        for (int r = 0; r < 4; ++r)
            acc = add_words(acc, _mm512_maddubs_epi16(w[r], _mm512_load_si512(x.q + 64 * r)), heads.run_scales(c, r));
        return acc;
    }
    // Q6_K: acc less 32 · each 16 values' sum of x · their scale, in one multiply (the others: acc).
    __m512i less_offsets(__m512i acc, const Q8KBlock& x) const {
        if constexpr (F == BlockFormat::Q6_K)
            acc = add_words(acc, offset_scales, _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.sums))));
        return acc;
    }
};

// Super-block s of the group's 4 rows against one row of x (R = 1; quads_for_tokens takes more): dots[0] the
// 4 rows' integers; heads the group's (Q4_K, Q5_K), else null.
template <BlockFormat F, int R>
[[gnu::always_inline]] inline void super_block_dots(const unsigned char* const (&b)[4], const GroupHeads<F>* heads, const Q8KBlock* x, int64_t,
                                                    __m128i (&dots)[R]) {
    static_assert(R == 1);
    __m512i lanes[4];
    for (int c = 0; c < 4; ++c) {
        RowBlock<F> row;
        row.load(b[c], heads, c);
        if constexpr (KFormat<F>::kMins) lanes[c] = row.dots_by_run(*x, *heads, c);
        else lanes[c] = row.dots(*x);
    }
    dots[0] = sum16x4(lanes);
}

// The same against R rows of x (KB blocks apart), 4 at a time: quads[t / 4]'s lane 4 (t % 4) + c is row c
// against x's row t. Each row's super-block is unpacked once for the R rows of x (a prefill pays the
// unpacking once per R tokens): at R = 4 a row at a time, in registers; at R = 8 and 16 the 4 rows at once.
template <BlockFormat F, int R>
[[gnu::always_inline]] inline void super_block_quads(const unsigned char* const (&b)[4], const GroupHeads<F>* heads, const Q8KBlock* x,
                                                     int64_t KB, __m512i (&quads)[R / 4]) {
    static_assert(R == 4 || R == 8 || R == 16);
    __m512i lanes[4][4];
    if constexpr (R == 4) {
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {  // unrolled, so each row's scale permutes are constants
            RowBlock<F> row;
            row.load(b[c], heads, c);
            for (int t = 0; t < 4; ++t) lanes[t][c] = row.dots(x[t * KB]);
        }
        quads[0] = sum16x16(lanes);
    } else {
        RowBlock<F> rows[4];
        for (int c = 0; c < 4; ++c) rows[c].load(b[c], heads, c);
        for (int t0 = 0; t0 < R; t0 += 4) {
            if constexpr (F == BlockFormat::Q6_K) {
                // Q6_K walks the runs outermost, each x vector met with the 4 rows' run from the stack: one
                // matrix K 2048 x N 1024, 8 rows of x, in cache, AMD EPYC Zen 5, 1 thread: 157 -> 142 us
                // (Q4_K and Q5_K run 6 % and 5 % slower that way, so they keep a row's runs together).
                for (int t = 0; t < 4; ++t)
                    for (int c = 0; c < 4; ++c) lanes[t][c] = _mm512_setzero_si512();
                for (int p = 0; p < 2; ++p)
                    for (int t = 0; t < 4; ++t) {
                        const int8_t* xq = x[(t0 + t) * KB].q + 128 * p;
                        const __m512i x0 = _mm512_load_si512(xq), x1 = _mm512_load_si512(xq + 64);
                        for (int c = 0; c < 4; ++c)
                            lanes[t][c] = add_runs(lanes[t][c], rows[c].w[2 * p], x0, rows[c].w[2 * p + 1], x1, rows[c].scales[p]);
                    }
                for (int t = 0; t < 4; ++t)
                    for (int c = 0; c < 4; ++c) lanes[t][c] = rows[c].less_offsets(lanes[t][c], x[(t0 + t) * KB]);
            } else {
                for (int c = 0; c < 4; ++c)
                    for (int t = 0; t < 4; ++t) lanes[t][c] = rows[c].dots(x[(t0 + t) * KB]);
            }
            quads[t0 / 4] = sum16x16(lanes);
        }
    }
}

// R rows of x (4, 8 or 16; y: rows N apart; x: rows KB blocks apart) by the group's 4 weight rows, the float
// arithmetic of 4 rows of x in one register.
template <BlockFormat F, int R>
void quads_for_tokens(float* y, int64_t N, const Q8KBlock* x, int64_t KB, const GroupRows& g, int64_t n0, int64_t n_count,
                      const float* bias, bool ask) {
    constexpr int64_t bytes = KFormat<F>::kBytes;
    constexpr int Q = R / 4;
    __m512 acc[Q];
    for (int q = 0; q < Q; ++q) acc[q] = _mm512_setzero_ps();
    for (int64_t s = 0; s < KB; ++s) {
        if (ask) g.ask_ahead(s * bytes, bytes);
        const unsigned char* const b[4] = {g.r[0] + s * bytes, g.r[1] + s * bytes, g.r[2] + s * bytes, g.r[3] + s * bytes};
        __m512i quads[Q];
        if constexpr (KFormat<F>::kMins) {
            const GroupHeads<F> heads(b);
            super_block_quads<F, R>(b, &heads, x + s, KB, quads);
            const QuadScales<F> scales(heads.floats.d, heads.floats.dmin);
            for (int q = 0; q < Q; ++q) acc[q] = scales.add(acc[q], x + 4 * q * KB + s, KB, quads[q], heads.mins_dot4(x + 4 * q * KB + s, KB));
        } else {
            super_block_quads<F, R>(b, nullptr, x + s, KB, quads);
            const QuadScales<F> scales(GroupScales<F>(b).d, _mm_setzero_ps());
            for (int q = 0; q < Q; ++q) acc[q] = scales.add(acc[q], x + 4 * q * KB + s, KB, quads[q], __m512i{});
        }
    }
    for (int q = 0; q < Q; ++q) {
        alignas(64) float out[16];
        _mm512_store_ps(out, acc[q]);
        for (int t = 0; t < 4; ++t)
            for (int c = 0; c < n_count; ++c) y[(4 * q + t) * N + n0 + c] = out[4 * t + c] + (bias ? bias[n0 + c] : 0.0f);
    }
}

#elif !KVSCOPE_PORTABLE
// AVX2 (and AVX-512 without its byte instructions): 32 weights per register, one or two scales; a row's
// super-block is unpacked in halves of 128 weights (4 weight and 4 scale registers of 16), each half used for
// the R rows of x before the next.
inline __m256i bytes32(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i sum8(__m256i a) { return _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)); }

// Half h of a row's super-block: w[i] the 32 weight bytes that pair with x's bytes 128h + 32i.., scales[i] their
// int16 scale per pair. Q4_K, Q5_K: w[i] is sub-block 4h + i (run 2h + i / 2, low nibbles for even i). Q6_K:
// w[i] is weights 128h + 32i.. (ql bytes 64h + 32 (i % 2).., nibble i / 2; qh bits 2i, 2i + 1), scales of
// groups 8h + 2i and + 1.
template <BlockFormat F>
void unpack_half(const unsigned char* b, int h, const int16_t* k_scales, __m256i (&w)[4], __m256i (&scales)[4]) {
    const __m256i nibble = _mm256_set1_epi8(15);
    if constexpr (F == BlockFormat::Q6_K) {
        // The half's 8 scales, each twice as int16 in a 32-bit lane, then one lane per 128 bits (vpermd): a
        // broadcast of each from memory cost Q6_K 40 % of its decode speed (one matrix, 1 thread, AVX2 build
        // on AMD EPYC Zen 5: 42 -> 68 GFLOP/s).
        const __m256i lanes = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 192 + 8 * h)));
        const __m256i pairs = _mm256_or_si256(_mm256_and_si256(lanes, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(lanes, 16));
        const __m256i qh = bytes32(b + 128 + 32 * h), three = _mm256_set1_epi8(3);
        for (int i = 0; i < 4; ++i) {
            const __m256i ql = bytes32(b + 64 * h + 32 * (i % 2));
            const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), three), 4);
            w[i] = _mm256_or_si256(_mm256_and_si256(i < 2 ? ql : _mm256_srli_epi16(ql, 4), nibble), top);
            scales[i] = _mm256_permutevar8x32_epi32(pairs, _mm256_setr_epi32(2 * i, 2 * i, 2 * i, 2 * i, 2 * i + 1, 2 * i + 1,
                                                                              2 * i + 1, 2 * i + 1));
        }
    } else {
        const unsigned char* qs = b + (KFormat<F>::kFifth ? 48 : 16);
        for (int i = 0; i < 4; ++i) {
            const int j = 4 * h + i;
            const __m256i v = bytes32(qs + 32 * (j / 2));
            w[i] = _mm256_and_si256(j % 2 == 0 ? v : _mm256_srli_epi16(v, 4), nibble);
            if constexpr (KFormat<F>::kFifth) {
                const __m256i fifth = _mm256_and_si256(_mm256_srli_epi16(bytes32(b + 16), j), _mm256_set1_epi8(1));
                w[i] = _mm256_or_si256(w[i], _mm256_slli_epi16(fifth, 4));
            }
            scales[i] = _mm256_set1_epi16(k_scales[j]);
        }
    }
}

// The heads of a Q4_K / Q5_K super-block in the group's 4 rows, unpacked together as the AVX-512 build's:
// rows (0, 1) and (2, 3) each in a register, a row's 16 bytes in a 128-bit lane. Against each row's own
// unpacking and its mins met with x apart: one matrix K 2048 x N 1024 in cache, the AVX2 build on AMD EPYC
// Zen 5, 1 thread, Q4_K decode 78 -> 96 GFLOP/s, 8 rows of x 121 -> 146.
template <BlockFormat F>
struct GroupHeads {
    alignas(32) int16_t pairs[4][16];  // row c: scales 0-7, then mins 0-7 (unpack_half broadcasts the scales)
    __m256i mins[2];                   // rows (0, 1) and (2, 3): a row's 8 mins as int16 in each 128-bit lane
    GroupScales<F> floats{_mm_setzero_ps(), _mm_setzero_ps()};

    explicit GroupHeads(const unsigned char* const (&b)[4]) {
        auto head = [&](int c) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[c])); };
        __m128i first_words[2];  // each pair's (d, dmin) words, rows 2p and 2p + 1
        for (int p = 0; p < 2; ++p) {
            const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(head(2 * p)), head(2 * p + 1), 1);
            // 32-bit words 1, 2, 3 of a lane are scales_and_mins' u0, u1, u2 (word 0: d and dmin)
            const __m256i a = _mm256_shuffle_epi32(h, _MM_SHUFFLE(3, 2, 3, 1)), u = _mm256_shuffle_epi32(h, _MM_SHUFFLE(2, 2, 1, 1));
            const __m256i low = _mm256_and_si256(_mm256_srlv_epi32(a, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
                                                 _mm256_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F,
                                                                   0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
            const __m256i high = _mm256_slli_epi32(
                _mm256_and_si256(_mm256_srli_epi32(u, 6), _mm256_setr_epi32(0, 0x03030303, 0, 0x03030303, 0, 0x03030303, 0, 0x03030303)), 4);
            const __m256i bytes = _mm256_or_si256(low, high);  // per lane: scales 0-7, then mins 0-7
            _mm256_store_si256(reinterpret_cast<__m256i*>(pairs[2 * p]), _mm256_cvtepu8_epi16(_mm256_castsi256_si128(bytes)));
            _mm256_store_si256(reinterpret_cast<__m256i*>(pairs[2 * p + 1]), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(bytes, 1)));
            mins[p] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(_mm256_permute4x64_epi64(bytes, _MM_SHUFFLE(3, 1, 3, 1))));
            first_words[p] = _mm_unpacklo_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        }
        floats.widen(_mm_unpacklo_epi64(first_words[0], first_words[1]));
    }
    // The 4 rows' m against x's block (rows A, B in mins[0], C, D in mins[1]).
    __m128i mins_dot(const Q8KBlock& x) const {
        const __m256i sums = _mm256_broadcastsi128_si256(x_sums32(x));
        const __m256i ab = _mm256_madd_epi16(mins[0], sums), cd = _mm256_madd_epi16(mins[1], sums);
        // per lane (A | B): A0 + A2, C0 + C2, A1 + A3, C1 + C3, then A, C, A, C
        __m256i v = _mm256_add_epi32(_mm256_unpacklo_epi32(ab, cd), _mm256_unpackhi_epi32(ab, cd));
        v = _mm256_add_epi32(v, _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
        return _mm_unpacklo_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    }
};

// super_block_dots as the AVX-512 build's, 32 weights at a time.
template <BlockFormat F, int R>
void super_block_dots(const unsigned char* const (&b)[4], const GroupHeads<F>* heads, const Q8KBlock* x, int64_t KB,
                      __m128i (&dots)[R]) {
    __m128i lanes[R][4];
    for (int c = 0; c < 4; ++c) {
        __m256i sum[R];
        for (int t = 0; t < R; ++t) sum[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            __m256i w[4], scales[4];
            const int16_t* k_scales = nullptr;
            if constexpr (KFormat<F>::kMins) k_scales = heads->pairs[c];
            unpack_half<F>(b[c], h, k_scales, w, scales);
            for (int t = 0; t < R; ++t)
                for (int i = 0; i < 4; ++i) {
                    const int8_t* xq = x[t * KB].q + 128 * h + 32 * i;
                    const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(xq));
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(w[i], xv), scales[i]));
                }
        }
        for (int t = 0; t < R; ++t) {
            if constexpr (F == BlockFormat::Q6_K) {  // q - 32: less 32 · each 16 values' sum of x · their scale
                const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[c] + 192)));
                const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t * KB].sums));
                sum[t] = _mm256_sub_epi32(sum[t], _mm256_slli_epi32(_mm256_madd_epi16(scales16, sums), 5));
            }
            lanes[t][c] = sum8(sum[t]);
        }
    }
    for (int t = 0; t < R; ++t) dots[t] = sum4(lanes[t][0], lanes[t][1], lanes[t][2], lanes[t][3]);
}

#endif

#if !KVSCOPE_PORTABLE
// R rows of x (y: rows N apart; x: rows KB blocks apart) by the group's 4 weight rows.
template <BlockFormat F, int R>
void rows_for_tokens(float* y, int64_t N, const Q8KBlock* x, int64_t KB, const GroupRows& g, int64_t n0, int64_t n_count,
                     const float* bias, bool ask) {
    constexpr int64_t bytes = KFormat<F>::kBytes;
    __m128 acc[R];
    for (int t = 0; t < R; ++t) acc[t] = _mm_setzero_ps();
    for (int64_t s = 0; s < KB; ++s) {
        if (ask) g.ask_ahead(s * bytes, bytes);
        const unsigned char* const b[4] = {g.r[0] + s * bytes, g.r[1] + s * bytes, g.r[2] + s * bytes, g.r[3] + s * bytes};
        __m128i dots[R];
        if constexpr (KFormat<F>::kMins) {
            const GroupHeads<F> heads(b);
            super_block_dots<F, R>(b, &heads, x + s, KB, dots);
            for (int t = 0; t < R; ++t) acc[t] = heads.floats.add(acc[t], x[t * KB + s], dots[t], heads.mins_dot(x[t * KB + s]));
        } else {
            super_block_dots<F, R>(b, nullptr, x + s, KB, dots);
            const GroupScales<F> scales(b);
            for (int t = 0; t < R; ++t) acc[t] = scales.add(acc[t], x[t * KB + s], dots[t], __m128i{});
        }
    }
    store_rows<R>(y, N, acc, n0, n_count, bias);
}

#else
// Portable: the integers one at a time (the reference for the others), then the same float operations.
template <BlockFormat F>
void super_block_integers(const unsigned char* b, const Q8KBlock& x, int32_t& dots, int32_t& mins) {
    dots = mins = 0;
    if constexpr (F == BlockFormat::Q6_K) {
        const auto* sc = reinterpret_cast<const signed char*>(b + 192);
        for (int n = 0; n < 2; ++n)
            for (int k = 0; k < 4; ++k)
                for (int l = 0; l < 32; ++l) {
                    const unsigned char ql = b[64 * n + 32 * (k % 2) + l], qh = b[128 + 32 * n + l];
                    const int q = ((k < 2 ? ql & 15 : ql >> 4) | ((qh >> (2 * k)) & 3) << 4) - 32;
                    const int i = 128 * n + 32 * k + l;
                    dots += sc[i / 16] * q * x.q[i];
                }
    } else {
        const unsigned char* qs = b + (KFormat<F>::kFifth ? 48 : 16);
        for (int j = 0; j < 8; ++j) {  // weights 32j + l: run j / 2, low nibbles (j even) or high
            int scale = 0, min = 0;
            scale_min(b + 4, j, scale, min);
            int32_t sum = 0;
            for (int l = 0; l < 32; ++l) {
                int q = j % 2 == 0 ? qs[32 * (j / 2) + l] & 15 : qs[32 * (j / 2) + l] >> 4;
                if (KFormat<F>::kFifth && (b[16 + l] >> j & 1)) q += 16;
                sum += q * x.q[32 * j + l];
            }
            dots += scale * sum;
            mins += min * (x.sums[2 * j] + x.sums[2 * j + 1]);
        }
    }
}

template <BlockFormat F>
void rows_for_token(float* y, const Q8KBlock* x, const GroupRows& g, int64_t KB, int64_t n0, int64_t n_count, const float* bias) {
    using Fmt = KFormat<F>;
    for (int c = 0; c < n_count; ++c) {
        float acc = 0.0f;
        for (int64_t s = 0; s < KB; ++s) {
            const unsigned char* b = g.r[c] + s * Fmt::kBytes;
            int32_t dots = 0, mins = 0;
            super_block_integers<F>(b, x[s], dots, mins);
            acc = std::fma(half(b + Fmt::kD) * x[s].d, float(dots), acc);
            if constexpr (Fmt::kMins) acc = std::fma(-(half(b + 2) * x[s].d), float(mins), acc);
        }
        y[n0 + c] = acc + (bias ? bias[n0 + c] : 0.0f);
    }
}
#endif

template <BlockFormat F>
void integer_rows_of(float* y, const Q8KBlock* x, int64_t T, const std::byte* w, const float* bias, int64_t K, int64_t N,
                     int64_t n0, int64_t n_count) {
    const int64_t KB = K / 256;
    const GroupRows g(w, KB * KFormat<F>::kBytes, n0, n_count);
    int64_t t = 0;
#if KVSCOPE_AVX512 && defined(__AVX512BW__)
    // Rows of x per unpacking of a super-block: up to 16 (the 4 unpacked rows on the stack, met by 4 rows of x
    // at a time). One matrix K 2048 x N 1024 in cache, AMD EPYC Zen 5, 1 thread, 16 rows of x as one 16 instead
    // of two 8s: Q4_K 200 -> 187 us, Q5_K 222 -> 198, Q6_K 238 -> 216.
    for (; t + 16 <= T; t += 16) quads_for_tokens<F, 16>(y + t * N, N, x + t * KB, KB, g, n0, n_count, bias, t == 0);
    for (; t + 8 <= T; t += 8) quads_for_tokens<F, 8>(y + t * N, N, x + t * KB, KB, g, n0, n_count, bias, t == 0);
    for (; t + 4 <= T; t += 4) quads_for_tokens<F, 4>(y + t * N, N, x + t * KB, KB, g, n0, n_count, bias, t == 0);
    for (; t < T; ++t) rows_for_tokens<F, 1>(y + t * N, N, x + t * KB, KB, g, n0, n_count, bias, t == 0);
#elif !KVSCOPE_PORTABLE
    // AVX2 unpacks a super-block in halves for 4 rows of x
    for (; t + 4 <= T; t += 4) rows_for_tokens<F, 4>(y + t * N, N, x + t * KB, KB, g, n0, n_count, bias, t == 0);
    for (; t < T; ++t) rows_for_tokens<F, 1>(y + t * N, N, x + t * KB, KB, g, n0, n_count, bias, t == 0);
#else
    for (; t < T; ++t) rows_for_token<F>(y + t * N, x + t * KB, g, KB, n0, n_count, bias);
#endif
}

}  // namespace

void integer_rows(float* y, const Q8KBlock* x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                  int64_t n_count) {
    switch (w.format) {
        case BlockFormat::Q4_K: return integer_rows_of<BlockFormat::Q4_K>(y, x, T, w.data, bias, K, N, n0, n_count);
        case BlockFormat::Q5_K: return integer_rows_of<BlockFormat::Q5_K>(y, x, T, w.data, bias, K, N, n0, n_count);
        case BlockFormat::Q6_K: return integer_rows_of<BlockFormat::Q6_K>(y, x, T, w.data, bias, K, N, n0, n_count);
        default: break;
    }
}

}  // namespace kvscope
