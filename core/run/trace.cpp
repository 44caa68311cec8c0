#include "run/trace.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/errors.h"
#include "forward/layers.h"
#include "kernels/attention.h"
#include "model/rotary.h"

namespace kvscope {

const char* probe_name(Probe p) {
    switch (p) {
        case Probe::Query: return "q";
        case Probe::Key: return "k";
        case Probe::Value: return "v";
        case Probe::Scores: return "scores";
        case Probe::Mask: return "mask";
        case Probe::Weights: return "weights";
        case Probe::Logits: return "logits";
    }
    return "?";
}

const char* phase_name(Phase p) { return p == Phase::Prefill ? "prefill" : "decode"; }

KeyRange StepRecord::visible_keys(int64_t query_position) const {
    return kvscope::visible_keys(query_position, id.window, id.sinks, id.sink_positions);
}

KeyRange StepRecord::visible_keys(int64_t query_position, int64_t il) const {
    return within_window(visible_keys(query_position), query_position, rows.window_of(il));
}

MaskRule StepRecord::mask_rule(int64_t il) const {
    MaskRule m;
    m.cache_window = id.window;
    m.sinks = id.window > 0 ? id.sinks : 0;
    m.layer_window = rows.window_of(il);
    return m;
}

std::string MaskRule::name() const {
    const int64_t W = window();
    if (W == 0) return "causal";
    std::string s = "window " + std::to_string(W);
    if (sinks > 0) s += " with sinks 0.." + std::to_string(sinks - 1);
    return s;
}

// visible_keys then within_window (attention.h): sinks count only where the session's window drops them,
// so a layer window narrower than the session's hides a sink that the session's window still covers.
std::string MaskRule::formula() const {
    const int64_t W = window();
    if (W == 0) return "k <= q";
    const std::string w = "k > q - " + std::to_string(W);
    if (sinks == 0) return "k <= q and " + w;
    const std::string s = "k < " + std::to_string(sinks);
    if (!own_window()) return "k <= q and (" + w + " or " + s + ")";
    return "k <= q and (" + w + " or (" + s + " and k <= q - " + std::to_string(cache_window) + "))";
}

int64_t StepRecord::visible_from(int64_t query_position) const { return visible_keys(query_position).lo; }

int64_t shift_cache_hidden_pairs(int64_t p, int64_t n, int64_t window) {
    if (window <= 0) return 0;
    if (n > window) return -1;
    // That cache holds positions p-min(p,W) .. p-1, and shifts out the oldest so the chunk fits in W
    // slots: afterwards it holds p+n-W .. p+n-1, and every query of the chunk sees only those.
    const int64_t kept_from = std::max<int64_t>(0, p + n - window);
    int64_t hidden = 0;
    for (int64_t r = 0; r < n; ++r) hidden += std::max<int64_t>(0, kept_from - std::max<int64_t>(0, p + r - window + 1));
    return hidden;
}

void Trace::append(std::shared_ptr<const StepRecord> step) { steps_.push_back(std::move(step)); }

void Trace::truncate(size_t n_steps) {
    if (n_steps < steps_.size()) steps_.resize(n_steps);
}

const float* Trace::row(bool key, size_t as_of, int64_t il, int64_t h, int64_t position) const {
    for (size_t s = std::min(as_of + 1, steps_.size()); s-- > 0;) {
        const StepRecord& r = *steps_[s];
        const RecordedRows& rows = r.rows;
        const int64_t C = rows.n_head * rows.head_dim;
        const int64_t i = position - r.cost.first_computed_position;
        if (r.recorded() && i >= 0 && i < r.cost.n_rows_computed)
            return (key ? rows.k : rows.v).data() + (il * r.cost.n_rows_computed + i) * C + h * rows.head_dim;
        const int64_t a = position - r.id.first_position;
        if (!rows.k_adopted.empty() && a >= 0 && a < r.cost.n_adopted)
            return (key ? rows.k_adopted : rows.v_adopted).data() + (il * r.cost.n_adopted + a) * C + h * rows.head_dim;
        // A patch made before step s wrote the row the cache held from then on (cache_edit.h, (L, 2, K, D)).
        const int64_t K = rows.n_kv_head > 0 ? rows.n_kv_head : rows.n_head, kv = h / (rows.n_head / K);
        for (auto e = r.edits.rbegin(); e != r.edits.rend(); ++e) {
            const CacheEdit& p = e->edit;
            if (p.kind == CacheEditKind::Patch && p.position == position && (p.layer < 0 || p.layer == il) &&
                (p.kv_head < 0 || p.kv_head == kv))
                return p.rows.data() + ((il * 2 + (key ? 0 : 1)) * K + kv) * rows.head_dim;
        }
    }
    return nullptr;
}

const float* Trace::key_row(size_t as_of, int64_t il, int64_t h, int64_t position) const {
    return row(true, as_of, il, h, position);
}

const float* Trace::value_row(size_t as_of, int64_t il, int64_t h, int64_t position) const {
    return row(false, as_of, il, h, position);
}

int64_t Trace::memory_bytes() const {
    int64_t bytes = 0;
    for (const auto& s : steps_) {
        const RecordedRows& rows = s->rows;
        const size_t floats = rows.q.size() + rows.k.size() + rows.v.size() + rows.k_adopted.size() +
                              rows.v_adopted.size() + rows.cross_q.size() + rows.residual.size() +
                              s->prediction.logits.size();
        bytes += int64_t(sizeof(StepRecord)) + int64_t(floats * sizeof(float)) +
                 int64_t(s->cache.slot_positions.size() * sizeof(int64_t) + s->id.tokens.size() * sizeof(TokenId) +
                         s->prediction.top.size() * sizeof(TokenProbability));
    }
    return bytes;
}

int64_t first_key_position(const StepRecord& r) {
    const int64_t first_q = r.cost.first_computed_position;
    return r.visible_keys(first_q).n_sink > 0 ? 0 : r.visible_from(first_q);
}

AttentionRows::AttentionRows(const Trace& trace, size_t step, int64_t layer, int64_t head) : layer_(layer), head_(head) {
    if (step >= trace.size()) throw UsageError("step " + std::to_string(step) + " is not in the trace");
    const StepRecord& r = trace[step];
    r_ = &r;
    if (!r.recorded()) throw UsageError("step " + std::to_string(step) + " was run without recording");
    if (layer < 0 || layer >= r.rows.n_layer || head < 0 || head >= r.rows.n_head)
        throw UsageError("layer " + std::to_string(layer) + ", head " + std::to_string(head) + " does not exist");
    n_query_ = r.cost.n_rows_computed;
    first_query_ = r.cost.first_computed_position;
    const int64_t last_q = first_query_ + n_query_ - 1;
    first_key_ = first_key_position(r);
    n_key_ = last_q - first_key_ + 1;
    keys_.resize(size_t(n_key_));
    values_.resize(size_t(n_key_));
    for (int64_t j = 0; j < n_key_; ++j) {
        keys_[size_t(j)] = trace.key_row(step, layer, head, first_key_ + j);
        values_[size_t(j)] = trace.value_row(step, layer, head, first_key_ + j);
        if (!keys_[size_t(j)])
            throw UsageError("step " + std::to_string(step) + ": key of position " + std::to_string(first_key_ + j) +
                             " was computed by a step that was not recorded");
    }
    evicted_ = evicted_before(trace, step, layer, head, first_key_, n_key_);
}

std::vector<EvictionEvent> evicted_after(const Trace& trace, size_t step, int64_t il, int64_t kv) {
    std::map<int64_t, EvictionEvent> by_position;  // the latest event of each position
    for (size_t s = 0; s <= step && s < trace.size(); ++s)
        for (const EvictionEvent& e : trace[s].eviction.events)
            if (e.layer == il && e.kv_head == kv) by_position[e.position] = e;
    std::vector<EvictionEvent> in_effect;
    for (const auto& [p, e] : by_position)
        if (!e.restored) in_effect.push_back(e);
    return in_effect;
}

std::vector<uint8_t> evicted_before(const Trace& trace, size_t step, int64_t il, int64_t h, int64_t first, int64_t P) {
    std::vector<uint8_t> flags;
    if (step >= trace.size()) return flags;
    const RecordedRows& rows = trace[step].rows;
    const int64_t K = rows.n_kv_head > 0 ? rows.n_kv_head : rows.n_head;
    const int64_t kv = h / (rows.n_head / K);
    bool any = false;
    auto set = [&](int64_t position, uint8_t flag) {
        if (position < first || position >= first + P) return;
        if (flags.empty()) flags.assign(size_t(P), 0);
        flags[size_t(position - first)] = flag;
        any = true;
    };
    // In the order they happened: the edits before step s, then what s evicted after it attended.
    for (size_t s = 0; s <= step; ++s) {
        for (const CacheEditRecord& r : trace[s].edits) {
            const CacheEdit& e = r.edit;
            if (e.kind == CacheEditKind::Patch || (e.layer >= 0 && e.layer != il) || (e.kv_head >= 0 && e.kv_head != kv))
                continue;
            set(e.position, e.kind == CacheEditKind::Evict ? 1 : 0);
        }
        if (s == step) break;
        for (const EvictionEvent& e : trace[s].eviction.events)
            if (e.layer == il && e.kv_head == kv) set(e.position, e.restored ? 0 : 1);
    }
    if (any && std::find(flags.begin(), flags.end(), uint8_t(1)) == flags.end()) flags.clear();
    return flags;
}

void AttentionRows::row(int64_t i, float* scores, uint8_t* visible, float* weights, float* output) const {
    const StepRecord& r = *r_;
    const int64_t R = n_query_, P = n_key_, D = r.rows.head_dim, C = r.rows.n_head * D;
    const float scale = r.rows.attention_scale > 0 ? r.rows.attention_scale : 1.0f / std::sqrt(float(D));
    const float* q = r.rows.q.data() + (layer_ * R + i) * C + head_ * D;
    const int64_t qpos = first_query_ + i;
    const KeyRange seen = r.visible_keys(qpos, layer_);
    std::vector<float> sink_q;  // (D) the query turned back for the sinks
    const bool turned = seen.sink_shift > 0 && seen.n_sink > 0 && !r.rows.inv_freq_of(layer_).empty();
    if (turned) {
        sink_q.resize(size_t(D));
        turn_back(sink_q.data(), q, 1, D, r.rows.inv_freq_of(layer_).data(), seen.sink_shift);
    }
    for (int64_t j = 0; j < P; ++j) {
        visible[j] = seen.contains(first_key_ + j) && (evicted_.empty() || !evicted_[size_t(j)]) ? 1 : 0;
        if (scores) {
            const bool sink = turned && first_key_ + j < seen.n_sink;
            scores[j] = scaled_score(sink ? sink_q.data() : q, keys_[size_t(j)], D, scale);
        }
    }
    if (!weights && !output) return;
    std::vector<float> visible_weights(size_t(seen.count()));  // (visible keys) in position order
    std::vector<float> out_scratch(output ? 0 : size_t(D));
    auto key_at = [&](int64_t p) { return keys_[size_t(p - first_key_)]; };
    auto value_at = [&](int64_t p) { return values_[size_t(p - first_key_)]; };
    if (evicted_.empty())
        attend_row(output ? output : out_scratch.data(), visible_weights.data(), q, key_at, value_at, seen, D, scale,
                   turned ? sink_q.data() : nullptr);
    else
        attend_row(output ? output : out_scratch.data(), visible_weights.data(), q, key_at, value_at, seen, D, scale,
                   turned ? sink_q.data() : nullptr, [&](int64_t p) { return evicted_[size_t(p - first_key_)] != 0; });
    if (weights) {
        std::fill(weights, weights + P, 0.0f);
        for (int64_t j = 0; j < seen.count(); ++j) weights[seen.position(j) - first_key_] = visible_weights[size_t(j)];
    }
}

AttentionMap attention_map(const Trace& trace, size_t step, int64_t layer, int64_t head) {
    const AttentionRows rows(trace, step, layer, head);
    AttentionMap m;
    m.step = int64_t(step);
    m.layer = layer;
    m.head = head;
    m.n_query = rows.n_query();
    m.n_key = rows.n_key();
    const int64_t R = m.n_query, P = m.n_key, D = trace[step].rows.head_dim;
    for (int64_t i = 0; i < R; ++i) m.query_positions.push_back(rows.first_query() + i);
    for (int64_t j = 0; j < P; ++j) m.key_positions.push_back(rows.first_key() + j);
    m.scores.assign(size_t(R * P), 0.0f);
    m.visible.assign(size_t(R * P), 0);
    m.weights.assign(size_t(R * P), 0.0f);
    m.output.assign(size_t(R * D), 0.0f);
    for (int64_t i = 0; i < R; ++i)
        rows.row(i, m.scores.data() + i * P, m.visible.data() + i * P, m.weights.data() + i * P, m.output.data() + i * D);
    return m;
}

AttentionMap cross_attention_map(const Trace& trace, size_t step, int64_t layer, int64_t head) {
    if (step >= trace.size()) throw UsageError("step " + std::to_string(step) + " is not in the trace");
    const StepRecord& r = trace[step];
    if (!r.rows.encoder)
        throw UsageError("step " + std::to_string(step) + " has no cross-attention: the model is decoder-only");
    if (r.rows.cross_q.empty()) throw UsageError("step " + std::to_string(step) + " was run without recording");
    if (layer < 0 || layer >= r.rows.n_layer || head < 0 || head >= r.rows.n_head)
        throw UsageError("layer " + std::to_string(layer) + ", head " + std::to_string(head) + " does not exist");
    const EncoderOutput& enc = *r.rows.encoder;
    const int64_t R = r.cost.n_rows_computed, S = enc.n_source(), D = r.rows.head_dim, C = r.rows.n_head * D;
    AttentionMap m;
    m.step = int64_t(step);
    m.layer = layer;
    m.head = head;
    m.n_query = R;
    m.n_key = S;
    for (int64_t i = 0; i < R; ++i) m.query_positions.push_back(r.cost.first_computed_position + i);
    for (int64_t s = 0; s < S; ++s) m.key_positions.push_back(s);
    m.scores.assign(size_t(R * S), 0.0f);
    m.visible.assign(size_t(R * S), 1);
    m.weights.assign(size_t(R * S), 0.0f);
    m.output.assign(size_t(R * D), 0.0f);
    const float scale = 1.0f / std::sqrt(float(D));
    const float* k = enc.cross_key(layer, head, 0);
    const float* v = enc.cross_value(layer, head, 0);
    for (int64_t i = 0; i < R; ++i) {
        const float* q = r.rows.cross_q.data() + (layer * R + i) * C + head * D;
        for (int64_t s = 0; s < S; ++s) m.scores[size_t(i * S + s)] = scaled_score(q, k + s * D, D, scale);
        attend_row(m.output.data() + i * D, m.weights.data() + i * S, q, [&](int64_t s) { return k + s * D; },
                   [&](int64_t s) { return v + s * D; }, KeyRange{0, 0, S - 1}, D, scale);
    }
    return m;
}

AttentionMap encoder_attention_map(const EncoderOutput& enc, int64_t layer, int64_t head) {
    if (enc.q.empty()) throw UsageError("the encoder ran without recording");
    if (layer < 0 || layer >= enc.n_encoder_layer || head < 0 || head >= enc.n_head)
        throw UsageError("encoder layer " + std::to_string(layer) + ", head " + std::to_string(head) + " does not exist");
    const int64_t S = enc.n_source(), D = enc.head_dim, C = enc.n_head * D;
    AttentionMap m;
    m.layer = layer;
    m.head = head;
    m.n_query = m.n_key = S;
    for (int64_t s = 0; s < S; ++s) {
        m.query_positions.push_back(s);
        m.key_positions.push_back(s);
    }
    m.scores.assign(size_t(S * S), 0.0f);
    m.visible.assign(size_t(S * S), 1);
    m.weights.assign(size_t(S * S), 0.0f);
    m.output.assign(size_t(S * D), 0.0f);
    const float scale = 1.0f / std::sqrt(float(D));
    const float* k = enc.k.data() + layer * S * C + head * D;
    const float* v = enc.v.data() + layer * S * C + head * D;
    for (int64_t i = 0; i < S; ++i) {
        const float* q = enc.q.data() + (layer * S + i) * C + head * D;
        for (int64_t j = 0; j < S; ++j) m.scores[size_t(i * S + j)] = scaled_score(q, k + j * C, D, scale);
        head_attention(m.output.data() + i * D, m.weights.data() + i * S, q, k, v, C, KeyRange{0, 0, S - 1}, D, scale);
    }
    return m;
}

}  // namespace kvscope
