#include "kv_cache.h"

#include <algorithm>
#include <cstring>

#include "errors.h"

namespace kvscope {

KvCache::KvCache(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, int64_t window)
    : n_layer_(n_layer), n_head_(n_head), head_dim_(head_dim), capacity_(capacity), window_(window),
      k_(size_t(n_layer * n_head * capacity * head_dim)),
      v_(size_t(n_layer * n_head * capacity * head_dim)),
      slot_positions_(size_t(capacity), -1) {}

int64_t KvCache::visible_from(int64_t query_position) const {
    return window_ > 0 ? std::max<int64_t>(0, query_position - window_ + 1) : 0;
}

int64_t KvCache::used() const {
    const int64_t alive = next_position_ - visible_from(next_position_);
    return std::min(alive, capacity_);
}

bool KvCache::fits(int64_t n_new) const {
    const int64_t oldest_needed = visible_from(next_position_);
    return next_position_ + n_new - oldest_needed <= capacity_;
}

void KvCache::require_fits(int64_t n_new) const {
    if (fits(n_new)) return;
    const int64_t oldest_needed = visible_from(next_position_);
    throw UsageError("a chunk of " + std::to_string(n_new) + " tokens at position " +
                     std::to_string(next_position_) + " needs " +
                     std::to_string(next_position_ + n_new - oldest_needed) + " cache slots, the cache has " +
                     std::to_string(capacity_));
}

const float* KvCache::key(int64_t il, int64_t h, int64_t position) const {
    return k_.data() + offset(il, h, position % capacity_);
}

const float* KvCache::value(int64_t il, int64_t h, int64_t position) const {
    return v_.data() + offset(il, h, position % capacity_);
}

void KvCache::write(int64_t il, int64_t h, int64_t position, const float* k, const float* v) {
    const int64_t slot = position % capacity_;
    std::memcpy(k_.data() + offset(il, h, slot), k, size_t(head_dim_) * sizeof(float));
    std::memcpy(v_.data() + offset(il, h, slot), v, size_t(head_dim_) * sizeof(float));
    if (il == 0 && h == 0) slot_positions_[size_t(slot)] = position;
}

void KvCache::advance(int64_t n_new) { next_position_ += n_new; }

void KvCache::reset() {
    next_position_ = 0;
    std::fill(slot_positions_.begin(), slot_positions_.end(), -1);
}

KvCacheCheckpoint KvCache::checkpoint(int64_t n_new) const {
    KvCacheCheckpoint c;
    c.next_position = next_position_;
    for (int64_t p = next_position_; p < next_position_ + n_new && p - next_position_ < capacity_; ++p) {
        const int64_t slot = p % capacity_;
        if (slot_positions_[size_t(slot)] < 0) continue;
        c.slots.push_back(slot);
        c.slot_positions.push_back(slot_positions_[size_t(slot)]);
        for (int64_t il = 0; il < n_layer_; ++il)
            for (const std::vector<float>* buf : {&k_, &v_})
                for (int64_t h = 0; h < n_head_; ++h) {
                    const float* row = buf->data() + offset(il, h, slot);
                    c.rows.insert(c.rows.end(), row, row + head_dim_);
                }
    }
    return c;
}

void KvCache::restore(const KvCacheCheckpoint& c) {
    // Slots written after the checkpoint that held nothing before become empty again.
    for (int64_t p = c.next_position; p < next_position_; ++p) {
        const int64_t slot = p % capacity_;
        if (slot_positions_[size_t(slot)] == p) slot_positions_[size_t(slot)] = -1;
    }
    const float* src = c.rows.data();
    for (size_t i = 0; i < c.slots.size(); ++i) {
        const int64_t slot = c.slots[i];
        slot_positions_[size_t(slot)] = c.slot_positions[i];
        for (int64_t il = 0; il < n_layer_; ++il)
            for (std::vector<float>* buf : {&k_, &v_})
                for (int64_t h = 0; h < n_head_; ++h) {
                    std::memcpy(buf->data() + offset(il, h, slot), src, size_t(head_dim_) * sizeof(float));
                    src += head_dim_;
                }
    }
    next_position_ = c.next_position;
}

}  // namespace kvscope
