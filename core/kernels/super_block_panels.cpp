// Q4_K and Q6_K matrices in panels from load (quant_blocks.h: BlockOrder::Panels): 16 rows side by side, so one
// register holds a run of 4 bytes of every row and a vpdpbusd multiplies 16 rows by x's 4 bytes, broadcast.
// Every T runs on the panels in place, decode too, with block_rows.h's integers and float steps, exact in int32
// (the order they are added in cannot matter): per super-block of a row
//   Q4_K   i = Σ_j sc_j · Σ_(k in j) q_k · qx_k, m = Σ_j m_j · (x's sum of sub-block j), then
//          acc = fma(d · dx, float(i), acc) and acc = fma(-(dmin · dx), float(m), acc)
//   Q6_K   i = Σ_g sc_g · (Σ_(k in g) q_k · qx_k - 32 · (x's sum of group g)), then acc = fma(d · dx, float(i), acc)
// The group kernel (block_rows_integer.cpp) unpacks each row's super-block apart and sums across lanes at each
// one; here the sums stay in the rows' lanes.
//
// A panel's Q4_K super-block (2304 bytes: the 16 rows' 144, in another order):
//   runs      32 x 64 bytes: run 8r + g holds bytes 32r + 4g .. 32r + 4g + 3 of each row's 128 bytes of
//             nibbles (row c in int32 lane c): the low nibbles are weights 64r + 4g .., of sub-block 2r; the
//             high ones 64r + 32 + 4g .., of sub-block 2r + 1
//   heads     3 x 64 bytes: each row's 12 bytes of (scale, min) pairs as 3 int32 words, word w of row c in
//             lane c of register w
//   d, dmin   16 float16 each
// A panel's Q6_K super-block (3360 bytes: the 16 rows' 210):
//   runs      16 x 192 bytes: for half n and c < 8, registers a, b, c of the 6-bit q of weights
//             128n + 32k + 4c + j (k < 4, j < 4), row r's byte j at 4r + j of each:
//               a = q0 | (q3 & 3) << 6,  b = q1 | (q3 >> 2 & 3) << 6,  c = q2 | (q3 >> 4) << 6
//             so q0, q1 and q2 are one AND apiece; the file's low and high bits of those 4 weights (ql at
//             64n + 4c + j and 64n + 32 + 4c + j, qh at 128 + 32n + 4c + j) re-encoded at pack time
//   scales    16 x 16 int8: scale g of the 16 rows, then g + 1
//   d         16 float16
// Built where AVX-512 has VNNI; elsewhere the K formats stay in rows (panel_rows is 0). Where AMX is allowed too
// (amx.h), Q4_K runs 16 rows of x at a time through its tiles (panel_tile_amx): the same integers, the same bits.
#include "kernels/block_rows.h"

#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/amx.h"
#include "kernels/block_vectors.h"
#include "kernels/read_ahead.h"
#include "kernels/simd.h"

