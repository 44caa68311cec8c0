// Dequantizers of ggml's block types, written from the block layouts in gguf_quants.h. Built with
// -ffp-contract=off: a fused multiply-add would round once where ggml's reference rounds twice.
#include "model/gguf_quants.h"

#include <cstring>

#include "model/safetensors.h"

namespace kvscope {

namespace {

constexpr int64_t kQK = 32;    // weights per block of the small types
constexpr int64_t kQKK = 256;  // weights per super-block of the K types

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, true},        {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true},    {GgmlType::Q4_1, "Q4_1", 32, 20, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true},    {GgmlType::Q5_1, "Q5_1", 32, 24, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true},    {GgmlType::Q8_1, "Q8_1", 32, 36, false},
    {GgmlType::Q2_K, "Q2_K", 256, 84, false},  {GgmlType::Q3_K, "Q3_K", 256, 110, false},
    {GgmlType::Q4_K, "Q4_K", 256, 144, true},  {GgmlType::Q5_K, "Q5_K", 256, 176, true},
    {GgmlType::Q6_K, "Q6_K", 256, 210, true},  {GgmlType::Q8_K, "Q8_K", 256, 292, false},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false}, {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false}, {GgmlType::IQ1_S, "IQ1_S", 256, 50, false},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, false},    {GgmlType::IQ3_S, "IQ3_S", 256, 110, false},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, false},     {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, false},
    {GgmlType::I8, "I8", 1, 1, false},         {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},       {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, false},       {GgmlType::IQ1_M, "IQ1_M", 256, 56, false},
    {GgmlType::BF16, "BF16", 1, 2, true},      {GgmlType::TQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66, false},
};

float half(const unsigned char* p) { return f16_to_f32(uint16_t(p[0] | p[1] << 8)); }

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

// The j-th (scale, min) pair of a Q4_K / Q5_K super-block: eight 6-bit pairs in 12 bytes. Pairs 0-3 sit in
// the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 take their low 4 bits from bytes 8-11 and
// their top 2 bits from the spare top bits of bytes 0-3 (scales) and 4-7 (mins).
void scale_min(const unsigned char* s, int j, int& scale, int& min) {
    if (j < 4) {
        scale = s[j] & 63;
        min = s[j + 4] & 63;
    } else {
        scale = (s[j + 4] & 0x0F) | (s[j - 4] >> 6) << 4;
        min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

// Q4_K (qh == null) and Q5_K: 256 weights in 4 runs of 64; each run's 32 bytes give the low nibbles to its
// first 32 weights and the high nibbles to the next 32; Q5_K's fifth bits: bit 2r (first half), 2r+1 (second).
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

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
    for (const GgmlTypeInfo& t : kTypes)
        if (uint32_t(t.type) == id) return &t;
    return nullptr;
}

void dequantize_row(GgmlType type, const std::byte* src, int64_t n, float* out) {
    const auto* b = reinterpret_cast<const unsigned char*>(src);
    const GgmlTypeInfo& info = ggml_type_info(type);
    const int64_t blocks = n / info.block_elements;
    for (int64_t i = 0; i < blocks; ++i, b += info.block_bytes, out += info.block_elements) {
        switch (type) {
            case GgmlType::F32: std::memcpy(out, b, 4); break;
            case GgmlType::F16: *out = half(b); break;
            case GgmlType::BF16: *out = bf16_to_f32(uint16_t(b[0] | b[1] << 8)); break;
            case GgmlType::Q4_0: small_block(b, false, false, out); break;
            case GgmlType::Q4_1: small_block(b, true, false, out); break;
            case GgmlType::Q5_0: small_block(b, false, true, out); break;
            case GgmlType::Q5_1: small_block(b, true, true, out); break;
            case GgmlType::Q8_0: {
                const float d = half(b);
                for (int j = 0; j < kQK; ++j) out[j] = float(static_cast<signed char>(b[2 + j])) * d;
                break;
            }
            case GgmlType::Q4_K: k_block(b, false, out); break;
            case GgmlType::Q5_K: k_block(b, true, out); break;
            case GgmlType::Q6_K: q6_k_block(b, out); break;
            default: return;  // callers check `readable` first
        }
    }
    static_assert(kQKK == 256);
}

}  // namespace kvscope
