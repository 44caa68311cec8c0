// matmul_nk_shared on matrices of blocks (quant_blocks.h; K a multiple of each format's elements): which
// kernel runs for which format and row count. The integer formats are dotted against x quantized once per
// fork (block_rows.h): the K formats' group kernel (integer_rows) for every T, or their panels
// (super_block_panels) where the matrix was packed at load; Q4_0, Q5_0 and Q8_0 the group kernel
// (integer_rows32) in decode and the smallest batches, packed panels (integer_panels) from kPanelTokens rows of
// x where the build has them, and for every T where the matrix was packed in panels at load (BlockOrder::Panels).
// Q4_1 and Q5_1 are a float32 kernel's arithmetic on the dequantized weights: prefill packs their exact float copy (block_prefill, matmul_nk.cpp), decode and small
// batches dequantize a group's 4 rows as they go (block_rows.h), or run on the group's float copy
// (block_batch_group); a matrix of those formats gives its float32 copy's bits.
#include "kernels/matmul_blocks.h"

#include <algorithm>
#include <array>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/block_rows.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

constexpr bool kPortable = KVSCOPE_PORTABLE;

// Every target's groups of 4 rows, numbered one target after the other: each thread streams its own run of
// groups, then takes pieces of about piece_bytes from the end of the other's (parallel_ranges), as
// decode_groups and tile_groups do; group(target, n0, count) for each.
template <class Group>
void block_groups(int64_t K, std::span<const MatmulTarget> targets, int64_t piece_bytes, const Group& group) {
    constexpr int CT = 4;
    std::array<int64_t, kMaxSharedTargets + 1> first_group{};  // target j's groups: [first_group[j], first_group[j + 1])
    int64_t group_bytes = 1;  // the largest of the targets' groups
    for (size_t j = 0; j < targets.size(); ++j) {
        first_group[j + 1] = first_group[j] + (targets[j].N + CT - 1) / CT;
        const BlockLayout layout = block_layout(targets[j].w.blocks.format);
        group_bytes = std::max(group_bytes, CT * (K / layout.elements) * layout.bytes);
    }
    ThreadPool::global().parallel_ranges(first_group[targets.size()], std::max<int64_t>(1, piece_bytes / group_bytes),
                                         [&](int64_t begin, int64_t end) {
        size_t j = 0;
        for (int64_t g = begin; g < end; ++g) {
            while (g >= first_group[j + 1]) ++j;
            const int64_t n0 = (g - first_group[j]) * CT;
            group(targets[j], n0, std::min<int64_t>(CT, targets[j].N - n0));
        }
    });
}

void matmul_nk_blocks_float(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets);
constexpr int64_t kIntegerTokens = 64;
// From this many rows of x on, Q4_0, Q5_0 and Q8_0 run in packed panels where the build has them: packing
// costs about 3.5 passes of a decode row, and the panels' rows of x cost a third of the group kernel's. One
// matrix K 2048 x N 1024 in cache, AMD EPYC Zen 4, 1 thread, us, group kernel -> panels: Q8_0 4 rows 192 ->
// 272, 8 rows 372 -> 332, 16 rows 732 -> 428; Q4_0 8 rows 427 -> 328.
constexpr int64_t kPanelTokens = 8;

bool super_blocks(BlockFormat f) { return block_layout(f).elements == 256; }

// x (T, K) quantized once for the fork, as each integer target needs it: Q8_K for the K formats, X8Rows for
// Q4_0, Q5_0 and Q8_0 (block_rows.h); null where no target does.
struct QuantizedX {
    const Q8KBlock* q8k = nullptr;
    const X8Rows* x8 = nullptr;
};
QuantizedX quantized_x(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets) {
    bool any_k = false, any_32 = false;
    for (const MatmulTarget& t : targets) {
        if (!integer_format(t.w.blocks.format)) continue;
        (super_blocks(t.w.blocks.format) ? any_k : any_32) = true;
    }
    QuantizedX out;
    if (any_k) {
        thread_local std::vector<Q8KBlock> storage;
        const int64_t KB = K / 256;
        if (int64_t(storage.size()) < T * KB) storage.resize(size_t(T * KB));
        Q8KBlock* xq = storage.data();
        if (T == 1) quantize_q8k(xq, x, K);
        else ThreadPool::global().parallel_for(T, [&](int64_t t) { quantize_q8k(xq + t * KB, x + t * K, K); });
        out.q8k = xq;
    }
    if (any_32) {
        thread_local std::vector<int8_t> q;
        thread_local std::vector<float> d;
        thread_local std::vector<int32_t> sums;
        thread_local X8Rows rows;
        const int64_t KB = K / 32;
        if (int64_t(q.size()) < T * K) q.resize(size_t(T * K));
        if (int64_t(d.size()) < T * KB) d.resize(size_t(T * KB)), sums.resize(size_t(T * KB));
        rows = {q.data(), d.data(), sums.data(), K};
        const X8Rows to = rows;  // the workers' own thread_local rows are not this thread's
        if (T == 1) quantize_x8(to, 0, x, K);
        else ThreadPool::global().parallel_for(T, [&](int64_t t) { quantize_x8(to, t, x + t * K, K); });
        out.x8 = &rows;
    }
    return out;
}

// One group's integer rows (up to 4 rows from n0) for T rows of x.
void integer_group(const QuantizedX& xq, int64_t T, int64_t K, const MatmulTarget& t, int64_t n0, int64_t count) {
    if (super_blocks(t.w.blocks.format)) integer_rows(t.y, xq.q8k, T, t.w.blocks, t.bias, K, t.N, n0, count);
    else integer_rows32(t.y, *xq.x8, T, t.w.blocks, t.bias, K, t.N, n0, count);
}