namespace kvscope {

#if KVSCOPE_AVX512 && KVSCOPE_VNNI
namespace {

constexpr int64_t kRows = 16;

// A format's super-block in a row and in a panel, and the rows of x a tile runs.
template <BlockFormat F>
struct Panel {
    static constexpr int64_t kBlockBytes = F == BlockFormat::Q4_K ? 144 : 210;
    static constexpr int64_t kBytes = kRows * kBlockBytes;
    static constexpr int64_t kRunBytes = F == BlockFormat::Q4_K ? 32 * 64 : 16 * 192;  // the runs lead the super-block
    // Rows of x a tile runs (then 4, 3, 2, 1): the unpacking of a run and the panel's heads serve them all. Intel Xeon
    // family 6 model 167, K 2048 x N 512 in L2, one thread, 4 -> 8 rows a tile: 8 rows of x Q4_K 57.3 -> 53.3 us,
    // Q6_K 86.3 -> 82.6; 512 rows Q4_K 7.27 -> 6.81 ms. The broadcasts of x, one a vpdpbusd, bound the rest.
    static constexpr int kTileRows = 8;
};
constexpr int64_t kHeadsAt = 32 * 64, kScalesAt = kHeadsAt + 3 * 64;  // Q4_K
constexpr int64_t kQ6ScalesAt = 16 * 192, kQ6DAt = kQ6ScalesAt + 256;   // Q6_K

// The 16 rows' 6-bit scales and mins of one super-block, one int32 lane per row (block_vectors.h's
// scale_min, on 16 rows at once): sc[j] for sub-block j, and the mins in pairs, m_2p | m_2p+1 << 16, for
// vpdpwssd against x's sums of 32 (two int16 side by side in Q8KBlock::sums32). Each row's 12 bytes are first
// put together as four bytes of scales 0-3, 4-7 and mins 0-3, 4-7 (a byte each, in the row's lane), then one
// vpshufb takes byte j of every lane to a lane of its own, or bytes 2p and 2p + 1 to a pair: 21 instructions
// where shifts and masks per scale took about 70. EPYC Zen 5 (family 26 model 2), K 2048 x N 8192, 8 rows of
// x, one thread: in cache unchanged (553-579 against 555-572 us), from memory 547-571 against 645-661 us. The
// 1B Q4_K_M file on 2 threads, interleaved pairs: batch 8 1.13-1.18x (5 pairs), prefill 512 1.05-1.09x (4),
// decode 0.98-1.16x (6, median 1.03).
struct PanelHeads {
    __m512i sc[8], min_pairs[4];
    explicit PanelHeads(const unsigned char* heads) {
        const __m512i u0 = _mm512_loadu_si512(heads), u1 = _mm512_loadu_si512(heads + 64), u2 = _mm512_loadu_si512(heads + 128);
        const __m512i six = _mm512_set1_epi8(0x3F), low = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
        // bytes 0-3 of u0 and u1 hold scales and mins 0-3 in their low 6 bits, their top 2 bits those of 4-7;
        // u2's nibbles hold the low 4 bits of scales (low) and mins (high) 4-7
        const __m512i sc03 = _mm512_and_si512(u0, six), m03 = _mm512_and_si512(u1, six);
        const __m512i sc47 = _mm512_ternarylogic_epi32(_mm512_and_si512(u2, low), _mm512_srli_epi32(u0, 2), top, 0xF8);  // A | B & C
        const __m512i m47 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(u2, 4), low), _mm512_srli_epi32(u1, 2), top, 0xF8);
        auto byte = [](int j) {  // byte j of each dword to its low byte, the rest zero
            return _mm512_set4_epi32(int(0x8080800Cu + j), int(0x80808008u + j), int(0x80808004u + j), int(0x80808000u + j));
        };
        for (int j = 0; j < 4; ++j) {
            sc[j] = _mm512_shuffle_epi8(sc03, byte(j));
            sc[j + 4] = _mm512_shuffle_epi8(sc47, byte(j));
        }
        const __m512i pair[2] = {_mm512_set4_epi32(int(0x800D800Cu), int(0x80098008u), int(0x80058004u), int(0x80018000u)),  // bytes 0, 1
                                 _mm512_set4_epi32(int(0x800F800Eu), int(0x800B800Au), int(0x80078006u), int(0x80038002u))}; // 2, 3
        min_pairs[0] = _mm512_shuffle_epi8(m03, pair[0]);
        min_pairs[1] = _mm512_shuffle_epi8(m03, pair[1]);
        min_pairs[2] = _mm512_shuffle_epi8(m47, pair[0]);
        min_pairs[3] = _mm512_shuffle_epi8(m47, pair[1]);
    }
};

// How far ahead of the line it loads the leading tile asks for the stream, and into which cache (read_ahead.h):
// a namespace-scope constant, no guard in the loops.
const ReadAhead kAhead = read_ahead();

// How far ahead the leading tile of TR rows of x asks for the stream: 0, not at all.
template <BlockFormat F, int TR>
inline int64_t ahead_of() {
    return F == BlockFormat::Q4_K ? (TR == 1 ? kAhead.q4k_panels_one_row : kAhead.q4k_panels)
                                  : (TR == 1 ? kAhead.q6k_panels_one_row : kAhead.q6k_panels);
}

// The leading tile's requests for the line at p, issued as it loads that line: the line ahead_of on and, for
// Q4_K, the line 128 bytes on into L1. TR: the tile's rows of x.
template <BlockFormat F, int TR>
inline void ask_ahead(const unsigned char* p) {
    const char* at = reinterpret_cast<const char*>(p) + ahead_of<F, TR>();
    if (TR == 1 && kAhead.k_panels_one_row_into_l1) _mm_prefetch(at, _MM_HINT_T0);
    else _mm_prefetch(at, _MM_HINT_T1);
    if constexpr (F == BlockFormat::Q4_K) _mm_prefetch(reinterpret_cast<const char*>(p) + 128, _MM_HINT_T0);
}

inline __m512i broadcast4(const int8_t* p) {
    int32_t four;
    std::memcpy(&four, p, sizeof four);
    return _mm512_set1_epi32(four);
}

// acc + the 16 rows' 4 bytes of w (unsigned) times x's 4 bytes at p (signed): one vpdpbusd, x its memory
// operand broadcast ({1to16}), where GCC emits a vpbroadcastd apiece. EPYC Zen 5 (family 26 model 2): an 8-row
// Q4_K tile's loop alone, in L1, 120 -> 109 ns a super-block; the 1B Q4_K_M file on 2 threads, interleaved
// pairs, batch 8 1.18-1.24x, prefill 512 1.07-1.12x, decode 1.00-1.04x. Q6_K's tiles of several rows use it too
// (with keep below); its one-row tile keeps the intrinsic.
inline __m512i dot4(__m512i acc, __m512i w, const int8_t* p) {
#if defined(__GNUC__)
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, broadcast4(p));
#endif
}

