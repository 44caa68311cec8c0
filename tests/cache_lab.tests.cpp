// The cache lab (core/analysis/cache_lab.h): its --config grammar and refusals, teacher forcing in Session, and
// its figures against test_models.h's double-precision reference forward pass (whole sequence, banded
// mask with sinks): loss, KL to full attention and top-1 agreement recomputed there from the logits.
// tests/parity/cache_lab.py checks `kvscope lab --json` against PyTorch, quantized rows included.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>

#include "analysis/cache_lab.h"
#include "base/errors.h"
#include "forward/model.h"
#include "run/session.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

const FixtureModel& lab_fixture() {  // V = 97, n_positions = 80, H = 4, D = 8
    static const FixtureModel fm = small_fixture("cache_lab", 4242);
    return fm;
}

std::shared_ptr<const Model> lab_model() {
    static std::shared_ptr<const Model> m = Model::load(lab_fixture().dir.string());
    return m;
}

std::vector<LabConfig> parse_all(std::initializer_list<const char*> specs) {
    std::vector<LabConfig> out;
    for (const char* s : specs) out.push_back(parse_lab_config(s));
    return out;
}

// log p (V) of a reference logits row, in double.
std::vector<double> log_probs(const Eigen::RowVectorXd& logits) {
    const double top = logits.maxCoeff();
    const double lse = top + std::log((logits.array() - top).exp().sum());
    std::vector<double> out(size_t(logits.size()));
    for (Eigen::Index v = 0; v < logits.size(); ++v) out[size_t(v)] = logits[v] - lse;
    return out;
}

}  // namespace

TEST_CASE("lab configs: the grammar maps to SessionOptions", "[cache_lab]") {
    const LabConfig full = parse_lab_config("full");
    CHECK(full.policy == "full");
    CHECK(full.options.window == 0);
    CHECK(!full.options.kv_quant.quantized());
    CHECK(full.name == "full");

    const LabConfig w = parse_lab_config("window=64,sinks=4");
    CHECK(w.policy == "window");
    CHECK(w.budget == 64);
    CHECK(w.options.window == 64);
    CHECK(w.options.sinks == 4);

    const LabConfig pb = parse_lab_config("policy=window,budget=16,name=w16");
    CHECK(pb.options.window == 16);
    CHECK(pb.name == "w16");
    CHECK(pb.spec == "policy=window,budget=16,name=w16");

    const LabConfig q = parse_lab_config("int4,g=16,r=8");
    CHECK(q.options.kv_quant.format == KvQuant::Int4);
    CHECK(q.options.kv_quant.group == 16);
    CHECK(q.options.kv_quant.residual == 8);
    CHECK(parse_lab_config("int8").options.kv_quant.format == KvQuant::Int8);
    CHECK(parse_lab_config("quant=fp8,window=8").options.kv_quant.format == KvQuant::Fp8);
    CHECK(parse_lab_config("window=8,fp8").options.window == 8);
    CHECK(!parse_lab_config("f32").options.kv_quant.quantized());
}

TEST_CASE("lab specs: ';' separates them, whitespace around each and empty parts are dropped", "[cache_lab]") {
    using V = std::vector<std::string>;
    CHECK(split_lab_specs("") == V{});
    CHECK(split_lab_specs(" ; ;\t\n") == V{});
    CHECK(split_lab_specs("full") == V{"full"});
    CHECK(split_lab_specs("full; window=32,sinks=4 ;int8\n;") == V{"full", "window=32,sinks=4", "int8"});
    CHECK(split_lab_specs(";h2o,budget=8;;name=a b") == V{"h2o,budget=8", "name=a b"});  // spaces inside a spec stay
}

