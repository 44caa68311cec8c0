#pragma once
// How one (D) key or value row is stored: one of the three parts a KvCache composes (kv_cache.h). It
// turns float32 rows into stored bytes and back; where the bytes live is the storage's business.
//
// float32; bfloat16 (rounded to nearest even when written, widened exactly when read: attention computes
// in float32 on the stored values, a row costs half the bytes); int8 or fp8 per token (kv_quant.h: the
// packed bytes are what the cache stores, reads dequantize); int4 KIVI (below).
//   RowFormat(D, bf16, quant)    quant wins over bf16; throws UsageError for a bad quant (kv_quant.h validate)
//   bf16() / quantized() / int4() / quant()
//   row_bytes()                  one stored row: 4D, 2D, the int8 / fp8 packed size, int4: a value row
//   key_row_bytes()              bytes a storage keeps per key row: row_bytes(), 0 for int4 (Int4Keys)
//   encode(x, out)               (D) float32 -> one stored row (not for int4 keys)
//   decode(in, out)              one stored row -> (D) float32 (int4: a value row)
//
// int4 (KIVI, no window): positions below int4_residual_boundary(next_position) are packed, keys by groups
// of G positions, values per row; the later ones (and a chunk being written) are float32 rows in a
// residual ring of Rb slots (position p in slot p % Rb; Rb grows before a chunk that needs it). Advancing
// packs the groups that fall below the boundary; a checkpoint keeps the float32 rows of the positions its
// chunk packs, so an undo puts them back exactly. Int4Rows holds the key groups and the residual; the
// packed value rows live in the storage like any other format's.
//   Int4Rows(L, H, D, S, spec)
//   n_quantized()                positions 0 .. n_quantized-1 are packed
//   residual_slots()             Rb
//   ensure(slots, next)          Rb >= slots, the live residual rows (n_quantized .. next-1) kept
//   residual(kv, il, h, p)       (D) float32 row of a position at or above n_quantized
//   key_group(il, h, g)          packed key group g: positions g·G .. g·G+G-1
//   copy_key(il, h, p, out)      (D) float32 key of p, packed or residual
//   pack_below(boundary, value_row(il, h, p))   pack the groups below boundary; values into value_row
//   save(next, n_new, c) / restore(next, c)     the residual rows a chunk of n_new will pack, and back
//   grow(S)                      more key groups for S slots
//   reset()                      nothing packed
//   bytes_used(next, row_bytes) / bytes_capacity(S, row_bytes)   per (layer, head, K and V) summed
#include <cstdint>
#include <cstring>
#include <vector>

#include "cache/kv_quant.h"

namespace kvscope {

class RowFormat {
public:
    RowFormat() = default;
    RowFormat(int64_t head_dim, bool bf16, KvQuantSpec quant);

    bool bf16() const { return bf16_; }
    bool quantized() const { return quant_.quantized(); }
    bool int4() const { return quant_.format == KvQuant::Int4; }
    const KvQuantSpec& quant() const { return quant_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t row_bytes() const { return row_bytes_; }
    int64_t key_row_bytes() const { return int4() ? 0 : row_bytes_; }
    void encode(const float* x, unsigned char* out) const;
    void decode(const unsigned char* in, float* out) const;

private:
    int64_t head_dim_ = 0, row_bytes_ = 0;
    bool bf16_ = false;
    KvQuantSpec quant_;
};

struct Int4Checkpoint {
    int64_t residual_from = 0;
    std::vector<float> rows;  // (n, L, 2, H, D) float32 K then V rows of residual_from .. that the chunk packs
};

class Int4Rows {
public:
    Int4Rows() = default;
    Int4Rows(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, KvQuantSpec spec);

    int64_t n_quantized() const { return n_quantized_; }
    int64_t residual_slots() const { return residual_slots_; }
    void ensure(int64_t slots, int64_t next_position);
    float* residual(int kv, int64_t il, int64_t h, int64_t position) const {
        const std::vector<float>& r = kv ? vr_ : kr_;
        return const_cast<float*>(r.data()) + ((il * n_head_ + h) * residual_slots_ + position % residual_slots_) * head_dim_;
    }
    uint8_t* key_group(int64_t il, int64_t h, int64_t group) const {
        return const_cast<uint8_t*>(kq_.data()) + ((il * n_head_ + h) * n_groups_ + group) * group_bytes_;
    }
    void copy_key(int64_t il, int64_t h, int64_t position, float* out) const;
    template <class ValueRow>
    void pack_below(int64_t boundary, ValueRow value_row);
    void save(int64_t next_position, int64_t n_new, Int4Checkpoint& c) const;
    void restore(int64_t next_position, const Int4Checkpoint& c);
    void grow(int64_t capacity);
    void reset() { n_quantized_ = 0; }
    int64_t bytes_used(int64_t next_position, int64_t row_bytes) const;
    int64_t bytes_capacity(int64_t capacity, int64_t row_bytes) const;

private:
    int64_t n_layer_ = 0, n_head_ = 0, head_dim_ = 0;
    KvQuantSpec spec_;
    int64_t n_groups_ = 0, group_bytes_ = 0;  // per (layer, head): ceil(S / G) groups of group_bytes
    std::vector<uint8_t> kq_;                 // (L, H, groups, group_bytes) packed key groups
    std::vector<float> kr_, vr_;              // (L, H, Rb, D) each: float32 rows at and above the boundary
    int64_t residual_slots_ = 0;              // Rb
    int64_t n_quantized_ = 0;
};

template <class ValueRow>
void Int4Rows::pack_below(int64_t boundary, ValueRow value_row) {
    const int64_t G = spec_.group, D = head_dim_;
    std::vector<float> keys;  // (G, D) one key group; only while a group completes
    for (int64_t p0 = n_quantized_; p0 + G <= boundary; p0 += G) {
        keys.resize(size_t(G * D));
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int64_t h = 0; h < n_head_; ++h) {
                for (int64_t i = 0; i < G; ++i) {
                    std::memcpy(keys.data() + i * D, residual(0, il, h, p0 + i), size_t(D) * sizeof(float));
                    quantize_int4_values(residual(1, il, h, p0 + i), D, G, value_row(il, h, p0 + i));
                }
                quantize_int4_keys(keys.data(), G, D, key_group(il, h, p0 / G));
            }
    }
    if (boundary > n_quantized_) n_quantized_ = boundary;
}

}  // namespace kvscope
