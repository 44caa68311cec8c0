// attention_map(trace, step, layer, head) against two independent computations:
//  1. a naive recomputation, in double, from the q/k/v rows the step records hold (scores = q·k/sqrt(D),
//     an explicit mask "q-W < k <= q", softmax over the visible keys, Σ w·v), with keys looked up here
//     by scanning the records (earliest step that computed the position);
//  2. the per-head attention output of the dense double-precision reference forward pass
//     (tests/test_models.h), which never sees the engine's numbers: so the map's `output` is what the
//     model must have used.
#include <catch2/catch.hpp>

#include <cmath>

#include "base/errors.h"
#include "forward/model.h"
#include "run/session.h"
#include "run/trace.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

const FixtureModel& fixture() {
    static const FixtureModel fm = [] {
        FixtureSpec spec;
        spec.seed = 31;
        return write_fixture(work_dir("attention") / "model", spec);
    }();
    return fm;
}

// (D) row of `which` (k or v) for position p, head h, layer il: from the earliest recorded step that computed p.
const float* find_row(const Trace& t, const std::vector<float> RecordedRows::*which, int64_t il, int64_t h, int64_t p) {
    for (size_t s = 0; s < t.size(); ++s) {
        const StepRecord& r = t[s];
        const int64_t i = p - r.cost.first_computed_position;
        if (i < 0 || i >= r.cost.n_rows_computed) continue;
        const int64_t D = r.rows.head_dim, C = r.rows.n_head * D;
        return (r.rows.*which).data() + (il * r.cost.n_rows_computed + i) * C + h * D;
    }
    return nullptr;
}

bool close(double got, double want, double tol) { return std::abs(got - want) <= tol * std::max(1.0, std::abs(want)); }

}  // namespace

