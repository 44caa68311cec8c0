#include "analysis/kv_quant_error.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "base/errors.h"

namespace kvscope {
namespace {

// (P, D) rows as the cache would read them back.
std::vector<float> reconstruct_keys(const KvQuantSpec& s, const float* k, int64_t P, int64_t D) {
    std::vector<float> out(k, k + P * D);
    if (s.format != KvQuant::Int4) {
        std::vector<uint8_t> packed(size_t(row_bytes(s.format, D)));
        for (int64_t p = 0; p < P; ++p) {
            quantize_row(s.format, k + p * D, D, packed.data());
            dequantize_row(s.format, packed.data(), D, out.data() + p * D);
        }
        return out;
    }
    const int64_t G = s.group, quantized = int4_residual_boundary(P, s);
    std::vector<uint8_t> packed(size_t(int4_key_group_bytes(D, G)));
    for (int64_t p0 = 0; p0 < quantized; p0 += G) {
        quantize_int4_keys(k + p0 * D, G, D, packed.data());
        dequantize_int4_keys(packed.data(), G, D, out.data() + p0 * D);
    }
    return out;
}

std::vector<float> reconstruct_values(const KvQuantSpec& s, const float* v, int64_t P, int64_t D) {
    if (s.format != KvQuant::Int4) return reconstruct_keys(s, v, P, D);  // per token, like keys
    std::vector<float> out(v, v + P * D);
    const int64_t G = s.group, quantized = int4_residual_boundary(P, s);
    std::vector<uint8_t> packed(size_t(int4_value_row_bytes(D, G)));
    for (int64_t p = 0; p < quantized; ++p) {
        quantize_int4_values(v + p * D, D, G, packed.data());
        dequantize_int4_values(packed.data(), D, G, out.data() + p * D);
    }
    return out;
}

float max_abs(const std::vector<float>& x) {
    float m = 0;
    for (float e : x)
        if (!std::isnan(e)) m = std::max(m, std::fabs(e));
    return m;
}

// visible(t, kp): query row t sees the key at position kp.
KvQuantError quant_error(const KvQuantSpec& spec, const float* q, const float* k, const float* v,
                         const std::vector<int64_t>& query_positions, const std::vector<int64_t>& key_positions,
                         int64_t D, float scale, const std::function<bool(int64_t, int64_t)>& visible_to) {
    const int64_t P = int64_t(key_positions.size()), T = int64_t(query_positions.size());
    validate(spec, D);
    if (spec.format == KvQuant::Int4)
        for (int64_t p = 0; p < P; ++p)
            if (key_positions[size_t(p)] != p)
                throw UsageError("int4 K/V groups positions from 0: the keys must be positions 0.." + std::to_string(P - 1));
    KvQuantError e;
    e.spec = spec;
    e.n_keys = P, e.n_queries = T, e.head_dim = D;
    e.key_positions = key_positions;
    e.query_positions = query_positions;
    const std::vector<float> k_hat = spec.quantized() ? reconstruct_keys(spec, k, P, D) : std::vector<float>(k, k + P * D);
    const std::vector<float> v_hat = spec.quantized() ? reconstruct_values(spec, v, P, D) : std::vector<float>(v, v + P * D);
    e.key_error.resize(size_t(P * D));
    e.value_error.resize(size_t(P * D));
    for (size_t i = 0; i < size_t(P * D); ++i) {
        e.key_error[i] = k_hat[i] - k[i];
        e.value_error[i] = v_hat[i] - v[i];
    }

    // pass 1: both scores of every visible (query, key) pair; pass 2: both softmaxes over the visible keys
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    e.score_change.assign(size_t(T * P), kNaN);
    e.weight_change.assign(size_t(T * P), kNaN);
    std::vector<double> s(static_cast<size_t>(P)), s_hat(static_cast<size_t>(P));  // (P) one query's scores
    for (int64_t t = 0; t < T; ++t) {
        auto visible = [&](int64_t p) { return visible_to(t, key_positions[size_t(p)]); };
        double top = -INFINITY, top_hat = -INFINITY;
        for (int64_t p = 0; p < P; ++p) {
            if (!visible(p)) continue;
            double a = 0, b = 0;
            for (int64_t d = 0; d < D; ++d) {
                a += double(q[t * D + d]) * double(k[p * D + d]);
                b += double(q[t * D + d]) * double(k_hat[size_t(p * D + d)]);
            }
            s[size_t(p)] = a * scale, s_hat[size_t(p)] = b * scale;
            top = std::max(top, s[size_t(p)]), top_hat = std::max(top_hat, s_hat[size_t(p)]);
            e.score_change[size_t(t * P + p)] = float(s_hat[size_t(p)] - s[size_t(p)]);
        }
        double sum = 0, sum_hat = 0;
        for (int64_t p = 0; p < P; ++p)
            if (visible(p)) sum += std::exp(s[size_t(p)] - top), sum_hat += std::exp(s_hat[size_t(p)] - top_hat);
        for (int64_t p = 0; p < P; ++p)
            if (visible(p))
                e.weight_change[size_t(t * P + p)] =
                    float(std::exp(s_hat[size_t(p)] - top_hat) / sum_hat - std::exp(s[size_t(p)] - top) / sum);
    }
    e.key_error_max = max_abs(e.key_error);
    e.value_error_max = max_abs(e.value_error);
    e.score_change_max = max_abs(e.score_change);
    e.weight_change_max = max_abs(e.weight_change);
    return e;
}

}  // namespace

KvQuantError kv_quant_error(const KvQuantSpec& spec, const float* q, const float* k, const float* v,
                            const std::vector<int64_t>& query_positions, const std::vector<int64_t>& key_positions,
                            int64_t D, float scale, int64_t window) {
    return quant_error(spec, q, k, v, query_positions, key_positions, D, scale, [&](int64_t t, int64_t kp) {
        const int64_t qp = query_positions[size_t(t)];
        return kp <= qp && (window <= 0 || kp > qp - window);
    });
}

KvQuantError kv_quant_error(const KvQuantSpec& spec, const Trace& trace, size_t step, int64_t layer, int64_t head,
                            int64_t max_queries) {
    const StepRecord& r = trace[step];
    if (!r.recorded()) throw UsageError("step " + std::to_string(step) + " was run without recording its rows");
    const RecordedRows& rows = r.rows;
    const int64_t R = r.cost.n_rows_computed, D = rows.head_dim, C = rows.n_head * D;
    const int64_t T = max_queries > 0 ? std::min(R, max_queries) : R, skipped = R - T;  // the last T rows
    const int64_t first = r.cost.first_computed_position + skipped;
    std::vector<KeyRange> seen(static_cast<size_t>(T));  // (T) what each query row sees
    std::vector<int64_t> query_positions(static_cast<size_t>(T));
    std::vector<float> q(size_t(T * D));                  // (T, D)
    for (int64_t t = 0; t < T; ++t) {
        query_positions[size_t(t)] = first + t;
        seen[size_t(t)] = r.visible_keys(first + t, layer);
        std::copy_n(rows.q.data() + (layer * R + skipped + t) * C + head * D, D, q.data() + t * D);
    }
    std::vector<int64_t> key_positions;
    for (int64_t p = 0; p < first + T; ++p)
        if (std::any_of(seen.begin(), seen.end(), [&](const KeyRange& k) { return k.contains(p); }))
            key_positions.push_back(p);
    const int64_t P = int64_t(key_positions.size());
    std::vector<float> k(size_t(P * D)), v(size_t(P * D));  // (P, D)
    for (int64_t i = 0; i < P; ++i) {
        const int64_t p = key_positions[size_t(i)];
        const float* kr = trace.key_row(step, layer, head, p);
        const float* vr = trace.value_row(step, layer, head, p);
        if (!kr || !vr)
            throw UsageError("step " + std::to_string(step) + ": position " + std::to_string(p) +
                             " was computed by a step that was not recorded");
        std::copy_n(kr, D, k.data() + i * D);
        std::copy_n(vr, D, v.data() + i * D);
    }
    const float scale = rows.attention_scale > 0 ? rows.attention_scale : 1.0f / std::sqrt(float(D));
    return quant_error(spec, q.data(), k.data(), v.data(), query_positions, key_positions, D, scale,
                       [&](int64_t t, int64_t kp) { return seen[size_t(t)].contains(kp); });
}

}  // namespace kvscope

