#pragma once
// The cache edits of one Session applied since its last step (cache_edit.h), with what each changed so
// step_back can put it back exactly. Session::apply_edit validates an edit and measures its effect; this
// log does the writing and the undoing on the cache. Callers read it through Session::parts().edits.
//
//   changes(cache, edit, L, K)  (n, 2) layer, K/V head pairs the edit would change; UsageError when none
//   apply(cache, edit, undo)    write the edit into the cache, keeping in `undo` what it overwrote
//   record(r)                   the applied edit's record (its measured effect), oldest first
//   undo_newest(cache)          put the newest edit back and forget it
//   newest_after(n_turns)       the newest change of the session is an edit made after turn n_turns - 1
//   logits_before()             (V) the next step's logits before the first pending edit
//   pending()                   the records, oldest first; clear() forgets them (the step took them)
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/cache_edit.h"
#include "cache/kv_cache.h"

namespace kvscope {

struct EditUndo {                        // what one edit changed, to put it back
    std::vector<int32_t> entries;        // (n, 2) layer, K/V head changed
    std::vector<float> rows;             // Patch: (n, 2, D) the rows before
    std::vector<uint8_t> flags;          // Patch: (n) the evicted flags before
    std::vector<float> logits_before;    // (V) the next step's logits before any pending edit
    size_t n_turns = 0;                  // the session's turns when applied (step_back order beside append_turn)
};

class EditLog {
public:
    static std::vector<int32_t> changes(const KvCache& cache, const CacheEdit& edit, int64_t n_layer, int64_t n_kv_head);
    void apply(KvCache& cache, const CacheEdit& edit, EditUndo undo);
    void record(CacheEditRecord r) { pending_.push_back(std::move(r)); }
    void undo_newest(KvCache& cache);
    bool newest_after(size_t n_turns) const { return !undo_.empty() && undo_.back().n_turns == n_turns; }
    const std::vector<float>& logits_before() const { return undo_.front().logits_before; }
    bool empty() const { return undo_.empty(); }
    const std::vector<CacheEditRecord>& pending() const { return pending_; }
    void clear();

private:
    std::vector<CacheEditRecord> pending_;  // one per applied edit whose record is complete
    std::vector<EditUndo> undo_;            // one per applied edit
};

}  // namespace kvscope
