#include "model/rotary.h"

#include <cmath>

namespace kvscope {

std::vector<float> rotary_inv_freq(const RopeSpec& rope, int64_t D) {
    const int64_t half = D / 2;
    std::vector<float> out(static_cast<size_t>(half));  // (D/2)
    const double pi = 3.14159265358979323846;
    for (int64_t i = 0; i < half; ++i) {
        // HF computes the default frequencies in float32: base ** (arange(0, D, 2).float() / D).
        const float exponent = float(2 * i) / float(D);
        double f = 1.0 / double(std::pow(float(rope.theta), exponent));
        if (rope.scaling == RopeScaling::Linear) {
            f /= rope.factor;
        } else if (rope.scaling == RopeScaling::Frequencies) {
            // HF's float32 frequency over the file's divisor (ggml's rope: theta_i / freq_factors[i]), rounded once
            f = double(float(f)) / double(rope.freq_factors[size_t(i)]);
        } else if (rope.scaling == RopeScaling::Llama3) {
            const double old = double(rope.original_max_positions);
            const double low_wavelen = old / rope.low_freq_factor, high_wavelen = old / rope.high_freq_factor;
            const double wavelen = 2 * pi / f;
            if (wavelen > low_wavelen) {
                f /= rope.factor;  // long wavelengths: scaled fully
            } else if (wavelen >= high_wavelen) {  // between the bands: interpolated
                const double smooth = (old / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
                f = (1 - smooth) * f / rope.factor + smooth * f;
            }  // short wavelengths: kept
        }
        out[size_t(i)] = float(f);
    }
    return out;
}

void rotary_angles(float* cos, float* sin, const float* inv_freq, int64_t position, int64_t half) {
    for (int64_t i = 0; i < half; ++i) {
        const float angle = float(position) * inv_freq[i];  // float32, as HF's freqs = inv_freq @ position_ids
        cos[i] = float(std::cos(double(angle)));
        sin[i] = float(std::sin(double(angle)));
    }
}

void turn_back(float* out, const float* x, int64_t n, int64_t D, const float* inv_freq, int64_t delta) {
    const int64_t half = D / 2;
    thread_local std::vector<float> angles;  // (2, D/2) cos, sin of delta
    angles.resize(size_t(D));
    rotary_angles(angles.data(), angles.data() + half, inv_freq, delta, half);
    const float* cos = angles.data();
    const float* sin = angles.data() + half;
    for (int64_t r = 0; r < n; ++r) {
        const float* a = x + r * D;
        float* y = out + r * D;
        for (int64_t i = 0; i < half; ++i) {  // apply_rotary with sin negated
            const float x1 = a[i], x2 = a[i + half];
            y[i] = x1 * cos[i] + x2 * sin[i];
            y[i + half] = x2 * cos[i] - x1 * sin[i];
        }
    }
}

}  // namespace kvscope
