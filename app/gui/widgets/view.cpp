#include "widgets/view.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/errors.h"
#include "logic/derived_views.h"
#include "run/options.h"
#include "widgets/gl.h"

namespace kvscope::gui {
namespace {
constexpr size_t kMaxEntries = 256;  // maps, tiles and K/V textures; bytes are bounded by kTileBudget
constexpr int kTile = 100, kMaskTile = 99;  // Entry::kind of tiles: kTile + values kind; the mask alone

// Bytes an entry holds: its map's cells, its texture, its pooled texels.
int64_t entry_bytes(const AttentionMap* m, int64_t texels, const PooledMap* p) {
    int64_t b = texels * 8;  // RG32F
    if (m) b += int64_t(m->scores.size() * 4 + m->weights.size() * 4 + m->visible.size() + m->output.size() * 4);
    if (p) b += p->bytes();
    return b;
}

// What a tile shows, from a full (small) map: cross-attention and the encoder's maps are source-sized.
PooledMap pool_map(const AttentionMap& m, bool scores, bool row_norm, const MapWindow& w) {
    std::vector<float> v = scores ? m.scores : m.weights;  // (R, P)
    if (row_norm)
        for (int64_t r = 0; r < m.n_query; ++r) {
            float mx = 0;
            for (int64_t c = 0; c < m.n_key; ++c)
                if (m.visible[size_t(r * m.n_key + c)]) mx = std::max(mx, std::fabs(v[size_t(r * m.n_key + c)]));
            if (mx > 0)
                for (int64_t c = 0; c < m.n_key; ++c) v[size_t(r * m.n_key + c)] /= mx;
        }
    return max_pool(v.data(), m.visible.data(), m.n_query, m.n_key, w);
}

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

MapExtent map_extent(const Trace& trace, size_t step, AttentionKind kind) {
    const StepRecord& r = trace[step];
    MapExtent e;
    const int64_t S = r.rows.encoder ? r.rows.encoder->n_source() : 0;
    switch (kind) {
    case AttentionKind::Encoder: return {S, S, 0, 0};
    case AttentionKind::Cross: return {r.cost.n_rows_computed, S, r.cost.first_computed_position, 0};
    case AttentionKind::Self: break;
    }
    e.n_query = r.cost.n_rows_computed;
    e.first_query = r.cost.first_computed_position;
    e.first_key = first_key_position(r);
    e.n_key = e.first_query + e.n_query - e.first_key;
    return e;
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
            entries_.front().used_frame = frame_;
            return &entries_.front();
        }
    return nullptr;
}

MapCache::Entry* MapCache::find_tile(const void* r, int64_t layer, int64_t head, int kind, const MapWindow& w) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->record.get() == r && it->layer == layer && it->head == head && it->kind == kind && it->window == w) {
            entries_.splice(entries_.begin(), entries_, it);
            entries_.front().used_frame = frame_;
            return &entries_.front();
        }
    return nullptr;
}

