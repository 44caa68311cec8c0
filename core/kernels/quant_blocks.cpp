// ggml's block formats: the reference dequantizers, written from the layouts in quant_blocks.h, and the
// vectorized ones, which give their bits. Built with -ffp-contract=off: a fused multiply-add would round once
// where the reference rounds twice (the vectorized kernels fuse only where the product is exact).
#include "kernels/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/block_vectors.h"
#include "kernels/lanes.h"
#include "kernels/simd.h"

namespace kvscope {

namespace {

constexpr BlockLayout kLayouts[] = {
    {"Q4_0", 32, 18}, {"Q4_1", 32, 20}, {"Q5_0", 32, 22}, {"Q5_1", 32, 24},
    {"Q8_0", 32, 34}, {"Q4_K", 256, 144}, {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
};

// Q4_0 and Q4_1 (with_min), Q5_0 and Q5_1 (with_high): 32 weights; low nibbles are the first 16.
void small_block(const unsigned char* b, bool with_min, bool with_high, float* out) {
    const float d = half(b);
    const float m = with_min ? half(b + 2) : 0.0f;
    const unsigned char* p = b + (with_min ? 4 : 2);
    uint32_t high = 0;
    if (with_high) {
        high = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
        p += 4;
    }
    const int offset = with_min ? 0 : (with_high ? 16 : 8);
    for (int j = 0; j < 16; ++j) {
        int lo = p[j] & 0x0F, hi = p[j] >> 4;
        if (with_high) {
            lo |= int((high >> j) & 1) << 4;
            hi |= int((high >> (j + 16)) & 1) << 4;
        }
        if (with_min) {
            out[j] = float(lo) * d + m;
            out[j + 16] = float(hi) * d + m;
        } else {
            out[j] = float(lo - offset) * d;
            out[j + 16] = float(hi - offset) * d;
        }
    }
}

// Q4_K (five == false) and Q5_K.
void k_block(const unsigned char* b, bool five, float* out) {
    const float d = half(b), dmin = half(b + 2);
    const unsigned char* scales = b + 4;
    const unsigned char* qh = five ? b + 16 : nullptr;
    const unsigned char* qs = b + (five ? 48 : 16);
    for (int run = 0; run < 4; ++run) {
        for (int half_index = 0; half_index < 2; ++half_index) {
            int scale = 0, min = 0;
            scale_min(scales, 2 * run + half_index, scale, min);
            const float dl = d * float(scale), ml = dmin * float(min);
            for (int l = 0; l < 32; ++l) {
                int q = half_index == 0 ? (qs[l] & 0x0F) : (qs[l] >> 4);
                if (five && (qh[l] >> (2 * run + half_index) & 1)) q += 16;
                *out++ = dl * float(q) - ml;
            }
        }
        qs += 32;
    }
}

// Q6_K: 256 weights in 2 runs of 128. Within a run, weight 32k + l (k = 0..3) takes the low nibble (k < 2)
// or high nibble (k >= 2) of ql[l + 32 (k % 2)] and bits 2k..2k+1 of qh[l]; scale index 8 run + 2k + l / 16.
void q6_k_block(const unsigned char* b, float* out) {
    const unsigned char* ql = b;
    const unsigned char* qh = b + 128;
    const auto* sc = reinterpret_cast<const signed char*>(b + 192);
    const float d = half(b + 208);
    for (int run = 0; run < 2; ++run) {
        for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 32; ++l) {
                const int nibble = k < 2 ? (ql[l + 32 * (k % 2)] & 0x0F) : (ql[l + 32 * (k % 2)] >> 4);
                const int q = (nibble | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                out[32 * k + l] = d * float(sc[2 * k + l / 16]) * float(q);
            }
        out += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

void reference_block(BlockFormat f, const unsigned char* b, float* out) {
    switch (f) {
        case BlockFormat::Q4_0: small_block(b, false, false, out); break;
        case BlockFormat::Q4_1: small_block(b, true, false, out); break;
        case BlockFormat::Q5_0: small_block(b, false, true, out); break;
        case BlockFormat::Q5_1: small_block(b, true, true, out); break;
        case BlockFormat::Q8_0: {
            const float d = half(b);
            for (int j = 0; j < 32; ++j) out[j] = float(static_cast<signed char>(b[2 + j])) * d;
            break;
        }
        case BlockFormat::Q4_K: k_block(b, false, out); break;
        case BlockFormat::Q5_K: k_block(b, true, out); break;
        case BlockFormat::Q6_K: q6_k_block(b, out); break;
    }
}

#if KVSCOPE_AVX512
// The AVX-512 build's blocks are block_vectors.h's, stored 16 weights at a time.
template <class Block>
void fast_blocks(const unsigned char* b, int64_t blocks, float* out) {
    for (int64_t i = 0; i < blocks; ++i) {
        Block block;
        block.load(b + i * Block::kBytes);
        for (int v = 0; v < Block::kElements / 16; ++v) _mm512_storeu_ps(out + i * Block::kElements + 16 * v, block.weights(v));
    }
}

#elif KVSCOPE_AVX2
// The AVX2 build's blocks take their small integers 16 at a time as bytes (SSE), then widen them to float32
// 8 at a time: q · s (exact), or q · dl - ml (fused: q · dl is exact, so one rounding, as the reference's
// two operations give).
inline void put16(float* out, __m128i q, float s) {
    const __m256 v = _mm256_set1_ps(s);
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), v));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), v));
}
inline void put16(float* out, __m128i q, float dl, float ml) {
    const __m256 a = _mm256_set1_ps(dl), b = _mm256_set1_ps(ml);
    _mm256_storeu_ps(out, _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), a, b));
    _mm256_storeu_ps(out + 8, _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), a, b));
}


