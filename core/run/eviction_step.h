#pragma once
// The eviction hook of one Session: after a step's forward pass the policy (eviction.h) observes the
// step's queries and decides, the cache evicts; step back puts both back. Callers read the policy
// through Session::parts().eviction.policy().
//
//   start(spec, L, K, G, n)     set_prompt: a fresh policy for up to n positions (inactive when spec is off)
//   grow(n) / reset()           a new turn: room for n positions / back to before the first step
//   queries(cfg, T)             (L, T, H*D) room the forward pass fills with the step's queries; null when
//                               the policy observes none
//   save(next_position)         before a step: the policy's state (the step's events join it afterwards)
//   after_step(...)             observe the step's queries, decide, evict; the events, in (layer, K/V
//                               head, position) order, go to `out`; full evicted blocks return to the pool
//   take_back(cache, saved)     step back, after the cache's checkpoint is restored: the step's flags
//                               back newest first, the policy's state as saved
#include <cstdint>
#include <vector>

#include "cache/kv_cache.h"
#include "model/config.h"
#include "run/eviction.h"
#include "run/trace.h"

namespace kvscope {

class EvictionStep {
public:
    struct Saved {               // what step back needs to undo one step's evictions
        EvictionPolicy::Saved policy;       // the policy's state before the step
        std::vector<EvictionEvent> events;  // what the step evicted after it attended
    };

    void start(const EvictionSpec& spec, int64_t n_layer, int64_t n_kv_head, int64_t group, int64_t n_positions);
    void grow(int64_t n_positions) { policy_.grow(n_positions); }
    void reset() { policy_.reset(); }
    float* queries(const ModelConfig& cfg, int64_t n_tokens);
    Saved save(int64_t next_position) const;
    // first / n: the step's computed positions; n_prompt: the prompt's length; prompt_done: the prompt is
    // all in after the step; keep_block: a paged block to keep mapped (-1: none)
    void after_step(const ModelConfig& cfg, KvCache& cache, const float* queries, int64_t first, int64_t n,
                    int64_t n_prompt, bool prompt_done, int64_t keep_block, std::vector<EvictionEvent>& out);
    void take_back(KvCache& cache, const Saved& saved);

    bool active() const { return policy_.active(); }
    const EvictionPolicy& policy() const { return policy_; }

private:
    EvictionPolicy policy_;
    std::vector<float> queries_;  // (L, T, H*D) the step's queries, for the policy
};

}  // namespace kvscope