MapCache::Entry& MapCache::insert(Entry e) {
    e.used_frame = frame_;
    entries_.push_front(std::move(e));
    tile_bytes_ = 0;
    for (const Entry& x : entries_) tile_bytes_ += x.bytes;
    // Evict the least recently used, but never what this frame draws (an all-heads view needs every head).
    while ((entries_.size() > kMaxEntries || tile_bytes_ > kTileBudget) && entries_.back().used_frame != frame_) {
        Entry& old = entries_.back();
        Gl::release(old.tex);
        if (old.computing.valid()) dropped_.push_back(old.computing);
        if (old.pooling.valid()) dropped_tiles_.push_back(old.pooling);
        if (old.cancel) old.cancel->store(true);  // a tile still pooling stops at its next row
        tile_bytes_ -= old.bytes;
        entries_.pop_back();
    }
    // Forget abandoned computations once they finish (never wait for one on the UI thread).
    dropped_.remove_if([](const auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
    dropped_tiles_.remove_if([](const auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
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
    e.bytes = entry_bytes(nullptr, rows * cols, nullptr);
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
            e->bytes = entry_bytes(e->map.get(), 0, nullptr);
        } catch (const std::exception& ex) {
            error_ = render_labels(ex.what());
        }
        e->computing = {};
    }
    return e->map.get();
}

unsigned MapCache::kv_texture(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values, float* absmax) {
    const int kind = values ? 11 : 10;
    auto rec = trace.share(step);
    if (Entry* e = find(rec.get(), layer, head, kind)) {
        if (absmax) *absmax = e->absmax;
        return e->tex;
    }
    const KvSlots kv = kv_slots(trace, step, layer, head, values);  // (S, D), what the figure shows too
    if (absmax) *absmax = kv.absmax;
    return insert_texture(rec, layer, head, kind, kv.n_slot, kv.head_dim, kv.values.data(), kv.visible.data(), kv.absmax);
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

const MapTile* MapCache::finish_tile(Entry& e) {
    if (e.pooling.valid()) {
        if (e.pooling.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
            ++n_missing_;
            return nullptr;
        }
        try {
            e.tile.pooled = e.pooling.get();
            const PooledMap& p = *e.tile.pooled;
            e.tile.tex = e.tex = Gl::upload(0, p.window.out_rows(), p.window.out_cols(), p.values.data(), p.visible.data());
            e.bytes = entry_bytes(nullptr, int64_t(p.values.size()), &p);
        } catch (const std::exception& ex) {
            error_ = render_labels(ex.what());
        }
        e.pooling = {};
    }
    return e.tile.pooled ? &e.tile : nullptr;
}

const MapTile* MapCache::tile(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind,
                              bool scores, bool row_norm, const MapWindow& w) {
    if (!trace[step].recorded()) return nullptr;
    const int code = kTile + (scores ? 2 : 1) + (row_norm ? 2 : 0) + kind_offset(kind);
    auto rec = map_owner(trace, step, kind);
    Entry* e = find_tile(rec.get(), layer, head, code, w);
    if (!e) {
        Entry fresh;
        fresh.record = rec;
        fresh.layer = layer;
        fresh.head = head;
        fresh.kind = code;
        fresh.window = w;
        fresh.cancel = std::make_shared<std::atomic<bool>>(false);
        // The task owns a copy of the trace (shared, immutable records), so it outlives any snapshot.
        fresh.pooling = std::async(std::launch::async, [trace, step, layer, head, kind, scores, row_norm, w,
                                                        cancel = fresh.cancel] {
                            if (kind != AttentionKind::Self)
                                return std::make_shared<const PooledMap>(
                                    pool_map(compute_map(trace, step, layer, head, kind), scores, row_norm, w));
                            const AttentionRows rows(trace, step, layer, head);
                            return std::make_shared<const PooledMap>(pooled_attention(
                                rows, scores ? MapValues::Scores : MapValues::Weights, row_norm, w, cancel.get()));
                        }).share();
        e = &insert(std::move(fresh));
    }
    return finish_tile(*e);
}

const MapTile* MapCache::covering(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind,
                                  bool scores, bool row_norm, int64_t block_rows, int64_t block_cols, int64_t r0,
                                  int64_t r1, int64_t c0, int64_t c1) {
    if (!trace[step].recorded()) return nullptr;
    const int code = kTile + (scores ? 2 : 1) + (row_norm ? 2 : 0) + kind_offset(kind);
    const void* rec = map_owner(trace, step, kind).get();
    for (Entry& e : entries_)
        if (e.record.get() == rec && e.layer == layer && e.head == head && e.kind == code && e.tile.pooled &&
            e.window.block_rows == block_rows && e.window.block_cols == block_cols && e.window.covers(r0, r1, c0, c1)) {
            e.used_frame = frame_;
            return &e.tile;
        }
    return nullptr;
}

const MapTile* MapCache::mask_tile(const Trace& trace, size_t step, int64_t layer, const MapWindow& w) {
    if (!trace[step].recorded()) return nullptr;
    auto rec = trace.share(step);
    if (Entry* e = find_tile(rec.get(), layer, 0, kMaskTile, w)) return &e->tile;
    const MapExtent x = map_extent(trace, step, AttentionKind::Self);
    Entry fresh;
    fresh.record = rec;
    fresh.layer = layer;
    fresh.kind = kMaskTile;
    fresh.window = w;
    fresh.tile.pooled = std::make_shared<const PooledMap>(pooled_mask(*rec, layer, x.first_query, x.first_key, x.n_key, w));
    const PooledMap& p = *fresh.tile.pooled;
    fresh.tile.tex = fresh.tex = Gl::upload(0, w.out_rows(), w.out_cols(), nullptr, p.visible.data());
    fresh.bytes = entry_bytes(nullptr, int64_t(p.values.size()), &p);
    return &insert(std::move(fresh)).tile;
}

bool MapCache::cell(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind, int64_t row,
                    int64_t col, MapCell& out) {
    if (!trace[step].recorded()) return false;
    if (kind != AttentionKind::Self) {  // source-sized maps: read the full map
        const AttentionMap* m = map(trace, step, layer, head, kind);
        if (!m || row >= m->n_query || col >= m->n_key) return false;
        const size_t i = size_t(row * m->n_key + col);
        out = {m->scores[i], m->weights[i], m->visible[i] != 0};
        return true;
    }
    std::shared_ptr<const void> owner = trace.share(step);
    const RowKey key{owner.get(), layer, head, row, int(kind)};
    if (!(key == row_key_)) {
        // One row of the map: P scores and weights, a fraction of a millisecond even at 8192 keys.
        try {
            const AttentionRows rows(trace, step, layer, head);
            if (row < 0 || row >= rows.n_query()) return false;
            row_scores_.resize(size_t(rows.n_key()));
            row_weights_.resize(size_t(rows.n_key()));
            row_visible_.resize(size_t(rows.n_key()));
            rows.row(row, row_scores_.data(), row_visible_.data(), row_weights_.data(), nullptr);
        } catch (const std::exception& ex) {
            error_ = render_labels(ex.what());
            return false;
        }
        row_key_ = key;
        row_owner_ = std::move(owner);
    }
    if (col < 0 || col >= int64_t(row_scores_.size())) return false;
    out = {row_scores_[size_t(col)], row_weights_[size_t(col)], row_visible_[size_t(col)] != 0};
    return true;
}

void MapCache::clear() {
    for (Entry& e : entries_) {
        Gl::release(e.tex);
        if (e.computing.valid()) dropped_.push_back(e.computing);
        if (e.pooling.valid()) dropped_tiles_.push_back(e.pooling);
        if (e.cancel) e.cancel->store(true);
    }
    entries_.clear();
    tile_bytes_ = 0;
    row_key_ = {};
    row_owner_.reset();
}

}  // namespace kvscope::gui
