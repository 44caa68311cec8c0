// Head scores (core/analysis/heads.h) and the acceptance checks of the shipped default model (assets/default).
//
// How the expectations are made: the synthetic-model case builds weights by hand so that one head's
// attention is known in closed form (uniform over the visible keys: score = mean over queries of 1/(t+1)),
// computed here with a loop. The default-model cases are issue 7's acceptance criteria, measured on the
// committed weights: a head with induction > 0.5, a head with previous-token > 0.8, and greedy copying of
// a repeated random span of letters/digits drawn with replacement, so tokens repeat inside it
// (assets/default/README.md: how the shipped model was trained; the recipe never trains on these spans as
// such). Issue 18's copying of every token kind is the ctest train.default_copies_any_tokens.
// They run in ctest on the committed weights; check a candidate before shipping it with
//   KVSCOPE_DEFAULT_MODEL=DIR heads_tests "[acceptance]"
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "analysis/heads.h"
#include "base/errors.h"
#include "forward/model.h"
#include "run/session.h"
#include "text/corpus.h"
#include "train/train.h"
#include "scratch_dir.h"

using namespace kvscope;

namespace {

// $KVSCOPE_DEFAULT_MODEL (as for the CLI) lets a candidate model be checked before it is shipped.
std::string default_dir() {
    if (const char* env = std::getenv("KVSCOPE_DEFAULT_MODEL"); env && *env) return env;
    return std::string(KVSCOPE_ASSETS_DIR) + "/default";
}

std::string table(const std::vector<HeadScore>& scores) {
    std::ostringstream s;
    for (const HeadScore& h : scores)
        s << "layer " << h.layer << " head " << h.head << ": previous_token " << h.previous_token << ", induction "
          << h.induction << "\n";
    return s.str();
}

}  // namespace

TEST_CASE("head scores: all-zero attention weights give uniform attention, scores match the closed form") {
    // Zero q/k weights and biases: every score is 0, so each query t spreads 1/(t+1) over keys 0..t.
    ModelConfig c;
    c.n_vocab = 768, c.n_ctx = 64, c.n_embd = 16, c.n_head = 2, c.n_layer = 1, c.n_inner = 32;
    std::vector<float> params = init_params(c, 3);
    for (const ParamInfo& p : param_layout(c))
        if (p.name.find("c_attn") != std::string::npos) std::fill(params.begin() + p.offset, params.begin() + p.offset + p.size, 0.0f);
    const auto dir = kvscope::test::scratch_root() / "heads" / "uniform";
    std::filesystem::create_directories(dir);
    save_model(dir.string(), c, params, default_dir());

    HeadProbeOptions o;
    o.n_prompts = 1, o.text_tokens = 40, o.span = 10;
    const std::vector<HeadScore> scores = head_scores(Model::load(dir.string()), o);
    REQUIRE(scores.size() == 2);
    double prev = 0, induction = 0;
    for (int t = 1; t < 40; ++t) prev += 1.0 / (t + 1) / 39;          // queries 1..39 of the text
    for (int i = 0; i + 1 < 10; ++i) induction += 1.0 / (10 + i + 1) / 9;  // queries 10..18 of the repeat
    for (const HeadScore& s : scores) {
        CHECK(s.previous_token == Approx(prev).epsilon(1e-5));
        CHECK(s.induction == Approx(induction).epsilon(1e-5));
    }
    CHECK(scores[1].layer == 0);
    CHECK(scores[1].head == 1);
}

