#pragma once
// The KV cache of one sequence: per layer, K and V preallocated as (H, S, D) float32, S = capacity slots.
//
// Slots form a ring: absolute position p is stored in slot p % S, so nothing is ever shifted or
// reallocated. With a sliding window W, a query at position q sees keys at positions q-W+1 .. q.
// A chunk of n new tokens starting at position p therefore needs keys p-W+1 .. p+n-1 alive at once,
// W-1+n slots: `fits(n)` checks that before anything is written. Positions stay absolute.
//
//   KvCache(L, H, D, S, W)      W = 0: no window (every earlier position stays visible)
//   next_position()             the position pointer: absolute position the next token gets
//   write_slot()                where the next token's K/V will be written
//   used()                      slots holding positions still visible to the next query (fill level)
//   slot_position(s)            absolute position in slot s, or -1 if never written
//   visible_from(q)             lowest key position a query at q may see
//   fits(n) / require_fits(n)   can a chunk of n tokens be processed now
//   key(il, h, p) / value(...)  (D) row of absolute position p; p must be alive
//   write(il, h, p, k, v)       store one position's (D) rows; called by the model for each new token
//   advance(n)                  move the position pointer after all layers wrote a chunk
//   checkpoint(n) / restore(c)  save what the next n writes overwrite (and the pointer); undo them later
//   bytes_used() / bytes_capacity()
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvscope {

struct KvCacheCheckpoint {
    int64_t next_position = 0;
    std::vector<int64_t> slots;           // slots the chunk overwrote that held live positions
    std::vector<int64_t> slot_positions;  // their positions before the write
    std::vector<float> rows;              // their K then V rows: (n, L, 2, H, D)
};

class KvCache {
public:
    KvCache() = default;
    KvCache(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, int64_t window);

    int64_t n_layer() const { return n_layer_; }
    int64_t n_head() const { return n_head_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t capacity() const { return capacity_; }
    int64_t window() const { return window_; }  // 0 = no window
    int64_t next_position() const { return next_position_; }
    int64_t write_slot() const { return capacity_ ? next_position_ % capacity_ : 0; }
    int64_t used() const;
    int64_t slot_position(int64_t slot) const { return slot_positions_[size_t(slot)]; }
    const std::vector<int64_t>& slot_positions() const { return slot_positions_; }
    int64_t visible_from(int64_t query_position) const;
    bool fits(int64_t n_new) const;
    void require_fits(int64_t n_new) const;  // throws UsageError with the numbers

    const float* key(int64_t il, int64_t h, int64_t position) const;
    const float* value(int64_t il, int64_t h, int64_t position) const;
    void write(int64_t il, int64_t h, int64_t position, const float* k, const float* v);
    void advance(int64_t n_new);
    void reset();

    KvCacheCheckpoint checkpoint(int64_t n_new) const;
    void restore(const KvCacheCheckpoint& c);

    int64_t bytes_per_position() const { return 2 * n_layer_ * n_head_ * head_dim_ * int64_t(sizeof(float)); }
    int64_t bytes_used() const { return used() * bytes_per_position(); }
    int64_t bytes_capacity() const { return capacity_ * bytes_per_position(); }

private:
    size_t offset(int64_t il, int64_t h, int64_t slot) const {
        return size_t(((il * n_head_ + h) * capacity_ + slot) * head_dim_);
    }
    int64_t n_layer_ = 0, n_head_ = 0, head_dim_ = 0, capacity_ = 0, window_ = 0;
    int64_t next_position_ = 0;
    std::vector<float> k_;                // (L, H, S, D)
    std::vector<float> v_;                // (L, H, S, D)
    std::vector<int64_t> slot_positions_; // (S), -1 = empty
};

}  // namespace kvscope
