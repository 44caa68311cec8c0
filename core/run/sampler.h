#pragma once
// Choosing the next token from logits: greedy, or sampling with temperature, top-k and top-p, from an
// explicit RNG state (so a session can step back and replay the same draws).
//
//   SamplerOptions          temperature 0 = greedy; top_k 0 = off; top_p 1 = off
//   validate(options)       throws UsageError for temperature < 0, top_p outside (0, 1], top_k < 0
//   Sampler(options, V)     buffers for a vocabulary of V, allocated once
//   sample(logits)          the chosen id; top() and entropy() then describe its distribution
//   top(k) / entropy()      the k most likely tokens and the entropy (nats) of the distribution used
//   rng_state()/set_rng_state()   the draw counter position, for snapshots
#include <cstdint>
#include <vector>

#include "text/tokenizer.h"

namespace kvscope {

struct SamplerOptions {
    double temperature = 0.0;
    int64_t top_k = 0;
    double top_p = 1.0;
    uint64_t seed = 0;
};
void validate(const SamplerOptions& options);

struct TokenProbability {
    TokenId id = 0;
    float probability = 0;  // under the distribution the choice was made from (after temperature)
    float logit = 0;        // raw model logit
};

class Sampler {
public:
    Sampler() = default;
    Sampler(const SamplerOptions& options, int64_t n_vocab);

    TokenId sample(const float* logits);  // (V)
    std::vector<TokenProbability> top(int64_t k) const;
    void top(int64_t k, std::vector<TokenProbability>& out) const;  // into `out`, reusing its capacity
    double entropy() const { return entropy_; }
    uint64_t rng_state() const { return rng_state_; }
    void set_rng_state(uint64_t s) { rng_state_ = s; }
    const SamplerOptions& options() const { return options_; }

private:
    double next_uniform();  // [0, 1)
    SamplerOptions options_;
    uint64_t rng_state_ = 0;
    std::vector<double> probs_;    // (V) softmax(logits / T) · norm_, T = 1 when greedy
    double norm_ = 1.0;            // greedy: Σ e^z, the division left to top(); sampling: 1 (divided in place)
    std::vector<TokenId> order_;   // (V) ids by descending probability (top-k/top-p work area)
    std::vector<float> logits_;    // (V) copy of the last logits
    mutable std::vector<TokenId> ranked_;  // (V) work area of top()
    std::vector<uint64_t> rank_keys_;      // (2, V) when sampling: the ranking's keys (sampler.cpp rank_all)
    std::vector<TokenId> rank_order_;      // (V) when sampling: its other buffer of ids
    std::vector<int64_t> rank_counts_;     // (6, 2048) when sampling: its digit counts
    double entropy_ = 0;
};

}  // namespace kvscope
