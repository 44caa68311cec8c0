#pragma once
// Scaled dot-product attention of one query row of one head, the single definition used both by the
// forward pass and by every attention view derived from a trace, so a heatmap shows the exact numbers
// the model used.
//
//   attend_row(out, weights, q, key_at, value_at, lo, hi, D, scale)
//       keys at absolute positions lo..hi (inclusive, all visible: the mask is already applied by the
//       caller's choice of lo and hi); weights (hi-lo+1) = softmax(q·k * scale); out (D) = Σ w·v.
//       `weights` also holds the scaled scores on the way: pass a buffer of hi-lo+1 floats.
//   scaled_score(q, k, D, scale)    the score of one (query, key) pair, as attend_row computes it
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels.h"

namespace kvscope {

inline float scaled_score(const float* q, const float* k, int64_t D, float scale) {
    return dot(q, k, D) * scale;
}

template <class KeyAt, class ValueAt>
void attend_row(float* out, float* weights, const float* q, KeyAt&& key_at, ValueAt&& value_at, int64_t lo,
                int64_t hi, int64_t D, float scale) {
    const int64_t n = hi - lo + 1;
    // pass 1: scores = q·kᵀ · scale, and their maximum (subtracted before exp so nothing overflows)
    float max_score = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        weights[j] = scaled_score(q, key_at(lo + j), D, scale);
        max_score = weights[j] > max_score ? weights[j] : max_score;
    }
    // pass 2: softmax, summed in position order
    for (int64_t j = 0; j < n; ++j) weights[j] -= max_score;
    exp_in_place(weights, n);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += weights[j];
    for (int64_t j = 0; j < n; ++j) weights[j] /= sum;
    // pass 3: out = Σ_j w_j · v_j, in position order
    std::memset(out, 0, size_t(D) * sizeof(float));
    for (int64_t j = 0; j < n; ++j) axpy(out, weights[j], value_at(lo + j), D);
}

}  // namespace kvscope
