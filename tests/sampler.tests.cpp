// Sampler: greedy picks the first argmax; sampling draws from softmax(logits / T) cut to the top-k ids,
// then to the smallest prefix (by descending probability) whose mass reaches top_p of what is left,
// renormalised. The expected distributions are computed here in double from that definition; the
// empirical frequencies of many seeded draws must match them (a chi-square statistic with a loose
// bound), and no draw may land outside the kept set.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <numeric>
#include <random>

#include <quadmath.h>

#include "base/errors.h"
#include "run/sampler.h"

using namespace kvscope;

namespace {

std::vector<double> expected_distribution(const std::vector<float>& logits, double T, int64_t top_k, double top_p) {
    const size_t V = logits.size();
    const double mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(V);
    double z = 0;
    for (size_t i = 0; i < V; ++i) z += p[i] = std::exp((double(logits[i]) - mx) / T);
    for (double& x : p) x /= z;
    std::vector<size_t> ids(V);
    std::iota(ids.begin(), ids.end(), size_t(0));
    std::stable_sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    size_t keep = top_k > 0 && size_t(top_k) < V ? size_t(top_k) : V;
    if (top_p < 1.0) {
        double total = 0, cum = 0;
        for (size_t i = 0; i < keep; ++i) total += p[ids[i]];
        size_t n = 0;
        while (n < keep) {
            cum += p[ids[n++]];
            if (cum >= top_p * total) break;
        }
        keep = n;
    }
    std::vector<double> q(V, 0.0);
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) mass += p[ids[i]];
    for (size_t i = 0; i < keep; ++i) q[ids[i]] = p[ids[i]] / mass;
    return q;
}

std::vector<int64_t> draw_counts(const std::vector<float>& logits, SamplerOptions o, int n_draws) {
    Sampler s(o, int64_t(logits.size()));
    std::vector<int64_t> counts(logits.size(), 0);
    int64_t n_outside = 0;
    for (int i = 0; i < n_draws; ++i) {
        const TokenId id = s.sample(logits.data());
        if (id >= 0 && size_t(id) < logits.size()) ++counts[size_t(id)];
        else ++n_outside;
    }
    REQUIRE(n_outside == 0);
    return counts;
}

const std::vector<float> kLogits = {1.2f, -0.3f, 2.5f, 0.0f, 0.7f, 2.5f, -1.8f, 1.9f, 0.4f, -0.6f, 3.1f, 1.0f};

}  // namespace

TEST_CASE("options are validated", "[sampler]") {
    auto bad = [](SamplerOptions o) { CHECK_THROWS_AS(validate(o), UsageError); };
    bad({-1.0, 0, 1.0, 0});
    bad({-1e-9, 0, 1.0, 0});
    bad({double(NAN), 0, 1.0, 0});
    bad({double(INFINITY), 0, 1.0, 0});
    bad({1.0, -1, 1.0, 0});
    bad({1.0, 0, 0.0, 0});
    bad({1.0, 0, -0.5, 0});
    bad({1.0, 0, 1.5, 0});
    bad({1.0, 0, double(NAN), 0});
    CHECK_NOTHROW(validate({0.0, 0, 1.0, 0}));
    CHECK_NOTHROW(validate({0.5, 3, 0.01, 9}));
    CHECK_THROWS_AS(Sampler(SamplerOptions{1.0, 0, 2.0, 0}, 10), UsageError);
}

TEST_CASE("greedy returns the first index of the largest logit", "[sampler]") {
    Sampler s({}, 6);
    const std::vector<float> tie = {0.0f, 3.0f, 1.0f, 3.0f, -2.0f, 3.0f};
    CHECK(s.sample(tie.data()) == 1);
    const std::vector<float> last = {-5.0f, -4.0f, -3.0f, -2.0f, -1.0f, -0.5f};
    CHECK(s.sample(last.data()) == 5);
    // top-k / top-p do not change a greedy choice.
    Sampler g({0.0, 1, 0.1, 3}, 6);
    CHECK(g.sample(tie.data()) == 1);
}

