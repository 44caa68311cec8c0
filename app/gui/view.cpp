#include "view.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "errors.h"
#include "gl.h"

namespace kvscope::gui {
namespace {
constexpr size_t kMaxEntries = 64;  // 12 heads x (map + texture) plus the K/V views, with room to spare

int kind_offset(AttentionKind k) { return k == AttentionKind::Cross ? 20 : k == AttentionKind::Encoder ? 40 : 0; }

// What identifies a map: the step record, or for the encoder's own attention the encoder output the
// step read (every step of one source shares it).
std::shared_ptr<const void> map_owner(const Trace& trace, size_t step, AttentionKind kind) {
    if (kind == AttentionKind::Encoder && trace[step].rows.encoder) return trace[step].rows.encoder;
    return trace.share(step);
}

AttentionMap compute_map(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind) {
    switch (kind) {
    case AttentionKind::Cross: return cross_attention_map(trace, step, layer, head);
    case AttentionKind::Encoder:
        if (!trace[step].rows.encoder)
            throw UsageError("step " + std::to_string(step) + " has no encoder: a decoder-only model");
        return encoder_attention_map(*trace[step].rows.encoder, layer, head);
    case AttentionKind::Self: break;
    }
    return attention_map(trace, step, layer, head);
}
}  // namespace

const char* attention_kind_name(AttentionKind k) {
    switch (k) {
    case AttentionKind::Cross: return "cross";
    case AttentionKind::Encoder: return "encoder";
    case AttentionKind::Self: break;
    }
    return "self";
}

const StepRecord* viewed_step(const Snapshot& s, const ViewPrefs& prefs, size_t* index) {
    const Trace& t = s.trace();
    if (t.empty()) return nullptr;
    size_t i = prefs.view_step < 0 || size_t(prefs.view_step) >= t.size() ? t.size() - 1 : size_t(prefs.view_step);
    if (index) *index = i;
    return &t[i];
}

MapCache::Entry* MapCache::find(const void* r, int64_t layer, int64_t head, int kind) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->record.get() == r && it->layer == layer && it->head == head && it->kind == kind) {
            entries_.splice(entries_.begin(), entries_, it);
            return &entries_.front();
        }
    return nullptr;
}

