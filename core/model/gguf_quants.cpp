// ggml's type table; the block formats' dequantizers are the kernels' (kernels/quant_blocks.h).
#include "model/gguf_quants.h"

#include <cstring>

#include "model/safetensors.h"

namespace kvscope {

namespace {

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

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
    for (const GgmlTypeInfo& t : kTypes)
        if (uint32_t(t.type) == id) return &t;
    return nullptr;
}

std::optional<BlockFormat> block_format(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0: return BlockFormat::Q4_0;
        case GgmlType::Q4_1: return BlockFormat::Q4_1;
        case GgmlType::Q5_0: return BlockFormat::Q5_0;
        case GgmlType::Q5_1: return BlockFormat::Q5_1;
        case GgmlType::Q8_0: return BlockFormat::Q8_0;
        case GgmlType::Q4_K: return BlockFormat::Q4_K;
        case GgmlType::Q5_K: return BlockFormat::Q5_K;
        case GgmlType::Q6_K: return BlockFormat::Q6_K;
        default: return std::nullopt;
    }
}

void dequantize_row(GgmlType type, const std::byte* src, int64_t n, float* out) {
    if (const std::optional<BlockFormat> f = block_format(type)) return dequantize_reference(*f, src, n, out);
    const auto* b = reinterpret_cast<const unsigned char*>(src);
    for (int64_t i = 0; i < n; ++i, b += ggml_type_info(type).block_bytes) {
        switch (type) {
            case GgmlType::F32: std::memcpy(out + i, b, 4); break;
            case GgmlType::F16: out[i] = f16_to_f32(uint16_t(b[0] | b[1] << 8)); break;
            case GgmlType::BF16: out[i] = bf16_to_f32(uint16_t(b[0] | b[1] << 8)); break;
            default: return;  // callers check `readable` first
        }
    }
}

}  // namespace kvscope
