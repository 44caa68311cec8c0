#pragma once
// Rotary position embeddings as the Hugging Face Llama code computes them. The cache stores keys
// after rotation (as the models do), so a cached key carries the position it was computed at.
//
//   rotary_inv_freq(rope, D)        (D/2) inverse frequencies: 1 / theta^(2i/D), then rope_scaling —
//                                   "linear" divides by factor, "llama3" is HF's
//                                   _compute_llama3_parameters (per-wavelength bands, smoothed between),
//                                   "rope_freqs" divides pair i by freq_factors[i] (D/2 of them)
//   rotary_angles(cos, sin, inv_freq, position, half)   (D/2) cos and sin of position · inv_freq[i]
//   apply_rotary(x, cos, sin, D)    one head's row in place, rotate-half layout (HF rotate_half):
//                                   pairs (i, i + D/2), not interleaved (2i, 2i + 1)
//   turn_back(out, x, n, D, inv_freq, delta)
//                                   n rows of D turned by -delta positions: q·R(delta)k = (R(-delta)q)·k,
//                                   so a query turned back scores a rotated key as if it sat delta later
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace kvscope {

std::vector<float> rotary_inv_freq(const RopeSpec& rope, int64_t D);
void rotary_angles(float* cos, float* sin, const float* inv_freq, int64_t position, int64_t half);

inline void apply_rotary(float* x, const float* cos, const float* sin, int64_t D) {
    const int64_t half = D / 2;
    for (int64_t i = 0; i < half; ++i) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cos[i] - b * sin[i];         // x·cos + rotate_half(x)·sin, first half: -x2
        x[i + half] = b * cos[i] + a * sin[i];  // second half: +x1
    }
}

void turn_back(float* out, const float* x, int64_t n, int64_t D, const float* inv_freq, int64_t delta);

}  // namespace kvscope
