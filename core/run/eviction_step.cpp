#include "run/eviction_step.h"

namespace kvscope {

void EvictionStep::start(const EvictionSpec& spec, int64_t n_layer, int64_t n_kv_head, int64_t group,
                         int64_t n_positions) {
    policy_ = spec.active() ? EvictionPolicy(spec, n_layer, n_kv_head, group, n_positions) : EvictionPolicy{};
}

float* EvictionStep::queries(const ModelConfig& cfg, int64_t n_tokens) {
    if (!policy_.observing()) return nullptr;
    queries_.resize(size_t(cfg.n_layer * n_tokens * cfg.q_width()));
    return queries_.data();
}

EvictionStep::Saved EvictionStep::save(int64_t next_position) const {
    Saved s;
    if (policy_.active()) s.policy = policy_.save(next_position);
    return s;
}

void EvictionStep::after_step(const ModelConfig& cfg, KvCache& cache, const float* queries, int64_t first, int64_t n,
                              int64_t n_prompt, bool prompt_done, int64_t keep_block, std::vector<EvictionEvent>& out) {
    out.clear();
    if (!policy_.active()) return;
    if (queries) policy_.observe_chunk(cfg, cache, queries, first, n, n_prompt);
    policy_.decide(cache, prompt_done, out);
    for (const EvictionEvent& e : out) cache.set_evicted(e.layer, e.kv_head, e.position, true);
    cache.return_evicted_blocks(keep_block);
}

void EvictionStep::take_back(KvCache& cache, const Saved& saved) {
    for (auto e = saved.events.rbegin(); e != saved.events.rend(); ++e)
        cache.set_evicted(e->layer, e->kv_head, e->position, e->restored);
    if (policy_.active()) policy_.load(saved.policy);
}

}  // namespace kvscope