TEST_CASE("head scores on given prompts: uniform attention matches the closed form, no tokenizer needed") {
    // The uniform model of the case above, without tokenizer files: prompts of 12 and 30 token ids. Each
    // is the previous-token text (query t spreads 1/(t+1), t = 1..n-1) and, repeated once, the induction
    // span (query n+i reads 1/(n+i+1) at position i+1, i = 0..n-2); the two prompts are averaged.
    ModelConfig c;
    c.n_vocab = 768, c.n_ctx = 64, c.n_embd = 16, c.n_head = 2, c.n_layer = 1, c.n_inner = 32;
    std::vector<float> params = init_params(c, 3);
    for (const ParamInfo& p : param_layout(c))
        if (p.name.find("c_attn") != std::string::npos) std::fill(params.begin() + p.offset, params.begin() + p.offset + p.size, 0.0f);
    const auto dir = kvscope::test::scratch_root() / "heads" / "uniform_ids";
    std::filesystem::create_directories(dir);
    save_model(dir.string(), c, params, "");
    for (const char* name : {"vocab.json", "merges.txt"}) std::filesystem::remove(dir / name);
    const auto model = Model::load(dir.string());
    REQUIRE(!model->tokenizer());

    HeadProbeOptions o;
    for (int n : {12, 30}) {
        std::vector<TokenId> p;
        for (int i = 0; i < n; ++i) p.push_back(TokenId((i * 37 + 5) % 768));
        o.prompts.push_back(p);
    }
    double prev = 0, induction = 0;
    for (int n : {12, 30}) {
        for (int t = 1; t < n; ++t) prev += 1.0 / (t + 1) / (n - 1) / 2;
        for (int i = 0; i + 1 < n; ++i) induction += 1.0 / (n + i + 1) / (n - 1) / 2;
    }
    const std::vector<HeadScore> scores = head_scores(model, o);
    REQUIRE(scores.size() == 2);
    for (const HeadScore& s : scores) {
        CHECK(s.previous_token == Approx(prev).epsilon(1e-5));
        CHECK(s.induction == Approx(induction).epsilon(1e-5));
    }
    // A prompt repeated must fit max_position_embeddings (64): 31 tokens make 62 positions, 32 make 64.
    o.prompts = {std::vector<TokenId>(31, 7)};
    CHECK_NOTHROW(head_scores(model, o));
    o.prompts = {std::vector<TokenId>(32, 7)};
    CHECK_THROWS_WITH(head_scores(model, o), Catch::Contains("give at most 31"));
    o.prompts = {{7}};
    CHECK_THROWS_WITH(head_scores(model, o), Catch::Contains("2 or more tokens"));
    o.prompts.clear();  // generated probes are text: the tokenizer is needed
    CHECK_THROWS_AS(head_scores(model, o), LoadError);
}

TEST_CASE("default model: a previous-token head (> 0.8) and an induction head (> 0.5)", "[acceptance]") {
    const std::vector<HeadScore> scores = head_scores(Model::load(default_dir()));
    INFO(table(scores));
    double best_prev = 0, best_induction = 0;
    for (const HeadScore& s : scores) {
        best_prev = std::max(best_prev, s.previous_token);
        best_induction = std::max(best_induction, s.induction);
    }
    CHECK(best_prev > 0.8);
    CHECK(best_induction > 0.5);
}

TEST_CASE("default model: greedy decoding copies a repeated random span of letters and digits", "[acceptance]") {
    // Prompt: 20 random ordinary tokens (" a", " 7", ...) then their first 5; the model should continue
    // with the remaining 15. Acceptance: at least 4 of 5 spans reproduced exactly.
    auto model = Model::load(default_dir());
    REQUIRE(model->tokenizer());
    const Corpus corpus(*model->tokenizer(), 0);
    int n_ok = 0;
    std::ostringstream log;
    for (uint64_t i = 0; i < 5; ++i) {
        Rng rng(mix_seed(20240607, i));
        const std::vector<TokenId> span = corpus.random_span(rng, 20);
        std::vector<TokenId> prompt = span;
        prompt.insert(prompt.end(), span.begin(), span.begin() + 5);
        SessionOptions so;
        so.max_new_tokens = 15;
        so.record = false;
        Session s(model, so);
        s.set_prompt(prompt);
        while (s.next() != Session::Next::Done) s.step();
        const std::vector<TokenId> want(span.begin() + 5, span.end());
        const bool ok = s.parts().generated == want;
        n_ok += ok;
        log << (ok ? "ok   " : "FAIL ") << model->tokenizer()->decode(span) << " ->"
            << model->tokenizer()->decode(s.parts().generated) << "\n";
    }
    INFO(log.str());
    CHECK(n_ok >= 4);
}
