#pragma once
// Scaled dot-product attention of one query row of one head, and the rule that says which keys a query
// sees. Both are the single definitions used by the forward pass and by every attention view derived
// from a trace, so a heatmap shows the exact numbers the model used.
//
//   KeyRange                        the keys one query sees: sinks 0..n_sink-1, then lo..hi (positions)
//   visible_keys(q, window, sinks, sink_positions)
//                                   the mask rule: causal; with a window W only q-W+1..q, plus with
//                                   attention sinks the first S positions stay visible too. With
//                                   SinkPositions::Cache (StreamingLLM) positions are numbered inside
//                                   the cache, so a rotary model scores the sinks sink_shift positions later
//   within_window(keys, q, W)       narrowed to a layer's own sliding window (model config)
//   attend_row(out, weights, q, key_at, value_at, keys, D, scale)
//       weights (keys.count()) = softmax(q·k * scale) over the visible keys in position order;
//       out (D) = Σ w·v. `weights` also holds the scaled scores on the way.
//   attend_group(out, weights, stride, q, G, key_at, value_at, keys, D, scale, sink_q, evicted)
//       attend_row for G heads reading the same keys, bit for bit, each key loaded once for the group;
//       sink_q (G, D), when given, scores the sinks instead of q (q turned back by keys.sink_shift);
//       evicted(p), when given, masks keys out: score -inf, weight exactly 0 (kv_cache.h eviction)
//   shared_keys(keys, R)            the window keys all R ranges hold (attend_rows takes those together)
//   attend_rows(out, weights, stride, q, R, G, key_table, value_table, keys, D, scale)
//       attend_group for R query rows of a prefill task at once (row r: out[r], q[r], keys[r], no sinks),
//       each row's numbers attend_group's bit for bit; the keys all rows see loaded once for them
//   RowTable<Row>{rows, span}       key_at / value_at from rows looked up once per task (a prefill's):
//                                   attend_group passes consecutive entries to the kernels in place
//   NoEviction                      the default `evicted`: every key stays (the unmasked code path)
//   scaled_score(q, k, D, scale)    the score of one (query, key) pair, as attend_row computes it
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/kernels.h"

