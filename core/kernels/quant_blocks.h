#pragma once
// Weights stored as ggml's quantized blocks (the blocks of a GGUF file), computed on where they lie: a row of
// a matrix (N, K) is K / elements blocks in the file's order, at any even byte offset. Each block holds a
// float16 scale (and minimum) with small integers; dequantizing it is exact but for at most one rounding,
// so a kernel given the dequantized values computes the bits it computes on the dequantized float32 matrix.
//
//   block_layout(f)                        weights and bytes per block, and ggml's name of the format
//   dequantize_reference(f, src, n, out)   n weights (whole blocks) -> float32 with the float operations of
//                                          ggml's reference dequantizers, in their order, one at a time
//   dequantize_blocks(f, src, n, out)      the same bits, vectorized where this build has a kernel for f
//                                          (all but Q5_K; AVX-512 and AVX2), else the reference
//   integer_format(f)                      f is dotted in integers against x quantized to 8 bits (block_rows.h),
//                                          as llama.cpp does: Q4_0, Q5_0, Q8_0 and the K formats; Q4_1 and
//                                          Q5_1 are computed in float32 on their exactly dequantized weights
//   quantize_q8k(out, x, K)                x (K, a multiple of 256) as K / 256 Q8KBlocks: x quantized for
//                                          the integer dot products of the K formats (block_rows.h)
//   quantize_x8(out, t, x, K)              x's row t (K, a multiple of 32) into out: quantized per 32 values
//                                          for Q4_0, Q5_0 and Q8_0 (X8Rows)
//   first_non_finite_block(f, src, n)      the first weight of the first block whose scale or minimum is not
//                                          finite (every weight of it is not), or -1; finite scales give
//                                          finite weights (|w| < 2^30)
//
// Layouts (bytes in order; d, m, dmin float16; a weight w from its small integer q):
//   Q4_0  d, 16 x (two 4-bit q)                w = (q - 8) · d          low nibbles: weights 0-15, high: 16-31
//   Q4_1  d, m, 16 x (two 4-bit q)             w = q · d + m
//   Q5_0  d, 32 high bits, 16 x nibbles        w = ((q | high << 4) - 16) · d
//   Q5_1  d, m, 32 high bits, 16 x nibbles     w = (q | high << 4) · d + m
//   Q8_0  d, 32 x int8                         w = q · d
//   Q4_K  d, dmin, 12 bytes of eight 6-bit (scale, min) pairs, 128 x nibbles: 256 weights in 4 runs of 64,
//         each run's 32 bytes giving their low nibbles to its first 32 weights and high nibbles to the next;
//         per 32 weights j: w = (d · scale_j) · q - dmin · min_j
//   Q5_K  as Q4_K with 32 bytes of fifth bits before the nibbles (bit 2r and 2r+1 for run r's halves)
//   Q6_K  128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (one per 16 weights), d:
//         w = (d · scale) · (q - 32)
// Every product above is exact in float32 (an 11-bit float16 significand times at most 12 bits of integers);
// only Q4_1, Q5_1, Q4_K and Q5_K round once, at the addition, which a fused multiply-add rounds alike.
#include <cstddef>
#include <cstdint>

namespace kvscope {

enum class BlockFormat : uint8_t { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K };
constexpr int kBlockFormats = 8;

struct BlockLayout {
    const char* name;  // ggml's spelling: "Q4_K"
    int64_t elements;  // weights per block: 32, or 256 for the K formats
    int64_t bytes;     // bytes per block
};
BlockLayout block_layout(BlockFormat f);

// How a matrix's blocks lie: row after row as the file has them, or packed at load in panels of
// panel_rows(f) rows: panel p holds rows [p R, p R + R), its blocks in order, each the R rows' weights side by
// side in runs of 4 and then their R float16 scales (block_panels.cpp; the K formats' heads and scales are
// laid out, and Q6_K's 6-bit weights re-encoded, in super_block_panels.cpp). The same bytes in number,
// so a matrix in panels is resident at its file size; the kernels read the panels with one stream a thread
// and without the per-call packing of prefill and batches, and compute the same bits (block_rows.h).
enum class BlockOrder : uint8_t { Rows, Panels };

// A matrix (N, K) of blocks: N rows of K / elements blocks each.
struct BlockMatrix {
    BlockFormat format = BlockFormat::Q8_0;
    const std::byte* data = nullptr;
    BlockOrder order = BlockOrder::Rows;
};

// The rows in a panel when this build packs a matrix of f in panels at load, or 0 where it keeps rows: Q4_0 and
// Q8_0 with AVX-512 VNNI (32) or AVX2 (16), Q4_K and Q6_K with AVX-512 VNNI (16); the portable build keeps rows,
// as do Q5_0 (its unpacked fifth bits would take 1.6 times the file's bytes), Q5_K, Q4_1 and Q5_1.
int64_t panel_rows(BlockFormat f);
// w (N, K) in rows becomes the same matrix in panels, in place (N a multiple of panel_rows(f) > 0): a panel
// takes the bytes its rows had. The threads share the panels.
void pack_panels(std::byte* w, BlockFormat f, int64_t N, int64_t K);
// Row `row` of a matrix in panels (K weights) as the file had its blocks: out gets the row's blocks, the bytes
// the row had before pack_panels (an embedding lookup dequantizes them as any row of blocks).
void panel_row_blocks(std::byte* out, BlockFormat f, const std::byte* panels, int64_t K, int64_t row);

// 256 values of x as 8-bit integers, ggml's Q8_K: amax = max |x|, q = round-half-even(x · (127 / amax))
// (|q| <= 127), d = amax / 127, and the sums of each 16 and each 32 q. amax below 2^-120 (0, or too small for 127 / amax)
// gives d = 0 and every q 0; a value that is not finite gives d = NaN and every q 0, so each output it
// reaches is NaN (an error, never a token).
struct Q8KBlock {
    alignas(64) int8_t q[256];
    int16_t sums[16];
    float d;
    int16_t sums32[8];  // the sum of each 32 q (sums in pairs): what the Q4_K and Q5_K mins meet
};

// Rows of x (T, K) quantized per 32 values for the 32-weight integer formats, each 32 as a Q8KBlock's 256 (the
// same integers, scale and special cases, from the 32's own amax): ggml's Q8_0 with a float32 scale. Row t's
// block b is q[t K + 32 b ..] (32 int8), d[t K / 32 + b] and sums[t K / 32 + b] (the sum of its q): the
// integers apart from the scales, so a kernel loads 64 or 4 of them at once.
struct X8Rows {
    int8_t* q;       // (T, K)
    float* d;        // (T, K / 32)
    int32_t* sums;   // (T, K / 32)
    int64_t K;
};

// n: a multiple of the format's elements.
void dequantize_reference(BlockFormat f, const std::byte* src, int64_t n, float* out);
void dequantize_blocks(BlockFormat f, const std::byte* src, int64_t n, float* out);
bool integer_format(BlockFormat f);
void quantize_q8k(Q8KBlock* out, const float* x, int64_t K);
void quantize_x8(const X8Rows& out, int64_t t, const float* x, int64_t K);
int64_t first_non_finite_block(BlockFormat f, const std::byte* src, int64_t n);

}  // namespace kvscope
