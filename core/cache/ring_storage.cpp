#include "cache/ring_storage.h"

#include <algorithm>

namespace kvscope {

RingStorage::RingStorage(int64_t n_layer, int64_t n_head, int64_t capacity, int64_t sinks, int64_t key_bytes,
                         int64_t value_bytes)
    : n_layer_(n_layer), n_head_(n_head), capacity_(capacity), sinks_(sinks), key_bytes_(key_bytes),
      value_bytes_(value_bytes), k_(size_t(n_layer * n_head * capacity * key_bytes)),
      v_(size_t(n_layer * n_head * capacity * value_bytes)), slot_positions_(size_t(capacity), -1) {}

void RingStorage::save(int64_t next, int64_t n_new, RingCheckpoint& c) const {
    for (int64_t p = next; p < next + n_new && p - next < capacity_; ++p) {
        const int64_t slot = slot_of(p);
        if (slot_positions_[size_t(slot)] < 0) continue;
        c.slots.push_back(slot);
        c.slot_positions.push_back(slot_positions_[size_t(slot)]);
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int kv = 0; kv < 2; ++kv) {
                const int64_t bytes = kv ? value_bytes_ : key_bytes_;
                for (int64_t h = 0; h < n_head_; ++h) {
                    const unsigned char* r = row(kv, il, h, p);
                    c.rows.insert(c.rows.end(), r, r + bytes);
                }
            }
    }
}

void RingStorage::grow(int64_t capacity) {
    if (capacity <= capacity_) return;
    // A ring that wrapped keeps position p in slot sinks + (p - sinks) % (S - sinks): with a new S the
    // slot changes, so each live position's rows are copied to the slot slot_of() gives it afterwards.
    const std::vector<int64_t> old_positions = std::move(slot_positions_);
    const int64_t old_capacity = capacity_;
    capacity_ = capacity;
    slot_positions_.assign(size_t(capacity), -1);
    auto regrow = [&](HugePageVector<unsigned char>& old, int64_t bytes) {
        HugePageVector<unsigned char> grown(size_t(n_layer_ * n_head_ * capacity * bytes));
        for (int64_t old_slot = 0; old_slot < old_capacity && bytes > 0; ++old_slot) {
            const int64_t p = old_positions[size_t(old_slot)];
            if (p < 0) continue;
            for (int64_t lh = 0; lh < n_layer_ * n_head_; ++lh)
                std::copy_n(old.begin() + (lh * old_capacity + old_slot) * bytes, bytes,
                            grown.begin() + (lh * capacity + slot_of(p)) * bytes);
        }
        old = std::move(grown);
    };
    regrow(k_, key_bytes_);
    regrow(v_, value_bytes_);
    for (int64_t old_slot = 0; old_slot < old_capacity; ++old_slot)
        if (const int64_t p = old_positions[size_t(old_slot)]; p >= 0) slot_positions_[size_t(slot_of(p))] = p;
}

void RingStorage::forget_from(int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
        const int64_t slot = slot_of(p);
        if (slot_positions_[size_t(slot)] == p) slot_positions_[size_t(slot)] = -1;
    }
}

void RingStorage::reset() { std::fill(slot_positions_.begin(), slot_positions_.end(), -1); }

}  // namespace kvscope