// v, as computed here: a fence for GCC, which otherwise sums a Q6_K super-block's 16 groups of several rows of x
// at its end, keeping all 16 x TR sums alive, and spills them. With it and the offset of 32 met once (add_q6k),
// EPYC Zen 5 (family 26 model 2), K 2048, 8 rows of x, one thread: N 512 in cache 46-58 -> 40-42 us, from memory
// 93-94 -> 46-48 us; N 16384 2.7-3.1 -> 1.34-1.43 ms. The fence alone, with x's sums in the groups' first
// registers as before, left the from-memory figure at 80-114 us. The 1B Q4_K_M file on 2 threads, interleaved
// pairs: batch 8 1.24-1.30x, prefill 512 1.09-1.14x, decode 1.03-1.06x. add_q4k's tiles of several rows fence
// their sums too; the one-row tiles need no fence (it cost Q6_K's 8 % in cache).
inline __m512i keep(__m512i v) {
#if defined(__GNUC__)
    asm("" : "+v"(v));
#endif
    return v;
}

// acc + the 16 rows' int16 pairs in pairs times the int16 pair at p: one vpdpwssd, p broadcast.
inline __m512i dot2(__m512i acc, __m512i pairs, const int16_t* p) {
#if defined(__GNUC__)
    asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(pairs), "m"(*reinterpret_cast<const int32_t*>(p)));
    return acc;
#else
    int32_t pair;
    std::memcpy(&pair, p, sizeof pair);
    return _mm512_dpwssd_epi32(acc, pairs, _mm512_set1_epi32(pair));
#endif
}

// The float steps of a Q4_K super-block for one row of x: its integer sum of q · qx through the scales (dots), and
// the mins against x's sums of 32.
inline __m512 q4k_row_step(__m512i dots, const PanelHeads& heads, __m512 d, __m512 dmin, const Q8KBlock& x, __m512 acc) {
    __m512i mins = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
        int32_t pair;
        std::memcpy(&pair, x.sums32 + 2 * p, sizeof pair);
        mins = _mm512_dpwssd_epi32(mins, heads.min_pairs[p], _mm512_set1_epi32(pair));
    }
    const __m512 dx = _mm512_set1_ps(x.d);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(dots), acc);
    return _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(mins), acc);
}

inline __m512 q4k_d(const unsigned char* block) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kScalesAt)));
}
inline __m512 q4k_dmin(const unsigned char* block) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kScalesAt + 32)));
}

// One Q4_K super-block of the panel into acc, for TR rows of x (xs: their blocks). Each run group's two
// sub-blocks sum in fresh int32 lanes (within 32 · 15 · 127), then meet their scales; the high nibbles are
// multiplied where they lie, as 16 q, and their sum shifted back once (exact: a multiple of 16). Lead: ask ahead
// for each run.
template <int TR, bool Lead>
void add_q4k(const unsigned char* block, const Q8KBlock* const (&xs)[TR], __m512 (&acc)[TR]) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    const PanelHeads heads(block + kHeadsAt);
    __m512i dots[TR], dots16[TR];
    for (int t = 0; t < TR; ++t) dots[t] = dots16[t] = _mm512_setzero_si512();
    if constexpr (TR == 1) {  // both nibbles of a line as it is loaded: decode reads each line once
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
            __m512i lo[TR], hi[TR];
            for (int t = 0; t < TR; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < 8; ++g) {
                const __m512i w = _mm512_loadu_si512(block + 64 * (8 * r + g));
                if constexpr (Lead) ask_ahead<BlockFormat::Q4_K, TR>(block + 64 * (8 * r + g));
                const __m512i w_lo = _mm512_and_si512(w, low), w_hi = _mm512_andnot_si512(low, w);  // w_hi: 16 q
                for (int t = 0; t < TR; ++t) {
                    lo[t] = dot4(lo[t], w_lo, xs[t]->q + 64 * r + 4 * g);
                    hi[t] = dot4(hi[t], w_hi, xs[t]->q + 64 * r + 32 + 4 * g);
                }
            }
            for (int t = 0; t < TR; ++t) {
                dots[t] = _mm512_add_epi32(dots[t], _mm512_mullo_epi32(lo[t], heads.sc[2 * r]));
                dots16[t] = _mm512_add_epi32(dots16[t], _mm512_mullo_epi32(hi[t], heads.sc[2 * r + 1]));
            }
        }
    } else {
        // A sub-block at a time, each line loaded twice: TR sums live, not 2 TR, and the order fenced (keep).
        // EPYC Zen 5 (family 26 model 2), K 2048 x N 512, 8 rows of x, one thread, in cache: 35-38 -> 32 us (the
        // loop alone, outside kvscope, 190 -> 178 TSC ticks a super-block, where its vpdpbusd alone take 156).
        // The 1B Q4_K_M file on 2 threads, interleaved pairs: prefill 512 1.02-1.18x (7 pairs), batch 8
        // 0.97-1.11x (9, median 1.03). At one row of x it lost 2-6 % of decode: the branch above.
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r)
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {  // sub-block 2r + h: the low nibbles of the run group, then the high ones
                __m512i sums[TR];
                for (int t = 0; t < TR; ++t) sums[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int g = 0; g < 8; ++g) {
                    const __m512i w = _mm512_loadu_si512(block + 64 * (8 * r + g));
                    if constexpr (Lead)
                        if (h == 0) ask_ahead<BlockFormat::Q4_K, TR>(block + 64 * (8 * r + g));
                    const __m512i q = h == 0 ? _mm512_and_si512(w, low) : _mm512_andnot_si512(low, w);  // high: 16 q
                    for (int t = 0; t < TR; ++t) sums[t] = dot4(sums[t], q, xs[t]->q + 64 * r + 32 * h + 4 * g);
                }
                __m512i (&to)[TR] = h == 0 ? dots : dots16;
                for (int t = 0; t < TR; ++t) to[t] = keep(_mm512_add_epi32(to[t], _mm512_mullo_epi32(sums[t], heads.sc[2 * r + h])));
            }
    }
    const __m512 d = q4k_d(block), dmin = q4k_dmin(block);
    for (int t = 0; t < TR; ++t)
        acc[t] = q4k_row_step(_mm512_add_epi32(dots[t], _mm512_srai_epi32(dots16[t], 4)), heads, d, dmin, *xs[t], acc[t]);
}

