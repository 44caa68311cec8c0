#include "cache/visibility.h"

#include <algorithm>

namespace kvscope {

int64_t CacheWindow::oldest_needed(int64_t q) const { return std::max(sinks, visible_from(q)); }

int64_t CacheWindow::used(int64_t next_position, int64_t capacity) const {
    return std::min(visible_keys(next_position).count() - 1, capacity);  // every visible key but the query's own
}

bool EvictionFlags::set(int64_t r, int64_t s) {
    if (flags_.empty()) flags_.assign(size_t(rows_ * slots_), 0);
    uint8_t& f = flags_[index(r, s)];
    if (f) return false;
    f = 1;
    ++count_;
    return true;
}

bool EvictionFlags::clear(int64_t r, int64_t s) {
    if (count_ == 0) return false;
    uint8_t& f = flags_[index(r, s)];
    if (!f) return false;
    f = 0;
    --count_;
    return true;
}

void EvictionFlags::save_slot(int64_t s, std::vector<uint8_t>& out) const {
    if (flags_.empty()) return;
    for (int64_t r = 0; r < rows_; ++r) out.push_back(flags_[index(r, s)]);
}

void EvictionFlags::load_slot(int64_t s, const uint8_t* in) {
    if (flags_.empty()) return;
    for (int64_t r = 0; r < rows_; ++r) flags_[index(r, s)] = in ? in[r] : 0;
}

bool EvictionFlags::all_set(int64_t r, int64_t s0, int64_t s1) const {
    if (count_ == 0) return false;
    for (int64_t s = s0; s < s1; ++s)
        if (!flags_[index(r, s)]) return false;
    return true;
}

void EvictionFlags::reset() {
    std::fill(flags_.begin(), flags_.end(), uint8_t(0));
    count_ = 0;
}

}  // namespace kvscope
