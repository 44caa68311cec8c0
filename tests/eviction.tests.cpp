// Eviction under a budget (eviction.h, kv_cache.h's evicted flags).
//
// The policies' choices are checked against tests/reference/eviction_reference.py, an independent numpy replay
// written from the README's rules: the test feeds both the same fixed attention histories (weights in
// eighths, so sums are exact and ties are many) and compares, after every step, the kept positions of
// every (layer, K/V head) and the score that decided each eviction. The engine tests compare runs with
// each other bit for bit: no eviction and a budget >= the length equal the plain cache; window+sinks
// equals --window/--sinks; step_back undoes a step's evictions exactly; attention gives an evicted
// key weight 0 and otherwise the numbers of a key list that never held it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <iomanip>
#include <random>
#include <set>
#include <sstream>

#include "base/errors.h"
#include "forward/model.h"
#include "kernels/attention.h"
#include "run/eviction.h"
#include "run/session.h"
#include "run/trace.h"
#include "session_runs.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

const char* torch_python() {
    static const char* p = std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0 ? "/usr/bin/python3" : nullptr;
    return p;
}

struct HistoryCase {
    std::string policy;
    int64_t budget = 4, sinks = 0, recent = -1, obs = 3, pool = 3;
    std::string pool_kind = "max";
    int64_t L = 3, K = 2, G = 2, N = 20, P = 12, chunk = 5;
    uint32_t seed = 1;
};

std::string describe(const HistoryCase& c) {
    std::ostringstream o;
    o << c.policy << " " << c.budget << " " << c.sinks << " " << c.recent << " " << c.obs << " " << c.pool << " "
      << c.pool_kind << " " << c.L << " " << c.K << " " << c.G << " " << c.N << " " << c.P << " " << c.chunk;
    return o.str();
}

// The engine's side of the replay: a real cache (D = 2, rows unused) and an EvictionPolicy, stepped as
// a session steps: write the step's positions, observe its queries' weights (0 for keys evicted
// before the step, as attention gives them), decide, evict.
void replay(const HistoryCase& c, const std::vector<float>& W, std::vector<std::string>& kept,
            std::vector<std::string>& events) {
    EvictionSpec spec;
    spec.kind = parse_eviction_policy(c.policy);
    spec.budget = c.budget, spec.sinks = c.sinks, spec.recent = c.recent, spec.obs = c.obs, spec.pool = c.pool;
    spec.pool_kind = c.pool_kind == "max" ? PoolKind::Max : PoolKind::Avg;
    KvCache cache(c.L, c.K, 2, c.N, 0);
    EvictionPolicy policy(spec, c.L, c.K, c.G, c.N);
    const float row[2] = {0, 0};
    std::vector<float> w(static_cast<size_t>(c.G * c.N));
    std::vector<EvictionEvent> out;
    int64_t step = 0;
    for (int64_t a = 0; a < c.N; ++step) {
        const int64_t b = a < c.P ? std::min(a + c.chunk, c.P) : a + 1;
        for (int64_t il = 0; il < c.L; ++il)
            for (int64_t kv = 0; kv < c.K; ++kv)
                for (int64_t p = a; p < b; ++p) cache.write(il, kv, p, row, row);
        cache.advance(b - a);
        for (int64_t q = a; q < b; ++q) {
            if (!policy.observes(q, c.P)) continue;
            const KeyRange keys{0, 0, q};
            for (int64_t il = 0; il < c.L; ++il)
                for (int64_t kv = 0; kv < c.K; ++kv) {
                    for (int64_t g = 0; g < c.G; ++g)
                        for (int64_t p = 0; p <= q; ++p)
                            w[size_t(g * (q + 1) + p)] = cache.rows(il, kv).evicted(p)
                                                             ? 0.0f
                                                             : W[size_t((((q * c.L + il) * c.K + kv) * c.G + g) * c.N + p)];
                    policy.observe(il, kv, w.data(), q + 1, keys);
                }
        }
        policy.decide(cache, b >= c.P, out);
        for (const EvictionEvent& e : out) {
            REQUIRE(cache.set_evicted(e.layer, e.kv_head, e.position, true));
            std::ostringstream line;
            line << step << " " << e.layer << " " << e.kv_head << " " << e.position << " " << std::setprecision(9) << e.score;
            events.push_back(line.str());
        }
        for (int64_t il = 0; il < c.L; ++il)
            for (int64_t kv = 0; kv < c.K; ++kv) {
                std::ostringstream line;
                line << step << " " << il << " " << kv << " ";
                bool first = true;
                for (int64_t p = 0; p < cache.next_position(); ++p)
                    if (!cache.rows(il, kv).evicted(p)) line << (first ? "" : " ") << p, first = false;
                kept.push_back(line.str());
            }
        a = b;
    }
}