TEST_CASE("attention maps equal a naive recomputation and the reference model's heads", "[attention]") {
    const int64_t window = GENERATE(0, 1, 3);
    const int64_t chunk = GENERATE(0, 4);
    INFO("window " << window << ", chunk " << chunk);
    const FixtureModel& fm = fixture();
    const auto model = Model::load(fm.dir.string());
    const ModelConfig& cfg = model->config();
    const int64_t C = cfg.n_embd, H = cfg.n_head, D = C / H;

    SessionOptions o;
    o.window = window;
    o.prefill_chunk = chunk;
    o.max_new_tokens = 6;
    Session s(model, o);
    const std::vector<int32_t> prompt = random_tokens(17, 9, cfg.n_vocab);
    s.set_prompt(prompt);
    for (int i = 0; s.next() != Session::Next::Done; ++i) {
        s.set_use_cache(i != 3);  // one step recomputes everything: its map covers every position
        s.step();
    }
    const Trace& trace = s.trace();
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), s.parts().generated.begin(), s.parts().generated.end());
    const Reference ref = reference_forward(fm, seq, window);

    int64_t n_maps = 0;
    for (size_t step = 0; step < trace.size(); ++step) {
        const StepRecord& r = trace[step];
        const int64_t R = r.cost.n_rows_computed;
        for (int64_t il = 0; il < cfg.n_layer; ++il)
            for (int64_t h = 0; h < H; ++h) {
                INFO("step " << step << ", layer " << il << ", head " << h);
                const AttentionMap m = attention_map(trace, step, il, h);
                ++n_maps;
                REQUIRE(m.n_query == R);
                const int64_t first_key = window > 0 ? std::max<int64_t>(0, r.cost.first_computed_position - window + 1) : 0;
                REQUIRE(m.n_key == r.cost.first_computed_position + R - first_key);
                for (int64_t i = 0; i < R; ++i) REQUIRE(m.query_positions[size_t(i)] == r.cost.first_computed_position + i);
                for (int64_t j = 0; j < m.n_key; ++j) REQUIRE(m.key_positions[size_t(j)] == first_key + j);
                const int64_t P = m.n_key;

                for (int64_t i = 0; i < R; ++i) {
                    const int64_t qp = m.query_positions[size_t(i)];
                    INFO("query position " << qp);
                    const float* q = r.rows.q.data() + (il * R + i) * C + h * D;
                    // The recorded q is the reference model's q.
                    for (int64_t d = 0; d < D; ++d) REQUIRE(close(q[d], ref.q[size_t(il)](qp, h * D + d), 1e-4));

                    std::vector<double> w(static_cast<size_t>(P), 0.0);
                    double mx = -INFINITY, sum = 0;
                    int64_t n_visible = 0, last_visible = -1, first_visible = -1;
                    for (int64_t j = 0; j < P; ++j) {
                        const int64_t kp = first_key + j;
                        const float* k = find_row(trace, &RecordedRows::k, il, h, kp);
                        REQUIRE(k != nullptr);
                        double dot = 0;
                        for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * double(k[d]);
                        const double score = dot / std::sqrt(double(D));
                        REQUIRE(close(m.scores[size_t(i * P + j)], score, 1e-6));
                        const bool visible = kp <= qp && (window == 0 || kp > qp - window);
                        REQUIRE(bool(m.visible[size_t(i * P + j)]) == visible);
                        if (visible) {
                            w[size_t(j)] = score;
                            mx = std::max(mx, score);
                            ++n_visible;
                            if (first_visible < 0) first_visible = kp;
                            last_visible = kp;
                        }
                    }
                    // Band: the last min(W, qp + 1) positions up to and including the query, contiguous.
                    CHECK(n_visible == (window > 0 ? std::min(window, qp + 1) : qp + 1));
                    CHECK(last_visible == qp);
                    CHECK(last_visible - first_visible + 1 == n_visible);
                    for (int64_t j = 0; j < P; ++j)
                        if (m.visible[size_t(i * P + j)]) sum += w[size_t(j)] = std::exp(w[size_t(j)] - mx);
                    double row_sum = 0;
                    std::vector<double> out(static_cast<size_t>(D), 0.0);
                    for (int64_t j = 0; j < P; ++j) {
                        const float got = m.weights[size_t(i * P + j)];
                        row_sum += got;
                        if (!m.visible[size_t(i * P + j)]) {
                            REQUIRE(got == 0.0f);
                            continue;
                        }
                        w[size_t(j)] /= sum;
                        REQUIRE(close(got, w[size_t(j)], 1e-6));
                        const float* v = find_row(trace, &RecordedRows::v, il, h, first_key + j);
                        for (int64_t d = 0; d < D; ++d) out[size_t(d)] += w[size_t(j)] * double(v[d]);
                    }
                    CHECK_THAT(row_sum, Catch::Matchers::WithinAbs(1.0, 1e-5));
                    for (int64_t d = 0; d < D; ++d) {
                        const float got = m.output[size_t(i * D + d)];
                        REQUIRE(close(got, out[size_t(d)], 1e-5));
                        REQUIRE(close(got, ref.heads[size_t(il)][size_t(h)](qp, d), 1e-4));
                    }
                }
            }
    }
    CHECK(n_maps == int64_t(trace.size()) * cfg.n_layer * H);
}

TEST_CASE("attention_map refuses what it cannot show", "[attention]") {
    const auto model = Model::load(fixture().dir.string());
    SessionOptions o;
    o.max_new_tokens = 3;
    Session s(model, o);
    s.set_prompt({1, 2, 3});
    s.step();
    const int64_t L = model->config().n_layer, H = model->config().n_head;
    CHECK_NOTHROW(attention_map(s.trace(), 0, L - 1, H - 1));
    CHECK_THROWS_AS(attention_map(s.trace(), 1, 0, 0), UsageError);
    CHECK_THROWS_AS(attention_map(s.trace(), 0, L, 0), UsageError);
    CHECK_THROWS_AS(attention_map(s.trace(), 0, -1, 0), UsageError);
    CHECK_THROWS_AS(attention_map(s.trace(), 0, 0, H), UsageError);
    CHECK_THROWS_AS(attention_map(s.trace(), 0, 0, -1), UsageError);

    o.record = false;
    Session quiet(model, o);
    quiet.set_prompt({1, 2, 3});
    const StepRecord& r = quiet.step();
    CHECK_FALSE(r.recorded());
    CHECK(r.rows.q.empty());
    CHECK(r.prediction.chosen.has_value());
    CHECK_THROWS_AS(attention_map(quiet.trace(), 0, 0, 0), UsageError);
}
