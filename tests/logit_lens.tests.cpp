// The residual stream a step records and the logit lens read from it. The lens is checked against a
// final norm and output layer written out here in double precision, and at the last depth against the
// step's own logits; recording is checked across the cached and uncached paths on a model whose query
// width (heads x head_dim) differs from its hidden width.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "analysis/logit_lens.h"
#include "base/errors.h"
#include "forward/model.h"
#include "model/config.h"
#include "model/random_model.h"
#include "run/session.h"
#include "test_models.h"

using namespace kvscope;

namespace {

// Llama family, C = 32 but H * D = 4 * 16 = 64, 2 K/V heads, tied embeddings.
std::shared_ptr<const Model> wide_heads_model() {
    static std::shared_ptr<const Model> model = [] {
        const ModelConfig c = parse_config(R"({"model_type": "llama", "vocab_size": 97, "hidden_size": 32,
          "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
          "tie_word_embeddings": true})", "config.json");
        const std::string dir = kvscope::test::fresh_dir("logit_lens", "wide_heads").string();
        write_random_model(dir, c, 17);
        return Model::load(dir);
    }();
    return model;
}

std::shared_ptr<const Model> gpt2_model() {
    static std::shared_ptr<const Model> model = [] {
        kvtest::FixtureSpec spec;
        spec.seed = 9;
        return Model::load(kvtest::write_fixture(kvtest::work_dir("logit_lens") / "gpt2", spec).dir.string());
    }();
    return model;
}

std::vector<float> weight_row(const WeightRef& w, int64_t row, int64_t C) {
    std::vector<float> out(static_cast<size_t>(C));
    for (int64_t i = 0; i < C; ++i) {
        if (w.f32) {
            out[size_t(i)] = w.f32[row * C + i];
        } else {
            const uint32_t bits = uint32_t(w.bf16[row * C + i]) << 16;
            std::memcpy(&out[size_t(i)], &bits, 4);
        }
    }
    return out;
}

// The lens at one depth, in double: RMSNorm (Llama) or LayerNorm (GPT-2), then every vocabulary row.
std::vector<double> lens_logits(const Model& m, const float* x) {
    const ModelConfig& cfg = m.config();
    const Weights& w = m.weights();
    const int64_t C = cfg.n_embd, V = cfg.n_vocab;
    std::vector<double> n(static_cast<size_t>(C));
    if (cfg.family == Family::Llama) {
        double ss = 0;
        for (int64_t i = 0; i < C; ++i) ss += double(x[i]) * x[i];
        const double inv = 1.0 / std::sqrt(ss / double(C) + cfg.layer_norm_epsilon);
        for (int64_t i = 0; i < C; ++i) n[size_t(i)] = double(x[i]) * inv * w.ln_f_weight[i];
    } else {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < C; ++i) mean += x[i];
        mean /= double(C);
        for (int64_t i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
        var /= double(C);
        for (int64_t i = 0; i < C; ++i)
            n[size_t(i)] = (x[i] - mean) / std::sqrt(var + cfg.layer_norm_epsilon) * w.ln_f_weight[i] + w.ln_f_bias[i];
    }
    std::vector<double> logits(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) {
        const std::vector<float> row = weight_row(w.lm_head_weight, v, C);
        double s = w.lm_head_bias ? w.lm_head_bias[v] : 0.0;
        for (int64_t i = 0; i < C; ++i) s += n[size_t(i)] * row[size_t(i)];
        logits[size_t(v)] = s;
    }
    return logits;
}