// Weights 4c + j, 4c + 32 + j, .. of a Q6_K run (q for group 2k + h of its half, k < 4), 16 rows by 4 bytes:
// q0, q1 and q2 are one AND apiece; q3's pieces go to bits 0-1, 2-3 and 4-5 of each byte (the 16-bit shifts pull
// in the next byte's low bits, which the selects drop; c's, masked before the shift, are zero).
inline __m512i q6k_weights(const unsigned char* run, int k) {
    const __m512i six_bits = _mm512_set1_epi8(0x3F);
    if (k < 3) return _mm512_and_si512(_mm512_loadu_si512(run + 64 * k), six_bits);
    const __m512i a = _mm512_loadu_si512(run), b = _mm512_loadu_si512(run + 64), c = _mm512_loadu_si512(run + 128);
    const __m512i q3_01 = _mm512_srli_epi16(a, 6), q3_23 = _mm512_srli_epi16(b, 4);
    const __m512i q3_45 = _mm512_srli_epi16(_mm512_andnot_si512(six_bits, c), 2);
    const __m512i q3_03 = _mm512_ternarylogic_epi32(q3_01, q3_23, _mm512_set1_epi8(0x03), 0xE4);  // bits 0-1 of q3_01, 2-3 of q3_23
    return _mm512_ternarylogic_epi32(q3_03, q3_45, _mm512_set1_epi8(0x0F), 0xEC);                // (q3_03 & 15) | q3_45
}

// One Q6_K super-block of the panel into acc. Each group of 16 weights sums in its own int32 lanes
// (|sum| <= 16 · 63 · 127), then meets its scale; the offset of 32 meets the scales once, against x's sums of
// 16 in pairs (one vpdpwssd a pair of groups): i = Σ_g sc_g · S_g - 32 · Σ_g sc_g · (x's sum of group g), exact in
// int32. Lead: ask ahead for each run's three lines.
template <int TR, bool Lead>
void add_q6k(const unsigned char* block, const Q8KBlock* const (&xs)[TR], __m512 (&acc)[TR]) {
    // Groups summed at once: decode all 4 of a run's (one unpacking), several rows of x one (their sums stay in registers).
    constexpr int G = TR == 1 ? 4 : 1;
    const unsigned char* scales = block + kQ6ScalesAt;
    __m512i dots[TR];
    for (int t = 0; t < TR; ++t) dots[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h)  // groups 8n + 2k + h: weights 128n + 32k + 16h ..
#pragma GCC unroll 4
            for (int k0 = 0; k0 < 4; k0 += G) {
                __m512i sums[G][TR];
                for (int j = 0; j < G; ++j)
                    for (int t = 0; t < TR; ++t) sums[j][t] = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int c = 4 * h; c < 4 * h + 4; ++c) {
                    const unsigned char* run = block + 192 * (8 * n + c);
                    if constexpr (Lead)
                        if (k0 == 0)
                            for (int line = 0; line < 3; ++line) ask_ahead<BlockFormat::Q6_K, TR>(run + 64 * line);
                    for (int j = 0; j < G; ++j) {
                        const __m512i w = q6k_weights(run, k0 + j);
                        for (int t = 0; t < TR; ++t) {
                            const int8_t* at = xs[t]->q + 128 * n + 32 * (k0 + j) + 4 * c;
                            sums[j][t] = TR == 1 ? _mm512_dpbusd_epi32(sums[j][t], w, broadcast4(at)) : dot4(sums[j][t], w, at);
                        }
                    }
                }
                for (int j = 0; j < G; ++j) {
                    const int g = 8 * n + 2 * (k0 + j) + h;
                    const __m512i scale = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * g)));
                    for (int t = 0; t < TR; ++t) {
                        dots[t] = _mm512_add_epi32(dots[t], _mm512_mullo_epi32(sums[j][t], scale));
                        if constexpr (TR > 1) dots[t] = keep(dots[t]);
                    }
                }
            }
    __m512i offsets[TR];
    for (int t = 0; t < TR; ++t) offsets[t] = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {  // scales 2p and 2p + 1 as int16 pairs against x's sums of groups 2p and 2p + 1
        const __m512i even = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32 * p)));
        const __m512i odd = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 32 * p + 16)));
        const __m512i pair = _mm512_ternarylogic_epi32(_mm512_slli_epi32(odd, 16), even, _mm512_set1_epi32(0xFFFF), 0xF8);
        for (int t = 0; t < TR; ++t) offsets[t] = dot2(offsets[t], pair, xs[t]->sums + 2 * p);
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kQ6DAt)));
    for (int t = 0; t < TR; ++t) {
        const __m512i i = _mm512_sub_epi32(dots[t], _mm512_slli_epi32(offsets[t], 5));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xs[t]->d)), _mm512_cvtepi32_ps(i), acc[t]);
    }
}

