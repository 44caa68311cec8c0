// Guided lessons (app/gui/logic/lesson.h) without a window: the shipped lesson files parse, a bad file is
// refused in one line naming the file and the field, and the checks read the engine's record — each check's
// verdict and values compared against a number computed here from the trace or the tokenizer, and the
// induction check failing, with the lesson's message, on a model whose weights are random.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/errors.h"
#include "logic/controller.h"
#include "logic/lesson.h"
#include "forward/model.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvscope::gui;
using namespace kvtest;

namespace {

const std::string kAssets = KVSCOPE_ASSETS_DIR;
const std::string kPrompt = "Tom saw the cookie at school. Tom saw the";

const Lesson& lesson(size_t i) {
    static const std::vector<Lesson> all = load_lessons(kAssets + "/lessons");
    return all.at(i);
}

// "Do it for me" for step `k` of lesson `l`: its intents, each applied and waited for.
void do_step(Controller& c, const LessonStep& st) {
    for (const LessonAction& a : st.actions)
        for (const Command& cmd : lesson_intents(a, *c.snapshot())) REQUIRE(c.execute(cmd));
}

const CheckValue& value(const CheckResult& r, const std::string& name) {
    for (const CheckValue& v : r.values)
        if (v.name == name) return v;
    FAIL("no value " << name << " in the check's result: " << r.message);
    return r.values.front();
}

std::shared_ptr<const Model> default_model() {
    static auto m = Model::load(kAssets + "/default");
    return m;
}

}  // namespace

TEST_CASE("every shipped lesson parses, with steps and a model folder that exists", "[lesson]") {
    const std::vector<Lesson> all = load_lessons(kAssets + "/lessons");
    REQUIRE(all.size() >= 8);
    for (const Lesson& l : all) {
        INFO(l.file);
        CHECK(!l.title.empty());
        CHECK(!l.steps.empty());
        CHECK(std::filesystem::exists(lesson_model_dir(l) + "/config.json"));
        for (const LessonStep& st : l.steps) CHECK(!st.text.empty());
    }
}

TEST_CASE("a bad lesson file is refused in one line naming the file and the field", "[lesson]") {
    struct Bad {
        std::string text, field;
    };
    const auto bad = GENERATE(
        Bad{"{\"steps\": [{\"text\": \"a\"}]}", "title: missing"},
        Bad{"{\"title\": \"t\", \"steps\": []}", "steps: empty"},
        Bad{"{\"title\": \"t\", \"steps\": [{\"text\": \"a\", \"do\": [{\"op\": \"prefil\"}]}]}", "steps[0].do[0].op: unknown op 'prefil'"},
        Bad{"{\"title\": \"t\", \"steps\": [{\"text\": \"a\", \"check\": [{\"is\": \"induction\", \"layer\": 1}]}]}",
            "steps[0].check[0].min: missing"},
        Bad{"{\"title\": \"t\", \"steps\": [{\"text\": \"a\", \"chek\": []}]}", "steps[0].chek: not a field here"},
        Bad{"{\"title\": \"t\", \"steps\": [{\"text\": \"a\"}, {\"text\": \"b\", \"check\": [{\"is\": \"cache_rows\", \"equals\": \"lots\"}]}]}",
            "steps[1].check[0].equals: unknown reference 'lots'"},
        Bad{"{\"title\": \"t\", \"steps\": [{\"text\": \"a\", \"do\": [{\"op\": \"options\", \"set\": [\"window=x\"]}]}]}",
            "steps[0].do[0].set[0]: "},
        Bad{"{\"title\": \"t\", \"steps\": [{\"text\": \"a\", \"do\": [{\"op\": \"decode\", \"n\": \"3\"}]}]}",
            "steps[0].do[0].n: expected a whole number"},
        Bad{"{\"title\": 3, \"steps\": [{\"text\": \"a\"}]}", "title: expected a string, got number"},
        Bad{"{\"title\": \"t\",", "not JSON"});
    INFO(bad.text);
    try {
        parse_lesson(bad.text, "09-broken.json");
        FAIL("accepted");
    } catch (const LoadError& e) {
        const std::string what = e.what();
        CHECK_THAT(what, Catch::StartsWith("09-broken.json: ") && Catch::Contains(bad.field));
        CHECK(what.find('\n') == std::string::npos);
    }
}