namespace kvscope {

// Where attention sinks sit for the query. Text: at their own positions, as every key (kvscope's
// default: distances are the true ones). Cache: StreamingLLM's numbering inside the cache, sinks 0..S-1
// and the window right after them, so a query sees the sinks as its window's direct predecessors.
enum class SinkPositions { Text, Cache };
inline const char* sink_positions_name(SinkPositions s) { return s == SinkPositions::Cache ? "cache" : "text"; }

struct KeyRange {
    int64_t n_sink = 0;      // positions 0..n_sink-1, all below lo
    int64_t lo = 0, hi = -1; // then lo..hi inclusive
    // SinkPositions::Cache: the sinks count as sitting this many positions later (lo - n_sink: the gap
    // the window left). Window keys keep their distance to the query either way. 0 under Text.
    int64_t sink_shift = 0;
    int64_t count() const { return n_sink + hi - lo + 1; }
    int64_t position(int64_t j) const { return j < n_sink ? j : lo + (j - n_sink); }
    int64_t index(int64_t p) const { return p < n_sink ? p : n_sink + (p - lo); }  // position's inverse
    bool contains(int64_t p) const { return (p >= lo && p <= hi) || (p >= 0 && p < n_sink); }
};

inline KeyRange visible_keys(int64_t query_position, int64_t window, int64_t sinks,
                             SinkPositions sink_positions = SinkPositions::Text) {
    KeyRange k;
    k.hi = query_position;
    k.lo = window > 0 ? std::max<int64_t>(0, query_position - window + 1) : 0;
    k.n_sink = window > 0 ? std::min(sinks, k.lo) : 0;
    if (sink_positions == SinkPositions::Cache && k.n_sink > 0) k.sink_shift = k.lo - k.n_sink;
    return k;
}

// A layer's own sliding window W (Mistral, Qwen2, Gemma 3) on top of what the cache shows a query at q:
// key j stays when j > q - W (HF masking_utils sliding_window_overlay). W = 0: unchanged.
inline KeyRange within_window(KeyRange k, int64_t q, int64_t W) {
    if (W <= 0) return k;
    k.lo = std::max(k.lo, q - W + 1);
    k.n_sink = std::min(k.n_sink, k.lo);
    return k;
}

// Row pointers looked up once for many queries (a prefill task's rows): rows[j] is the row of
// span.position(j). attend_group hands a batch of consecutive entries to the kernels in place.
template <class Row>
struct RowTable {
    const Row* rows;  // (span.count())
    KeyRange span;
    int64_t index(int64_t p) const { return span.index(p); }
    Row operator()(int64_t p) const { return rows[span.index(p)]; }
};
template <class T>
constexpr bool is_row_table = false;
template <class Row>
constexpr bool is_row_table<RowTable<Row>> = true;

struct NoEviction {
    bool operator()(int64_t) const { return false; }
};

template <class K>  // k: float32 or bfloat16 (uint16_t) row
inline float scaled_score(const float* q, const K* k, int64_t D, float scale) {
    return dot(q, k, D) * scale;
}

// Sums of W rows of scores (row i: w[i], n[i] of them; rows past `rows` repeat row 0 and are not read), each in
// position order from 0, W serial chains side by side over the length all rows have, then each row's rest.
// Named sums in registers: GCC keeps an array indexed by a run-time count in memory, and each add then waits
// for a store.
template <int W>
void sums_in_order(float* sums, const float* const* w, const int64_t* n, int64_t rows) {
    static_assert(W == 4 || W == 8);
    const float* r[8];
    int64_t common = n[0];
    for (int k = 0; k < 8; ++k) r[k] = k < rows ? w[k] : w[0];
    for (int64_t k = 1; k < rows; ++k) common = std::min(common, n[k]);
    float s[8] = {};
    {
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, s4 = 0.0f, s5 = 0.0f, s6 = 0.0f, s7 = 0.0f;
        for (int64_t j = 0; j < common; ++j) {
            s0 += r[0][j];
            s1 += r[1][j];
            s2 += r[2][j];
            s3 += r[3][j];
            if constexpr (W == 8) {
                s4 += r[4][j];
                s5 += r[5][j];
                s6 += r[6][j];
                s7 += r[7][j];
            }
        }
        s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3, s[4] = s4, s[5] = s5, s[6] = s6, s[7] = s7;
    }
    for (int64_t k = 0; k < rows; ++k) {
        for (int64_t j = common; j < n[k]; ++j) s[k] += w[k][j];
        sums[k] = s[k];
    }
}

// attend_group's pass 2 for `count` rows of scores (row i: w[i], n[i] of them): softmax in place, the maximum
// subtracted first so nothing overflows, each row's sum in position order, up to 8 rows' serial sums side by
// side. evicted(j): key j's weight is exactly 0 (its score was -inf).
template <class EvictedAt>
void softmax_rows(float* const* w, const int64_t* n, int64_t count, const EvictedAt& evicted_at) {
    for (int64_t i0 = 0; i0 < count; i0 += 8) {
        const int64_t rows = std::min<int64_t>(8, count - i0);
        for (int64_t i = i0; i < i0 + rows; ++i) {
            const float max_score = max_of(w[i], n[i]);
            for (int64_t j = 0; j < n[i]; ++j) w[i][j] -= max_score;
            exp_in_place(w[i], n[i]);
            if constexpr (!std::is_same_v<EvictedAt, std::nullptr_t>)  // exactly 0, whatever exp makes of -inf
                for (int64_t j = 0; j < n[i]; ++j)
                    if (evicted_at(j)) w[i][j] = 0.0f;
        }
        float sums[8];
        if (rows <= 4) sums_in_order<4>(sums, w + i0, n + i0, rows);
        else sums_in_order<8>(sums, w + i0, n + i0, rows);
        for (int64_t i = i0; i < i0 + rows; ++i)
            for (int64_t j = 0; j < n[i]; ++j) w[i][j] /= sums[i - i0];
    }
}

// attend_row for G query heads that read the same keys (the heads of one K/V group at one position):
// q and out are (G, D), weights (G, weights_stride). Each head's numbers are attend_row's bit for bit
// (the same per-head operations in the same order), but every key and value row is looked up and
// loaded once for the group, and the heads' serial softmax sums run side by side. kAskAhead: rows a
// few batches ahead are prefetched (rows that come from memory, as in decode).
template <bool kAskAhead = true, class KeyAt, class ValueAt, class Evicted = NoEviction>
void attend_group(float* out, float* weights, int64_t weights_stride, const float* q, int64_t G, KeyAt&& key_at,
                  ValueAt&& value_at, const KeyRange& keys, int64_t D, float scale, const float* sink_q = nullptr,
                  const Evicted& evicted = Evicted{}) {
    constexpr bool masked = !std::is_same_v<Evicted, NoEviction>;
    using KeyRow = decltype(key_at(int64_t(0)));  // const float* or const uint16_t*
    using ValueRow = decltype(value_at(int64_t(0)));
    // Rows are looked up kBatch at a time (pointers on the stack) and handed to the kernels. Rows that
    // come from memory (decode) are asked for kAhead batches before they are computed, a few cache lines
    // at a time between kernel calls: one burst for a whole 64-row batch ahead filled the queue of
    // outstanding misses, and the arithmetic waited behind it (Zen 3 VM, one thread, 3 heads of size 64
    // against 2000 keys streamed from memory: 56-58 -> 40-42 ns per key).
    constexpr int64_t kBatch = kAskAhead ? 8 : 64;
    constexpr int64_t kAhead = kAskAhead ? 3 : 0;
    constexpr int64_t kMaxHeads = 4;  // heads whose sums and outputs are carried together
    const int64_t n = keys.count();
    auto head_weights = [&](int64_t g) { return weights + g * weights_stride; };
    // An evicted key's rows may be gone (a paged block back in the pool): its loads read the query's own
    // position instead, always alive. Its score is replaced by -inf and its weight by 0, so what is read
    // there only adds 0 · v, as the evicted row's own values did.
    auto readable = [&](int64_t p) {
        if constexpr (masked) return evicted(p) ? keys.hi : p;
        return p;
    };
    // Calls compute(j0, m, rows) for the rows j0 .. j0 + m - 1 of [from, to), kBatch at a time in order.
    auto stream_rows = [&](auto&& row_at, int64_t from, int64_t to, auto&& compute) {
        using Row = decltype(row_at(int64_t(0)));
        if constexpr (is_row_table<std::decay_t<decltype(row_at)>> && !masked && !kAskAhead) {
            // A batch whose positions are consecutive entries of the table (index grows with position,
            // so its ends tell) is passed in place; one that crosses from the sinks to the window is copied.
            for (int64_t j0 = from; j0 < to; j0 += kBatch) {
                const int64_t m = std::min(kBatch, to - j0), first = row_at.index(keys.position(j0));
                if (row_at.index(keys.position(j0 + m - 1)) - first == m - 1) {
                    compute(j0, m, row_at.rows + first);
                    continue;
                }
                Row rows[kBatch];
                for (int64_t j = j0; j < j0 + m; ++j) rows[j - j0] = row_at(keys.position(j));
                compute(j0, m, static_cast<const Row*>(rows));
            }
            return;
        }
        Row ring[(kAhead + 1) * kBatch];  // batch i's row pointers in slot i % (kAhead + 1)
        auto look_up = [&](int64_t i) {
            const int64_t j0 = from + i * kBatch;
            Row* rows = ring + i % (kAhead + 1) * kBatch;
            for (int64_t j = j0; j < std::min(to, j0 + kBatch); ++j) {
                rows[j - j0] = row_at(readable(keys.position(j)));
                if constexpr (kAskAhead) {
                    const char* row = reinterpret_cast<const char*>(rows[j - j0]);
                    for (int64_t b = 0; b < D * int64_t(sizeof(*rows[0])); b += 64) __builtin_prefetch(row + b);
                }
            }
        };
        for (int64_t i = 0; i < kAhead; ++i) look_up(i);
        for (int64_t i = 0, j0 = from; j0 < to; ++i, j0 += kBatch) {
            look_up(i + kAhead);
            compute(j0, std::min(kBatch, to - j0), ring + i % (kAhead + 1) * kBatch);
        }
    };
    // pass 1: scores = q·kᵀ · scale (each exactly scaled_score); the sinks against sink_q when given
    auto score = [&](int64_t from, int64_t to, const float* queries) {
        stream_rows(key_at, from, to, [&](int64_t j0, int64_t m, const KeyRow* rows) {
            dot_rows_heads(weights + j0, weights_stride, queries, G, rows, m, D, scale);
        });
    };
    const int64_t sinks = sink_q ? keys.n_sink : 0;
    score(0, sinks, sink_q);
    score(sinks, n, q);
    // pass 1b: an evicted key scores -inf: it cannot be the maximum, and its weight is set to 0 below
    if constexpr (masked)
        for (int64_t j = 0; j < n; ++j)
            if (evicted(keys.position(j)))
                for (int64_t g = 0; g < G; ++g) head_weights(g)[j] = -INFINITY;
    // pass 2: softmax, each head's sum in position order
    for (int64_t g0 = 0; g0 < G; g0 += kMaxHeads) {
        const int64_t heads = std::min(kMaxHeads, G - g0);
        float* rows[kMaxHeads];
        const int64_t counts[kMaxHeads] = {n, n, n, n};
        for (int64_t g = 0; g < heads; ++g) rows[g] = head_weights(g0 + g);
        if constexpr (masked) softmax_rows(rows, counts, heads, [&](int64_t j) { return evicted(keys.position(j)); });
        else softmax_rows(rows, counts, heads, nullptr);
    }
    // pass 3: out = Σ_j w_j · v_j, in position order
    std::memset(out, 0, size_t(G * D) * sizeof(float));
    stream_rows(value_at, 0, n, [&](int64_t j0, int64_t m, const ValueRow* rows) {
        for (int64_t g0 = 0; g0 < G; g0 += kMaxHeads)
            axpy_rows_heads(out + g0 * D, weights + g0 * weights_stride + j0, weights_stride, std::min(kMaxHeads, G - g0),
                            rows, m, D);
    });
}

// The window keys every one of R ranges holds: the latest first key to the earliest last one (empty when
// hi < lo). Sinks are not counted.
inline KeyRange shared_keys(const KeyRange* keys, int64_t R) {
    KeyRange k{0, keys[0].lo, keys[0].hi};
    for (int64_t r = 1; r < R; ++r) k.lo = std::max(k.lo, keys[r].lo), k.hi = std::min(k.hi, keys[r].hi);
    return k;
}

// attend_group for R query rows of one K/V group (a prefill task's rows), each row's numbers bit for bit
// attend_group's: out[r] and q[r] (G, D), row r's weights (G, weights_stride) at weights + r·G·weights_stride,
// keys[r] its keys (no sinks), every row's keys consecutive entries of the tables. The keys all R rows see
// are scored and summed by dot_rows_block and axpy_rows_block, which load each key and value row once for
// the R · G heads; the keys only some rows see (before the latest first key, after the earliest last key)
// row by row, in position order around them.
template <class KeyRow, class ValueRow>
void attend_rows(float* const* out, float* weights, int64_t weights_stride, const float* const* q, int64_t R, int64_t G,
                 const RowTable<KeyRow>& key_at, const RowTable<ValueRow>& value_at, const KeyRange* keys, int64_t D,
                 float scale) {
    constexpr int64_t kMaxRows = 8;
    const KeyRange shared = shared_keys(keys, R);
    const int64_t lo = shared.lo, hi = shared.hi;
    float* row_weights[kMaxRows];  // row r's weights, then at the shared keys
    float* shared_weights[kMaxRows];
    for (int64_t r = 0; r < R; ++r) {
        row_weights[r] = weights + r * G * weights_stride;
        shared_weights[r] = row_weights[r] + (lo - keys[r].lo);
    }
    auto key_rows = [&](int64_t p) { return key_at.rows + key_at.index(p); };
    auto value_rows = [&](int64_t p) { return value_at.rows + value_at.index(p); };
    // scores: each row's keys before the shared ones, the shared ones, each row's after them
    for (int64_t r = 0; r < R; ++r) dot_rows_heads(row_weights[r], weights_stride, q[r], G, key_rows(keys[r].lo), lo - keys[r].lo, D, scale);
    dot_rows_block(shared_weights, weights_stride, q, R, G, key_rows(lo), hi - lo + 1, D, scale);
    for (int64_t r = 0; r < R; ++r)
        dot_rows_heads(shared_weights[r] + (hi - lo + 1), weights_stride, q[r], G, key_rows(hi + 1), keys[r].hi - hi, D, scale);
    for (int64_t i0 = 0; i0 < R * G; i0 += 8) {  // the rows' heads' sums 8 side by side
        float* rows[8];
        int64_t counts[8];
        const int64_t m = std::min<int64_t>(8, R * G - i0);
        for (int64_t i = 0; i < m; ++i) {
            rows[i] = row_weights[(i0 + i) / G] + (i0 + i) % G * weights_stride;
            counts[i] = keys[(i0 + i) / G].count();
        }
        softmax_rows(rows, counts, m, nullptr);
    }
    // out = Σ_j w_j · v_j in position order: the keys before the shared ones, the shared ones, the keys after
    const int64_t heads = std::min<int64_t>(4, G);
    auto each_head_group = [&](auto&& f) {
        for (int64_t g0 = 0; g0 < G; g0 += heads) f(g0, std::min(heads, G - g0));
    };
    for (int64_t r = 0; r < R; ++r) {
        std::memset(out[r], 0, size_t(G * D) * sizeof(float));
        each_head_group([&](int64_t g0, int64_t n_heads) {
            axpy_rows_heads(out[r] + g0 * D, row_weights[r] + g0 * weights_stride, weights_stride, n_heads,
                            value_rows(keys[r].lo), lo - keys[r].lo, D);
        });
    }
    axpy_rows_block(out, shared_weights, weights_stride, R, G, value_rows(lo), hi - lo + 1, D);
    for (int64_t r = 0; r < R; ++r)
        each_head_group([&](int64_t g0, int64_t n_heads) {
            axpy_rows_heads(out[r] + g0 * D, shared_weights[r] + g0 * weights_stride + (hi - lo + 1), weights_stride, n_heads,
                            value_rows(hi + 1), keys[r].hi - hi, D);
        });
}

template <class KeyAt, class ValueAt, class Evicted = NoEviction>
void attend_row(float* out, float* weights, const float* q, KeyAt&& key_at, ValueAt&& value_at,
                const KeyRange& keys, int64_t D, float scale, const float* sink_q = nullptr,
                const Evicted& evicted = Evicted{}) {
    attend_group(out, weights, 0, q, 1, key_at, value_at, keys, D, scale, sink_q, evicted);
}

}  // namespace kvscope