std::vector<std::string> read_lines(const fs::path& f) {
    std::ifstream in(f);
    std::vector<std::string> lines;
    for (std::string s; std::getline(in, s);) {
        while (!s.empty() && s.back() == ' ') s.pop_back();
        lines.push_back(s);
    }
    return lines;
}

// Events as "step layer head position score", the score compared as a float value.
void compare_events(const std::vector<std::string>& got, const std::vector<std::string>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        std::istringstream g(got[i]), w(want[i]);
        int64_t a[4], b[4];
        double sg, sw;
        for (int j = 0; j < 4; ++j) g >> a[j], w >> b[j];
        g >> sg, w >> sw;
        INFO("event " << i << ": engine " << got[i] << ", reference " << want[i]);
        REQUIRE(std::equal(a, a + 4, b));
        REQUIRE(float(sg) == Approx(float(sw)).epsilon(1e-6));
    }
}

}  // namespace

TEST_CASE("each policy keeps what the numpy reference keeps, on fixed attention histories with ties", "[eviction]") {
    const char* python = torch_python();
    if (!python) {
        WARN("skipped: /usr/bin/python3 with numpy not found");
        return;
    }
    auto make = [](std::string policy, int64_t budget, auto&& set) {
        HistoryCase c;
        c.policy = std::move(policy);
        c.budget = budget;
        set(c);
        return c;
    };
    auto none = [](HistoryCase&) {};
    const std::vector<HistoryCase> cases = {
        make("h2o", 5, [](HistoryCase& c) { c.recent = 2; }),
        make("h2o", 6, [](HistoryCase& c) { c.recent = 0, c.chunk = 12, c.seed = 2; }),
        make("h2o", 4, [](HistoryCase& c) { c.recent = 4, c.seed = 3; }),
        make("h2o", 7, [](HistoryCase& c) { c.K = 1, c.G = 4, c.chunk = 1, c.seed = 4; }),   // MQA-like group
        make("h2o", 30, none),                                                             // budget > length
        make("window+sinks", 6, [](HistoryCase& c) { c.sinks = 2; }),
        make("window+sinks", 3, [](HistoryCase& c) { c.sinks = 0, c.chunk = 1; }),
        make("snapkv", 7, [](HistoryCase& c) { c.obs = 3, c.pool = 3, c.pool_kind = "max"; }),
        make("snapkv", 6, [](HistoryCase& c) { c.obs = 4, c.pool = 5, c.pool_kind = "avg", c.chunk = 12, c.seed = 5; }),
        make("snapkv", 2, [](HistoryCase& c) { c.obs = 4, c.pool = 1, c.seed = 6; }),     // budget < obs
        make("pyramid", 6, [](HistoryCase& c) { c.L = 4, c.obs = 2, c.pool = 3, c.seed = 7; }),
        make("pyramid", 5, [](HistoryCase& c) { c.L = 2, c.obs = 3, c.pool = 3, c.pool_kind = "avg", c.seed = 8; }),
        make("oracle-off", 3, none),
    };
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const HistoryCase& c = cases[ci];
        INFO("case " << ci << ": " << describe(c));
        // Weights in eighths 0..3/8: exact in float and in any sum, and full of ties.
        std::mt19937 rng(c.seed);
        std::vector<float> W(static_cast<size_t>(c.N * c.L * c.K * c.G * c.N), 0.0f);
        for (int64_t q = 0; q < c.N; ++q)
            for (int64_t lkg = 0; lkg < c.L * c.K * c.G; ++lkg)
                for (int64_t p = 0; p <= q; ++p) W[size_t((q * c.L * c.K * c.G + lkg) * c.N + p)] = float(rng() % 4) / 8.0f;
        const fs::path dir = work_dir("eviction") / ("case" + std::to_string(ci));
        fs::create_directories(dir);
        std::ofstream(dir / "case.txt") << describe(c) << "\n";
        {
            std::ofstream out(dir / "weights.f32", std::ios::binary);
            out.write(reinterpret_cast<const char*>(W.data()), std::streamsize(W.size() * sizeof(float)));
        }
        const std::string cmd = std::string(python) + " " KVSCOPE_SOURCE_DIR "/tests/reference/eviction_reference.py " + dir.string();
        REQUIRE(std::system(cmd.c_str()) == 0);
        std::vector<std::string> kept, events;
        replay(c, W, kept, events);
        const std::vector<std::string> ref_kept = read_lines(dir / "ref_kept.txt");
        REQUIRE(kept.size() == ref_kept.size());
        for (size_t i = 0; i < kept.size(); ++i) {
            INFO("kept line " << i);
            REQUIRE(kept[i] == ref_kept[i]);
        }
        compare_events(events, read_lines(dir / "ref_events.txt"));
        if (c.policy != "oracle-off" && c.budget < c.N) CHECK(!events.empty());
    }
}

