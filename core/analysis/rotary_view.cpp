#include "analysis/rotary_view.h"

#include <cmath>

#include "model/rotary.h"

namespace kvscope {
namespace {

constexpr double kTwoPi = 6.283185307179586476925;

// The angle a pair turns by at `position`, as rotary_angles computes it (float32 product), in [0, 2π).
double angle_at(float inv_freq, int64_t position) {
    const double a = std::fmod(double(float(position) * inv_freq), kTwoPi);
    return a < 0 ? a + kTwoPi : a;
}

// x (D) turned by angle_i on pair i: rotate-half layout, pairs (i, i + D/2).
std::vector<double> turned(const std::vector<double>& x, const std::vector<double>& angles) {
    const size_t half = angles.size();
    std::vector<double> out(x.size());  // (D)
    for (size_t i = 0; i < half; ++i) {
        const double c = std::cos(angles[i]), s = std::sin(angles[i]);
        out[i] = x[i] * c - x[i + half] * s;
        out[i + half] = x[i + half] * c + x[i] * s;
    }
    return out;
}

}  // namespace

RotaryView rotary_view(const ModelConfig& config, int64_t layer, const float* q, int64_t q_pos, const float* k,
                       int64_t k_pos, double scale, int64_t max_distance, int64_t query_turned_back) {
    const int64_t D = config.head_dim(), half = D / 2;
    const bool local = config.local_rope && config.window_of(layer) > 0;
    RopeSpec rope = config.rope, unscaled = config.rope;
    if (local) rope = unscaled = RopeSpec{config.local_rope_theta};
    unscaled.scaling = RopeScaling::None;
    const std::vector<float> inv_freq = rotary_inv_freq(rope, D), inv_freq_unscaled = rotary_inv_freq(unscaled, D);

    RotaryView v;
    v.head_dim = D;
    v.query_position = q_pos;
    v.key_position = k_pos;
    v.query_turned_back = query_turned_back;
    v.scored_distance = q_pos - query_turned_back - k_pos;
    std::vector<double> q_back(static_cast<size_t>(half)), k_back(static_cast<size_t>(half));  // (D/2) angles to undo
    for (int64_t i = 0; i < half; ++i) {
        RotaryPairView p;
        p.inv_freq = inv_freq[size_t(i)];
        p.inv_freq_unscaled = inv_freq_unscaled[size_t(i)];
        p.wavelength = kTwoPi / p.inv_freq;
        p.query_angle = angle_at(inv_freq[size_t(i)], q_pos);
        p.key_angle = angle_at(inv_freq[size_t(i)], k_pos);
        q_back[size_t(i)] = -p.query_angle;
        k_back[size_t(i)] = -p.key_angle;
        v.pairs.push_back(p);
    }
    v.query_rotated.assign(q, q + D);
    v.key_rotated.assign(k, k + D);
    v.query_unrotated = turned(v.query_rotated, q_back);
    v.key_unrotated = turned(v.key_rotated, k_back);
    // The query as the model met this key: turned back by δ when the key is a sink numbered in the cache.
    std::vector<double> turn_back(static_cast<size_t>(half));  // (D/2)
    for (int64_t i = 0; i < half; ++i) turn_back[size_t(i)] = -angle_at(inv_freq[size_t(i)], query_turned_back);
    const std::vector<double> q_scored = query_turned_back > 0 ? turned(v.query_rotated, turn_back) : v.query_rotated;
    for (int64_t i = 0; i < D; ++i) v.score += q_scored[size_t(i)] * v.key_rotated[size_t(i)];
    v.score *= scale;

    // The query's content d positions after the key's: only the difference of the angles matters.
    std::vector<double> angles(static_cast<size_t>(half));  // (D/2)
    for (int64_t d = 0; d <= max_distance; ++d) {
        for (int64_t i = 0; i < half; ++i) angles[size_t(i)] = double(d) * v.pairs[size_t(i)].inv_freq;
        const std::vector<double> qd = turned(v.query_unrotated, angles);
        double s = 0;
        for (int64_t i = 0; i < D; ++i) s += qd[size_t(i)] * v.key_unrotated[size_t(i)];
        v.score_by_distance.push_back(s * scale);
    }
    return v;
}

}  // namespace kvscope
