#pragma once
// What the KV cache costs per token for a model's shape, beside what the same shape would cost with
// one K/V head per query head (multi-head attention) or a single shared one (multi-query attention):
// the saving grouped-query attention buys. Shared by `kvscope inspect` and the window's KV cache panel.
//
//   kv_footprint(config, bf16)   bytes per token = 2 (K and V) · L · K/V heads · D · bytes per value
//   kv_quant_per_token(config, q)   the same with quantized rows (kv_quant.h): 2 · L · K/V heads · packed
//                                   row bytes (int4: the average over a full key group)
//   kv_layer_positions_held(config, n, chunk)   (L) positions each layer stores after n positions written
//                                   `chunk` at a time: n for a full layer, min(n, W_l - 1 + chunk) for a
//                                   sliding one (kv_cache.h: Hugging Face's DynamicSlidingWindowLayer rule)
//   kv_bytes_held(config, bf16, n, chunk)   what a float32 / bfloat16 ring cache stores then: the sum over
//                                   layers of those positions x 2 · K/V heads · D · bytes per value
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cache/kv_quant.h"
#include "model/config.h"

namespace kvscope {

struct KvFootprint {
    int64_t n_kv_head = 0, n_head = 0;  // K and H of the model
    int64_t bytes_per_value = 4;        // float32 cache, 2 for bfloat16
    int64_t per_token = 0;              // as the model caches: K K/V heads per layer
    int64_t per_token_mha = 0;          // H K/V heads per layer (multi-head attention)
    int64_t per_token_mqa = 0;          // one K/V head per layer (multi-query attention)
    int64_t group() const { return n_head / n_kv_head; }  // query heads reading each K/V head
};

inline KvFootprint kv_footprint(const ModelConfig& c, bool bf16) {
    KvFootprint f;
    f.n_kv_head = c.kv_heads();
    f.n_head = c.n_head;
    f.bytes_per_value = bf16 ? 2 : 4;
    const int64_t per_head = 2 * c.n_layer * c.head_dim() * f.bytes_per_value;  // K and V rows of one head, all layers
    f.per_token = per_head * f.n_kv_head;
    f.per_token_mha = per_head * f.n_head;
    f.per_token_mqa = per_head;
    return f;
}

inline int64_t kv_quant_per_token(const ModelConfig& c, const KvQuantSpec& q) {
    const int64_t D = c.head_dim();
    const int64_t row = q.format == KvQuant::Int4 ? int4_value_row_bytes(D, q.group) : row_bytes(q.format, D);
    return 2 * c.n_layer * c.kv_heads() * row;
}

inline std::vector<int64_t> kv_layer_positions_held(const ModelConfig& c, int64_t n, int64_t chunk) {
    std::vector<int64_t> held(size_t(c.n_layer), n);
    for (int64_t il = 0; il < c.n_layer; ++il)
        if (const int64_t w = c.window_of(il); w > 0) held[size_t(il)] = std::min(n, w - 1 + std::max<int64_t>(1, chunk));
    return held;
}

inline int64_t kv_bytes_held(const ModelConfig& c, bool bf16, int64_t n, int64_t chunk) {
    int64_t positions = 0;
    for (int64_t p : kv_layer_positions_held(c, n, chunk)) positions += p;
    return positions * kv_footprint(c, bf16).per_token / c.n_layer;
}

}  // namespace kvscope