void q8_0_block(const unsigned char* b, float* out) {
    const float d = half(b);
    put16(out, bytes16(b + 2), d);
    put16(out + 16, bytes16(b + 18), d);
}

// Q4_0, Q4_1, Q5_0, Q5_1 (q · d + m: put16 with -m, so q · d - (-m), one rounding as the reference's addition).
template <BlockFormat F>
void nibble_block(const unsigned char* b, float* out) {
    const float d = half(b);
    __m128i q[2];
    nibble_bytes<F>(b, q);
    if constexpr (NibbleLayout<F>::kMin) {
        const float m = half(b + 2);
        put16(out, q[0], d, -m);
        put16(out + 16, q[1], d, -m);
    } else {
        put16(out, q[0], d);
        put16(out + 16, q[1], d);
    }
}

void q4_k_block(const unsigned char* b, float* out) {
    const float d = half(b), dmin = half(b + 2);
    const unsigned char* qs = b + 16;
    for (int run = 0; run < 4; ++run, qs += 32, out += 64) {
        for (int h = 0; h < 2; ++h) {
            int scale = 0, min = 0;
            scale_min(b + 4, 2 * run + h, scale, min);
            const float dl = d * float(scale), ml = dmin * float(min);
            for (int i = 0; i < 2; ++i) {
                const __m128i bytes = bytes16(qs + 16 * i);
                put16(out + 32 * h + 16 * i, h == 0 ? low_nibbles(bytes) : high_nibbles(bytes), dl, ml);
            }
        }
    }
}

void q6_k_block_avx2(const unsigned char* b, float* out) {
    const float d = half(b + 208);
    const auto* sc = reinterpret_cast<const signed char*>(b + 192);
    const __m128i three = _mm_set1_epi8(3), thirty_two = _mm_set1_epi8(32);
    for (int run = 0; run < 2; ++run, out += 128, sc += 8) {
        const unsigned char* ql = b + 64 * run;
        const unsigned char* qh = b + 128 + 32 * run;
        for (int i = 0; i < 2; ++i) {  // l in [16 i, 16 i + 16)
            const __m128i l0 = bytes16(ql + 16 * i), l1 = bytes16(ql + 32 + 16 * i), h = bytes16(qh + 16 * i);
            auto high = [&](int k) { return _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(h, 2 * k), three), 4); };
            const __m128i q[4] = {_mm_or_si128(low_nibbles(l0), high(0)), _mm_or_si128(low_nibbles(l1), high(1)),
                                  _mm_or_si128(high_nibbles(l0), high(2)), _mm_or_si128(high_nibbles(l1), high(3))};
            for (int k = 0; k < 4; ++k) put16(out + 32 * k + 16 * i, _mm_sub_epi8(q[k], thirty_two), d * float(sc[2 * k + i]));
        }
    }
}