TEST_CASE("pure choices: pool_scores and pyramid_budgets against definitions written here", "[eviction]") {
    const std::vector<double> s = {1, 5, 2, 0, 7};
    CHECK(pool_scores(s, 3, PoolKind::Max) == std::vector<double>{5, 5, 5, 7, 7});
    CHECK(pool_scores(s, 3, PoolKind::Avg) == std::vector<double>{6.0 / 3, 8.0 / 3, 7.0 / 3, 9.0 / 3, 7.0 / 3});
    CHECK(pool_scores(s, 1, PoolKind::Max) == s);
    // 1.5x .. 0.5x the mean, averaging the mean: 8 over 3 layers = 12, 8, 4
    CHECK(pyramid_budgets(8, 3) == std::vector<int64_t>{12, 8, 4});
    CHECK(pyramid_budgets(8, 1) == std::vector<int64_t>{8});
    const std::vector<int64_t> alive = {0, 1, 2, 3, 4, 5};
    const std::vector<double> score = {1, 3, 3, 0, 3, 9};
    CHECK(keep_heavy_recent(alive, score, 3, 1) == std::vector<int64_t>{1, 2, 5});  // ties: lower position
    CHECK(keep_window_sinks(alive, 4, 2) == std::vector<int64_t>{0, 1, 4, 5});
}

TEST_CASE("an evicted key gets weight 0 and leaves the other numbers of a key list without it", "[eviction]") {
    const int64_t D = 12, n = 70;  // more keys than one kernel batch of 64
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::vector<float> k(static_cast<size_t>(n * D)), v(static_cast<size_t>(n * D)), q(static_cast<size_t>(D));
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (float& x : q) x = nd(rng);
    const float scale = 1.0f / std::sqrt(float(D));
    for (int64_t gone : {int64_t(0), int64_t(5), int64_t(64), n - 2}) {
        INFO("evicted key " << gone);
        std::vector<float> w_masked(static_cast<size_t>(n)), out_masked(static_cast<size_t>(D)), w_without(static_cast<size_t>(n - 1)), out_without(static_cast<size_t>(D));
        attend_row(out_masked.data(), w_masked.data(), q.data(), [&](int64_t p) { return k.data() + p * D; },
                   [&](int64_t p) { return v.data() + p * D; }, KeyRange{0, 0, n - 1}, D, scale, nullptr,
                   [&](int64_t p) { return p == gone; });
        // The same keys with `gone` left out of the list (index j -> key j, skipping gone).
        auto at = [&](int64_t j) { return j < gone ? j : j + 1; };
        attend_row(out_without.data(), w_without.data(), q.data(), [&](int64_t j) { return k.data() + at(j) * D; },
                   [&](int64_t j) { return v.data() + at(j) * D; }, KeyRange{0, 0, n - 2}, D, scale);
        CHECK(w_masked[size_t(gone)] == 0.0f);
        for (int64_t j = 0; j < n - 1; ++j) REQUIRE(std::memcmp(&w_masked[size_t(at(j))], &w_without[size_t(j)], 4) == 0);
        CHECK(first_mismatch(out_masked, out_without).empty());
    }
}