TEST_CASE("lab configs: bad specs are refused with one line naming the spec", "[cache_lab]") {
    struct Bad { const char* spec; const char* says; };
    const Bad bad[] = {
        {"", "empty"},
        {"snapkv", "unknown part 'snapkv'"},
        {"policy=snapkv,budget=8", "unknown policy 'snapkv'"},
        {"window=0", "budget must be >= 1"},
        {"window=-3", "window must be between 1 and"},  // the option table's range for window
        {"policy=window,budget=0", "budget must be >= 1"},
        {"policy=window", "needs a budget"},
        {"policy=full,budget=4", "takes no budget"},
        {"window=8,window=9", "given twice"},
        {"full,window=8", "given twice"},
        {"int8,fp8", "given twice"},
        {"quant=int5", "unknown format 'int5'"},
        {"int5", "unknown part 'int5'"},
        {"g=8", "add int4"},
        {"int8,r=2", "add int4"},
        {"int4,window=8", "only with policy full"},
        {"sinks=4", "give window=W"},
        {"window=8,sinks=-1", "sinks must be between 0 and"},
        {"foo=1", "unknown key 'foo' (window, sinks, quant, g, r, policy, budget, name)"},
        {"window=abc", "{lab_config} 'window=abc': window wants a whole number, got 'abc'"},
        {"int4,group=x", "group wants a whole number"},  // the key as written
        {"int4,g=0", "g must be >= 1"},
        {"int4,r=-1", "r must be >= 0"},
        {"name=", "name= is empty"},
    };
    for (const Bad& b : bad) {
        INFO("spec '" << b.spec << "'");
        try {
            parse_lab_config(b.spec);
            FAIL("accepted");
        } catch (const UsageError& e) {
            const std::string what = e.what();
            CHECK_THAT(what, Catch::Contains(b.says));
            CHECK(what.find('\n') == std::string::npos);
        }
    }
}

TEST_CASE("lab: what the engine refuses is refused before any step, naming the configuration", "[cache_lab]") {
    auto model = lab_model();  // head_dim 8, n_positions 80
    const std::vector<TokenId> text = random_tokens(5, 20, 97);
    CHECK_THROWS_WITH(run_cache_lab(model, text, parse_all({"full", "int4,g=3"})), Catch::Contains("{lab_config} 'int4,g=3': g=3 does not divide head_dim 8"));
    CHECK_THROWS_WITH(run_cache_lab(model, text, parse_all({"int4,g=16"})), Catch::Contains("'int4,g=16'"));
    CHECK_THROWS_WITH(run_cache_lab(model, random_tokens(5, 81, 97), parse_all({"full"})), Catch::Contains("n_positions (80)"));
    CHECK_THROWS_WITH(run_cache_lab(model, std::vector<TokenId>{3}, parse_all({"full"})), Catch::Contains("at least 2"));
    CHECK_THROWS_WITH(run_cache_lab(model, std::vector<TokenId>{3, 97}, parse_all({"full"})), Catch::Contains("97"));
    CHECK_THROWS_AS(run_cache_lab(model, text, {}), UsageError);
    // Names label the rows, lines and JSON entries: two configurations with one name are refused.
    CHECK_THROWS_WITH(run_cache_lab(model, text, parse_all({"int8,name=a", "full", "fp8,name=a"})),
                      "{lab_config} 'fp8,name=a': the name 'a' is taken by 'int8,name=a' (give another name=LABEL)");
    CHECK_THROWS_WITH(run_cache_lab(model, text, parse_all({"int8", "int8"})), "{lab_config} 'int8' is given twice");
    CHECK_THROWS_WITH(run_cache_lab(model, text, parse_all({"window=4,name=full"})),  // the added reference is "full"
                      Catch::Contains("the name 'full' is taken"));
    CHECK_NOTHROW(run_cache_lab(model, text, parse_all({"int8,name=a", "int8,name=b"})));
}