// The AVX2 blocks above, named as the AVX-512 build's (one dispatch for both).
template <int kE, int kB, void (*kPut)(const unsigned char*, float*)>
struct Avx2Block {
    static constexpr int kElements = kE, kBytes = kB;
    static void put(const unsigned char* b, float* out) { kPut(b, out); }
};
using Q8_0Block = Avx2Block<32, 34, q8_0_block>;
template <BlockFormat F>
using NibbleBlock = Avx2Block<32, NibbleLayout<F>::kBytes, nibble_block<F>>;
using Q4_0Block = NibbleBlock<BlockFormat::Q4_0>;
using Q4_1Block = NibbleBlock<BlockFormat::Q4_1>;
using Q5_0Block = NibbleBlock<BlockFormat::Q5_0>;
using Q5_1Block = NibbleBlock<BlockFormat::Q5_1>;
using Q4_KBlock = Avx2Block<256, 144, q4_k_block>;
using Q6_KBlock = Avx2Block<256, 210, q6_k_block_avx2>;
template <class Block>
void fast_blocks(const unsigned char* b, int64_t blocks, float* out) {
    for (int64_t i = 0; i < blocks; ++i) Block::put(b + i * Block::kBytes, out + i * Block::kElements);
}
#endif

}  // namespace

BlockLayout block_layout(BlockFormat f) { return kLayouts[int(f)]; }

void dequantize_reference(BlockFormat f, const std::byte* src, int64_t n, float* out) {
    const BlockLayout layout = block_layout(f);
    const auto* b = reinterpret_cast<const unsigned char*>(src);
    for (int64_t i = 0; i < n / layout.elements; ++i) reference_block(f, b + i * layout.bytes, out + i * layout.elements);
}

void dequantize_blocks(BlockFormat f, const std::byte* src, int64_t n, float* out) {
#if !KVSCOPE_PORTABLE
    const auto* b = reinterpret_cast<const unsigned char*>(src);
    const int64_t blocks = n / block_layout(f).elements;
    switch (f) {
        case BlockFormat::Q4_0: return fast_blocks<Q4_0Block>(b, blocks, out);
        case BlockFormat::Q4_1: return fast_blocks<Q4_1Block>(b, blocks, out);
        case BlockFormat::Q5_0: return fast_blocks<Q5_0Block>(b, blocks, out);
        case BlockFormat::Q5_1: return fast_blocks<Q5_1Block>(b, blocks, out);
        case BlockFormat::Q8_0: return fast_blocks<Q8_0Block>(b, blocks, out);
        case BlockFormat::Q4_K: return fast_blocks<Q4_KBlock>(b, blocks, out);
        case BlockFormat::Q6_K: return fast_blocks<Q6_KBlock>(b, blocks, out);
        default: break;
    }
#endif
    dequantize_reference(f, src, n, out);
}

bool integer_format(BlockFormat f) { return f != BlockFormat::Q4_1 && f != BlockFormat::Q5_1; }

void quantize_q8k(Q8KBlock* out, const float* x, int64_t K) {
    for (int64_t i = 0; i < K / 256; ++i, x += 256) {
        Q8KBlock& block = out[i];
#if KVSCOPE_AVX512
        __m512 amax = _mm512_setzero_ps(), zero = _mm512_setzero_ps();
        __mmask16 finite = 0xFFFF;
        for (int v = 0; v < 16; ++v) {
            const __m512 xv = _mm512_loadu_ps(x + 16 * v);
            finite &= _mm512_cmp_ps_mask(_mm512_sub_ps(xv, xv), zero, _CMP_EQ_OQ);  // inf - inf, NaN: not 0
            amax = _mm512_max_ps(amax, _mm512_abs_ps(xv));
        }
        const float m = finite == 0xFFFF ? _mm512_reduce_max_ps(amax) : NAN;
#else
        float m = 0.0f;
        for (int k = 0; k < 256; ++k) m = std::isfinite(x[k]) && std::isfinite(m) ? std::max(m, std::fabs(x[k])) : NAN;
#endif
        if (!(m >= 0x1p-120f)) {  // zero or too small for 127 / m, or not finite (NaN)
            std::memset(block.q, 0, sizeof block.q);
            std::memset(block.sums, 0, sizeof block.sums);
            std::memset(block.sums32, 0, sizeof block.sums32);
            block.d = std::isnan(m) ? NAN : 0.0f;
            continue;
        }
        const float scale = 127.0f / m;
        block.d = m / 127.0f;
#if KVSCOPE_AVX512
        const __m512 s = _mm512_set1_ps(scale);
        for (int v = 0; v < 16; ++v) {  // the default rounding, to nearest even, as std::nearbyint
            const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * v), s));
            _mm_store_si128(reinterpret_cast<__m128i*>(block.q + 16 * v), _mm512_cvtsepi32_epi8(q));
            block.sums[v] = int16_t(_mm512_reduce_add_epi32(q));
        }
