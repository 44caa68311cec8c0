#pragma once
// The contiguous storage of a KV cache: one of the three parts a KvCache composes (kv_cache.h). Per layer,
// K and V preallocated as (H, S_l, row bytes), S_l = the layer's slots; rows are whatever the row format
// stores (row_format.h). Position p lives in slot p % S_l (sinks: p < sinks in slot p, later positions in
// a ring over the remaining slots), so nothing is ever shifted or reallocated by a write.
//
// Every layer has S slots unless given a limit: a sliding layer (a model's own window W_l, Gemma 3's local
// layers, Mistral, Qwen2 with use_sliding_window) keeps S_l = min(S, limit) slots, the limit being
// W_l - 1 + the chunk being written (KvCache sets it; the rule of Hugging Face's DynamicSlidingWindowLayer,
// which keeps W - 1 positions between steps and attends over them plus the new chunk). Rows are found as
// the layer's block base + (head, slot) · row bytes, slots through slot_of(il, p) alone.
// slot_positions() is the whole-sequence record (S slots, what a layer without a limit holds): alive(),
// the eviction flags and the views read it; layer_positions(il) is what layer il's own ring holds.
//   RingStorage(L, H, S, sinks, key_bytes, value_bytes)   key_bytes 0: keys stored elsewhere (int4 groups)
//   capacity() / sinks()
//   slot_of(p)                   the slot of position p in the S-slot record
//   slot_positions()             (S) absolute position per slot, -1 = empty
//   set_layer_limits(limits)     (L) the most slots each layer keeps, 0 = S; rows move to their new slots
//                                (a layer given fewer keeps its newest positions)
//   layer_capacity(il)           S_l
//   slot_of(il, p) / layer_positions(il) / holds(il, p)   the same for layer il's own ring
//   held(il, next)               positions below next layer il holds (its fill)
//   note_written(p)              every layer's slot of p now holds p; note_written(il, p): layer il's
//                                (il 0 also the S-slot record)
//   row(kv, il, h, p)            the stored bytes of p's K (kv 0) or V (kv 1) row
//   fits(next, n, oldest_needed) a chunk of n at next keeps every position from oldest_needed alive
//   slots_needed(next, n, oldest_needed)   what fits() compares with S
//   save_layers(limits, next, c) the rows of every position below next the layers with a limit hold (before
//                                their rings shrink)
//   save(next, n, c) / restore(next_now, c)   the slots a chunk of n overwrites: positions and rows (per
//                                layer: a sliding layer's checkpoint keeps the rows its ring overwrites, so
//                                step back works while the ring holds only the window)
//   grow(S)                      more slots, each live position's rows moved to its slot in the larger ring
//   forget_from(p0, p1)          slots of positions p0 .. p1-1 become empty (an undo)
//   reset()                      every slot empty (rows left as they are)
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/huge_pages.h"

namespace kvscope {

struct RingCheckpoint {
    std::vector<int64_t> slots;           // slots of the S-slot record the chunk overwrote that held live positions
    std::vector<int64_t> slot_positions;  // their positions before the write
    std::vector<int64_t> layer_entries;   // (layer, position) pairs each layer's ring overwrote, position-major
    std::vector<unsigned char> rows;      // their K then V rows: (entries, 2, H, row bytes) as stored
};

class RingStorage {
public:
    RingStorage() = default;
    RingStorage(int64_t n_layer, int64_t n_head, int64_t capacity, int64_t sinks, int64_t key_bytes, int64_t value_bytes);

