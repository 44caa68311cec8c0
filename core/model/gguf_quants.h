#pragma once
// The tensor types a GGUF file may hold (ggml's type numbers) and the dequantizers of the ones kvscope
// reads. A quantized row is a run of blocks; each block stores `block_elements` weights in `block_bytes`
// bytes, a float16 scale (and minimum) with small integers, so a Q4_K weight costs 144 * 8 / 256 = 4.5 bits.
//
//   ggml_type_info(id)          the table row of a type number, or null for a number ggml never used
//   dequantize_row(t, src, n, out)   n weights (a multiple of the block) from blocks -> float32; only for
//                               types with `readable` set. Exact: the same float32 operations, in the same
//                               order, as ggml's reference dequantizers (no fused multiply-add)
//
// The block layouts are kernels/quant_blocks.h's.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "kernels/quant_blocks.h"

namespace kvscope {

enum class GgmlType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35,
};

struct GgmlTypeInfo {
    GgmlType type;
    const char* name;        // ggml's spelling: "Q4_K", "BF16"
    int64_t block_elements;  // weights per block (1 for plain types)
    int64_t block_bytes;     // bytes per block
    bool readable;           // kvscope dequantizes it
    double bits_per_weight() const { return 8.0 * double(block_bytes) / double(block_elements); }
};

const GgmlTypeInfo* ggml_type_info(uint32_t id);
inline const GgmlTypeInfo& ggml_type_info(GgmlType t) { return *ggml_type_info(uint32_t(t)); }

// The kernels' block format of a quantized type, or none (plain and unread types).
std::optional<BlockFormat> block_format(GgmlType t);

// n: a multiple of the type's block_elements; src holds n / block_elements blocks.
void dequantize_row(GgmlType type, const std::byte* src, int64_t n, float* out);

}  // namespace kvscope
