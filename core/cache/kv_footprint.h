#pragma once
// What the KV cache costs per token for a model's shape, beside what the same shape would cost with
// one K/V head per query head (multi-head attention) or a single shared one (multi-query attention):
// the saving grouped-query attention buys. Shared by `kvscope inspect` and the window's KV cache panel.
//
//   kv_footprint(config, bf16)   bytes per token = 2 (K and V) · L · K/V heads · D · bytes per value
//   kv_quant_per_token(config, q)   the same with quantized rows (kv_quant.h): 2 · L · K/V heads · packed
//                                   row bytes (int4: the average over a full key group)
#include <cstdint>

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

}  // namespace kvscope
