#include "run/edit_log.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "base/errors.h"

namespace kvscope {

std::vector<int32_t> EditLog::changes(const KvCache& cache, const CacheEdit& edit, int64_t L, int64_t K) {
    const int64_t p = edit.position;
    std::vector<int32_t> entries;
    for (int64_t il = std::max<int64_t>(edit.layer, 0); il < (edit.layer < 0 ? L : edit.layer + 1); ++il)
        for (int64_t h = std::max<int64_t>(edit.kv_head, 0); h < (edit.kv_head < 0 ? K : edit.kv_head + 1); ++h) {
            const bool flagged = cache.rows(il, h).evicted(p);
            if ((edit.kind == CacheEditKind::Evict && flagged) || (edit.kind == CacheEditKind::Restore && !flagged))
                continue;
            // A sliding layer that no longer stores p has no row to patch (and no query of it sees p).
            if (edit.kind == CacheEditKind::Patch && !stores(cache, il, p)) continue;
            entries.insert(entries.end(), {int32_t(il), int32_t(h)});
        }
    if (entries.empty() && edit.kind == CacheEditKind::Patch)
        throw UsageError("position " + std::to_string(p) + " has left the window of every layer asked (the model's "
                         "sliding layers store only their window): nothing to patch");
    if (entries.empty())
        throw UsageError("position " + std::to_string(p) +
                         (edit.kind == CacheEditKind::Evict ? " is already evicted in every layer and head asked: nothing to evict"
                                                            : " is not evicted in any layer and head asked: nothing to restore"));
    return entries;
}

void EditLog::apply(KvCache& cache, const CacheEdit& edit, EditUndo u) {
    const int64_t D = cache.shape().head_dim, K = cache.shape().n_head, p = edit.position;
    const size_t n = u.entries.size() / 2;
    if (edit.kind == CacheEditKind::Patch) {
        u.rows.resize(n * 2 * size_t(D));
        u.flags.resize(n);
    }
    for (size_t i = 0; i < n; ++i) {
        const int64_t il = u.entries[2 * i], h = u.entries[2 * i + 1];
        switch (edit.kind) {
            case CacheEditKind::Evict: cache.set_evicted(il, h, p, true); break;
            case CacheEditKind::Restore: cache.set_evicted(il, h, p, false); break;
            case CacheEditKind::Patch: {
                float* old = u.rows.data() + i * 2 * size_t(D);
                cache.rows(il, h).copy_key(p, old);
                cache.rows(il, h).copy_value(p, old + D);
                u.flags[i] = cache.rows(il, h).evicted(p) ? 1 : 0;
                const float* k = edit.rows.data() + size_t(((il * 2 + 0) * K + h) * D);
                const float* v = edit.rows.data() + size_t(((il * 2 + 1) * K + h) * D);
                cache.write(il, h, p, k, v);  // clears the flag: a patch changes rows only, so set it again
                if (u.flags[i]) cache.set_evicted(il, h, p, true);
                break;
            }
        }
    }
    undo_.push_back(std::move(u));
}

void EditLog::undo_newest(KvCache& cache) {
    assert(!pending_.empty() && pending_.size() == undo_.size() && "undo_newest: record the edit first");
    const CacheEdit& e = pending_.back().edit;
    const EditUndo& u = undo_.back();
    const int64_t D = cache.shape().head_dim, p = e.position;
    for (size_t i = u.entries.size() / 2; i-- > 0;) {
        const int64_t il = u.entries[2 * i], h = u.entries[2 * i + 1];
        switch (e.kind) {
            case CacheEditKind::Evict: cache.set_evicted(il, h, p, false); break;
            case CacheEditKind::Restore: cache.set_evicted(il, h, p, true); break;
            case CacheEditKind::Patch: {
                const float* old = u.rows.data() + i * 2 * size_t(D);
                cache.write(il, h, p, old, old + D);
                if (u.flags[i]) cache.set_evicted(il, h, p, true);
                break;
            }
        }
    }
    pending_.pop_back();
    undo_.pop_back();
}

void EditLog::clear() {
    pending_.clear();
    undo_.clear();
}

}  // namespace kvscope