TEST_CASE("lesson 1's checks: cache rows and rows computed, against the tokenizer and the step count", "[lesson]") {
    Controller c(default_model(), SessionOptions{});
    const Lesson& l = lesson(0);
    // Before anything ran, the check waits (it never passes on an empty record).
    CHECK(check_step(l.steps[0], *c.snapshot()).state == CheckResult::State::Waiting);
    do_step(c, l.steps[0]);
    const int64_t n_prompt = int64_t(default_model()->tokenizer()->encode(kPrompt).size());
    CheckResult r = check_step(l.steps[0], *c.snapshot());
    INFO(r.message);
    REQUIRE(r.passed());
    CHECK(value(r, "cache_rows").actual == double(n_prompt));
    CHECK(value(r, "rows_computed").actual == double(n_prompt));
    // Step 2's check on the state step 1 left: a prefill is not a decode, so it is not passed.
    CHECK(!check_step(l.steps[1], *c.snapshot()).passed());
    do_step(c, l.steps[1]);
    do_step(c, l.steps[2]);  // decode 3
    r = check_step(l.steps[2], *c.snapshot());
    INFO(r.message);
    REQUIRE(r.passed());
    CHECK(value(r, "cache_rows").actual == double(n_prompt + 4));  // the prompt and the 4 tokens fed by decode steps
    CHECK(value(r, "rows_computed").actual == 1);
}

TEST_CASE("lesson 2's FLOPs check compares the step with the shadow run without the cache", "[lesson]") {
    Controller c(default_model(), SessionOptions{});
    const Lesson& l = lesson(1);
    do_step(c, l.steps[0]);
    do_step(c, l.steps[1]);
    const auto snap = c.snapshot();
    const CheckResult r = check_step(l.steps[1], *snap);
    INFO(r.message);
    REQUIRE(r.passed());
    REQUIRE(snap->shadow());
    const StepRecord& on = snap->trace().back();
    const StepRecord& off = snap->shadow()->back();
    CHECK(!off.id.cache_on);
    CHECK(value(r, "flops_saved.flops_on").actual == on.cost.flops);
    CHECK(value(r, "flops_saved.flops_off").actual == off.cost.flops);
    CHECK(value(r, "flops_saved.rows_off").actual == double(on.last_position() + 1));
    CHECK(value(r, "flops_saved.ratio").actual > 5);
}

TEST_CASE("lesson 4's induction check reads the attention weight the engine used", "[lesson]") {
    Controller c(default_model(), SessionOptions{});
    const Lesson& l = lesson(3);
    do_step(c, l.steps[0]);
    const auto snap = c.snapshot();
    const CheckResult r = check_step(l.steps[0], *snap);
    INFO(r.message);
    REQUIRE(r.passed());
    // Independently: the full attention map of layer 1 head 1, last row, at the earlier " cookie".
    const std::vector<TokenId> ids = default_model()->tokenizer()->encode(kPrompt);
    const std::vector<TokenId> cookie = default_model()->tokenizer()->encode(" cookie");
    REQUIRE(cookie.size() == 1);
    const int64_t key = std::find(ids.begin(), ids.end(), cookie[0]) - ids.begin();
    const AttentionMap m = attention_map(snap->trace(), 0, 1, 1);
    const float w = m.weights[size_t((m.n_query - 1) * m.n_key + key - m.key_positions[0])];
    CHECK(value(r, "induction.weight").actual == Approx(w));
    CHECK(value(r, "induction.key_position").actual == double(key));
    CHECK(w >= 0.5f);
    CHECK(check_step(l.steps[1], *snap).passed());  // the model predicts " cookie"
}

TEST_CASE("the induction check fails, with the lesson's message, on random weights", "[lesson]") {
    FixtureSpec spec;
    spec.stddev = 0.02f;  // near-uniform attention: nothing copies
    auto model = Model::load(write_fixture(work_dir("lesson") / "random", spec).dir.string());
    SessionOptions o;
    o.max_new_tokens = 4;  // the fixture has 32 positions
    Controller c(model, o);
    // A repeat in token ids (the fixture has no tokenizer): the last 5 repeats the earlier 5, followed by 6.
    REQUIRE(c.execute(SetPrompt{"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,5"}));
    REQUIRE(c.execute(Prefill{}));
    LessonStep st;
    LessonCheck induction;
    induction.is = "induction", induction.layer = 1, induction.head = 1, induction.min = 0.5;
    st.checks.push_back(induction);
    const CheckResult r = check_step(st, *c.snapshot());
    INFO(r.message);
    CHECK(r.state == CheckResult::State::Failed);
    CHECK_THAT(r.message, Catch::StartsWith("expected an induction head (layer 1 head 1) with weight >= 0.5 on the earlier") &&
                              Catch::Contains("the strongest is"));
    CHECK(value(r, "induction.key_position").actual == 5);
    CHECK(value(r, "induction.strongest").actual < 0.5);
}