TEST_CASE("teacher forcing: the forced tokens are fed and recorded as forced, with the logits of a prompt run", "[cache_lab]") {
    auto model = lab_model();
    const std::vector<TokenId> text = random_tokens(11, 12, 97);
    SessionOptions o;
    o.max_new_tokens = 11;
    o.forced_tokens.assign(text.begin() + 1, text.end() - 3);  // 8 forced, then 3 sampled (greedy)
    Session forced(model, o);
    forced.set_prompt({text[0]});
    while (forced.next() != Session::Next::Done) forced.step();
    REQUIRE(forced.trace().size() == 11);
    for (size_t k = 0; k < 11; ++k) {
        INFO("step " << k);
        const Prediction& pred = forced.trace()[k].prediction;
        CHECK(pred.forced == (k < 8));
        if (k < 8) CHECK(*pred.chosen == text[k + 1]);
        // The step's logits are those of a prompt of the text's first k + 1 tokens (cached == prefilled,
        // bit for bit): forcing changes what is fed, nothing else.
        if (k < 9) {
            SessionOptions plain;
            plain.max_new_tokens = 1;
            Session s(model, plain);
            s.set_prompt(std::vector<TokenId>(text.begin(), text.begin() + int64_t(k) + 1));
            s.step();
            CHECK(first_mismatch(s.parts().logits, pred.logits) == "");
        }
    }
    std::vector<TokenId> fed;
    for (size_t k = 1; k < 11; ++k) fed.push_back(forced.trace()[k].id.tokens.at(0));
    CHECK(std::vector<TokenId>(fed.begin(), fed.begin() + 8) == o.forced_tokens);
    // Past the forced tokens the sampler chooses again: greedy = the argmax of the logits.
    const std::vector<float>& last = forced.trace()[9].prediction.logits;
    CHECK(*forced.trace()[9].prediction.chosen == TokenId(std::max_element(last.begin(), last.end()) - last.begin()));
    // An id outside the vocabulary is refused when the session is made.
    o.forced_tokens = {1, 97};
    CHECK_THROWS_AS(Session(model, o), UsageError);
}

TEST_CASE("lab: full against full is KL 0 and top-1 100 %, and a reference is added when none is given", "[cache_lab]") {
    auto model = lab_model();
    const std::vector<TokenId> text = random_tokens(21, 30, 97);
    const LabReport r = run_cache_lab(model, text, parse_all({"full", "name=again", "window=4"}));
    REQUIRE(r.runs.size() == 3);
    CHECK(r.reference == 0);
    CHECK(!r.added_reference);
    const LabRun& again = r.runs[1];
    REQUIRE(again.kl.size() == 29);
    for (size_t i = 0; i < again.kl.size(); ++i) {
        CHECK(again.kl[i] == 0.0);
        CHECK(again.top1[i] == 1);
        CHECK(again.loss[i] == r.runs[0].loss[i]);
    }
    CHECK(again.totals.kl_mean == 0.0);
    CHECK(again.totals.top1_rate == 1.0);
    CHECK(again.totals.loss_delta == 0.0);
    CHECK(r.runs[2].totals.kl_mean > 0.0);  // the window does change the predictions

    const LabReport added = run_cache_lab(model, text, parse_all({"int8", "window=4,sinks=1"}));
    REQUIRE(added.runs.size() == 3);
    CHECK(added.added_reference);
    CHECK(added.reference == 0);
    CHECK(added.runs[0].config.name == "full");
    CHECK(added.runs[1].config.name == "int8");
}

