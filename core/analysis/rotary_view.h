#pragma once
// What rotary position embedding does to one query and one key of a head, as plain numbers for a view:
// each dimension pair's frequency (with rope_scaling applied, and as it would be without), the angle it
// turns by at the query's and the key's positions, both vectors as the model holds them (rotated) and
// turned back to before rotation, and the score the same two vectors would get at every distance, which
// shows that a rotary score depends on the distance, not on where the pair sits.
//
//   rotary_view(config, layer, q, q_pos, k, k_pos, scale, max_distance, query_turned_back = 0)
//       q and k (D) as cached: rotated at q_pos and k_pos with the layer's frequencies (Gemma 3's
//       sliding layers use rope_local_base_freq, unscaled). query_turned_back = δ > 0: the model scored
//       this key with the query turned back by δ positions (an attention sink numbered inside the cache,
//       attention.h), so its score is the one at distance q_pos - δ - k_pos
//
// Angles are position · inv_freq in float32, as the model computes them, then widened; vectors are turned
// back and scores recomputed in double, so a view is exact to the rounding of the stored rows.
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace kvscope {

struct RotaryPairView {
    double inv_freq = 0;           // radians per position, after rope_scaling
    double inv_freq_unscaled = 0;  // the same pair without rope_scaling
    double wavelength = 0;         // positions per full turn: 2π / inv_freq
    double query_angle = 0;        // radians turned at the query's position, in [0, 2π)
    double key_angle = 0;          // at the key's position
};

struct RotaryView {
    int64_t head_dim = 0, query_position = 0, key_position = 0;
    std::vector<RotaryPairView> pairs;         // (D/2): pair i turns dimensions (i, i + D/2)
    std::vector<double> query_rotated, query_unrotated;  // (D)
    std::vector<double> key_rotated, key_unrotated;      // (D)
    std::vector<double> score_by_distance;     // (max_distance + 1): scale · rot(q, d) · k for distance d
    double score = 0;                          // at scored_distance, as the model scores it
    int64_t query_turned_back = 0;             // δ: positions the query was turned back by for this key
    int64_t scored_distance = 0;               // q_pos - δ - k_pos
};

RotaryView rotary_view(const ModelConfig& config, int64_t layer, const float* q, int64_t q_pos, const float* k,
                       int64_t k_pos, double scale, int64_t max_distance, int64_t query_turned_back = 0);

}  // namespace kvscope