    int64_t capacity() const { return capacity_; }
    int64_t sinks() const { return sinks_; }
    int64_t slot_of(int64_t position) const { return slot_in(capacity_, position); }
    const std::vector<int64_t>& slot_positions() const { return slot_positions_; }
    void set_layer_limits(const std::vector<int64_t>& limits);
    int64_t layer_capacity(int64_t il) const { return layers_[size_t(il)].capacity; }
    int64_t slot_of(int64_t il, int64_t position) const { return slot_in(layers_[size_t(il)].capacity, position); }
    const std::vector<int64_t>& layer_positions(int64_t il) const { return layers_[size_t(il)].positions; }
    bool holds(int64_t il, int64_t position) const {
        return position >= 0 && layers_[size_t(il)].positions[size_t(slot_of(il, position))] == position;
    }
    int64_t held(int64_t il, int64_t next) const;
    void note_written(int64_t position) {
        slot_positions_[size_t(slot_of(position))] = position;
        for (int64_t il = 0; il < n_layer_; ++il) note_written(il, position);
    }
    void note_written(int64_t il, int64_t position) {
        Layer& l = layers_[size_t(il)];
        l.positions[size_t(slot_in(l.capacity, position))] = position;
        if (il == 0) slot_positions_[size_t(slot_of(position))] = position;
    }
    unsigned char* row(int kv, int64_t il, int64_t h, int64_t position) const {
        const int64_t bytes = kv ? value_bytes_ : key_bytes_;
        const Layer& l = layers_[size_t(il)];
        const unsigned char* base = (kv ? v_ : k_).data();
        return const_cast<unsigned char*>(base) + size_t((l.base + h * l.capacity + slot_in(l.capacity, position)) * bytes);
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
    void save_layers(const std::vector<int64_t>& limits, int64_t next, RingCheckpoint& c) const;
    template <class OnSlot>
    void restore(const RingCheckpoint& c, OnSlot on_slot);
    void grow(int64_t capacity);
    void forget_from(int64_t p0, int64_t p1);
    void reset();

private:
    struct Layer {
        int64_t limit = 0;                 // the most slots the layer keeps, 0 = S
        int64_t capacity = 0;              // S_l
        int64_t base = 0;                  // its first row in k_ / v_: sum of H · S_j over the layers before
        std::vector<int64_t> positions;    // (S_l) absolute position per slot of its own ring, -1 = empty
    };
    int64_t slot_in(int64_t capacity, int64_t position) const {
        // Until the ring wraps every slot is its position: no division.
        if (position < capacity || capacity <= sinks_) return position;
        return sinks_ + (position - sinks_) % (capacity - sinks_);
    }
    void relayout(const std::vector<int64_t>& capacities);  // (L) new S_l, live rows moved
    void save_entry(int64_t il, int64_t position, RingCheckpoint& c) const;  // its K then V rows, as stored

    int64_t n_layer_ = 0, n_head_ = 0, capacity_ = 0, sinks_ = 0, key_bytes_ = 0, value_bytes_ = 0;
    HugePageVector<unsigned char> k_, v_;  // per layer (H, S_l, key_bytes) and (H, S_l, value_bytes), layer after layer
    std::vector<int64_t> slot_positions_;  // (S)
    std::vector<Layer> layers_;            // (L)
};

// Puts the saved rows back; on_slot(i, slot) is told where the i-th saved position of the S-slot record
// now sits.
template <class OnSlot>
void RingStorage::restore(const RingCheckpoint& c, OnSlot on_slot) {
    for (size_t i = 0; i < c.slots.size(); ++i) {
        // The slot the saved position has now: the one it was saved from, unless grow() ran since.
        const int64_t p = c.slot_positions[i], slot = slot_of(p);
        slot_positions_[size_t(slot)] = p;
        on_slot(i, slot);
    }
    const unsigned char* src = c.rows.data();
    for (size_t e = 0; e + 1 < c.layer_entries.size(); e += 2) {
        const int64_t il = c.layer_entries[e], p = c.layer_entries[e + 1];
        Layer& l = layers_[size_t(il)];
        l.positions[size_t(slot_in(l.capacity, p))] = p;
        for (int kv = 0; kv < 2; ++kv) {
            const size_t bytes = size_t(kv ? value_bytes_ : key_bytes_);
            for (int64_t h = 0; h < n_head_; ++h) {
                std::memcpy(row(kv, il, h, p), src, bytes);
                src += bytes;
            }
        }
    }
}

}  // namespace kvscope
