#include "trace.h"

#include <algorithm>
#include <cmath>

#include "attention.h"
#include "errors.h"
#include "rotary.h"

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

AttentionMap attention_map(const Trace& trace, size_t step, int64_t layer, int64_t head) {
    if (step >= trace.size()) throw UsageError("step " + std::to_string(step) + " is not in the trace");
    const StepRecord& r = trace[step];
    if (!r.recorded()) throw UsageError("step " + std::to_string(step) + " was run without recording");
    if (layer < 0 || layer >= r.rows.n_layer || head < 0 || head >= r.rows.n_head)
        throw UsageError("layer " + std::to_string(layer) + ", head " + std::to_string(head) + " does not exist");
    const int64_t R = r.cost.n_rows_computed, C = r.rows.n_head * r.rows.head_dim, D = r.rows.head_dim;
    const int64_t first_q = r.cost.first_computed_position, last_q = first_q + R - 1;
    const int64_t first_key = r.visible_keys(first_q).n_sink > 0 ? 0 : r.visible_from(first_q);

    AttentionMap m;
    m.step = int64_t(step);
    m.layer = layer;
    m.head = head;
    m.n_query = R;
    m.n_key = last_q - first_key + 1;
    const int64_t P = m.n_key;
    for (int64_t i = 0; i < R; ++i) m.query_positions.push_back(first_q + i);
    for (int64_t j = 0; j < P; ++j) m.key_positions.push_back(first_key + j);

    std::vector<const float*> keys(static_cast<size_t>(P)), values(static_cast<size_t>(P));  // (P) rows of this head
    for (int64_t j = 0; j < P; ++j) {
        keys[size_t(j)] = trace.key_row(step, layer, head, first_key + j);
        values[size_t(j)] = trace.value_row(step, layer, head, first_key + j);
        if (!keys[size_t(j)])
            throw UsageError("step " + std::to_string(step) + ": key of position " + std::to_string(first_key + j) +
                             " was computed by a step that was not recorded");
    }
    const float scale = r.rows.attention_scale > 0 ? r.rows.attention_scale : 1.0f / std::sqrt(float(D));
    m.scores.assign(size_t(R * P), 0.0f);
    m.visible.assign(size_t(R * P), 0);
    m.weights.assign(size_t(R * P), 0.0f);
    m.output.assign(size_t(R * D), 0.0f);
    auto key_at = [&](int64_t p) { return keys[size_t(p - first_key)]; };
    auto value_at = [&](int64_t p) { return values[size_t(p - first_key)]; };
    std::vector<float> visible_weights(static_cast<size_t>(P));  // (visible keys) of one query, in position order
    std::vector<float> sink_q(static_cast<size_t>(D));              // (D) the query turned back for the sinks
    for (int64_t i = 0; i < R; ++i) {
        const float* q = r.rows.q.data() + (layer * R + i) * C + head * D;
        const int64_t qpos = first_q + i;
        const KeyRange seen = r.visible_keys(qpos, layer);
        const bool turned = seen.sink_shift > 0 && seen.n_sink > 0 && !r.rows.inv_freq_of(layer).empty();
        if (turned) turn_back(sink_q.data(), q, 1, D, r.rows.inv_freq_of(layer).data(), seen.sink_shift);
        for (int64_t j = 0; j < P; ++j) {
            const bool sink = turned && first_key + j < seen.n_sink;
            m.scores[size_t(i * P + j)] = scaled_score(sink ? sink_q.data() : q, keys[size_t(j)], D, scale);
            m.visible[size_t(i * P + j)] = seen.contains(first_key + j) ? 1 : 0;
        }
        attend_row(m.output.data() + i * D, visible_weights.data(), q, key_at, value_at, seen, D, scale,
                   turned ? sink_q.data() : nullptr);
        for (int64_t j = 0; j < seen.count(); ++j)
            m.weights[size_t(i * P + seen.position(j) - first_key)] = visible_weights[size_t(j)];
    }
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

}  // namespace kvscope