// The panels of every target, numbered one target after the other, split between the threads
// (parallel_ranges): each packs a panel once (or finds it packed at load) and runs all T rows of x against it.
// A K-format matrix in panels has super_block_panel_rows(f) rows a panel, the others integer_panel_rows() (not
// panel_rows(f): Q5_0 is packed here, on every call, though never at load).
void panel_targets(const QuantizedX& xq, int64_t T, int64_t K, std::span<const MatmulTarget> targets) {
    std::array<int64_t, kMaxSharedTargets + 1> first_panel{};
    std::array<int64_t, kMaxSharedTargets> rows{};
    for (size_t j = 0; j < targets.size(); ++j) {
        const BlockFormat f = targets[j].w.blocks.format;
        rows[j] = super_blocks(f) ? super_block_panel_rows(f) : integer_panel_rows();
        first_panel[j + 1] = first_panel[j] + (targets[j].N + rows[j] - 1) / rows[j];
    }
    ThreadPool::global().parallel_ranges(first_panel[targets.size()], 1, [&](int64_t begin, int64_t end) {
        size_t j = 0;
        for (int64_t p = begin; p < end; ++p) {
            while (p >= first_panel[j + 1]) ++j;
            const MatmulTarget& t = targets[j];
            const int64_t n0 = (p - first_panel[j]) * rows[j], count = std::min(rows[j], t.N - n0);
            if (super_blocks(t.w.blocks.format)) super_block_panels(t.y, xq.q8k, T, t.w.blocks, t.bias, K, t.N, n0, count);
            else integer_panels(t.y, *xq.x8, T, t.w.blocks, t.bias, K, t.N, n0, count);
        }
    });
}

// The formats dotted in float32 (all but the integer ones).
void matmul_nk_blocks_float(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets) {
    if (!kPortable && T >= kPrefillRows) {  // prefill
        block_prefill(x, T, K, targets);
        return;
    }
    if (T == 1) {
        block_groups(K, targets, int64_t(32) << 10, [&](const MatmulTarget& t, int64_t n0, int64_t count) {
            block_rows(t.y, x, t.w.blocks, t.bias, K, n0, count);
        });
        return;
    }
    block_groups(K, targets, int64_t(128) << 10, [&](const MatmulTarget& t, int64_t n0, int64_t count) {
        block_batch_group(x, T, K, t, n0, count);
    });
}

}  // namespace

void matmul_nk_blocks(const float* x, int64_t T, int64_t K, std::span<const MatmulTarget> targets) {
    const QuantizedX xq = quantized_x(x, T, K, targets);
    if (!xq.q8k && !xq.x8) return matmul_nk_blocks_float(x, T, K, targets);
    const bool panels = integer_panel_rows() > 0 && T >= kPanelTokens;
    auto by_rows = [&](const MatmulTarget& t) {
        if (!integer_format(t.w.blocks.format) || t.w.blocks.order == BlockOrder::Panels) return false;
        return super_blocks(t.w.blocks.format) || !panels;
    };
    const bool all_rows = std::all_of(targets.begin(), targets.end(), by_rows);
    const bool any_panels = std::any_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) {
        return integer_format(t.w.blocks.format) && !by_rows(t);
    });
    if (T <= kIntegerTokens && !any_panels && (all_rows || T < kPrefillRows)) {  // decode, small batches: one fork
        block_groups(K, targets, int64_t(T == 1 ? 32 : 128) << 10, [&](const MatmulTarget& t, int64_t n0, int64_t count) {
            if (integer_format(t.w.blocks.format)) integer_group(xq, T, K, t, n0, count);
            else if (T == 1) block_rows(t.y, x, t.w.blocks, t.bias, K, n0, count);
            else block_batch_group(x, T, K, t, n0, count);
        });
        return;
    }
    // Prefill (and Q4_0, Q5_0, Q8_0 batches): the float formats packed, Q4_0, Q5_0 and Q8_0 in panels, the K
    // formats kIntegerTokens rows of x at a time (their quantized rows stay in L2 while every group of weight rows passes over them).
    std::array<MatmulTarget, kMaxSharedTargets> of_rows, of_panels;
    size_t n_rows = 0, n_panels = 0;
    for (const MatmulTarget& t : targets) {
        if (!integer_format(t.w.blocks.format)) matmul_nk_blocks_float(x, T, K, {&t, 1});
        else if (by_rows(t)) of_rows[n_rows++] = t;
        else of_panels[n_panels++] = t;
    }
    if (n_panels) panel_targets(xq, T, K, std::span<const MatmulTarget>(of_panels.data(), n_panels));
    if (!n_rows) return;
    for (int64_t t0 = 0; t0 < T; t0 += kIntegerTokens) {
        const int64_t rows = std::min(kIntegerTokens, T - t0);
        block_groups(K, std::span<const MatmulTarget>(of_rows.data(), n_rows), int64_t(32) << 10,
                     [&](const MatmulTarget& t, int64_t n0, int64_t count) {
            if (super_blocks(t.w.blocks.format)) {
                integer_rows(t.y + t0 * t.N, xq.q8k + t0 * (K / 256), rows, t.w.blocks, t.bias, K, t.N, n0, count);
            } else {
                const X8Rows& x8 = *xq.x8;
                const X8Rows from_t0{x8.q + t0 * K, x8.d + t0 * (K / 32), x8.sums + t0 * (K / 32), K};
                integer_rows32(t.y + t0 * t.N, from_t0, rows, t.w.blocks, t.bias, K, t.N, n0, count);
            }
        });
    }
}

}  // namespace kvscope