TEST_CASE("greedy over a long vocabulary: the first of tied maxima, whatever lane or block holds it", "[sampler]") {
    // What `if (x[i] > x[best]) best = i` from best = 0 returns: the definition, written out here.
    auto first_largest = [](const std::vector<float>& x) {
        size_t best = 0;
        for (size_t i = 1; i < x.size(); ++i)
            if (x[i] > x[best]) best = i;
        return TokenId(best);
    };
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> level(-6, 6);
    for (int64_t V : {int64_t(15), int64_t(16), int64_t(17), int64_t(40), int64_t(1000), int64_t(4099)}) {
        for (int trial = 0; trial < 40; ++trial) {
            std::vector<float> x(static_cast<size_t>(V));
            for (float& v : x) v = float(level(rng));  // 13 levels: the maximum ties at many ids
            if (trial % 4 == 1) x[size_t(rng() % uint64_t(V))] = NAN;  // a NaN never wins
            if (trial % 4 == 2) std::fill(x.begin(), x.end(), trial % 8 == 2 ? -0.0f : -INFINITY), x[size_t(V / 2)] = 0.0f;
            if (trial % 4 == 3) x[0] = NAN;  // and at 0 it keeps 0
            INFO("V " << V << ", trial " << trial);
            Sampler s({}, V);
            CHECK(s.sample(x.data()) == first_largest(x));
        }
    }
}

TEST_CASE("top() and entropy() describe softmax(logits / T)", "[sampler]") {
    for (double T : {0.0, 0.5, 2.0}) {
        INFO("T " << T);
        Sampler s({T, 0, 1.0, 1}, int64_t(kLogits.size()));
        s.sample(kLogits.data());
        const std::vector<double> p = expected_distribution(kLogits, T == 0 ? 1.0 : T, 0, 1.0);
        double h = 0;
        for (double x : p) h -= x * std::log(x);
        CHECK_THAT(s.entropy(), Catch::Matchers::WithinAbs(h, 1e-12));
        const auto top = s.top(4);
        REQUIRE(top.size() == 4);
        // Descending logits, ties by id: 3.1 (10), 2.5 (2), 2.5 (5), 1.9 (7).
        const TokenId want[] = {10, 2, 5, 7};
        for (size_t i = 0; i < 4; ++i) {
            CHECK(top[i].id == want[i]);
            CHECK(top[i].logit == kLogits[size_t(want[i])]);
            CHECK_THAT(top[i].probability, Catch::Matchers::WithinAbs(p[size_t(want[i])], 1e-7));
        }
        CHECK(s.top(100).size() == kLogits.size());
    }
}

TEST_CASE("sampled frequencies match the truncated, renormalised distribution", "[sampler]") {
    struct Case {
        double T;
        int64_t k;
        double p;
    };
    const Case c = GENERATE(Case{1.0, 0, 1.0}, Case{0.5, 5, 1.0}, Case{2.0, 0, 0.8}, Case{1.3, 6, 0.7},
                            Case{0.7, 15, 1.0}, Case{3.0, 3, 0.5}, Case{1.0, 0, 0.05});
    INFO("T " << c.T << ", top_k " << c.k << ", top_p " << c.p);
    const int n = 200000;
    const std::vector<int64_t> counts = draw_counts(kLogits, {c.T, c.k, c.p, 777}, n);
    const std::vector<double> q = expected_distribution(kLogits, c.T, c.k, c.p);
    double chi2 = 0;
    int df = -1;
    for (size_t i = 0; i < q.size(); ++i) {
        INFO("id " << i << ": " << counts[i] << " draws, expected " << q[i] * n);
        if (q[i] == 0) {
            CHECK(counts[i] == 0);  // never outside the kept set
            continue;
        }
        chi2 += (double(counts[i]) - q[i] * n) * (double(counts[i]) - q[i] * n) / (q[i] * n);
        ++df;
    }
    // For df <= 11, the chance that chi-square exceeds df + 6 sqrt(2 df) + 10 is far below 1e-6.
    INFO("chi2 " << chi2 << " with " << df << " degrees of freedom");
    CHECK(chi2 < df + 6 * std::sqrt(2.0 * std::max(df, 1)) + 10);
}

TEST_CASE("top-p keeps the smallest prefix reaching p", "[sampler]") {
    // Probabilities 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1 (logits are their logs, T = 1).
    const std::vector<float> logits = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};
    auto kept = [&](double p) {
        const auto counts = draw_counts(logits, {1.0, 0, p, 3}, 4000);
        std::vector<int> ids;
        for (size_t i = 0; i < counts.size(); ++i)
            if (counts[i] > 0) ids.push_back(int(i));
        return ids;
    };
    CHECK(kept(0.3) == std::vector<int>{2});
    CHECK(kept(0.79) == std::vector<int>{0, 2});
    CHECK(kept(0.81) == std::vector<int>{0, 2, 3});
    CHECK(kept(0.96) == std::vector<int>{0, 1, 2, 3});
    CHECK(kept(1.0) == std::vector<int>{0, 1, 2, 3});
    // With top-k = 2 first, p applies to the renormalised pair {0.625, 0.375}.
    const auto counts = draw_counts(logits, {1.0, 2, 0.6, 3}, 4000);
    CHECK(counts == std::vector<int64_t>{0, 0, 4000, 0});
}

