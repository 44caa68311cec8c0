// kv_quant_error: the per-cell view of what K/V quantization costs. Errors are checked against the
// format functions (kv_quant.tests.cpp checks those against numpy) and against a bound worked out by
// hand (int8: at most half a step, max|x| / 254, per row); score changes against q·(k̂ − k)·scale.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "analysis/kv_quant_error.h"
#include "base/errors.h"
#include "run/session.h"
#include "test_models.h"

using namespace kvscope;

namespace {

std::vector<float> normal_rows(uint32_t seed, int64_t n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& e : x) e = normal(rng);
    return x;
}

}  // namespace

TEST_CASE("int8 errors stay within half a step of each row's scale, scores move by q·(k̂ − k)", "[kv_quant_error]") {
    const int64_t P = 10, T = 3, D = 16;
    const std::vector<float> q = normal_rows(1, T * D), k = normal_rows(2, P * D), v = normal_rows(3, P * D);
    const std::vector<int64_t> keys{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, queries{7, 8, 9};
    const float scale = 0.25f;
    const KvQuantError e = kv_quant_error({KvQuant::Int8}, q.data(), k.data(), v.data(), queries, keys, D, scale, 4);
    REQUIRE(e.key_error.size() == size_t(P * D));
    REQUIRE(e.score_change.size() == size_t(T * P));
    for (int64_t p = 0; p < P; ++p) {
        float absmax = 0;
        for (int64_t d = 0; d < D; ++d) absmax = std::max(absmax, std::fabs(k[size_t(p * D + d)]));
        for (int64_t d = 0; d < D; ++d) CHECK(std::fabs(e.key_error[size_t(p * D + d)]) <= absmax / 254 * 1.0001f);
    }
    CHECK(e.key_error_max > 0);
    CHECK(e.value_error_max > 0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t p = 0; p < P; ++p) {
            const float change = e.score_change[size_t(t * P + p)], w = e.weight_change[size_t(t * P + p)];
            const bool seen = keys[size_t(p)] <= queries[size_t(t)] && keys[size_t(p)] > queries[size_t(t)] - 4;
            CHECK(std::isnan(change) == !seen);
            CHECK(std::isnan(w) == !seen);
            if (!seen) continue;
            double want = 0;
            for (int64_t d = 0; d < D; ++d) want += double(q[size_t(t * D + d)]) * double(e.key_error[size_t(p * D + d)]);
            CHECK(change == Approx(want * scale).margin(1e-5));
        }
}

TEST_CASE("no format: every change is zero, int4 keeps the residual in float32", "[kv_quant_error]") {
    const int64_t P = 11, D = 8;
    const std::vector<float> k = normal_rows(4, P * D), v = normal_rows(5, P * D), q = normal_rows(6, D);
    std::vector<int64_t> keys(static_cast<size_t>(P));
    for (int64_t p = 0; p < P; ++p) keys[size_t(p)] = p;
    const KvQuantError none = kv_quant_error({}, q.data(), k.data(), v.data(), {10}, keys, D, 1.0f);
    CHECK(none.key_error_max == 0);
    CHECK(none.score_change_max == 0);
    CHECK(none.weight_change_max == 0);
    // G = 4, R = 2: positions 0..7 in two key groups are quantized, 8..10 stay float32.
    const KvQuantError int4 = kv_quant_error({KvQuant::Int4, 4, 2}, q.data(), k.data(), v.data(), {10}, keys, D, 1.0f);
    for (int64_t p = 0; p < P; ++p) {
        float row_max = 0;
        for (int64_t d = 0; d < D; ++d) row_max = std::max(row_max, std::fabs(int4.key_error[size_t(p * D + d)]));
        INFO("position " << p);
        if (p < 8) CHECK(row_max > 0);
        else CHECK(row_max == 0);
    }
    CHECK_THROWS_AS(kv_quant_error({KvQuant::Int4, 3, 0}, q.data(), k.data(), v.data(), {10}, keys, D, 1.0f), UsageError);
    std::vector<int64_t> shifted = keys;
    for (int64_t& p : shifted) p += 5;
    CHECK_THROWS_AS(kv_quant_error({KvQuant::Int4, 4, 0}, q.data(), k.data(), v.data(), {15}, shifted, D, 1.0f), UsageError);
}

TEST_CASE("a recorded step's view: its queries, every key they see (sinks and window), the trace's rows", "[kv_quant_error]") {
    const kvtest::FixtureModel fixture = kvtest::small_fixture("kv_quant_error", 7);
    SessionOptions o;
    o.window = 4, o.sinks = 2, o.max_new_tokens = 3;
    Session s(Model::load(fixture.dir.string()), o);
    s.set_prompt(kvtest::random_tokens(3, 12, 97));
    while (s.next() != Session::Next::Done) s.step();
    const Trace& trace = s.trace();
    const int64_t layer = 1, head = 3, D = 8;
    for (size_t step : {size_t(0), trace.size() - 1}) {
        const StepRecord& r = trace[step];
        const KvQuantError e = kv_quant_error({KvQuant::Int8}, trace, step, layer, head);
        REQUIRE(e.n_queries == r.cost.n_rows_computed);
        REQUIRE(e.query_positions.front() == r.cost.first_computed_position);
        // Keys: exactly the positions some query of the step sees, in order (sinks 0 and 1, then the windows).
        std::vector<int64_t> seen;
        for (int64_t p = 0; p <= r.last_position(); ++p)
            for (int64_t qp : e.query_positions)
                if (p <= qp && (p > qp - 4 || p < 2)) {
                    seen.push_back(p);
                    break;
                }
        REQUIRE(e.key_positions == seen);
        for (int64_t t = 0; t < e.n_queries; ++t)
            for (int64_t i = 0; i < e.n_keys; ++i) {
                const int64_t qp = e.query_positions[size_t(t)], kp = e.key_positions[size_t(i)];
                const bool visible = kp <= qp && (kp > qp - 4 || kp < 2);
                REQUIRE(std::isnan(e.score_change[size_t(t * e.n_keys + i)]) == !visible);
            }
        // K error: the trace's row of that position through int8 and back, minus the row.
        for (int64_t i = 0; i < e.n_keys; ++i) {
            const float* k = trace.key_row(step, layer, head, e.key_positions[size_t(i)]);
            std::vector<uint8_t> packed(size_t(row_bytes(KvQuant::Int8, D)));
            std::vector<float> back(static_cast<size_t>(D));
            quantize_row(KvQuant::Int8, k, D, packed.data());
            dequantize_row(KvQuant::Int8, packed.data(), D, back.data());
            for (int64_t d = 0; d < D; ++d) REQUIRE(e.key_error[size_t(i * D + d)] == back[size_t(d)] - k[d]);
        }
    }
    // The last rows only: a prefill of 12 limited to 5 queries sees positions 7..11 (and the sinks).
    const KvQuantError last = kv_quant_error({KvQuant::Int8}, trace, 0, layer, head, 5);
    REQUIRE(last.query_positions == std::vector<int64_t>{7, 8, 9, 10, 11});
    REQUIRE(last.key_positions == std::vector<int64_t>{0, 1, 4, 5, 6, 7, 8, 9, 10, 11});
    // int4 needs the keys from position 0 on: the last rows' windows skip 2..3.
    REQUIRE_THROWS_AS(kv_quant_error({KvQuant::Int4, 4, 0}, trace, 0, layer, head, 5), UsageError);
    REQUIRE_NOTHROW(kv_quant_error({KvQuant::Int4, 4, 0}, trace, 0, layer, head));
}
