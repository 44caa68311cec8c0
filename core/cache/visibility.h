#pragma once
// Which cached keys a query sees: the window and sink rule, and the eviction flags attention honours.
// One of the three parts a KvCache composes (kv_cache.h); it knows positions and slots, not rows.
//
// The window (attention.h visible_keys): causal; with a window W a query at q sees q-W+1 .. q, plus with
// `sinks` S the first S positions (StreamingLLM's attention sinks). Sinks count only with a window.
//   CacheWindow(W, sinks)        W = 0: every earlier position stays visible (sinks are then dropped)
//   visible_keys(q)              the keys a query at q sees; visible_from(q): lowest of its window part
//   oldest_needed(q)             lowest non-sink position a query at q sees: what the storage must keep
//   used(next, capacity)         keys the next query sees besides itself, at most capacity (fill level)
//
// Eviction flags (eviction.h policies; later by hand): one flag per (layer·head row, slot), allocated at
// the first set; an evicted key gets score -inf and weight exactly 0 in attention. The flags index slots,
// so the storage that maps positions to slots decides which flag a position has.
//   EvictionFlags(rows, slots)   rows = L·H (row il·H + h), slots = S
//   set(r, s) / clear(r, s)      returns whether the flag changed
//   test(r, s)                   is the flag set (false while nothing is evicted)
//   any() / count()              anything evicted / how many flags are set
//   row(r)                       (S) the flags of one (layer, head), as attention reads them
//   overwrite(r, s)              a new position went into the slot: its flag goes
//   save_slot(s, out)            append the slot's flag of every row (nothing while none is set)
//   load_slot(s, in)             put them back (in = nullptr: all clear)
//   drop_dead(live(s))           clear the flags of slots whose position is gone; recount
//   all_set(r, s0, s1)           every flag of row r in slots s0 .. s1-1 is set
//   entries(position_of(s))      (il·H+h, position) of every set flag; regrid(slots, entries, slot_of(p))
//                                lays them out again for a new slot count (growing a ring moves positions;
//                                slot_of -1: the entry is dropped)
//   reset()                      all clear (storage kept)
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace kvscope {

struct CacheWindow {
    int64_t window = 0, sinks = 0;
    SinkPositions sink_positions = SinkPositions::Text;

    CacheWindow() = default;
    CacheWindow(int64_t w, int64_t s) : window(w), sinks(w > 0 ? s : 0) {}
    KeyRange visible_keys(int64_t q) const { return kvscope::visible_keys(q, window, sinks, sink_positions); }
    int64_t visible_from(int64_t q) const { return visible_keys(q).lo; }
    int64_t oldest_needed(int64_t q) const;
    int64_t used(int64_t next_position, int64_t capacity) const;
};

class EvictionFlags {
public:
    EvictionFlags() = default;
    EvictionFlags(int64_t rows, int64_t slots) : rows_(rows), slots_(slots) {}

    bool set(int64_t r, int64_t s);
    bool clear(int64_t r, int64_t s);
    bool test(int64_t r, int64_t s) const { return count_ > 0 && flags_[index(r, s)] != 0; }
    bool any() const { return count_ > 0; }
    int64_t count() const { return count_; }
    const uint8_t* row(int64_t r) const { return flags_.data() + size_t(r * slots_); }
    void overwrite(int64_t r, int64_t s) {
        if (count_ == 0) return;
        uint8_t& f = flags_[index(r, s)];
        count_ -= f;
        f = 0;
    }
    void save_slot(int64_t s, std::vector<uint8_t>& out) const;
    void load_slot(int64_t s, const uint8_t* in);
    template <class Live>
    void drop_dead(Live live);
    bool all_set(int64_t r, int64_t s0, int64_t s1) const;
    template <class PositionOf>
    std::vector<int64_t> entries(PositionOf position_of) const;  // (n, 2) row, position
    template <class SlotOf>
    void regrid(int64_t slots, const std::vector<int64_t>& entries, SlotOf slot_of);
    void reset();

private:
    size_t index(int64_t r, int64_t s) const { return size_t(r * slots_ + s); }
    int64_t rows_ = 0, slots_ = 0;
    std::vector<uint8_t> flags_;  // (rows, slots) 1 = evicted; empty until a first set
    int64_t count_ = 0;
};

template <class Live>
void EvictionFlags::drop_dead(Live live) {
    count_ = 0;
    if (flags_.empty()) return;
    for (int64_t s = 0; s < slots_; ++s) {
        const bool alive = live(s);
        for (int64_t r = 0; r < rows_; ++r) {
            uint8_t& f = flags_[index(r, s)];
            if (f && !alive) f = 0;
            count_ += f;
        }
    }
}

template <class PositionOf>
std::vector<int64_t> EvictionFlags::entries(PositionOf position_of) const {
    std::vector<int64_t> out;
    for (int64_t r = 0; r < rows_ && count_ > 0; ++r)
        for (int64_t s = 0; s < slots_; ++s)
            if (flags_[index(r, s)]) out.insert(out.end(), {r, position_of(s)});
    return out;
}

template <class SlotOf>
void EvictionFlags::regrid(int64_t slots, const std::vector<int64_t>& entries, SlotOf slot_of) {
    const bool allocated = !flags_.empty();
    slots_ = slots;
    count_ = 0;
    flags_.clear();
    if (!allocated) return;
    flags_.assign(size_t(rows_ * slots_), 0);
    for (size_t i = 0; i < entries.size(); i += 2)
        if (const int64_t s = slot_of(entries[i + 1]); s >= 0) set(entries[i], s);
}

}  // namespace kvscope
