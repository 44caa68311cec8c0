#include "logic/derived_views.h"

#include <algorithm>
#include <cmath>

namespace kvscope::gui {

int64_t lens_position(const StepRecord& r, int64_t sel_query) {
    const int64_t R = r.cost.n_rows_computed, first = r.cost.first_computed_position;
    return sel_query >= first && sel_query < first + R ? sel_query : first + R - 1;
}

const LogitLens& LensCache::get(const Model& model, std::shared_ptr<const StepRecord> r, int64_t q_pos) {
    const StepRecord& rec = *r;
    return cache_.get(std::move(r), q_pos, [&](LogitLens& lens) {
        lens = logit_lens(model, rec.rows, q_pos - rec.cost.first_computed_position, kLensTop);
    });
}

RotaryShown rotary_shown(const Trace& trace, size_t step, int64_t layer, int64_t head, int64_t sel_query,
                         int64_t sel_key) {
    const StepRecord& r = trace[step];
    const int64_t L = r.rows.n_layer, H = r.rows.n_head, D = r.rows.head_dim, C = H * D;
    RotaryShown out;
    out.step = step;
    out.layer = std::clamp<int64_t>(layer, 0, L - 1), out.head = std::clamp<int64_t>(head, 0, H - 1);
    const int64_t R = r.cost.n_rows_computed, first = r.cost.first_computed_position;
    const int64_t q_pos = lens_position(r, sel_query);
    int64_t k_pos = sel_key >= 0 && sel_key <= q_pos ? sel_key : 0;
    if (!trace.key_row(step, out.layer, out.head, k_pos)) k_pos = q_pos;
    out.query_position = q_pos, out.key_position = k_pos;
    out.k = trace.key_row(step, out.layer, out.head, k_pos);
    out.q = r.rows.q.data() + (out.layer * R + (q_pos - first)) * C + out.head * D;
    out.scale = r.rows.attention_scale > 0 ? r.rows.attention_scale : 1.0 / std::sqrt(double(D));
    // Sinks numbered inside the cache: the model turned the query back by the shift for these keys.
    const KeyRange seen = r.visible_keys(q_pos, out.layer);
    out.turned_back = seen.sink_shift > 0 && k_pos < seen.n_sink ? seen.sink_shift : 0;
    return out;
}

RotaryView rotary_view_of(const ModelConfig& cfg, const RotaryShown& x) {
    const int64_t max_distance = std::min<int64_t>(cfg.n_ctx - 1, 4095);
    return rotary_view(cfg, x.layer, x.q, x.query_position, x.k, x.key_position, x.scale, max_distance, x.turned_back);
}

const RotaryPlots& RotaryCache::get(const ModelConfig& cfg, std::shared_ptr<const StepRecord> r,
                                    const RotaryShown& shown) {
    const Key key{shown.layer, shown.head, shown.query_position, shown.key_position, shown.turned_back};
    return cache_.get(std::move(r), key, [&](RotaryPlots& p) {
        p.view = rotary_view_of(cfg, shown);
        const RotaryView& v = p.view;
        p.log_freq.clear();
        p.log_freq_unscaled.clear();
        p.query_angle.clear();
        for (const RotaryPairView& pair : v.pairs) {
            p.log_freq.push_back(float(std::log10(pair.inv_freq)));
            p.log_freq_unscaled.push_back(float(std::log10(pair.inv_freq_unscaled)));
            p.query_angle.push_back(float(pair.query_angle));
        }
        p.key_before.assign(v.key_unrotated.begin(), v.key_unrotated.end());
        p.key_after.assign(v.key_rotated.begin(), v.key_rotated.end());
        p.by_distance.assign(v.score_by_distance.begin(), v.score_by_distance.end());
    });
}

KvSlots kv_slots(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values) {
    const StepRecord& r = trace[step];
    KvSlots out;
    const int64_t S = out.n_slot = r.cache.capacity, D = out.head_dim = r.rows.head_dim;
    out.values.assign(size_t(S * D), 0.0f);
    out.visible.assign(size_t(S * D), 0);
    for (int64_t slot = 0; slot < S; ++slot) {
        const int64_t p = r.cache.slot_positions[size_t(slot)];
        if (p < 0) continue;
        const float* row = values ? trace.value_row(step, layer, head, p) : trace.key_row(step, layer, head, p);
        if (!row) continue;
        for (int64_t d = 0; d < D; ++d) {
            out.values[size_t(slot * D + d)] = row[d];
            out.visible[size_t(slot * D + d)] = 1;
            out.absmax = std::max(out.absmax, std::fabs(row[d]));
        }
    }
    return out;
}

}  // namespace kvscope::gui
