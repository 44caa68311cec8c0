#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "errors.h"

namespace kvscope {

void validate(const SamplerOptions& o) {
    if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature))
        throw UsageError("temperature must be a finite number > 0 (or 0 for greedy), got " + std::to_string(o.temperature));
    if (o.top_k < 0) throw UsageError("top-k must be >= 0 (0 = off), got " + std::to_string(o.top_k));
    if (!(o.top_p > 0.0 && o.top_p <= 1.0))
        throw UsageError("top-p must be in (0, 1], got " + std::to_string(o.top_p));
}

Sampler::Sampler(const SamplerOptions& options, int64_t n_vocab)
    : options_(options), rng_state_(options.seed), probs_(size_t(n_vocab)), order_(size_t(n_vocab)),
      logits_(size_t(n_vocab)), ranked_(size_t(n_vocab)) {
    validate(options);
}

double Sampler::next_uniform() {
    // splitmix64: a counter-based generator whose whole state is one integer, so snapshots are trivial.
    uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 11) * 0x1.0p-53;
}

TokenId Sampler::sample(const float* logits) {
    const int64_t V = int64_t(probs_.size());
    std::copy(logits, logits + V, logits_.begin());
    const bool greedy = options_.temperature == 0.0;
    const double t = greedy ? 1.0 : options_.temperature;
    // Greedy: the first index of the largest logit (what argmax in numpy/torch returns).
    TokenId best = 0;
    for (int64_t i = 1; i < V; ++i)
        if (logits[i] > logits[best]) best = TokenId(i);
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += probs_[size_t(i)] = std::exp((double(logits[i]) - logits[best]) / t);
    entropy_ = 0.0;
    for (int64_t i = 0; i < V; ++i) {
        probs_[size_t(i)] /= sum;
        if (probs_[size_t(i)] > 0) entropy_ -= probs_[size_t(i)] * std::log(probs_[size_t(i)]);
    }
    if (greedy) return best;

    // Candidates in descending probability (ties: lower id first), cut by top-k, then by top-p.
    std::iota(order_.begin(), order_.end(), TokenId(0));
    auto by_prob = [&](TokenId a, TokenId b) {
        return probs_[size_t(a)] != probs_[size_t(b)] ? probs_[size_t(a)] > probs_[size_t(b)] : a < b;
    };
    int64_t n_keep = V;
    if (options_.top_k > 0 && options_.top_k < V) {
        n_keep = options_.top_k;
        std::partial_sort(order_.begin(), order_.begin() + n_keep, order_.end(), by_prob);
    } else {
        std::sort(order_.begin(), order_.end(), by_prob);
    }
    if (options_.top_p < 1.0) {
        double kept = 0.0, total = 0.0;
        for (int64_t i = 0; i < n_keep; ++i) total += probs_[size_t(order_[size_t(i)])];
        int64_t n = 0;
        while (n < n_keep) {
            kept += probs_[size_t(order_[size_t(n++)])];
            if (kept >= options_.top_p * total) break;
        }
        n_keep = n;
    }
    double mass = 0.0;
    for (int64_t i = 0; i < n_keep; ++i) mass += probs_[size_t(order_[size_t(i)])];
    double u = next_uniform() * mass;
    for (int64_t i = 0; i < n_keep; ++i) {
        u -= probs_[size_t(order_[size_t(i)])];
        if (u < 0.0) return order_[size_t(i)];
    }
    return order_[size_t(n_keep - 1)];
}

std::vector<TokenProbability> Sampler::top(int64_t k) const {
    std::vector<TokenProbability> out;
    top(k, out);
    return out;
}

void Sampler::top(int64_t k, std::vector<TokenProbability>& out) const {
    const int64_t V = int64_t(probs_.size());
    k = std::min(k, V);
    ranked_.resize(size_t(V));
    std::iota(ranked_.begin(), ranked_.end(), TokenId(0));
    std::partial_sort(ranked_.begin(), ranked_.begin() + k, ranked_.end(), [&](TokenId a, TokenId b) {
        return logits_[size_t(a)] != logits_[size_t(b)] ? logits_[size_t(a)] > logits_[size_t(b)] : a < b;
    });
    out.clear();
    for (int64_t i = 0; i < k; ++i) {
        const TokenId id = ranked_[size_t(i)];
        out.push_back({id, float(probs_[size_t(id)]), logits_[size_t(id)]});
    }
}

}  // namespace kvscope
