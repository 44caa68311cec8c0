// The rotary view against rotations written out here in double precision.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "analysis/rotary_view.h"
#include "model/config.h"

using namespace kvscope;

namespace {

ModelConfig llama_config(const char* rope_scaling) {
    const std::string json = std::string(R"({"model_type": "llama", "vocab_size": 32, "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": )") +
                             rope_scaling + "}";
    return parse_config(json, "config.json");
}

// x (16) turned by position · inv_freq_i on pairs (i, i + 8), in double.
std::vector<double> rotate(const std::vector<double>& x, const std::vector<double>& inv_freq, double position) {
    std::vector<double> out(x.size());
    for (size_t i = 0; i < 8; ++i) {
        const double a = position * inv_freq[i];
        out[i] = x[i] * std::cos(a) - x[i + 8] * std::sin(a);
        out[i + 8] = x[i + 8] * std::cos(a) + x[i] * std::sin(a);
    }
    return out;
}

}  // namespace

TEST_CASE("rotary view: frequencies, llama3 bands, vectors turned back and the score at every distance") {
    const ModelConfig c = llama_config(R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})");
    REQUIRE(c.head_dim() == 16);
    std::vector<double> base(8), scaled(8);
    for (int i = 0; i < 8; ++i) {
        base[size_t(i)] = 1.0 / std::pow(500000.0, 2.0 * i / 16.0);
        const double wavelen = 2 * M_PI / base[size_t(i)];
        if (wavelen < 64.0 / 4) scaled[size_t(i)] = base[size_t(i)];                      // short: kept
        else if (wavelen > 64.0) scaled[size_t(i)] = base[size_t(i)] / 8;                   // long: divided by 8
        else {
            const double smooth = (64.0 / wavelen - 1.0) / 3.0;
            scaled[size_t(i)] = (1 - smooth) * base[size_t(i)] / 8 + smooth * base[size_t(i)];
        }
    }
    std::mt19937 rng(3);
    std::normal_distribution<double> d(0.0, 1.0);
    std::vector<double> q0(16), k0(16);
    for (double& v : q0) v = d(rng);
    for (double& v : k0) v = d(rng);
    const int64_t q_pos = 37, k_pos = 5;
    const std::vector<double> q = rotate(q0, scaled, q_pos), k = rotate(k0, scaled, k_pos);
    std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end());
    const RotaryView v = rotary_view(c, 1, qf.data(), q_pos, kf.data(), k_pos, 0.25, 100);

    REQUIRE(v.pairs.size() == 8);
    for (size_t i = 0; i < 8; ++i) {
        INFO("pair " << i);
        CHECK(v.pairs[i].inv_freq == Approx(scaled[i]).epsilon(1e-6));
        CHECK(v.pairs[i].inv_freq_unscaled == Approx(base[i]).epsilon(1e-6));
        CHECK(v.pairs[i].wavelength == Approx(2 * M_PI / scaled[i]).epsilon(1e-6));
        CHECK(std::remainder(v.pairs[i].query_angle - q_pos * scaled[i], 2 * M_PI) == Approx(0).margin(1e-4));
        CHECK(v.pairs[i].query_angle >= 0);
        CHECK(v.pairs[i].query_angle < 2 * M_PI);
    }
    CHECK(v.pairs[0].inv_freq == v.pairs[0].inv_freq_unscaled);  // the shortest wavelength is kept
    CHECK(v.pairs[7].inv_freq < v.pairs[7].inv_freq_unscaled / 7.9);  // the longest is stretched 8x
    for (size_t j = 0; j < 16; ++j) {
        CHECK(v.query_unrotated[j] == Approx(q0[j]).margin(2e-5));
        CHECK(v.key_unrotated[j] == Approx(k0[j]).margin(2e-5));
    }
    REQUIRE(v.score_by_distance.size() == 101);
    for (int64_t dist : {0, 1, 32, 100}) {
        const std::vector<double> qd = rotate(q0, scaled, double(dist));
        double want = 0;
        for (size_t j = 0; j < 16; ++j) want += qd[j] * k0[j];
        CHECK(v.score_by_distance[size_t(dist)] == Approx(0.25 * want).margin(1e-4));
    }
    // The score the pair has at its own distance does not depend on where the pair sits.
    CHECK(v.score == Approx(v.score_by_distance[size_t(q_pos - k_pos)]).margin(1e-4));
}

// A GGUF file's rope_freqs.weight: pair i's frequency is Hugging Face's float32 one over divisor i.
TEST_CASE("rotary view: per-frequency divisors from a GGUF file scale each pair by its own") {
    ModelConfig c = llama_config("null");
    c.rope.scaling = RopeScaling::Frequencies;
    c.rope.freq_factors = {1, 1, 1.5f, 3.25f, 8, 8, 8, 8};
    const std::vector<float> x(16, 0.5f);
    const RotaryView v = rotary_view(c, 0, x.data(), 9, x.data(), 2, 0.25, 4);
    REQUIRE(v.pairs.size() == 8);
    for (size_t i = 0; i < 8; ++i) {
        INFO("pair " << i);
        const float base = float(1.0 / std::pow(500000.0, 2.0 * double(i) / 16.0));
        CHECK(v.pairs[i].inv_freq_unscaled == Approx(base).epsilon(1e-6));
        CHECK(v.pairs[i].inv_freq == Approx(base / c.rope.freq_factors[i]).epsilon(1e-6));
    }
    CHECK(v.pairs[0].inv_freq == v.pairs[0].inv_freq_unscaled);
}

TEST_CASE("rotary view: a query turned back by a sink shift is scored at the shorter distance") {
    const ModelConfig c = llama_config("null");
    std::vector<double> freq(8);
    for (int i = 0; i < 8; ++i) freq[size_t(i)] = 1.0 / std::pow(500000.0, 2.0 * i / 16.0);
    std::mt19937 rng(4);
    std::normal_distribution<double> d(0.0, 1.0);
    std::vector<double> q0(16), k0(16);
    for (double& v : q0) v = d(rng);
    for (double& v : k0) v = d(rng);
    const int64_t q_pos = 40, k_pos = 1, shift = 30;  // a sink at 1, the query turned back by 30
    const std::vector<double> q = rotate(q0, freq, q_pos), k = rotate(k0, freq, k_pos);
    std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end());
    const RotaryView v = rotary_view(c, 0, qf.data(), q_pos, kf.data(), k_pos, 0.25, 64, shift);
    CHECK(v.query_turned_back == shift);
    CHECK(v.scored_distance == q_pos - shift - k_pos);
    // As if the query stood at q_pos - shift: its content rotated there against the key's.
    const std::vector<double> q_at = rotate(q0, freq, double(q_pos - shift));
    double want = 0;
    for (size_t j = 0; j < 16; ++j) want += q_at[j] * k[j];
    CHECK(v.score == Approx(0.25 * want).margin(1e-5));
    double text = 0;  // the text-position score, which must differ
    for (size_t j = 0; j < 16; ++j) text += q[j] * k[j];
    CHECK(std::abs(v.score - 0.25 * text) > 1e-3);
    // The vectors shown stay as cached; only the score and its distance move.
    for (size_t j = 0; j < 16; ++j) CHECK(v.query_rotated[j] == Approx(q[j]).margin(1e-6));
}
