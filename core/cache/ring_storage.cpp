#include "cache/ring_storage.h"

#include <algorithm>

namespace kvscope {

RingStorage::RingStorage(int64_t n_layer, int64_t n_head, int64_t capacity, int64_t sinks, int64_t key_bytes,
                         int64_t value_bytes)
    : n_layer_(n_layer), n_head_(n_head), capacity_(capacity), sinks_(sinks), key_bytes_(key_bytes),
      value_bytes_(value_bytes), k_(size_t(n_layer * n_head * capacity * key_bytes)),
      v_(size_t(n_layer * n_head * capacity * value_bytes)), slot_positions_(size_t(capacity), -1),
      layers_(size_t(n_layer)) {
    for (int64_t il = 0; il < n_layer; ++il) {
        Layer& l = layers_[size_t(il)];
        l.capacity = capacity;
        l.base = il * n_head * capacity;
        l.positions.assign(size_t(capacity), -1);
    }
}

int64_t RingStorage::held(int64_t il, int64_t next) const {
    int64_t n = 0;
    for (int64_t p : layers_[size_t(il)].positions) n += p >= 0 && p < next;
    return n;
}

void RingStorage::save_entry(int64_t il, int64_t position, RingCheckpoint& c) const {
    c.layer_entries.insert(c.layer_entries.end(), {il, position});
    for (int kv = 0; kv < 2; ++kv) {
        const int64_t bytes = kv ? value_bytes_ : key_bytes_;
        for (int64_t h = 0; h < n_head_; ++h) {
            const unsigned char* r = row(kv, il, h, position);
            c.rows.insert(c.rows.end(), r, r + bytes);
        }
    }
}

void RingStorage::save(int64_t next, int64_t n_new, RingCheckpoint& c) const {
    for (int64_t p = next; p < next + n_new && p - next < capacity_; ++p) {
        const int64_t slot = slot_of(p);
        if (slot_positions_[size_t(slot)] < 0) continue;
        c.slots.push_back(slot);
        c.slot_positions.push_back(slot_positions_[size_t(slot)]);
    }
    for (int64_t p = next; p < next + n_new; ++p)
        for (int64_t il = 0; il < n_layer_; ++il) {
            const Layer& l = layers_[size_t(il)];
            if (p - next >= l.capacity) continue;
            const int64_t old = l.positions[size_t(slot_in(l.capacity, p))];
            if (old < 0) continue;
            save_entry(il, old, c);
        }
}

void RingStorage::save_layers(const std::vector<int64_t>& limits, int64_t next, RingCheckpoint& c) const {
    for (int64_t il = 0; il < n_layer_; ++il) {
        if (il >= int64_t(limits.size()) || limits[size_t(il)] <= 0) continue;
        for (int64_t p : layers_[size_t(il)].positions) {
            if (p < 0 || p >= next) continue;
            save_entry(il, p, c);
        }
    }
}

void RingStorage::relayout(const std::vector<int64_t>& capacities) {
    // A ring that wrapped keeps position p in slot sinks + (p - sinks) % (S_l - sinks): with a new S_l the
    // slot changes, so each live position's rows are copied to the slot slot_of() gives it afterwards. A
    // layer given fewer slots keeps its newest positions.
    std::vector<Layer> old_layers = layers_;
    std::vector<int64_t> oldest_kept(size_t(n_layer_), 0);
    for (int64_t il = 0; il < n_layer_; ++il) {
        const std::vector<int64_t>& held = old_layers[size_t(il)].positions;
        const int64_t newest = held.empty() ? -1 : *std::max_element(held.begin(), held.end());
        if (capacities[size_t(il)] < old_layers[size_t(il)].capacity) oldest_kept[size_t(il)] = newest - capacities[size_t(il)] + 1;
    }
    int64_t total = 0;
    for (int64_t il = 0; il < n_layer_; ++il) {
        Layer& l = layers_[size_t(il)];
        l.capacity = capacities[size_t(il)];
        l.base = total;
        total += n_head_ * l.capacity;
        l.positions.assign(size_t(l.capacity), -1);
    }
    auto regrow = [&](HugePageVector<unsigned char>& old, int64_t bytes) {
        HugePageVector<unsigned char> grown(size_t(total * bytes));
        for (int64_t il = 0; il < n_layer_ && bytes > 0; ++il) {
            const Layer &from = old_layers[size_t(il)], &to = layers_[size_t(il)];
            for (int64_t old_slot = 0; old_slot < from.capacity; ++old_slot) {
                const int64_t p = from.positions[size_t(old_slot)];
                if (p < 0 || p < oldest_kept[size_t(il)]) continue;
                for (int64_t h = 0; h < n_head_; ++h)
                    std::copy_n(old.begin() + (from.base + h * from.capacity + old_slot) * bytes, bytes,
                                grown.begin() + (to.base + h * to.capacity + slot_in(to.capacity, p)) * bytes);
            }
        }
        old = std::move(grown);
    };
    regrow(k_, key_bytes_);
    regrow(v_, value_bytes_);
    for (int64_t il = 0; il < n_layer_; ++il) {
        const Layer& from = old_layers[size_t(il)];
        Layer& to = layers_[size_t(il)];
        for (int64_t p : from.positions)
            if (p >= 0 && p >= oldest_kept[size_t(il)]) to.positions[size_t(slot_in(to.capacity, p))] = p;
    }
}

void RingStorage::set_layer_limits(const std::vector<int64_t>& limits) {
    std::vector<int64_t> capacities(size_t(n_layer_), 0);
    bool changed = false;
    for (int64_t il = 0; il < n_layer_; ++il) {
        Layer& l = layers_[size_t(il)];
        l.limit = limits.empty() ? 0 : limits[size_t(il)];
        capacities[size_t(il)] = l.limit > 0 ? std::min(capacity_, l.limit) : capacity_;
        changed |= capacities[size_t(il)] != l.capacity;
    }
    if (changed) relayout(capacities);
}

void RingStorage::grow(int64_t capacity) {
    if (capacity <= capacity_) return;
    const std::vector<int64_t> old_positions = std::move(slot_positions_);
    capacity_ = capacity;
    slot_positions_.assign(size_t(capacity), -1);
    for (int64_t p : old_positions)
        if (p >= 0) slot_positions_[size_t(slot_of(p))] = p;
    std::vector<int64_t> capacities(size_t(n_layer_), 0);
    for (int64_t il = 0; il < n_layer_; ++il) {
        const Layer& l = layers_[size_t(il)];
        capacities[size_t(il)] = l.limit > 0 ? std::min(capacity, l.limit) : capacity;
    }
    relayout(capacities);
}

void RingStorage::forget_from(int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
        const int64_t slot = slot_of(p);
        if (slot_positions_[size_t(slot)] == p) slot_positions_[size_t(slot)] = -1;
        for (Layer& l : layers_) {
            int64_t& held = l.positions[size_t(slot_in(l.capacity, p))];
            if (held == p) held = -1;
        }
    }
}

void RingStorage::reset() {
    std::fill(slot_positions_.begin(), slot_positions_.end(), -1);
    for (Layer& l : layers_) std::fill(l.positions.begin(), l.positions.end(), -1);
}

}  // namespace kvscope