TEST_CASE("lab figures match the double-precision reference forward pass", "[cache_lab]") {
    auto model = lab_model();
    const FixtureModel& fm = lab_fixture();
    const ModelConfig& c = fm.config;
    const int64_t D = c.n_embd / c.n_head, T = 40, W = 6, S = 2;
    const std::vector<TokenId> text = random_tokens(33, T, c.n_vocab);
    const LabReport r = run_cache_lab(model, text, parse_all({"full", "window=6,sinks=2", "int8"}));
    const std::vector<int32_t> read(text.begin(), text.end() - 1);  // position i reads tokens 0..i
    const Reference full = reference_forward(fm, read, 0);
    const Reference windowed = reference_forward(fm, read, W, S);
    int64_t n_disagree = 0;
    for (int64_t i = 0; i < T - 1; ++i) {
        INFO("position " << i);
        const std::vector<double> ref = log_probs(full.logits.row(i)), win = log_probs(windowed.logits.row(i));
        const size_t next = size_t(text[size_t(i + 1)]);
        double kl = 0;
        for (size_t v = 0; v < ref.size(); ++v) kl += std::exp(ref[v]) * (ref[v] - win[v]);
        const bool agree = std::max_element(ref.begin(), ref.end()) - ref.begin() ==
                           std::max_element(win.begin(), win.end()) - win.begin();
        n_disagree += !agree;
        CHECK(r.runs[0].loss[size_t(i)] == Approx(-ref[next]).margin(1e-4));
        CHECK(r.runs[1].loss[size_t(i)] == Approx(-win[next]).margin(1e-4));
        CHECK(r.runs[1].kl[size_t(i)] == Approx(kl).margin(1e-5));
        CHECK(bool(r.runs[1].top1[size_t(i)]) == agree);
        // Bytes as stored: float32 rows of the positions held, and int8 rows of D codes + a float32 scale.
        const int64_t held = i + 1, held_window = std::min(held, W - 1 + S);
        CHECK(r.runs[0].cache_bytes[size_t(i)] == held * 2 * c.n_layer * c.n_head * D * 4);
        CHECK(r.runs[1].cache_bytes[size_t(i)] == held_window * 2 * c.n_layer * c.n_head * D * 4);
        CHECK(r.runs[2].cache_bytes[size_t(i)] == held * 2 * c.n_layer * c.n_head * (D + 4));
    }
    CHECK(n_disagree > 0);  // the case tells something: the window changes some top-1
    CHECK(r.runs[1].totals.top1_rate == Approx(1.0 - double(n_disagree) / double(T - 1)));
    CHECK(r.runs[2].totals.bytes_per_token == double(2 * c.n_layer * c.n_head * (D + 4)));
    CHECK(r.runs[0].totals.bytes_total == (T - 1) * 2 * c.n_layer * c.n_head * D * 4);
}

TEST_CASE("lab: eviction policies as configurations; a budget beyond the text equals the full cache bit for bit",
          "[cache_lab]") {
    const std::shared_ptr<const Model> model = lab_model();
    const std::vector<TokenId> tokens = kvtest::random_tokens(11, 40, 97);
    const LabReport r = run_cache_lab(model, tokens,
                                      {parse_lab_config("full"), parse_lab_config("h2o,budget=64"),
                                       parse_lab_config("h2o,budget=8"), parse_lab_config("policy=window+sinks,budget=10,sinks=2"),
                                       parse_lab_config("window=9,sinks=2")});
    REQUIRE(r.runs[1].loss == r.runs[0].loss);  // budget 64 > 40 positions: nothing is evicted
    REQUIRE(r.runs[1].totals.kl_mean == 0.0);
    REQUIRE(r.runs[2].totals.kl_mean > 0.0);    // budget 8 of 40: h2o changes the predictions
    REQUIRE(r.runs[2].positions_held.back() == 8);
    // window+sinks keeping N = 10 with S = 2 is the window of N - S + 1 = 9 with 2 sinks (eviction.h).
    REQUIRE(r.runs[3].loss == r.runs[4].loss);
    REQUIRE(r.runs[3].kl == r.runs[4].kl);
    REQUIRE_THROWS_AS(parse_lab_config("h2o"), UsageError);                           // no budget
    REQUIRE_THROWS_AS(parse_lab_config("policy=window+sinks,budget=2,sinks=2"), UsageError);
    REQUIRE_THROWS_AS(parse_lab_config("h2o,budget=8,sinks=2"), UsageError);          // sinks are window+sinks'
    REQUIRE_THROWS_AS(parse_lab_config("policy=snapkv,budget=8"), UsageError);         // not offered: one-token prompt
}