template <BlockFormat F, int TR, bool Lead>
void add_block(const unsigned char* block, const Q8KBlock* const (&xs)[TR], __m512 (&acc)[TR]) {
    if constexpr (F == BlockFormat::Q4_K) add_q4k<TR, Lead>(block, xs, acc);
    else add_q6k<TR, Lead>(block, xs, acc);
}

#if KVSCOPE_AMX
// Q4_K tiles of 16 rows of x on AMX (amx.h). A run group's 8 runs are AMX's layout for the weights already (row g:
// 4 bytes of each of the 16 rows), so each sub-block's nibbles, unpacked to bytes, are one tile; 16 rows of x's
// 32 bytes there are another; one tdpbsud gives the 16 x 16 sums of the sub-block, the exact integers add_q4k's
// vpdpbusd chains give (the high nibbles taken as q here, as 16 q there: the same sum after the shift). They pass
// through L1 to the same scales, mins and float steps: the same bits. Intel Xeon family 6 model 167, K 2048 x
// N 512 in L2, one thread: 16 rows of x 108 -> 84 us, 512 rows (N 1024) 7.1 -> 5.5 ms; 8 rows lost (55 -> 58:
// each tile operation costs what it costs for 16 rows), so tiles of 8 keep vpdpbusd.
constexpr int kAmxRows = 16;

// Tiles 0, 1: x's 32 bytes of a sub-block, 16 rows; 2, 3: a sub-block's weights (8 rows of 64 bytes); 4-7: sums
// (16 x 16 int32). Static: GCC's _tile_loadconfig tells the compiler it reads 8 bytes, so a local's other 56
// might not be stored yet.
void load_q4k_tile_config() {
    struct alignas(64) Config {
        uint8_t palette = 1, start_row = 0, reserved[14] = {};
        uint16_t bytes_per_row[16] = {32, 32, 64, 64, 64, 64, 64, 64};
        uint8_t rows[16] = {kAmxRows, kAmxRows, 8, 8, kAmxRows, kAmxRows, kAmxRows, kAmxRows};
    };
    static const Config config;
    _tile_loadconfig(&config);
}

// A Q4_K super-block's 8 sub-blocks as tiles of bytes: w[j] holds sub-block j's 32 weights of the 16 rows.
template <bool Lead>
void unpack_q4k(const unsigned char* block, unsigned char (&w)[8][512]) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int r = 0; r < 4; ++r)
        for (int g = 0; g < 8; ++g) {
            const __m512i v = _mm512_loadu_si512(block + 64 * (8 * r + g));
            if constexpr (Lead) ask_ahead<BlockFormat::Q4_K, kAmxRows>(block + 64 * (8 * r + g));
            _mm512_store_si512(w[2 * r] + 64 * g, _mm512_and_si512(v, low));
            _mm512_store_si512(w[2 * r + 1] + 64 * g, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
        }
}

// The super-block's integer sums (sums[j][t]: sub-block j, row t of x, the 16 weight rows) through their scales
// and mins into acc, as add_q4k.
void q4k_tile_steps(const unsigned char* block, const Q8KBlock* x, int64_t x_stride, const int32_t (&sums)[8][kAmxRows][16],
                    __m512 (&acc)[kAmxRows]) {
    const PanelHeads heads(block + kHeadsAt);
    const __m512 d = q4k_d(block), dmin = q4k_dmin(block);
    for (int t = 0; t < kAmxRows; ++t) {
        __m512i dots = _mm512_mullo_epi32(_mm512_load_si512(sums[0][t]), heads.sc[0]);
        for (int j = 1; j < 8; ++j) dots = _mm512_add_epi32(dots, _mm512_mullo_epi32(_mm512_load_si512(sums[j][t]), heads.sc[j]));
        const auto* xt = reinterpret_cast<const Q8KBlock*>(reinterpret_cast<const unsigned char*>(x) + t * x_stride);
        acc[t] = q4k_row_step(dots, heads, d, dmin, *xt, acc[t]);
    }
}