#else
        for (int v = 0; v < 16; ++v) {
            int sum = 0;
            for (int k = 16 * v; k < 16 * v + 16; ++k) {
                const int q = int(std::nearbyint(x[k] * scale));
                block.q[k] = int8_t(std::clamp(q, -127, 127));
                sum += block.q[k];
            }
            block.sums[v] = int16_t(sum);
        }
#endif
        for (int j = 0; j < 8; ++j) block.sums32[j] = int16_t(block.sums[2 * j] + block.sums[2 * j + 1]);
    }
}

void quantize_x8(const X8Rows& out, int64_t t, const float* x, int64_t K) {
    const int64_t KB = K / 32;
    int8_t* q = out.q + t * K;
    float* d = out.d + t * KB;
    int32_t* sums = out.sums + t * KB;
    for (int64_t b = 0; b < KB; ++b, x += 32, q += 32) {
#if KVSCOPE_AVX512
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16), zero = _mm512_setzero_ps();
        const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_sub_ps(x0, x0), zero, _CMP_EQ_OQ) &  // inf - inf, NaN: not 0
                                 _mm512_cmp_ps_mask(_mm512_sub_ps(x1, x1), zero, _CMP_EQ_OQ);
        const float m = finite == 0xFFFF ? _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1))) : NAN;
#else
        float m = 0.0f;
        for (int k = 0; k < 32; ++k) m = std::isfinite(x[k]) && std::isfinite(m) ? std::max(m, std::fabs(x[k])) : NAN;
#endif
        if (!(m >= 0x1p-120f)) {  // zero or too small for 127 / m, or not finite (NaN)
            std::memset(q, 0, 32);
            sums[b] = 0;
            d[b] = std::isnan(m) ? NAN : 0.0f;
            continue;
        }
        const float scale = 127.0f / m;
        d[b] = m / 127.0f;
#if KVSCOPE_AVX512
        const __m512 s = _mm512_set1_ps(scale);  // the default rounding, to nearest even, as std::nearbyint
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, s)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, s));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(q1));
        sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
#else
        int32_t sum = 0;
        for (int k = 0; k < 32; ++k) {
            q[k] = int8_t(std::clamp(int(std::nearbyint(x[k] * scale)), -127, 127));
            sum += q[k];
        }
        sums[b] = sum;
#endif
    }
}

int64_t first_non_finite_block(BlockFormat f, const std::byte* src, int64_t n) {
    const BlockLayout layout = block_layout(f);
    const bool two = f == BlockFormat::Q4_1 || f == BlockFormat::Q5_1 || f == BlockFormat::Q4_K || f == BlockFormat::Q5_K;
    const int64_t at = f == BlockFormat::Q6_K ? 208 : 0;  // the (first) float16 of a block
    const auto* b = reinterpret_cast<const unsigned char*>(src);
    auto finite = [](const unsigned char* p) { return (p[1] & 0x7C) != 0x7C; };  // the exponent's bits, high byte
    for (int64_t i = 0; i < n / layout.elements; ++i) {
        const unsigned char* block = b + i * layout.bytes + at;
        if (!finite(block) || (two && !finite(block + 2))) return i * layout.elements;
    }
    return -1;
}

}  // namespace kvscope
