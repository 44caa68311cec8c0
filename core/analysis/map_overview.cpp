#include "analysis/map_overview.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace kvscope {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t pow2_at_least(int64_t n) {
    int64_t p = 1;
    while (p < n) p *= 2;
    return p;
}

// One axis of MapWindow::detail: cells lo..hi-1 of n shown on px pixels -> (first, count, block).
void detail_axis(int64_t n, int64_t lo, int64_t hi, int64_t px, int64_t& first, int64_t& count, int64_t& block) {
    lo = std::clamp<int64_t>(lo, 0, n);
    hi = std::clamp<int64_t>(hi, lo, n);
    const int64_t shown = std::max<int64_t>(1, hi - lo);
    block = pow2_at_least(ceil_div(shown, std::max<int64_t>(1, px)));
    const int64_t margin = shown / 4;
    first = std::max<int64_t>(0, lo - margin) / block * block;
    count = std::min(n, hi + margin) - first;
}

}  // namespace

MapWindow MapWindow::whole(int64_t rows, int64_t cols, int64_t px_rows, int64_t px_cols) {
    MapWindow w;
    w.n_rows = rows;
    w.n_cols = cols;
    w.block_rows = std::max<int64_t>(1, ceil_div(rows, std::max<int64_t>(1, px_rows)));
    w.block_cols = std::max<int64_t>(1, ceil_div(cols, std::max<int64_t>(1, px_cols)));
    return w;
}

MapWindow MapWindow::detail(int64_t rows, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                            int64_t px_rows, int64_t px_cols) {
    MapWindow w;
    detail_axis(rows, r0, r1, px_rows, w.row0, w.n_rows, w.block_rows);
    detail_axis(cols, c0, c1, px_cols, w.col0, w.n_cols, w.block_cols);
    return w;
}

PooledMap::PooledMap(const MapWindow& w)
    : window(w), values(size_t(w.out_rows() * w.out_cols()), 0.0f), visible(size_t(w.out_rows() * w.out_cols()), 0) {}

void pool_row(PooledMap& out, int64_t row, const float* values, const uint8_t* visible) {
    const MapWindow& w = out.window;
    if (row < w.row0 || row >= w.row0 + w.n_rows) return;
    const int64_t cols = w.out_cols();
    float* texel_values = out.values.data() + (row - w.row0) / w.block_rows * cols;
    uint8_t* texel_visible = out.visible.data() + (row - w.row0) / w.block_rows * cols;
    for (int64_t c = w.col0; c < w.col0 + w.n_cols; ++c) {
        if (visible && !visible[c]) continue;
        const float v = values[c], a = std::fabs(v);
        const int64_t t = (c - w.col0) / w.block_cols;
        const float cur = texel_values[t], b = std::fabs(cur);
        // The strongest cell wins; between +x and -x the positive one, so the result does not depend on
        // the order cells arrive in.
        if (!texel_visible[t] || a > b || (a == b && v > cur)) {
            texel_values[t] = v;
            texel_visible[t] = 1;
        }
        out.absmax = std::max(out.absmax, a);
    }
}

PooledMap max_pool(const float* values, const uint8_t* visible, int64_t rows, int64_t cols, const MapWindow& w) {
    assert(w.row0 + w.n_rows <= rows && w.col0 + w.n_cols <= cols && "the window must lie inside the map");
    (void)rows;
    PooledMap out(w);
    for (int64_t r = w.row0; r < w.row0 + w.n_rows; ++r)
        pool_row(out, r, values + r * cols, visible ? visible + r * cols : nullptr);
    return out;
}

PooledMap pooled_attention(const AttentionRows& rows, MapValues values, bool row_norm, const MapWindow& w,
                           const std::atomic<bool>* cancel) {
    const int64_t P = rows.n_key();
    assert(w.row0 + w.n_rows <= rows.n_query() && w.col0 + w.n_cols <= P && "the window must lie inside the map");
    PooledMap out(w);
    std::vector<float> v(static_cast<size_t>(P));      // (P) one row's values
    std::vector<uint8_t> vis(static_cast<size_t>(P));  // (P) its mask
    const bool scores = values == MapValues::Scores;
    for (int64_t i = w.row0; i < w.row0 + w.n_rows; ++i) {
        if (cancel && cancel->load(std::memory_order_relaxed)) break;
        rows.row(i, scores ? v.data() : nullptr, vis.data(), scores ? nullptr : v.data(), nullptr);
        if (row_norm) {
            float mx = 0;
            for (int64_t j = 0; j < P; ++j)
                if (vis[size_t(j)]) mx = std::max(mx, std::fabs(v[size_t(j)]));
            if (mx > 0)
                for (float& x : v) x /= mx;
        }
        pool_row(out, i, v.data(), vis.data());
    }
    return out;
}

PooledMap pooled_mask(const StepRecord& record, int64_t layer, int64_t first_query, int64_t first_key, int64_t n_key,
                      const MapWindow& w) {
    PooledMap out(w);
    std::vector<float> ones(static_cast<size_t>(n_key), 1.0f);
    std::vector<uint8_t> vis(static_cast<size_t>(n_key));
    for (int64_t i = w.row0; i < w.row0 + w.n_rows; ++i) {
        const KeyRange seen = record.visible_keys(first_query + i, layer);
        // columns of the sinks 0..n_sink-1, then of lo..hi
        std::fill(vis.begin(), vis.end(), uint8_t(0));
        auto mark = [&](int64_t lo, int64_t hi) {
            lo = std::max(lo - first_key, int64_t(0));
            hi = std::min(hi - first_key, n_key - 1);
            if (lo <= hi) std::fill(vis.begin() + lo, vis.begin() + hi + 1, uint8_t(1));
        };
        mark(0, seen.n_sink - 1);
        mark(seen.lo, seen.hi);
        pool_row(out, i, ones.data(), vis.data());
    }
    return out;
}

int64_t visible_cells(const StepRecord& record, int64_t layer, int64_t first_query, int64_t n_query, int64_t first_key,
                      int64_t n_key) {
    const int64_t last_key = first_key + n_key - 1;
    int64_t n = 0;
    for (int64_t i = 0; i < n_query; ++i) {
        const KeyRange k = record.visible_keys(first_query + i, layer);
        // the sinks 0..n_sink-1, then lo..hi, each clipped to the map's columns
        n += std::max<int64_t>(0, std::min(k.n_sink - 1, last_key) - std::max<int64_t>(0, first_key) + 1);
        n += std::max<int64_t>(0, std::min(k.hi, last_key) - std::max(k.lo, first_key) + 1);
    }
    return n;
}

}  // namespace kvscope
