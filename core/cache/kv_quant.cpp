#include "cache/kv_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/errors.h"

namespace kvscope {

KvQuant parse_kv_quant(std::string_view name) {
    if (name == "none") return KvQuant::None;
    if (name == "int8") return KvQuant::Int8;
    if (name == "int4") return KvQuant::Int4;
    if (name == "fp8") return KvQuant::Fp8;
    throw UsageError("{kv_quant} must be none, int8, int4 or fp8, got '" + std::string(name) + "'");
}

const char* to_string(KvQuant format) {
    switch (format) {
        case KvQuant::Int8: return "int8";
        case KvQuant::Int4: return "int4";
        case KvQuant::Fp8: return "fp8";
        default: return "none";
    }
}

void validate(const KvQuantSpec& spec, int64_t head_dim) {
    if (spec.group <= 0) throw UsageError("{kv_group} must be >= 1, got " + std::to_string(spec.group));
    if (spec.residual < 0) throw UsageError("{kv_residual} must be >= 0, got " + std::to_string(spec.residual));
    if (spec.format != KvQuant::Int4) return;
    if (head_dim % 2) throw UsageError("int4 K/V packs two values a byte: head_dim " + std::to_string(head_dim) + " is odd");
    if (head_dim % spec.group)
        throw UsageError("{kv_group} " + std::to_string(spec.group) + " does not divide head_dim " + std::to_string(head_dim));
}

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void put_f32(uint8_t* out, float f) { std::memcpy(out, &f, sizeof f); }
float get_f32(const uint8_t* in) {
    float f;
    std::memcpy(&f, in, sizeof f);
    return f;
}

// The per-token scale absmax / qmax; NaN when a value is not finite (the row then decodes to NaN).
float absmax_scale(const float* x, int64_t D, float qmax) {
    float m = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
        if (!std::isfinite(x[d])) return kNaN;
        m = std::max(m, std::fabs(x[d]));
    }
    return m / qmax;
}

// Asymmetric 4-bit: codes 0..15 over [min, max] of n values `stride` apart. ±0 compare equal, so the
// min is normalised to +0 (min + 0) to make it independent of the order values are visited in.
struct MinScale {
    float min, scale;
};

MinScale min_scale(const float* x, int64_t n, int64_t stride) {
    float lo = x[0], hi = x[0];
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i * stride];
        if (!std::isfinite(v)) return {kNaN, kNaN};
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    const float range = hi - lo;
    if (!std::isfinite(range)) return {kNaN, kNaN};  // finite values whose range overflows float32
    return {lo + 0.0f, range / 15.0f};
}

uint8_t code4(float x, MinScale s) {
    if (!(s.scale > 0.0f)) return 0;  // constant group (scale 0) or NaN
    return uint8_t(std::clamp(std::nearbyint((x - s.min) / s.scale), 0.0f, 15.0f));
}

float value4(uint8_t q, MinScale s) { return float(q) * s.scale + s.min; }

void put_nibble(uint8_t* codes, int64_t i, uint8_t q) {
    uint8_t& b = codes[i / 2];
    b = i % 2 ? uint8_t((b & 0x0F) | (q << 4)) : uint8_t((b & 0xF0) | q);
}
uint8_t get_nibble(const uint8_t* codes, int64_t i) { return i % 2 ? codes[i / 2] >> 4 : codes[i / 2] & 0x0F; }

}  // namespace

uint8_t fp8_e4m3_encode(float y) {
    if (std::isnan(y)) return 0x7F;
    const uint8_t sign = std::signbit(y) ? 0x80 : 0x00;
    const float a = std::fabs(y);
    if (a >= 448.0f) return sign | 0x7E;  // saturate: no inf in e4m3fn, 0x7F is NaN
    if (a < 0x1p-6f) return sign | uint8_t(std::nearbyint(a * 512.0f));  // subnormals 2^-9 apart; 8 = 2^-6
    int e;
    std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1): unbiased exponent e - 1
    int E = e - 1;
    int m = int(std::nearbyint(std::ldexp(a, 3 - E)));  // 8..16: 1.mmm scaled by 8
    if (m == 16) ++E, m = 8;
    return uint8_t(sign | ((E + 7) << 3) | (m - 8));
}

