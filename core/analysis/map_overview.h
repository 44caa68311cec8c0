#pragma once
// Overviews of attention maps larger than the screen. An 8192-token prefill's map of one head has 67
// million cells; the window has about a million pixels for all of them. Averaging (or sampling) cells
// into pixels would let a single strong key vanish, so each texel keeps the strongest cell of its block:
// the visible value with the largest magnitude, its sign kept (for softmax weights, which are >= 0, the
// maximum; for signed scores the one farthest from 0). Masked cells never count; a block with no visible
// cell is masked. A window of the map pooled in 1x1 blocks holds the exact cells.
//
//   MapWindow                         cells row0.. x col0.. of a map, pooled in blocks of block_rows x block_cols
//   MapWindow::whole(rows, cols, px_rows, px_cols)   the whole map in the smallest blocks that give at most
//                                     px_rows x px_cols texels
//   MapWindow::detail(...)            the cells a zoomed view shows (plus a margin), blocks a power of two
//   PooledMap                         the texels of one window: values, visibility, the largest |value|
//   PooledMap(window)                 empty texels, ready for pool_row
//   pool_row(out, row, values, visible)   fold one map row (every column) into the texels
//   max_pool(values, visible, rows, cols, window)  a dense (rows, cols) map pooled (small maps, tests)
//   pooled_attention(rows, values, row_norm, window, cancel)   one head's map row by row (AttentionRows),
//                                     never holding more than a row: scores or softmax weights, each row
//                                     optionally divided by its largest |visible value| first
//   pooled_mask(record, layer, first_query, first_key, n_key, window)   the mask alone (no attention)
//   visible_cells(record, layer, first_query, n_query, first_key, n_key)  how many cells the mask shows
//
// Shapes: R = the map's rows (queries), P = its columns (keys); a window's texels are
// (out_rows(), out_cols()), at most R x P.
#include <atomic>
#include <cstdint>
#include <vector>

#include "run/trace.h"

namespace kvscope {

struct MapWindow {
    int64_t row0 = 0, col0 = 0;            // first cell
    int64_t n_rows = 0, n_cols = 0;        // cells covered (the last block may be partial)
    int64_t block_rows = 1, block_cols = 1;// cells per texel along each axis
    int64_t out_rows() const { return (n_rows + block_rows - 1) / block_rows; }
    int64_t out_cols() const { return (n_cols + block_cols - 1) / block_cols; }
    bool exact() const { return block_rows == 1 && block_cols == 1; }
    bool covers(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {  // cells r0..r1-1 x c0..c1-1
        return r0 >= row0 && r1 <= row0 + n_rows && c0 >= col0 && c1 <= col0 + n_cols;
    }
    bool operator==(const MapWindow&) const = default;

    static MapWindow whole(int64_t rows, int64_t cols, int64_t px_rows, int64_t px_cols);
    // Cells r0..r1-1 x c0..c1-1 of a (rows, cols) map shown on px_rows x px_cols pixels: blocks the smallest
    // power of two that keeps a texel no smaller than a pixel, the window widened by a quarter of the
    // shown span on each side (small pans reuse it) and aligned to the blocks.
    static MapWindow detail(int64_t rows, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                            int64_t px_rows, int64_t px_cols);
};

struct PooledMap {
    MapWindow window;
    std::vector<float> values;    // (out_rows, out_cols) strongest visible value of each block; 0 when none
    std::vector<uint8_t> visible; // (out_rows, out_cols) 1 = some cell of the block is visible
    float absmax = 0;             // largest |value| over the visible cells folded in
    PooledMap() = default;
    explicit PooledMap(const MapWindow& w);
    int64_t bytes() const { return int64_t(values.size() * sizeof(float) + visible.size()); }
};

// Row `row` of the map (values and visible hold every column, 0..P-1); rows outside the window are skipped.
void pool_row(PooledMap& out, int64_t row, const float* values, const uint8_t* visible);
PooledMap max_pool(const float* values, const uint8_t* visible, int64_t rows, int64_t cols, const MapWindow& w);

enum class MapValues { Weights, Scores };
// Returns early (texels partly filled) once *cancel turns true.
PooledMap pooled_attention(const AttentionRows& rows, MapValues values, bool row_norm, const MapWindow& w,
                           const std::atomic<bool>* cancel = nullptr);
PooledMap pooled_mask(const StepRecord& record, int64_t layer, int64_t first_query, int64_t first_key, int64_t n_key,
                      const MapWindow& w);
int64_t visible_cells(const StepRecord& record, int64_t layer, int64_t first_query, int64_t n_query, int64_t first_key,
                      int64_t n_key);

}  // namespace kvscope