TEST_CASE("top-k never returns a token outside the k best", "[sampler]") {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> logits(50);
    for (float& x : logits) x = normal(rng);
    std::vector<size_t> order(logits.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    const int64_t k = 7;
    const auto counts = draw_counts(logits, {4.0, k, 1.0, 5}, 20000);  // T = 4: nearly flat inside the k
    for (size_t r = 0; r < order.size(); ++r) {
        INFO("rank " << r << " id " << order[r]);
        if (r < size_t(k)) CHECK(counts[order[r]] > 0);
        else CHECK(counts[order[r]] == 0);
    }
    // Ties at the boundary go to the lower id.
    const std::vector<float> tied = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
    const auto t = draw_counts(tied, {1.0, 2, 1.0, 5}, 2000);
    CHECK(t[3] == 0);
    CHECK(t[0] == 0);
    CHECK(t[1] > 0);
    CHECK(t[2] > 0);
}

TEST_CASE("draws are a function of the seed and the RNG state", "[sampler]") {
    SamplerOptions o{1.0, 0, 1.0, 42};
    Sampler a(o, int64_t(kLogits.size())), b(o, int64_t(kLogits.size()));
    std::vector<TokenId> da, db;
    for (int i = 0; i < 500; ++i) {
        da.push_back(a.sample(kLogits.data()));
        db.push_back(b.sample(kLogits.data()));
    }
    CHECK(da == db);
    o.seed = 43;
    Sampler c(o, int64_t(kLogits.size()));
    std::vector<TokenId> dc;
    for (int i = 0; i < 500; ++i) dc.push_back(c.sample(kLogits.data()));
    CHECK(dc != da);
    // Saving and restoring the state replays the same draws.
    const uint64_t state = a.rng_state();
    std::vector<TokenId> first, again;
    for (int i = 0; i < 20; ++i) first.push_back(a.sample(kLogits.data()));
    a.set_rng_state(state);
    for (int i = 0; i < 20; ++i) again.push_back(a.sample(kLogits.data()));
    CHECK(first == again);
}

TEST_CASE("each draw is the id where the running sum, tokens by descending probability and ties by id, passes u", "[sampler]") {
    // Logits on a coarse grid: equal logits give equal probabilities, so long runs of ties, in id order,
    // split each level's mass; neighbours a float ulp apart differ in their probabilities' low bits. The walk is done here in long double from the definition, with u from the
    // documented generator (splitmix64 of the state, 53 bits); a draw that falls in a tie run names the
    // run's member by id, so a ranking that breaks ties the other way, or drops a token, fails.
    constexpr int64_t V = 5003;
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> level(-24, 8);
    std::vector<float> logits(static_cast<size_t>(V));
    for (float& x : logits) x = 0.25f * float(level(rng));
    // and one id in 7 a float ulp above its level: probabilities apart in their low bits only
    for (size_t i = 3; i < logits.size(); i += 7)
        if (logits[i] != 0.0f) logits[i] = std::nextafter(logits[i], INFINITY);
    auto uniform_at = [](uint64_t state) {
        uint64_t z = state + 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return (long double)(z >> 11) * 0x1.0p-53L;
    };
    struct Case {
        double T;
        int64_t k;
        double p;
    };
    // T 1e6: a nearly flat distribution whose order lies in the probabilities' lowest bits
    for (const Case c : {Case{0.7, 0, 1.0}, Case{1.5, 0, 0.9}, Case{1e6, 0, 1.0}, Case{0.7, 40, 1.0}, Case{1.0, 64, 0.8},
                         Case{2.0, 300, 1.0}}) {
        INFO("T " << c.T << ", top_k " << c.k << ", top_p " << c.p);
        const float mx = *std::max_element(logits.begin(), logits.end());
        std::vector<long double> prob(static_cast<size_t>(V));
        for (size_t i = 0; i < prob.size(); ++i) prob[i] = std::exp((long double)(logits[i] - mx) / c.T);
        std::vector<TokenId> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), TokenId(0));
        std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) { return logits[size_t(a)] > logits[size_t(b)]; });
        size_t keep = c.k > 0 ? size_t(c.k) : size_t(V);
        if (c.p < 1.0) {
            long double total = 0, run = 0;
            for (size_t i = 0; i < keep; ++i) total += prob[size_t(order[i])];
            size_t n = 0;
            while (n < keep && (run += prob[size_t(order[n++])]) < c.p * total) {}
            keep = n;
        }
        long double mass = 0;
        for (size_t i = 0; i < keep; ++i) mass += prob[size_t(order[i])];
        Sampler s({c.T, c.k, c.p, 99}, V);
        int64_t in_ties = 0;
        for (int draw = 0; draw < 400; ++draw) {
            long double u = uniform_at(s.rng_state()) * mass;
            size_t at = 0;
            while (at + 1 < keep && (u -= prob[size_t(order[at])]) >= 0) ++at;
            const TokenId want = order[at];
            in_ties += (at > 0 && logits[size_t(order[at - 1])] == logits[size_t(want)]);
            INFO("draw " << draw);
            REQUIRE(s.sample(logits.data()) == want);
        }
        CHECK(in_ties > 100);  // most draws land past the first id of a tie run
    }
}

