#pragma once
// KV-cache eviction policies under a budget: which positions each (layer, K/V head) keeps once the cache
// holds more than `budget` of them. A policy only decides; the cache's evicted flags (kv_cache.h) carry
// the decision out, and attention gives an evicted key weight exactly 0.
//
// When: after a step's queries attended (so the step's own attention counts), before the next step.
// Between steps every (layer, K/V head) then keeps at most `budget` positions; the next step's queries
// see those plus the step's own tokens (a prompt chunk sees itself causally, as in H2O and SnapKV).
// Ties: the lower position wins (is kept) everywhere, so a reference can reproduce every choice.
//
//   oracle-off     the full cache: nothing is evicted (the baseline)
//   window+sinks   the first `sinks` positions and the most recent budget - sinks. The cache's own
//                  window rule (attention.h visible_keys) then applies inside a chunk too, so
//                  --evict window+sinks --kv-budget N --evict-sinks S equals --window N-S+1 --sinks S
//                  bit for bit (the window counts the query itself, the budget what stays between steps)
//   h2o            the `recent` most recent positions, then the heavy hitters: the highest accumulated
//                  attention, summed over every query so far and the group's query heads (double), until
//                  `budget` are kept (Zhang et al. 2023, H2O)
//   snapkv         once, at the end of the prompt: scores = the attention of the last `obs` prompt
//                  queries to each earlier key, summed over those queries and the group's query heads,
//                  pooled over positions (kernel `pool`, odd, stride 1, padding pool/2: max pads with
//                  -inf, avg counts the padding as 0); keeps the observation window and the top
//                  budget - obs of the rest. Decoded tokens are then appended (Li et al. 2024, SnapKV)
//   pyramid        snapkv's choice with a budget per layer, linear in depth from 1.5x to 0.5x the
//                  mean (pyramid_budgets; PyramidKV's shape)
//
//   EvictionSpec, validate(spec)            the policy and its parameters; throws UsageError
//   parse_eviction_policy(name)             "oracle-off" | "window+sinks" | "h2o" | "snapkv" | "pyramid"
//   keep_window_sinks / keep_heavy_recent / pool_scores / keep_snapkv / pyramid_budgets
//                                           the pure choices, on plain arrays (tests compare them with
//                                           tests/reference/eviction_reference.py)
//   EvictionPolicy                          the running state of one sequence: observe() a query's
//                                           weights, decide() after a step, save()/load() for step_back
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/config.h"
#include "run/trace.h"

namespace kvscope {

enum class EvictionPolicyKind { Off, WindowSinks, H2O, SnapKV, Pyramid };
const char* eviction_policy_name(EvictionPolicyKind k);
EvictionPolicyKind parse_eviction_policy(const std::string& name);  // throws UsageError naming the choices

enum class PoolKind { Max, Avg };
const char* pool_kind_name(PoolKind k);  // "max" | "avg"

struct EvictionSpec {
    EvictionPolicyKind kind = EvictionPolicyKind::Off;
    int64_t budget = 0;          // positions each (layer, K/V head) keeps between steps (pyramid: the mean)
    int64_t sinks = 0;           // window+sinks: first positions always kept
    int64_t recent = -1;         // h2o: most recent positions always kept; -1 = budget / 2
    int64_t obs = 8;             // snapkv, pyramid: observation window (last prompt queries)
    int64_t pool = 7;            // snapkv, pyramid: pooling kernel, odd
    PoolKind pool_kind = PoolKind::Avg;
    bool active() const { return kind != EvictionPolicyKind::Off; }
    int64_t recent_or_default() const { return recent >= 0 ? recent : budget / 2; }
};
void validate(const EvictionSpec& spec);  // throws UsageError

// Each returns the kept positions, ascending. `alive` ascending; `score` one per alive position.
std::vector<int64_t> keep_window_sinks(std::span<const int64_t> alive, int64_t budget, int64_t sinks);
std::vector<int64_t> keep_heavy_recent(std::span<const int64_t> alive, std::span<const double> score, int64_t budget,
                                       int64_t recent);
// (n) pooled over neighbours in array order, kernel k odd, same length.
std::vector<double> pool_scores(std::span<const double> score, int64_t kernel, PoolKind kind);
// The last min(obs, budget) alive positions, then the top of the others by `pooled` (one per alive position
// before the window; the window's own entries are ignored).
std::vector<int64_t> keep_snapkv(std::span<const int64_t> alive, std::span<const double> pooled, int64_t budget,
                                 int64_t obs);
std::vector<int64_t> pyramid_budgets(int64_t mean, int64_t n_layer);  // (L) round(mean * (1.5 - l/(L-1))), >= 1

class EvictionPolicy {
public:
    EvictionPolicy() = default;
    EvictionPolicy(EvictionSpec spec, int64_t n_layer, int64_t n_kv_head, int64_t group, int64_t max_positions);
    const EvictionSpec& spec() const { return spec_; }
    bool active() const { return spec_.active(); }
    // Does the query at `position` need its weights observed (prompt_length: the prompt's positions).
    bool observes(int64_t position, int64_t prompt_length) const;
    bool observing() const;               // may any query still be observed (h2o; snapkv before compressing)
    // weights (G, stride) over the keys of `keys` (attention.h order) for K/V head kv of layer il.
    void observe(int64_t il, int64_t kv, const float* weights, int64_t stride, const KeyRange& keys);
    // The rows first_position .. +n of a step that just ran: their weights (recomputed with attend_group
    // from queries (L, n, H*D) and the cache, the forward pass's numbers) for every query observes() wants.
    void observe_chunk(const ModelConfig& cfg, const KvCache& cache, const float* queries, int64_t first_position,
                       int64_t n, int64_t prompt_length);
    // After a step whose tokens end at cache.next_position(): the evictions to make now, in (layer,
    // K/V head, position) order, each with the score that decided it. prompt_done: the prompt is all in.
    void decide(const KvCache& cache, bool prompt_done, std::vector<EvictionEvent>& out);
    void reset();
    void grow(int64_t max_positions);     // room for more positions (a new turn), scores kept
    // What step_back needs to undo a step: the accumulated scores up to `n_positions` and the flags.
    struct Saved {
        std::vector<double> scores;
        int64_t n_positions = 0;
        bool compressed = false;
        int64_t window_mark = 0;
    };
    Saved save(int64_t n_positions) const;
    void load(const Saved& s);
    double score(int64_t il, int64_t kv, int64_t position) const {
        return scores_[size_t((il * n_kv_head_ + kv) * max_positions_ + position)];
    }

private:
    EvictionSpec spec_;
    int64_t n_layer_ = 0, n_kv_head_ = 0, group_ = 1, max_positions_ = 0;
    std::vector<double> scores_;          // (L, K, max_positions) accumulated attention (h2o) or the
                                          // observation window's sums (snapkv, pyramid)
    bool compressed_ = false;             // snapkv, pyramid: the prompt was compressed once
    int64_t window_mark_ = 0;             // window+sinks: positions sinks .. window_mark - 1 are reported gone
    std::vector<int64_t> budgets_;        // (L) per-layer budget
    std::vector<int64_t> alive_, kept_;   // scratch
    std::vector<double> alive_scores_;
    std::vector<float> weights_, out_, k_rows_, v_rows_;  // observe_chunk scratch: (G, P), (G, D), (P, D) x 2
};

}  // namespace kvscope