void check_lens(const std::shared_ptr<const Model>& model) {
    Session s(model, SessionOptions{});
    s.set_prompt({3, 14, 15, 9, 26, 5});
    const StepRecord& r = s.step();
    const int64_t L = model->config().n_layer, C = model->config().n_embd, R = r.cost.n_rows_computed;
    REQUIRE(int64_t(r.rows.residual.size()) == (L + 1) * R * C);
    // Depth 0 is the input embedding of each token (GPT-2 adds its position's row).
    const Weights& w = model->weights();
    for (int64_t row = 0; row < R; ++row) {
        const std::vector<float> e = weight_row(w.token_embedding, s.parts().prompt[size_t(row)], C);
        for (int64_t i = 0; i < C; ++i) {
            const float want = e[size_t(i)] + (w.position_embedding ? w.position_embedding[row * C + i] : 0.0f);
            REQUIRE(r.rows.residual[size_t(row * C + i)] == want);
        }
    }
    for (int64_t row : {int64_t(0), R - 1}) {
        const LogitLens lens = logit_lens(*model, r.rows, row, 5);
        REQUIRE(int64_t(lens.depths.size()) == L + 1);
        for (int64_t d = 0; d <= L; ++d) {
            INFO("row " << row << ", depth " << d);
            const std::vector<double> want = lens_logits(*model, r.rows.residual.data() + (d * R + row) * C);
            const int64_t best = std::max_element(want.begin(), want.end()) - want.begin();
            const LensDepth& got = lens.depths[size_t(d)];
            REQUIRE(got.top.size() == 5);
            CHECK(got.top[0].id == best);
            double z = 0;
            for (double v : want) z += std::exp(v - want[size_t(best)]);
            CHECK(got.top[0].probability == Approx(1.0 / z).margin(1e-5));
            for (const TokenProbability& t : got.top) CHECK(t.logit == Approx(want[size_t(t.id)]).margin(1e-4));
        }
    }
    // The last depth of the last row is the step's own prediction, bit for bit.
    const LogitLens last = logit_lens(*model, r.rows, R - 1, 5);
    for (size_t i = 0; i < 5; ++i) {
        CHECK(last.depths.back().top[i].id == r.prediction.top[i].id);
        CHECK(last.depths.back().top[i].logit == r.prediction.top[i].logit);
        CHECK(last.depths.back().top[i].logit == r.prediction.logits[size_t(r.prediction.top[i].id)]);
    }
    CHECK_THROWS_AS(logit_lens(*model, r.rows, R, 5), UsageError);
    CHECK_THROWS_AS(logit_lens(*model, r.rows, -1, 5), UsageError);
}

}  // namespace

TEST_CASE("logit lens: every depth equals a double-precision final norm and output layer, the last the step's logits") {
    SECTION("llama, query width 64 beside hidden 32") { check_lens(wide_heads_model()); }
    SECTION("gpt2, LayerNorm with bias and learned positions") { check_lens(gpt2_model()); }
}

TEST_CASE("uncached steps record the same rows as cached ones when heads x head_dim differs from the hidden width") {
    // Recomputing every position used to copy q, k and v in rows of the hidden width: on this model it
    // recorded the wrong half of every row (and read past the buffer when exporting).
    auto run = [](bool cached) {
        SessionOptions o;
        o.max_new_tokens = 3;
        Session s(wide_heads_model(), o);
        s.set_prompt({7, 8, 9, 10, 11});
        s.set_use_cache(cached);
        std::vector<RecordedRows> rows;
        while (s.next() != Session::Next::Done) rows.push_back(s.step().rows);
        return rows;
    };
    const std::vector<RecordedRows> on = run(true), off = run(false);
    REQUIRE(on.size() == off.size());
    const int64_t L = 3, C = 32, Q = 64;
    for (size_t step = 0; step < on.size(); ++step) {
        INFO("step " << step);
        const int64_t R_on = int64_t(on[step].q.size()) / (L * Q), R_off = int64_t(off[step].q.size()) / (L * Q);
        REQUIRE(int64_t(off[step].residual.size()) == (L + 1) * R_off * C);
        // The cached step's rows are the uncached step's last rows.
        for (auto [a, b, width, slots] : {std::tuple{&on[step].q, &off[step].q, Q, L}, {&on[step].k, &off[step].k, Q, L},
                                          {&on[step].v, &off[step].v, Q, L},
                                          {&on[step].residual, &off[step].residual, C, L + 1}})
            for (int64_t d = 0; d < slots; ++d)
                for (int64_t r = 0; r < R_on; ++r)
                    REQUIRE(std::equal(a->begin() + (d * R_on + r) * width, a->begin() + (d * R_on + r + 1) * width,
                                       b->begin() + (d * R_off + R_off - R_on + r) * width));
    }
}