namespace {

// V = 61, n_ctx = 48, C = 32, H = 4 (D = 8), L = 3.
std::shared_ptr<const Model> gpt2_model() {
    static std::shared_ptr<const Model> model = [] {
        FixtureSpec spec;
        spec.config.n_vocab = 61;
        spec.config.n_ctx = 48;
        spec.config.n_embd = 32;
        spec.config.n_head = 4;
        spec.config.n_inner = 64;
        spec.config.n_layer = 3;
        spec.seed = 77;
        return Model::load(write_fixture(work_dir("eviction") / "gpt2", spec).dir.string());
    }();
    return model;
}

std::shared_ptr<const Model> gqa_model() {  // Llama family, 4 query heads on 2 K/V heads, bfloat16
    static std::shared_ptr<const Model> model = Model::load(KVSCOPE_SOURCE_DIR "/assets/llama-gqa");
    return model;
}

std::vector<int32_t> prompt_of(int64_t n, int32_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = int32_t(rng() % uint32_t(vocab));
    return p;
}

SessionOptions with_policy(EvictionPolicyKind kind, int64_t budget, int64_t n_new, int64_t chunk = 0) {
    SessionOptions o;
    o.max_new_tokens = n_new;
    o.prefill_chunk = chunk;
    o.eviction.kind = kind;
    o.eviction.budget = budget;
    return o;
}

int64_t n_events(const Run& r) {
    int64_t n = 0;
    for (const auto& rec : r.records) n += int64_t(rec->eviction.events.size());
    return n;
}

}  // namespace

TEST_CASE("no eviction and a budget >= the length are bit-identical to the plain cache", "[eviction]") {
    const auto model = gpt2_model();
    const std::vector<int32_t> prompt = prompt_of(14, 61, 5);
    SessionOptions plain;
    plain.max_new_tokens = 10;
    const Run want = run_to_end(model, plain, prompt);
    for (EvictionPolicyKind kind : {EvictionPolicyKind::Off, EvictionPolicyKind::H2O, EvictionPolicyKind::SnapKV,
                                    EvictionPolicyKind::Pyramid}) {
        for (int64_t chunk : {int64_t(0), int64_t(5)}) {
            INFO(eviction_policy_name(kind) << ", chunk " << chunk);
            // pyramid's last layer gets half the mean: a mean of 48 leaves it 24 >= 24 positions
            const Run got = run_to_end(model, with_policy(kind, kind == EvictionPolicyKind::Pyramid ? 48 : 24, 10, chunk), prompt);
            require_identical(got, want);
            CHECK(n_events(got) == 0);
        }
    }
}

TEST_CASE("window+sinks as a policy equals --window N-S+1 --sinks S bit for bit", "[eviction]") {
    const auto model = gpt2_model();
    const std::vector<int32_t> prompt = prompt_of(17, 61, 6);
    for (int64_t chunk : {int64_t(0), int64_t(4), int64_t(1)})
        for (auto [budget, sinks] : {std::pair<int64_t, int64_t>{8, 2}, {6, 0}, {5, 4}}) {
            INFO("budget " << budget << ", sinks " << sinks << ", chunk " << chunk);
            SessionOptions window;
            window.max_new_tokens = 9;
            window.prefill_chunk = chunk;
            window.window = budget - sinks + 1;
            window.sinks = sinks;
            const Run want = run_to_end(model, window, prompt);
            SessionOptions policy = with_policy(EvictionPolicyKind::WindowSinks, budget, 9, chunk);
            policy.eviction.sinks = sinks;
            Session s(model, policy);
            s.set_prompt(prompt);
            while (s.next() != Session::Next::Done) {
                s.step();
                // between steps every layer and head keeps exactly min(budget, positions) keys
                for (int32_t kept : s.cache().view().kept) CHECK(kept <= budget);
            }
            require_identical(collect(s), want);
            CHECK(n_events(collect(s)) > 0);
        }
}