float fp8_e4m3_decode(uint8_t c) {
    const int E = (c >> 3) & 0x0F, M = c & 0x07;
    if (E == 15 && M == 7) return kNaN;
    const float a = E == 0 ? std::ldexp(float(M), -9) : std::ldexp(float(8 + M), E - 10);
    return c & 0x80 ? -a : a;
}

int64_t row_bytes(KvQuant format, int64_t D) {
    switch (format) {
        case KvQuant::Int8:
        case KvQuant::Fp8: return D + 4;
        default: return D * 4;
    }
}

void quantize_row(KvQuant format, const float* x, int64_t D, uint8_t* out) {
    const bool int8 = format == KvQuant::Int8;
    const float scale = absmax_scale(x, D, int8 ? 127.0f : 448.0f);
    for (int64_t d = 0; d < D; ++d) {
        if (!(scale > 0.0f)) out[d] = 0;  // all zero (or too small to scale), or NaN
        else if (int8) out[d] = uint8_t(int8_t(std::clamp(std::nearbyint(x[d] / scale), -127.0f, 127.0f)));
        else out[d] = fp8_e4m3_encode(x[d] / scale);
    }
    put_f32(out + D, scale);
}

void dequantize_row(KvQuant format, const uint8_t* in, int64_t D, float* out) {
    const float scale = get_f32(in + D);
    if (format == KvQuant::Int8)
        for (int64_t d = 0; d < D; ++d) out[d] = float(int8_t(in[d])) * scale;
    else {
        // Every read of an fp8 cache dequantizes each row it sees: the 256 values come from a table.
        static const std::array<float, 256> kValues = [] {
            std::array<float, 256> t{};
            for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8_e4m3_decode(uint8_t(c));
            return t;
        }();
        for (int64_t d = 0; d < D; ++d) out[d] = kValues[in[d]] * scale;
    }
}

int64_t int4_value_row_bytes(int64_t D, int64_t G) { return D / 2 + D / G * 8; }

void quantize_int4_values(const float* x, int64_t D, int64_t G, uint8_t* out) {
    uint8_t* stats = out + D / 2;  // (D/G, 2) float32: min, scale per group of G channels
    for (int64_t g = 0; g < D / G; ++g) {
        const MinScale s = min_scale(x + g * G, G, 1);
        put_f32(stats + g * 8, s.min);
        put_f32(stats + g * 8 + 4, s.scale);
        for (int64_t d = g * G; d < (g + 1) * G; ++d) put_nibble(out, d, code4(x[d], s));
    }
}

void dequantize_int4_values(const uint8_t* in, int64_t D, int64_t G, float* out) {
    const uint8_t* stats = in + D / 2;
    for (int64_t g = 0; g < D / G; ++g) {
        const MinScale s{get_f32(stats + g * 8), get_f32(stats + g * 8 + 4)};
        for (int64_t d = g * G; d < (g + 1) * G; ++d) out[d] = value4(get_nibble(in, d), s);
    }
}

int64_t int4_key_group_bytes(int64_t D, int64_t G) { return G * D / 2 + D * 8; }

void quantize_int4_keys(const float* x, int64_t G, int64_t D, uint8_t* out) {
    uint8_t* stats = out + G * D / 2;  // (D, 2) float32: min, scale per channel over the G positions
    for (int64_t d = 0; d < D; ++d) {
        const MinScale s = min_scale(x + d, G, D);
        put_f32(stats + d * 8, s.min);
        put_f32(stats + d * 8 + 4, s.scale);
        for (int64_t i = 0; i < G; ++i) put_nibble(out, i * D + d, code4(x[i * D + d], s));
    }
}

void dequantize_int4_keys(const uint8_t* in, int64_t G, int64_t D, float* out) {
    for (int64_t i = 0; i < G; ++i) dequantize_int4_key_row(in, G, D, i, out + i * D);
}

void dequantize_int4_key_row(const uint8_t* in, int64_t G, int64_t D, int64_t i, float* out) {
    const uint8_t* stats = in + G * D / 2;
    for (int64_t d = 0; d < D; ++d)
        out[d] = value4(get_nibble(in, i * D + d), MinScale{get_f32(stats + d * 8), get_f32(stats + d * 8 + 4)});
}

int64_t int4_residual_boundary(int64_t n, const KvQuantSpec& spec) {
    return std::max<int64_t>(0, (n - spec.residual) / spec.group * spec.group);
}

}  // namespace kvscope
