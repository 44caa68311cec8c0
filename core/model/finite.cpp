#include "model/finite.h"

#include <algorithm>
#include <cstring>

namespace kvscope {
namespace {

// Values whose exponent field is all ones. Blocks of 1024 OR a flag with no branch inside (the loop
// vectorises); only a block that has one is searched again for the index.
template <typename Bits, Bits kExponent>
int64_t first_in(const std::byte* data, int64_t n) {
    constexpr int64_t kBlock = 1024;
    Bits block[kBlock];
    for (int64_t start = 0; start < n; start += kBlock) {
        const int64_t m = std::min(kBlock, n - start);
        std::memcpy(block, data + start * int64_t(sizeof(Bits)), size_t(m) * sizeof(Bits));  // any alignment
        Bits any = 0;
        for (int64_t i = 0; i < m; ++i) any |= Bits((block[i] & kExponent) == kExponent);
        if (!any) continue;
        for (int64_t i = 0; i < m; ++i)
            if ((block[i] & kExponent) == kExponent) return start + i;
    }
    return -1;
}

}  // namespace

int64_t first_non_finite(const std::byte* data, Dtype dtype, int64_t n) {
    switch (dtype) {
    case Dtype::F32: return first_in<uint32_t, 0x7f800000u>(data, n);
    case Dtype::F16: return first_in<uint16_t, 0x7c00u>(data, n);
    case Dtype::BF16: return first_in<uint16_t, 0x7f80u>(data, n);
    default:
        // A block's weights are finite exactly when its float16 scale (and minimum) are: its first weight.
        if (const std::optional<BlockFormat> f = block_format(dtype)) return first_non_finite_block(*f, data, n);
        return -1;  // not a dtype kvscope computes with (weights.cpp refuses those by name)
    }
}

bool all_finite(const float* x, int64_t n) {
    return first_non_finite(reinterpret_cast<const std::byte*>(x), Dtype::F32, n) < 0;
}

}  // namespace kvscope