TEST_CASE("h2o, snapkv and pyramid evict down to the budget, per K/V head, and views show the evicted keys unattended",
          "[eviction]") {
    for (bool gqa : {false, true}) {
        const auto model = gqa ? gqa_model() : gpt2_model();
        const int32_t V = int32_t(model->config().n_vocab);
        const int64_t L = model->config().n_layer, K = model->config().kv_heads();
        const std::vector<int32_t> prompt = prompt_of(16, V, 7);
        for (EvictionPolicyKind kind : {EvictionPolicyKind::H2O, EvictionPolicyKind::SnapKV, EvictionPolicyKind::Pyramid}) {
            INFO(eviction_policy_name(kind) << (gqa ? " on llama-gqa" : " on gpt2"));
            SessionOptions o = with_policy(kind, 6, 8);
            o.eviction.obs = 3;
            o.eviction.recent = 2;
            Session s(model, o);
            s.set_prompt(prompt);
            s.step();  // the prompt
            const std::vector<int64_t> budgets =
                kind == EvictionPolicyKind::Pyramid ? pyramid_budgets(6, L) : std::vector<int64_t>(size_t(L), 6);
            const KvCacheView after_prompt = s.cache().view();
            REQUIRE(after_prompt.kept.size() == size_t(L * K));
            for (int64_t il = 0; il < L; ++il)
                for (int64_t kv = 0; kv < K; ++kv)
                    CHECK(after_prompt.kept[size_t(il * K + kv)] == std::min<int64_t>(budgets[size_t(il)], 16));
            while (s.next() != Session::Next::Done) s.step();
            // the cache panel's list (evicted_after) is the cache's own flags after the last step
            for (int64_t il = 0; il < L; ++il)
                for (int64_t kv = 0; kv < K; ++kv) {
                    std::vector<int64_t> listed, flagged;
                    for (const EvictionEvent& e : evicted_after(s.trace(), s.trace().size() - 1, il, kv)) listed.push_back(e.position);
                    for (int64_t p = 0; p < s.cache().next_position(); ++p)
                        if (s.cache().rows(il, kv).evicted(p)) flagged.push_back(p);
                    CHECK(listed == flagged);
                }
            // every evicted key of every step shows as masked, with weight 0, in the views of later steps
            const Trace& t = s.trace();
            const int64_t last = int64_t(t.size()) - 1;
            int64_t checked = 0;
            for (int64_t il = 0; il < L; ++il)
                for (int64_t h = 0; h < model->config().n_head; ++h) {
                    const AttentionMap m = attention_map(t, size_t(last), il, h);
                    std::set<int64_t> gone;
                    for (int64_t st = 0; st < last; ++st)
                        for (const EvictionEvent& e : t[size_t(st)].eviction.events)
                            if (e.layer == il && e.kv_head == model->config().kv_head_of(h)) gone.insert(e.position);
                    for (int64_t j = 0; j < m.n_key; ++j) {
                        const bool evicted = gone.count(m.key_positions[size_t(j)]) > 0;
                        CHECK(bool(m.visible[size_t(j)]) == !evicted);
                        if (evicted) {
                            CHECK(m.weights[size_t(j)] == 0.0f);
                            ++checked;
                        }
                    }
                }
            CHECK(checked > 0);
        }
    }
}