MapCache::Entry& MapCache::insert(Entry e) {
    entries_.push_front(std::move(e));
    while (entries_.size() > kMaxEntries) {
        Gl::release(entries_.back().tex);
        if (entries_.back().computing.valid()) dropped_.push_back(entries_.back().computing);
        entries_.pop_back();
    }
    // Forget abandoned computations once they finish (never wait for one on the UI thread).
    dropped_.remove_if([](const auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
    return entries_.front();
}

unsigned MapCache::insert_texture(std::shared_ptr<const void> record, int64_t layer, int64_t head, int kind,
                                  int64_t rows, int64_t cols, const float* values, const uint8_t* visible, float absmax) {
    Entry e;
    e.record = std::move(record);
    e.layer = layer;
    e.head = head;
    e.kind = kind;
    e.absmax = absmax;
    e.tex = Gl::upload(0, rows, cols, values, visible);
    return insert(std::move(e)).tex;
}

const AttentionMap* MapCache::map(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind) {
    auto rec = map_owner(trace, step, kind);
    Entry* e = find(rec.get(), layer, head, kind_offset(kind));
    if (!e) {
        Entry fresh;
        fresh.record = rec;
        fresh.layer = layer;
        fresh.head = head;
        fresh.kind = kind_offset(kind);
        // The task owns a copy of the trace (shared, immutable records), so it outlives any snapshot.
        fresh.computing = std::async(std::launch::async, [trace, step, layer, head, kind] {
                              return std::shared_ptr<const AttentionMap>(
                                  std::make_shared<AttentionMap>(compute_map(trace, step, layer, head, kind)));
                          }).share();
        e = &insert(std::move(fresh));
    }
    if (e->computing.valid()) {
        if (e->computing.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
            ++n_missing_;
            return nullptr;
        }
        try {
            e->map = e->computing.get();
        } catch (const std::exception& ex) {
            error_ = ex.what();
        }
        e->computing = {};
    }
    return e->map.get();
}

unsigned MapCache::texture(const Trace& trace, size_t step, int64_t layer, int64_t head, bool scores, bool row_norm,
                           AttentionKind which) {
    if (!trace[step].recorded()) return 0;
    const int kind = (scores ? 2 : 1) + (row_norm ? 2 : 0) + kind_offset(which);
    auto rec = map_owner(trace, step, which);
    if (Entry* e = find(rec.get(), layer, head, kind)) return e->tex;
    const AttentionMap* mp = map(trace, step, layer, head, which);
    if (!mp) return 0;
    const AttentionMap& m = *mp;
    std::vector<float> v = scores ? m.scores : m.weights;  // (R, P)
    if (row_norm)
        for (int64_t r = 0; r < m.n_query; ++r) {
            float mx = 0;
            for (int64_t c = 0; c < m.n_key; ++c)
                if (m.visible[size_t(r * m.n_key + c)]) mx = std::max(mx, std::fabs(v[size_t(r * m.n_key + c)]));
            if (mx > 0)
                for (int64_t c = 0; c < m.n_key; ++c) v[size_t(r * m.n_key + c)] /= mx;
        }
    return insert_texture(rec, layer, head, kind, m.n_query, m.n_key, v.data(), m.visible.data(), 0.0f);
}

unsigned MapCache::kv_texture(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values, float* absmax) {
    const int kind = values ? 11 : 10;
    auto rec = trace.share(step);
    if (Entry* e = find(rec.get(), layer, head, kind)) {
        if (absmax) *absmax = e->absmax;
        return e->tex;
    }
    const StepRecord& r = *rec;
    const int64_t S = r.cache.capacity, D = r.rows.head_dim;
    std::vector<float> kv(size_t(S * D), 0.0f);  // (S, D)
    std::vector<uint8_t> visible(size_t(S * D), 0);
    float mx = 0;
    for (int64_t slot = 0; slot < S; ++slot) {
        const int64_t p = r.cache.slot_positions[size_t(slot)];
        if (p < 0) continue;
        const float* row = values ? trace.value_row(step, layer, head, p) : trace.key_row(step, layer, head, p);
        if (!row) continue;
        for (int64_t d = 0; d < D; ++d) {
            kv[size_t(slot * D + d)] = row[d];
            visible[size_t(slot * D + d)] = 1;
            mx = std::max(mx, std::fabs(row[d]));
        }
    }
    if (absmax) *absmax = mx;
    return insert_texture(rec, layer, head, kind, S, D, kv.data(), visible.data(), mx);
}

unsigned MapCache::cross_kv_texture(std::shared_ptr<const EncoderOutput> enc, int64_t layer, int64_t head, bool values,
                                    float* absmax) {
    const int kind = (values ? 11 : 10) + kind_offset(AttentionKind::Cross);
    if (Entry* e = find(enc.get(), layer, head, kind)) {
        if (absmax) *absmax = e->absmax;
        return e->tex;
    }
    const int64_t S = enc->n_source(), D = enc->head_dim;
    std::vector<float> kv(size_t(S * D));  // (S, D)
    float mx = 0;
    for (int64_t s = 0; s < S; ++s) {
        const float* row = values ? enc->cross_value(layer, head, s) : enc->cross_key(layer, head, s);
        for (int64_t d = 0; d < D; ++d) {
            kv[size_t(s * D + d)] = row[d];
            mx = std::max(mx, std::fabs(row[d]));
        }
    }
    if (absmax) *absmax = mx;
    return insert_texture(enc, layer, head, kind, S, D, kv.data(), nullptr, mx);
}

void MapCache::clear() {
    for (Entry& e : entries_) {
        Gl::release(e.tex);
        if (e.computing.valid()) dropped_.push_back(e.computing);
    }
    entries_.clear();
}

}  // namespace kvscope::gui
