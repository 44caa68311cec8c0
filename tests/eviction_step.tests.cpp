// The eviction hook of a session (eviction_step.h): decide, evict, and take a step back.
//
// Independent computation: window+sinks keeps the first `sinks` positions and the most recent
// budget - sinks (eviction.h), so the positions each step must evict are written down here; taking a
// step back must clear exactly its flags and bring the policy back to decide the same again.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/config.h"
#include "run/eviction_step.h"

using namespace kvscope;

namespace {

constexpr int64_t L = 1, K = 2, D = 2;

void write(KvCache& c, int64_t n) {  // n more positions; the rows do not matter to window+sinks
    const float row[D] = {0, 0};
    for (int64_t p = c.next_position(); p < c.next_position() + n; ++p)
        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < K; ++h) c.write(il, h, p, row, row);
    c.advance(n);
}

std::vector<std::string> named(const std::vector<EvictionEvent>& events) {  // "layer head position"
    std::vector<std::string> out;
    for (const EvictionEvent& e : events)
        out.push_back(std::to_string(e.layer) + " " + std::to_string(e.kv_head) + " " + std::to_string(e.position));
    return out;
}

std::vector<int> flags(const KvCache& c, int64_t h) {
    std::vector<int> out;
    for (int64_t p = 0; p < c.next_position(); ++p) out.push_back(c.rows(0, h).evicted(p) ? 1 : 0);
    return out;
}

}  // namespace

TEST_CASE("window+sinks evicts what leaves the budget; a step back clears it and decides the same again", "[eviction_step]") {
    EvictionSpec spec;
    spec.kind = EvictionPolicyKind::WindowSinks;
    spec.budget = 3;
    spec.sinks = 1;
    const ModelConfig cfg;  // only read when the policy observes queries; window+sinks does not
    KvCache cache(L, K, D, 8, 0);
    EvictionStep step;
    step.start(spec, L, K, 1, 8);
    REQUIRE(step.active());
    CHECK(step.queries(cfg, 5) == nullptr);

    // step 1: the prompt, positions 0..4. Kept: sink 0 and the recent 3, 4.
    write(cache, 5);
    std::vector<EvictionEvent> out;
    step.after_step(cfg, cache, nullptr, 0, 5, 5, true, -1, out);
    CHECK(named(out) == std::vector<std::string>{"0 0 1", "0 0 2", "0 1 1", "0 1 2"});
    CHECK(flags(cache, 0) == std::vector<int>{0, 1, 1, 0, 0});

    // step 2: position 5. Kept: 0, 4, 5; 3 goes.
    EvictionStep::Saved saved = step.save(cache.next_position());
    write(cache, 1);
    step.after_step(cfg, cache, nullptr, 5, 1, 5, true, -1, out);
    saved.events = out;
    CHECK(named(out) == std::vector<std::string>{"0 0 3", "0 1 3"});
    CHECK(flags(cache, 1) == std::vector<int>{0, 1, 1, 1, 0, 0});

    // back: only step 2's flags clear; the policy decides step 2 again exactly as before.
    step.take_back(cache, saved);
    CHECK(flags(cache, 0) == std::vector<int>{0, 1, 1, 0, 0, 0});
    CHECK(flags(cache, 1) == std::vector<int>{0, 1, 1, 0, 0, 0});
    step.after_step(cfg, cache, nullptr, 5, 1, 5, true, -1, out);
    CHECK(named(out) == std::vector<std::string>{"0 0 3", "0 1 3"});
}

TEST_CASE("an inactive hook evicts nothing and saves nothing", "[eviction_step]") {
    const ModelConfig cfg;
    KvCache cache(L, K, D, 8, 0);
    EvictionStep step;
    step.start(EvictionSpec{}, L, K, 1, 8);
    CHECK_FALSE(step.active());
    write(cache, 6);
    std::vector<EvictionEvent> out{EvictionEvent{}};
    step.after_step(cfg, cache, nullptr, 0, 6, 6, true, -1, out);
    CHECK(out.empty());
    CHECK(flags(cache, 0) == std::vector<int>(6, 0));
    CHECK(step.save(6).policy.scores.empty());
}
