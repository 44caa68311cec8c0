#pragma once
// Quantized K/V formats as pure functions: float32 rows in, packed bytes out, and back. The exact
// definitions (byte layout, scale dtype, rounding, edge cases) are docs/engine.md's "Quantized K/V";
// tests/reference/kv_quant_reference.py implements the same definitions independently in numpy.
//
// D = head dim, G = group size, all little-endian. Every division, product and sum is one float32
// operation (this file is compiled with -ffp-contract=off: no fused multiply-add).
//
//   KvQuant                          none | int8 | int4 | fp8
//   KvQuantSpec{format, group, residual}   a format with the int4 KIVI parameters G and R
//   parse_kv_quant(name)             "none" | "int8" | "int4" | "fp8"; throws UsageError otherwise
//   validate(spec, D)                throws UsageError: G <= 0, G not dividing D, odd D for int4, R < 0
//   row_bytes(format, D)             int8 / fp8: bytes of one packed (D) row = D codes + float32 scale
//   quantize_row(format, x, D, out)  int8 / fp8, per token: (D) floats -> row_bytes bytes
//   dequantize_row(format, in, D, out)   row_bytes bytes -> (D) floats
//   fp8_e4m3_encode(y) / fp8_e4m3_decode(c)   OCP e4m3fn, round to nearest even, saturating at ±448
//   int4_value_row_bytes(D, G)       KIVI values, per token in groups of G channels
//   quantize_int4_values(x, D, G, out) / dequantize_int4_values(in, D, G, out)
//   int4_key_group_bytes(D, G)       KIVI keys, per channel over a group of G positions
//   quantize_int4_keys(x, G, D, out) / dequantize_int4_keys(in, G, D, out)   x, out: (G, D)
//   dequantize_int4_key_row(in, G, D, i, out)   row i of a key group only: (D), the same floats
//   int4_residual_boundary(n, spec)  positions below it are quantized once n are written: ⌊(n − R)/G⌋·G
#include <cstdint>
#include <string>
#include <string_view>

namespace kvscope {

enum class KvQuant { None, Int8, Int4, Fp8 };

struct KvQuantSpec {
    KvQuant format = KvQuant::None;
    int64_t group = 32;     // G (int4): positions per key group, channels per value group
    int64_t residual = 0;   // R (int4): the most recent R positions stay float32 (then up to G-1 more)
    bool quantized() const { return format != KvQuant::None; }
};

KvQuant parse_kv_quant(std::string_view name);
const char* to_string(KvQuant format);
void validate(const KvQuantSpec& spec, int64_t head_dim);

int64_t row_bytes(KvQuant format, int64_t D);
void quantize_row(KvQuant format, const float* x, int64_t D, uint8_t* out);
void dequantize_row(KvQuant format, const uint8_t* in, int64_t D, float* out);

uint8_t fp8_e4m3_encode(float y);
float fp8_e4m3_decode(uint8_t c);

int64_t int4_value_row_bytes(int64_t D, int64_t G);
void quantize_int4_values(const float* x, int64_t D, int64_t G, uint8_t* out);
void dequantize_int4_values(const uint8_t* in, int64_t D, int64_t G, float* out);
int64_t int4_key_group_bytes(int64_t D, int64_t G);
void quantize_int4_keys(const float* x, int64_t G, int64_t D, uint8_t* out);
void dequantize_int4_keys(const uint8_t* in, int64_t G, int64_t D, float* out);
void dequantize_int4_key_row(const uint8_t* in, int64_t G, int64_t D, int64_t i, float* out);
int64_t int4_residual_boundary(int64_t n, const KvQuantSpec& spec);

}  // namespace kvscope