TEST_CASE("step_back undoes a step's evictions exactly: run, step back, rerun is bit-identical", "[eviction]") {
    for (bool gqa : {false, true}) {
        const auto model = gqa ? gqa_model() : gpt2_model();
        const std::vector<int32_t> prompt = prompt_of(13, int32_t(model->config().n_vocab), 8);
        for (EvictionPolicyKind kind : {EvictionPolicyKind::H2O, EvictionPolicyKind::SnapKV, EvictionPolicyKind::WindowSinks}) {
            INFO(eviction_policy_name(kind) << (gqa ? " on llama-gqa" : " on gpt2"));
            SessionOptions o = with_policy(kind, 7, 9, 4);
            o.eviction.sinks = 2;
            o.eviction.obs = 2;
            o.sampling.temperature = 0.8f;  // sampled: the RNG must come back too
            Session s(model, o);
            s.set_prompt(prompt);
            while (s.next() != Session::Next::Done) s.step();
            const Run want = collect(s);
            for (int back : {1, 5, int(want.records.size())}) {
                INFO("back " << back);
                for (int i = 0; i < back; ++i) REQUIRE(s.step_back());
                if (back == int(want.records.size())) CHECK(!s.cache().eviction().any());
                while (s.next() != Session::Next::Done) s.step();
                const Run got = collect(s);
                require_identical(got, want);
                for (size_t i = 0; i < got.records.size(); ++i) {
                    const auto& a = got.records[i]->eviction.events;
                    const auto& b = want.records[i]->eviction.events;
                    REQUIRE(a.size() == b.size());
                    for (size_t j = 0; j < a.size(); ++j)
                        REQUIRE((a[j].layer == b[j].layer && a[j].kv_head == b[j].kv_head && a[j].position == b[j].position &&
                                 std::memcmp(&a[j].score, &b[j].score, 4) == 0));
                    REQUIRE(got.records[i]->cache.kept == want.records[i]->cache.kept);
                }
            }
        }
    }
}

TEST_CASE("evicted flags: a reused ring slot clears them, checkpoint/restore puts them back", "[eviction]") {
    KvCache c(2, 2, 4, 5, 3, 1);  // ring of 5 slots, window 3, 1 sink
    const std::vector<float> row(4, 1.0f);
    auto feed = [&](int64_t n) {
        for (int64_t p = c.next_position(); p < c.next_position() + n; ++p)
            for (int64_t il = 0; il < 2; ++il)
                for (int64_t h = 0; h < 2; ++h) c.write(il, h, p, row.data(), row.data());
        c.advance(n);
    };
    feed(5);
    CHECK(!c.set_evicted(0, 0, 7, true));  // not alive
    CHECK(c.set_evicted(1, 1, 4, true));
    CHECK(!c.set_evicted(1, 1, 4, true));   // once
    CHECK(c.set_evicted(0, 1, 0, true));
    CHECK(c.eviction().count() == 2);
    KvCacheCheckpoint cp = c.checkpoint(1);
    feed(1);                    // position 5 takes slot 1 (ring over slots 1..4): nothing of 4 or 0 is touched
    CHECK(c.rows(1, 1).evicted(4));
    KvCacheCheckpoint cp2 = c.checkpoint(4);
    feed(4);                    // positions 6..9 take slots 2, 3, 4, 1: position 4's flag goes with slot 4
    CHECK(!c.rows(1, 1).evicted(8));
    CHECK(c.eviction().count() == 1);
    c.restore(cp2);
    CHECK(c.rows(1, 1).evicted(4));
    CHECK(c.eviction().count() == 2);
    c.restore(cp);
    CHECK(c.set_evicted(1, 1, 4, false));
    CHECK(c.eviction().count() == 1);
    c.grow(9);                  // flags follow their positions into the larger ring
    CHECK(c.rows(0, 1).evicted(0));
    CHECK(c.eviction().count() == 1);
    c.reset();
    CHECK(!c.eviction().any());
}

TEST_CASE("bad eviction input: one UsageError each, nothing changed", "[eviction]") {
    CHECK_THROWS_AS(parse_eviction_policy("lru"), UsageError);
    const auto model = gpt2_model();
    auto refused = [&](SessionOptions o) { CHECK_THROWS_AS(Session(model, o), UsageError); };
    refused(with_policy(EvictionPolicyKind::H2O, 0, 4));
    refused(with_policy(EvictionPolicyKind::H2O, -3, 4));
    SessionOptions windowed = with_policy(EvictionPolicyKind::SnapKV, 4, 4);
    windowed.window = 8;
    refused(windowed);
    SessionOptions sinks = with_policy(EvictionPolicyKind::WindowSinks, 4, 4);
    sinks.eviction.sinks = 4;
    refused(sinks);
    SessionOptions pool = with_policy(EvictionPolicyKind::SnapKV, 4, 4);
    pool.eviction.pool = 4;
    refused(pool);
    // the cache switched off mid-run: the step is refused and the session keeps its state
    Session s(model, with_policy(EvictionPolicyKind::H2O, 4, 4));
    s.set_prompt(prompt_of(8, 61, 9));
    s.step();
    const size_t n_steps = s.trace().size();
    const int64_t next = s.cache().next_position();
    s.set_use_cache(false);
    CHECK_THROWS_AS(s.step(), UsageError);
    CHECK(s.trace().size() == n_steps);
    CHECK(s.cache().next_position() == next);
    s.set_use_cache(true);
    s.step();
    CHECK(s.trace().size() == n_steps + 1);
}