TEST_CASE("a 49,152-token softmax: probabilities as std::exp gives them, entropy as -sum p log p", "[sampler]") {
    // Logits spread wide enough that many e^z land in double's subnormal range or underflow to 0, one
    // -inf, and a vocabulary that is not a multiple of the 8 lanes.
    const int64_t V = 49152 + 5;
    std::vector<float> logits(static_cast<size_t>(V));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& x : logits) x = normal(rng);
    logits[17] = 40.0f;
    logits[100] = -700.0f;
    logits[101] = -712.5f;
    logits[102] = -744.0f;
    logits[103] = -800.0f;
    logits[104] = -INFINITY;
    for (double T : {0.0, 0.7}) {
        INFO("T " << T);
        Sampler s({T, 0, 1.0, 1}, V);
        s.sample(logits.data());
        const double t = T == 0 ? 1.0 : T, mx = 40.0;
        std::vector<double> e(static_cast<size_t>(V));
        double sum = 0;
        for (int64_t i = 0; i < V; ++i) sum += e[size_t(i)] = std::exp((double(logits[size_t(i)]) - mx) / t);
        // The entropy of so sharp a distribution (1e-10 nats and less) is -Σ p·log p in __float128: in
        // double or long double, log p of the top token alone is off by more than that allows.
        __float128 sum_q = 0, h = 0;
        for (int64_t i = 0; i < V; ++i) sum_q += expq((__float128(logits[size_t(i)]) - mx) / t);
        for (int64_t i = 0; i < V; ++i) {
            const __float128 p = expq((__float128(logits[size_t(i)]) - mx) / t) / sum_q;
            if (p > 0) h -= p * logq(p);
        }
        INFO("entropy " << std::setprecision(17) << s.entropy() << ", in __float128 " << double(h));
        CHECK(std::abs(s.entropy() - double(h)) <= 1e-13 * double(h));
        // top() reports float probabilities: compare the double behind each through a full ranking.
        const auto all = s.top(V);
        REQUIRE(int64_t(all.size()) == V);
        int64_t checked = 0;
        for (const TokenProbability& p : all) {
            const double want = e[size_t(p.id)] / sum;
            if (want < 1e-300) {
                CHECK(p.probability == 0.0f);
                continue;
            }
            CHECK_THAT(double(p.probability), Catch::Matchers::WithinRel(double(float(want)), 1.2e-7));
            ++checked;
        }
        CHECK(checked > V - 10);
    }
}

TEST_CASE("top(k) ranks as a full sort does: descending logits, ties by id", "[sampler]") {
    // Logits on a coarse grid, so many tie; the ranking is checked against std::sort of every id.
    constexpr int64_t V = 5003;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> level(-40, 40);
    std::vector<float> logits(V);
    for (float& x : logits) x = 0.25f * float(level(rng));
    std::vector<TokenId> order(V);
    std::iota(order.begin(), order.end(), TokenId(0));
    std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
        return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
    });
    Sampler s({1.0, 0, 1.0, 1}, V);
    s.sample(logits.data());
    for (int64_t k : {int64_t(0), int64_t(1), int64_t(10), int64_t(64), int64_t(65), int64_t(300), V, V + 5}) {
        INFO("k " << k);
        const auto top = s.top(k);
        REQUIRE(int64_t(top.size()) == std::min(k, V));
        for (size_t i = 0; i < top.size(); ++i) {
            REQUIRE(top[i].id == order[i]);
            REQUIRE(top[i].logit == logits[size_t(order[i])]);
        }
    }
}