// Sub-block J's sums into sums[J] through tiles A (x), B (weights) and C: tiles are not renamed, so neighbouring
// sub-blocks take other ones.
#define KVSCOPE_Q4K_SUB_BLOCK(J, A, B, C)  \
    _tile_loadd(A, xq + 32 * (J), stride); \
    _tile_loadd(B, w[J], 64);              \
    _tile_zero(C);                         \
    _tile_dpbsud(C, A, B);                 \
    _tile_stored(C, &sums[J][0][0], 64);

// Rows t0 .. t0 + 15 of x against a Q4_K panel, as panel_tile. The float steps of super-block s run after the
// tiles of s + 1 are started (sums in two halves), and s + 1 is unpacked before s's tiles load theirs.
void panel_tile_amx(float* y, int64_t N, const Q8KBlock* x, int64_t KB, int64_t t0, const unsigned char* panel, const float* bias,
                    int64_t n0, int64_t n_count) {
    constexpr int64_t kBytes = Panel<BlockFormat::Q4_K>::kBytes;
    __m512 acc[kAmxRows];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    const int64_t stride = KB * int64_t(sizeof(Q8KBlock));
    const Q8KBlock* xr = x + t0 * KB;
    alignas(64) unsigned char weights[2][8][512];
    alignas(64) int32_t sums_of[2][8][kAmxRows][16];
    auto unpack = [&](int64_t s) {
        const unsigned char* block = panel + s * kBytes;
        if (t0 == 0) {
            for (int64_t at = Panel<BlockFormat::Q4_K>::kRunBytes; at < kBytes; at += 64) ask_ahead<BlockFormat::Q4_K, kAmxRows>(block + at);
            unpack_q4k<true>(block, weights[s % 2]);
        } else {
            unpack_q4k<false>(block, weights[s % 2]);
        }
    };
    unpack(0);
    for (int64_t s = 0; s < KB; ++s) {
        if (s + 1 < KB) unpack(s + 1);
        const auto& w = weights[s % 2];
        auto& sums = sums_of[s % 2];
        const int8_t* xq = xr[s].q;
        KVSCOPE_Q4K_SUB_BLOCK(0, 0, 2, 4)
        KVSCOPE_Q4K_SUB_BLOCK(1, 1, 3, 5)
        KVSCOPE_Q4K_SUB_BLOCK(2, 0, 2, 6)
        KVSCOPE_Q4K_SUB_BLOCK(3, 1, 3, 7)
        KVSCOPE_Q4K_SUB_BLOCK(4, 0, 2, 4)
        KVSCOPE_Q4K_SUB_BLOCK(5, 1, 3, 5)
        KVSCOPE_Q4K_SUB_BLOCK(6, 0, 2, 6)
        KVSCOPE_Q4K_SUB_BLOCK(7, 1, 3, 7)
        if (s > 0) q4k_tile_steps(panel + (s - 1) * kBytes, xr + s - 1, stride, sums_of[(s - 1) % 2], acc);
    }
    q4k_tile_steps(panel + (KB - 1) * kBytes, xr + KB - 1, stride, sums_of[(KB - 1) % 2], acc);
    const __mmask16 m = __mmask16(n_count >= 16 ? 0xFFFF : (1u << n_count) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + n0) : _mm512_setzero_ps();
    for (int t = 0; t < kAmxRows; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * N + n0, m, _mm512_add_ps(acc[t], b));
}
#undef KVSCOPE_Q4K_SUB_BLOCK
#endif

// Rows t0 .. t0 + TR - 1 of x (Q8_K, KB blocks a row) against the panel: y's columns [n0, n0 + n_count).
template <BlockFormat F, int TR>
void panel_tile(float* y, int64_t N, const Q8KBlock* x, int64_t KB, int64_t t0, const unsigned char* panel, const float* bias,
                int64_t n0, int64_t n_count) {
    constexpr int64_t kBytes = Panel<F>::kBytes;
    __m512 acc[TR];
    for (int t = 0; t < TR; ++t) acc[t] = _mm512_setzero_ps();
    const bool lead = t0 == 0 && ahead_of<F, TR>() > 0;
    for (int64_t s = 0; s < KB; ++s) {
        const unsigned char* block = panel + s * kBytes;
        // The first tile asks for the stream ahead (ahead_of; Q4_K also 128 bytes ahead into L1), a line as it
        // loads a line, the lines after the runs at the start. Intel Xeon family 6 model 167, K 2048 x
        // N 16384 from memory, 1 row of x, share of the probe, 1 | 2 threads: all of a super-block's requests at
        // its start, 1 KiB ahead, gave Q4_K 83-84 | 73-77 %, Q6_K 78 | 71-73 %; a line at a time 1 KiB ahead the
        // same; 2 KiB 90-91 | 79-89 % and 80 | 73-75 %; 3 KiB 87 | 84 % and 85-86 | 76-79 %; 4 KiB 84 | 79 % and
        // 84 | 78 %; one super-block (Q4_K 2304, Q6_K 3360 bytes) 89-90 | 78-79 % and 86 | 76 %. In L2 (N 512)
        // the new order is faster too: 1 row Q4_K 14.9 -> 13.3 us, Q6_K 21.7 -> 19.2. The 1B Q4_K_M file's decode
        // on 2 threads: 30.7-31.3 -> 33.1-33.3 tokens/s.
        const Q8KBlock* xs[TR];
        for (int t = 0; t < TR; ++t) xs[t] = x + (t0 + t) * KB + s;
        if (lead) {
            for (int64_t at = Panel<F>::kRunBytes; at < kBytes; at += 64) ask_ahead<F, TR>(block + at);
            add_block<F, TR, true>(block, xs, acc);
        } else {
            add_block<F, TR, false>(block, xs, acc);
        }
    }
    const __mmask16 m = __mmask16(n_count >= 16 ? 0xFFFF : (1u << n_count) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + n0) : _mm512_setzero_ps();
    for (int t = 0; t < TR; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * N + n0, m, _mm512_add_ps(acc[t], b));
}

