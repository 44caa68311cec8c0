// The "Cache on vs off" panel's times (app/gui/logic/cache_comparison.h): both sides measured alike, so a step
// that does the same work both ways is timed the same way both ways, and on a GPT-2-sized model the
// series the panel plots (cost_series, fed from a Workbench as the window's worker runs it) are flat with
// the cache and grow with the position without it. The expected shapes come from counting rows, not
// from the code under test: a cached decode step computes one row whatever the position, an uncached one
// recomputes every position. Margins are wide: the machine running the tests may be busy elsewhere.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "logic/cache_comparison.h"
#include "forward/model.h"
#include "model/random_model.h"
#include "logic/workbench.h"
#include "scratch_dir.h"

using namespace kvscope;
using namespace kvscope::gui;

namespace {

std::shared_ptr<const Model> random_model(const std::string& name, ModelConfig config) {
    const std::filesystem::path dir = kvscope::test::scratch_root() / "cache_timing" / name;
    // Written once and kept: the same seed gives the same bytes, and GPT-2's shape is ~350 MB.
    if (!std::filesystem::exists(dir / "model.safetensors")) write_random_model(dir.string(), config, 13);
    return Model::load(dir.string());
}

std::string id_list(int64_t n) {  // "1,2,...,n": a prompt for a model without a tokenizer
    std::string s;
    for (int64_t i = 1; i <= n; ++i) {
        if (i > 1) s += ',';
        s += std::to_string(i);
    }
    return s;
}

}  // namespace

TEST_CASE("cache timing: a prefill step that is the same work both ways is timed several times both ways") {
    // The window's default model's shape (assets/default): steps here take well under a millisecond, where
    // recording and a single run used to make cache ON read 3x cache OFF.
    ModelConfig c = gpt2_small_config();
    c.n_vocab = 768;
    c.n_ctx = 256;
    c.n_embd = 128;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_inner = 512;
    SessionOptions o;
    o.max_new_tokens = 8;
    Workbench w(random_model("default-shape", c), o, {});
    w.apply(SetPrompt{id_list(16)});
    for (int i = 0; i < 3; ++i) {
        w.step();  // the prefill: 16 rows with the cache on (an empty cache) and off
        auto s = w.snapshot();
        REQUIRE(s->shadow() != nullptr);
        REQUIRE(s->step_timings.size() == 1);
        const StepRecord& on = s->trace()[0];
        const StepRecord& off = (*s->shadow())[0];
        REQUIRE(on.id.cache_on);
        REQUIRE(!off.id.cache_on);
        REQUIRE(on.cost.n_rows_computed == off.cost.n_rows_computed);
        REQUIRE(on.cost.flops == off.cost.flops);
        const StepTiming& t = s->step_timings[0];
        INFO("prefill of 16 rows: ON " << t.on * 1e3 << " ms (median of " << t.n_on << "), OFF " << t.off * 1e3
                                       << " ms (median of " << t.n_off << ")");
        CHECK(t.n_on > 1);  // far shorter than the budget: timed more than once
        CHECK(t.n_off > 1);
        CHECK(t.on > 0);
        CHECK(t.off > 0);
        // No bound on their ratio: a wall-clock comparison fails on a shared machine (issue 42). That both
        // ways are timed several times over the same counted work is what keeps the panel's figures fair.
        // The panel plots the same numbers.
        const CostSeries series = cost_series(s->trace(), *s->shadow(), s->step_timings);
        REQUIRE(series.seconds_on.size() == 1);
        CHECK(series.seconds_on[0] == t.on);
        CHECK(series.seconds_off[0] == t.off);
        w.apply(Back{1});
    }
}

// The work, not the clock: this test runs on shared machines, where a wall-clock bound fails under load.
// The times themselves are printed (and drawn by `kvscope bench --chart`, which is where speed is judged).
TEST_CASE("cache timing: on a GPT-2-sized model the cached decode step's work is flat, the uncached one grows",
          "[gpt2-shape]") {
    ModelConfig c = gpt2_small_config();  // GPT-2 124M's width and depth
    c.n_vocab = 4096;                     // a smaller vocabulary and context keep the file and the run short
    c.n_ctx = 256;
    constexpr int64_t kPrompt = 4, kLate = 80;  // the last decode step (step 0 is the prefill)
    SessionOptions o;
    o.max_new_tokens = kLate + 1;
    Workbench w(random_model("gpt2-shape", c), o, {});
    w.apply(SetPrompt{id_list(kPrompt)});
    for (int64_t i = 0; i <= kLate; ++i) w.step();  // each step also runs uncached, then both are timed

    auto s = w.snapshot();
    REQUIRE(s->shadow() != nullptr);
    const CostSeries series = cost_series(s->trace(), *s->shadow(), s->step_timings);
    REQUIRE(series.seconds_on.size() == size_t(kLate + 1));
    WARN("cache ON: " << series.seconds_on[1] * 1e3 << " ms at step 1, " << series.seconds_on[kLate] * 1e3
                      << " ms at step " << kLate << "; cache OFF: " << series.seconds_off[1] * 1e3 << " ms, "
                      << series.seconds_off[kLate] * 1e3 << " ms (printed, not asserted)");
    // Rows: each cached decode step computes one row and reuses the rest; uncached, it recomputes them all.
    for (int64_t i = 1; i <= kLate; ++i) {
        const StepRecord& on = s->trace()[size_t(i)];
        const StepRecord& off = (*s->shadow())[size_t(i)];
        CHECK(on.cost.n_rows_computed == 1);
        CHECK(on.cost.n_rows_reused == kPrompt + i - 1);
        CHECK(off.cost.n_rows_computed == kPrompt + i);
        CHECK(off.cost.n_rows_reused == 0);
    }
    // The FLOPs agree with the rows: flat with the cache, growing without.
    CHECK(series.flops_on[size_t(kLate)] < 1.1 * series.flops_on[1]);
    CHECK(series.flops_off[size_t(kLate)] > 10 * series.flops_off[1]);
}

TEST_CASE("cache timing: a step far slower than its work predicts does not set the chart's scale") {
    // Times proportional to FLOPs, but step 3 took 20x as long (the machine was busy elsewhere).
    const std::vector<double> flops{16, 1, 1, 1, 1, 1};
    std::vector<double> seconds{16e-3, 1e-3, 1.1e-3, 20e-3, 0.9e-3, 1e-3};
    const std::vector<bool> flagged = time_outliers(seconds, flops);
    CHECK(flagged == std::vector<bool>{false, false, false, true, false, false});
    // A series that grows with its work has no outliers.
    CHECK(time_outliers({1e-3, 2e-3, 4e-3, 8e-3}, {1, 2, 4, 8}) == std::vector<bool>(4, false));
}
