#pragma once
// The contiguous storage of a KV cache: one of the three parts a KvCache composes (kv_cache.h). Per layer,
// K and V preallocated as (H, S, row bytes), S = capacity slots; rows are whatever the row format stores
// (row_format.h). Position p lives in slot p % S (sinks: p < sinks in slot p, later positions in a ring
// over the remaining slots), so nothing is ever shifted or reallocated.
//
// Rows are found as (layer, head) block + slot · row bytes, and slots through slot_of(p) alone: a layer
// holding fewer slots than another (a sliding-window layer keeping only its window) would be a per-layer
// S and block base here, nothing above this type. Today every layer has S.
//   RingStorage(L, H, S, sinks, key_bytes, value_bytes)   key_bytes 0: keys stored elsewhere (int4 groups)
//   capacity() / sinks()
//   slot_of(p)                   the slot of position p
//   slot_positions()             (S) absolute position per slot, -1 = empty
//   note_written(p)              slot_of(p) now holds p
//   row(kv, il, h, p)            the stored bytes of p's K (kv 0) or V (kv 1) row
//   fits(next, n, oldest_needed) a chunk of n at next keeps every position from oldest_needed alive
//   slots_needed(next, n, oldest_needed)   what fits() compares with S
//   save(next, n, c) / restore(next_now, c)   the slots a chunk of n overwrites: positions and rows
//   grow(S)                      more slots, each live position's rows moved to its slot in the larger ring
//   forget_from(p0, p1)          slots of positions p0 .. p1-1 become empty (an undo)
//   reset()                      every slot empty (rows left as they are)
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/huge_pages.h"

namespace kvscope {

struct RingCheckpoint {
    std::vector<int64_t> slots;           // slots the chunk overwrote that held live positions
    std::vector<int64_t> slot_positions;  // their positions before the write
    std::vector<unsigned char> rows;      // their K then V rows: (n, L, 2, H, row bytes) as stored
};

class RingStorage {
public:
    RingStorage() = default;
    RingStorage(int64_t n_layer, int64_t n_head, int64_t capacity, int64_t sinks, int64_t key_bytes, int64_t value_bytes);

    int64_t capacity() const { return capacity_; }
    int64_t sinks() const { return sinks_; }
    int64_t slot_of(int64_t position) const {
        // Until the ring wraps every slot is its position: no division.
        if (position < capacity_ || capacity_ <= sinks_) return position;
        return sinks_ + (position - sinks_) % (capacity_ - sinks_);
    }
    const std::vector<int64_t>& slot_positions() const { return slot_positions_; }
    void note_written(int64_t position) { slot_positions_[size_t(slot_of(position))] = position; }
    unsigned char* row(int kv, int64_t il, int64_t h, int64_t position) const {
        const int64_t bytes = kv ? value_bytes_ : key_bytes_;
        const unsigned char* base = (kv ? v_ : k_).data();
        return const_cast<unsigned char*>(base) + size_t(((il * n_head_ + h) * capacity_ + slot_of(position)) * bytes);
    }
    int64_t slots_needed(int64_t next, int64_t n_new, int64_t oldest_needed) const {
        return sinks_ + next + n_new - oldest_needed;
    }
    bool fits(int64_t next, int64_t n_new, int64_t oldest_needed) const {
        // The ring wraps: the positions the chunk's first query needs (past the sinks) plus the chunk must
        // fit in the slots after the sinks.
        return next + n_new <= capacity_ || slots_needed(next, n_new, oldest_needed) <= capacity_;
    }
    void save(int64_t next, int64_t n_new, RingCheckpoint& c) const;
    template <class OnSlot>
    void restore(const RingCheckpoint& c, OnSlot on_slot);
    void grow(int64_t capacity);
    void forget_from(int64_t p0, int64_t p1);
    void reset();

private:
    int64_t n_layer_ = 0, n_head_ = 0, capacity_ = 0, sinks_ = 0, key_bytes_ = 0, value_bytes_ = 0;
    HugePageVector<unsigned char> k_, v_;  // (L, H, S, key_bytes) and (L, H, S, value_bytes)
    std::vector<int64_t> slot_positions_;  // (S)
};

// Puts the saved rows back; on_slot(i, slot) is told where the i-th saved position now sits.
template <class OnSlot>
void RingStorage::restore(const RingCheckpoint& c, OnSlot on_slot) {
    const unsigned char* src = c.rows.data();
    for (size_t i = 0; i < c.slots.size(); ++i) {
        // The slot the saved position has now: the one it was saved from, unless grow() ran since.
        const int64_t p = c.slot_positions[i], slot = slot_of(p);
        slot_positions_[size_t(slot)] = p;
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int kv = 0; kv < 2; ++kv) {
                const size_t bytes = size_t(kv ? value_bytes_ : key_bytes_);
                for (int64_t h = 0; h < n_head_; ++h) {
                    std::memcpy(row(kv, il, h, p), src, bytes);
                    src += bytes;
                }
            }
        on_slot(i, slot);
    }
}

}  // namespace kvscope