TEST_CASE("paged cache: a block evicted in every layer and head leaves the table and returns to the pool, step back "
          "brings it back", "[eviction]") {
    const auto model = gpt2_model();
    const int64_t L = model->config().n_layer, K = model->config().kv_heads(), B = 2;
    const std::vector<int32_t> prompt = prompt_of(12, 61, 10);
    for (EvictionPolicyKind kind : {EvictionPolicyKind::WindowSinks, EvictionPolicyKind::H2O, EvictionPolicyKind::SnapKV})
        for (bool history : {true, false}) {
            INFO(eviction_policy_name(kind) << (history ? ", history on" : ", history off"));
            SessionOptions ring = with_policy(kind, 5, 14, 3);
            ring.eviction.sinks = 1;
            ring.eviction.recent = 1;
            ring.eviction.obs = 2;
            ring.history = history;
            SessionOptions paged = ring;
            paged.block_size = B;
            Session s(model, paged);
            Session r(model, ring);
            s.set_prompt(prompt);
            r.set_prompt(prompt);
            int64_t returned_somewhere = 0;
            std::vector<std::set<int64_t>> gone(size_t(L * K));  // evicted positions per (layer, K/V head), from the events
            while (s.next() != Session::Next::Done) {
                const int64_t first = s.cache().next_position();
                const StepRecord& rec = s.step();
                const StepRecord& rec_ring = r.step();
                REQUIRE(first_mismatch(rec.prediction.logits, rec_ring.prediction.logits).empty());  // paged = ring
                REQUIRE(rec.eviction.events.size() == rec_ring.eviction.events.size());
                for (const EvictionEvent& e : rec.eviction.events) gone[size_t(e.layer * K + e.kv_head)].insert(e.position);
                // independent count: full blocks whose every position is gone in every layer and head, but (history on)
                // not the block the step began writing into: its checkpoint does not hold it (window+sinks: the
                // window's own rule returns it, held)
                const int64_t next = rec.cache.next_position;
                const int64_t kept_block = history && first % B != 0 && kind != EvictionPolicyKind::WindowSinks ? first / B : -1;
                int64_t expect_mapped = 0;
                for (int64_t k = 0; k * B < next; ++k) {
                    bool all = (k + 1) * B <= next && k != kept_block;
                    for (size_t lh = 0; lh < gone.size() && all; ++lh)
                        for (int64_t p = k * B; p < (k + 1) * B && all; ++p) all = gone[lh].count(p) > 0;
                    all ? ++returned_somewhere : ++expect_mapped;
                }
                const int64_t mapped =
                    std::count_if(rec.cache.block_table.begin(), rec.cache.block_table.end(), [](int32_t b) { return b >= 0; });
                REQUIRE(mapped == expect_mapped);
                CHECK(rec.cache.bytes_used == mapped * s.cache().pages().pool()->bytes_per_block());
                // without history nothing else holds a returned block: the pool has it back
                if (!history) CHECK(rec.cache.pool_free == rec.cache.pool_blocks - mapped);
            }
            CHECK(returned_somewhere > 0);
            if (!history) continue;
            // back to the prompt step and forward again: the same blocks leave, the same numbers
            const Run got = collect(s);
            const size_t n = got.records.size();
            for (size_t i = 1; i < n; ++i) REQUIRE(s.step_back());
            CHECK(s.cache().pages().table() == got.records[0]->cache.block_table);
            while (s.next() != Session::Next::Done) s.step();
            require_identical(collect(s), got);
            for (size_t i = 0; i < n; ++i) {
                const auto& a = collect(s).records[i]->cache.block_table;
                const auto& b = got.records[i]->cache.block_table;
                REQUIRE(a.size() == b.size());
                for (size_t k = 0; k < a.size(); ++k) CHECK((a[k] >= 0) == (b[k] >= 0));
            }
        }
}
