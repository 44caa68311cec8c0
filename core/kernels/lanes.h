#pragma once
// The lane helpers that the kernel sources share; private to core/kernels/*.cpp (no other file includes
// it). They sit in an anonymous namespace, as they did when the kernels were one file: each source keeps
// its own copy, inlined as before, and no symbol is shared with a file compiled with other options.
//
//   as_f32(v)                 a float, or a bfloat16 widened exactly
//   half_to_f32(h)            a float16 (Q8_0's scale) as float32, exactly
//   lane_tree_sum(lanes)      16 lanes summed in a fixed tree: every build reduces its lanes alike
//   AVX-512  tail_mask(r), load16(p), maskz_load16(m, p)    16 floats or widened bfloat16 values
//   AVX2     load8(p)                                       8 floats or widened bfloat16 values
//            lane_tree_sums4, lane_tree_sums8, lane_sums8   lane_tree_sum of 4 or 8 outputs at once
//            nk_block<R, C>(out, xr, wr, K)                 R x C dot products of K, lane_tree_sum's bits
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

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

inline float half_to_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1Fu) bits = sign | 0x7F800000u | (mant << 13);  // infinity, NaN
    else if (exp != 0) bits = sign | ((exp + 112) << 23) | (mant << 13);
    else if (mant == 0) bits = sign;  // zero
    else {  // subnormal: normalise
        int e = 0;  // one less per shift: the value is (m / 1024) * 2^(-14 - shifts)
        uint32_t m = mant;
        while (!(m & 0x400u)) m <<= 1, --e;
        bits = sign | (uint32_t(e + 113) << 23) | ((m & 0x3FFu) << 13);
    }
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
#endif
}

// The sum of one output's 16 lanes as a tree: lane i + lane i+8, then i + i+4, i + i+2, i + i+1, the
// pairs _mm512_reduce_add_ps adds, so every build reduces the lanes alike (float addition commutes).
inline float lane_tree_sum(const float* lanes) {
    float s[8];
    for (int i = 0; i < 8; ++i) s[i] = lanes[i] + lanes[i + 8];
    for (int i = 0; i < 4; ++i) s[i] = s[i] + s[i + 4];
    for (int i = 0; i < 2; ++i) s[i] = s[i] + s[i + 2];
    return s[0] + s[1];
}

#if KVSCOPE_AVX512
inline __mmask16 tail_mask(int64_t remaining) {
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

#elif KVSCOPE_AVX2
// AVX2: 8 floats, or 8 bfloat16 values widened exactly (the top half of a float32).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
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
#endif

}  // namespace
}  // namespace kvscope