// Where row r's bytes of a super-block lie in the panel's: move(panel offset, offset in the row's block, bytes)
// for each piece. Q6_K's runs are then re-encoded in place (recode_q6k_runs).
template <BlockFormat F, class Move>
void row_pieces(int64_t r, const Move& move) {
    if constexpr (F == BlockFormat::Q4_K) {
        move(kScalesAt + 2 * r, 0, 2);       // d
        move(kScalesAt + 32 + 2 * r, 2, 2);  // dmin
        for (int64_t w = 0; w < 3; ++w) move(kHeadsAt + 64 * w + 4 * r, 4 + 4 * w, 4);
        for (int64_t run = 0; run < 32; ++run) move(64 * run + 4 * r, 16 + 4 * run, 4);
    } else {
        for (int64_t n = 0; n < 2; ++n)
            for (int64_t c = 0; c < 8; ++c) {
                const int64_t run = 192 * (8 * n + c) + 4 * r;
                move(run, 64 * n + 4 * c, 4);
                move(run + 64, 64 * n + 32 + 4 * c, 4);
                move(run + 128, 128 + 32 * n + 4 * c, 4);
            }
        for (int64_t g = 0; g < 16; ++g) move(kQ6ScalesAt + 16 * g + r, 192 + g, 1);
        move(kQ6DAt + 2 * r, 208, 2);
    }
}

// One byte position of a Q6_K run, the file's bits (x0, x1: low nibbles, x2: high bit pairs) to the panel's
// (a, b, c above), and back: the 6-bit q of the position's 4 weights stay as they are.
void q6k_to_panel(unsigned char& x0, unsigned char& x1, unsigned char& x2) {
    const unsigned q0 = (x0 & 15) | (x2 & 3) << 4, q1 = (x1 & 15) | (x2 >> 2 & 3) << 4;
    const unsigned q2 = x0 >> 4 | (x2 >> 4 & 3) << 4, q3 = x1 >> 4 | (x2 >> 6) << 4;
    x0 = (unsigned char)(q0 | (q3 & 3) << 6), x1 = (unsigned char)(q1 | (q3 >> 2 & 3) << 6), x2 = (unsigned char)(q2 | (q3 >> 4) << 6);
}
void q6k_from_panel(unsigned char& a, unsigned char& b, unsigned char& c) {
    const unsigned q0 = a & 63, q1 = b & 63, q2 = c & 63, q3 = a >> 6 | (b >> 6) << 2 | (c >> 6) << 4;
    a = (unsigned char)((q0 & 15) | (q2 & 15) << 4), b = (unsigned char)((q1 & 15) | (q3 & 15) << 4);
    c = (unsigned char)(q0 >> 4 | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
}

// Byte positions [j0, j1) of each of a super-block's 16 runs through recode.
template <class Recode>
void recode_q6k_runs(unsigned char* block, int64_t j0, int64_t j1, const Recode& recode) {
    for (int64_t run = 0; run < 16; ++run)
        for (int64_t j = j0; j < j1; ++j) {
            unsigned char* p = block + 192 * run + j;
            recode(p[0], p[64], p[128]);
        }
}

template <BlockFormat F>
void tiles(float* y, const Q8KBlock* x, int64_t T, const unsigned char* panel, const float* bias, int64_t K, int64_t N, int64_t n0,
           int64_t n_count) {
    constexpr int R = Panel<F>::kTileRows;
    const int64_t KB = K / 256;
    int64_t t = 0;
#if KVSCOPE_AMX
    if (F == BlockFormat::Q4_K && T >= kAmxRows && amx_tiles_allowed()) {
        load_q4k_tile_config();
        for (; t + kAmxRows <= T; t += kAmxRows) panel_tile_amx(y, N, x, KB, t, panel, bias, n0, n_count);
        _tile_release();
    }
#endif
    for (; t + R <= T; t += R) panel_tile<F, R>(y, N, x, KB, t, panel, bias, n0, n_count);
    if (t + 4 <= T) {
        panel_tile<F, 4>(y, N, x, KB, t, panel, bias, n0, n_count);
        t += 4;
    }
    switch (T - t) {
        case 3: panel_tile<F, 3>(y, N, x, KB, t, panel, bias, n0, n_count); break;
        case 2: panel_tile<F, 2>(y, N, x, KB, t, panel, bias, n0, n_count); break;
        case 1: panel_tile<F, 1>(y, N, x, KB, t, panel, bias, n0, n_count); break;
        default: break;
    }
}

template <BlockFormat F>
void pack(std::byte* w, int64_t N, int64_t K) {
    const int64_t KB = K / 256, panel_bytes = KB * Panel<F>::kBytes;  // kRows rows' bytes
    ThreadPool::global().parallel_for(N / kRows, [&](int64_t p) {
        thread_local std::vector<unsigned char> panel;
        panel.resize(size_t(panel_bytes));
        auto* rows = reinterpret_cast<unsigned char*>(w + p * panel_bytes);
        for (int64_t r = 0; r < kRows; ++r)
            for (int64_t s = 0; s < KB; ++s)
                row_pieces<F>(r, [&](int64_t at, int64_t from, int64_t n) {
                    std::memcpy(panel.data() + s * Panel<F>::kBytes + at, rows + (r * KB + s) * Panel<F>::kBlockBytes + from, size_t(n));
                });
        if constexpr (F == BlockFormat::Q6_K)
            for (int64_t s = 0; s < KB; ++s) recode_q6k_runs(panel.data() + s * Panel<F>::kBytes, 0, 64, q6k_to_panel);
        std::memcpy(rows, panel.data(), size_t(panel_bytes));
    });
}

template <BlockFormat F>
void unpack_row(std::byte* out, const std::byte* panels, int64_t K, int64_t row) {
    const int64_t KB = K / 256;
    const auto* panel = reinterpret_cast<const unsigned char*>(panels) + row / kRows * KB * Panel<F>::kBytes;
    auto* to = reinterpret_cast<unsigned char*>(out);
    unsigned char decoded[Panel<F>::kBytes];
    for (int64_t s = 0; s < KB; ++s) {
        const unsigned char* block = panel + s * Panel<F>::kBytes;
        if constexpr (F == BlockFormat::Q6_K) {
            std::memcpy(decoded, block, sizeof decoded);
            recode_q6k_runs(decoded, 4 * (row % kRows), 4 * (row % kRows) + 4, q6k_from_panel);  // this row's bytes only
            block = decoded;
        }
        row_pieces<F>(row % kRows, [&](int64_t at, int64_t from, int64_t n) {
            std::memcpy(to + s * Panel<F>::kBlockBytes + from, block + at, size_t(n));
        });
    }
}

}  // namespace

bool super_block_panels(float* y, const Q8KBlock* x, int64_t T, BlockMatrix w, const float* bias, int64_t K, int64_t N, int64_t n0,
                        int64_t n_count) {
    if (w.order != BlockOrder::Panels) return false;
    const auto* data = reinterpret_cast<const unsigned char*>(w.data);
    switch (w.format) {
        case BlockFormat::Q4_K:
            tiles<BlockFormat::Q4_K>(y, x, T, data + n0 / kRows * (K / 256) * Panel<BlockFormat::Q4_K>::kBytes, bias, K, N, n0, n_count);
            return true;
        case BlockFormat::Q6_K:
            tiles<BlockFormat::Q6_K>(y, x, T, data + n0 / kRows * (K / 256) * Panel<BlockFormat::Q6_K>::kBytes, bias, K, N, n0, n_count);
            return true;
        default: return false;
    }
}

int64_t super_block_panel_rows(BlockFormat f) { return f == BlockFormat::Q4_K || f == BlockFormat::Q6_K ? kRows : 0; }

void pack_super_block_panels(std::byte* w, BlockFormat f, int64_t N, int64_t K) {
    if (f == BlockFormat::Q4_K) pack<BlockFormat::Q4_K>(w, N, K);
    else if (f == BlockFormat::Q6_K) pack<BlockFormat::Q6_K>(w, N, K);
}

void super_block_panel_row(std::byte* out, BlockFormat f, const std::byte* panels, int64_t K, int64_t row) {
    if (f == BlockFormat::Q4_K) unpack_row<BlockFormat::Q4_K>(out, panels, K, row);
    else if (f == BlockFormat::Q6_K) unpack_row<BlockFormat::Q6_K>(out, panels, K, row);
}

#else
bool super_block_panels(float*, const Q8KBlock*, int64_t, BlockMatrix, const float*, int64_t, int64_t, int64_t, int64_t) { return false; }
int64_t super_block_panel_rows(BlockFormat) { return 0; }
void pack_super_block_panels(std::byte*, BlockFormat, int64_t, int64_t) {}
void super_block_panel_row(std::byte*, BlockFormat, const std::byte*, int64_t, int64_t) {}
#endif

}  // namespace kvscope
