// The window's command queue (app/gui/logic/controller.h) driven without a window: intents go in through
// Controller::execute, results come out of snapshots, and each is checked against plain core Sessions
// run here on the same prompt (the Controller's worker, shadow session and batch plumbing are what is
// under test; the sessions' own correctness is session.tests.cpp's job). Comparisons are bit-exact:
// cached, uncached and batched steps promise identical logits (kernels.h).
//
// The fixture models have no tokenizer, so prompts are typed as id lists ("1,2,3"), as in the window.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chat_folder.h"
#include "logic/controller.h"
#include "logic/derived_views.h"
#include "forward/model.h"
#include "model/config.h"
#include "model/random_model.h"
#include "run/session.h"
#include "text/chat_template.h"
#include "session_runs.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvscope::gui;
using namespace kvtest;

namespace {

// ---- The intents, as the window's buttons make them ----

Command set_prompt(std::string text) { return SetPrompt{std::move(text)}; }
Command step() { return Step{}; }
Command back(int64_t n = 1) { return Back{n}; }
Command reset() { return Reset{}; }
Command cache(bool on) { return SetCache{on}; }
Command set_options(SessionOptions options, BatchOptions batch) { return SetOptions{std::move(options), std::move(batch), {}}; }
Command load_model(std::string dir) { return LoadModel{std::move(dir)}; }

// ---- Fixtures and the independent runs ----

std::shared_ptr<const Model> fixture_model(const std::string& name, int64_t n_vocab, int64_t n_layer, uint32_t seed,
                                           WeightFormat format = WeightFormat::F32) {
    FixtureSpec spec;
    spec.config.n_vocab = n_vocab;
    spec.config.n_layer = n_layer;
    spec.seed = seed;
    return Model::load(write_fixture(work_dir("gui_controller") / name, spec).dir.string(), format);
}

std::shared_ptr<const Model> model_a() {
    static auto m = fixture_model("a", 53, 2, 7);
    return m;
}

std::shared_ptr<const Model> model_a_bf16() {  // the same weights, and a bfloat16 KV cache
    static auto m = fixture_model("a16", 53, 2, 7, WeightFormat::BF16);
    return m;
}

SessionOptions small_options() {
    SessionOptions o;
    o.max_new_tokens = 4;
    return o;
}

// What the plain engine makes of `prompt` in `n_steps` steps (each step cached unless listed in `uncached`).
kvtest::Run plain_run(std::shared_ptr<const Model> model, SessionOptions o, std::vector<TokenId> prompt, int n_steps,
              std::vector<int> uncached = {}) {
    Session s(std::move(model), o);
    s.set_prompt(std::move(prompt));
    for (int i = 0; i < n_steps; ++i) {
        s.set_use_cache(std::find(uncached.begin(), uncached.end(), i) == uncached.end());
        s.step();
    }
    return collect(s);
}

kvtest::Run snapshot_run(const Snapshot::Sequence& seq) {
    kvtest::Run r;
    r.generated = seq.generated_ids;
    for (size_t i = 0; i < seq.trace.size(); ++i) {
        r.records.push_back(seq.trace.share(i));
        if (!seq.trace[i].prediction.logits.empty()) r.logits.push_back(seq.trace[i].prediction.logits);
    }
    return r;
}

kvtest::Run snapshot_run(const Snapshot& s) { return snapshot_run(s.sequences[size_t(s.selected)]); }

// execute() and the status line when it failed, so a broken step says why.
void run_ok(Controller& c, const Command& cmd) {
    const bool ok = c.execute(cmd);
    INFO("status: " << c.snapshot()->status);
    REQUIRE(ok);
}

const std::vector<TokenId> kPrompt{1, 2, 3, 4, 5};
const char* const kPromptText = "1,2,3,4,5";

}  // namespace

TEST_CASE("Controller: steps equal a plain session; the shadow session computes the same step cache off") {
    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    REQUIRE(c.snapshot()->prompt() == kPrompt);
    REQUIRE(c.snapshot()->next() == Session::Next::Prefill);
    for (int i = 0; i < 3; ++i) run_ok(c, step());

    auto s = c.snapshot();
    REQUIRE(s->trace().size() == 3);
    CHECK(s->trace()[0].id.phase == Phase::Prefill);
    CHECK(s->trace()[1].id.phase == Phase::Decode);
    require_identical(snapshot_run(*s), plain_run(model_a(), small_options(), kPrompt, 3));
    CHECK(!s->status_error);

    // The shadow ran each step the other way: cache off, same choice, same logits.
    REQUIRE(s->shadow() != nullptr);
    REQUIRE(s->shadow()->size() == 3);
    for (size_t i = 0; i < 3; ++i) {
        CHECK(!(*s->shadow())[i].id.cache_on);
        CHECK((*s->shadow())[i].prediction.chosen == s->trace()[i].prediction.chosen);
        CHECK(first_mismatch((*s->shadow())[i].prediction.logits, s->trace()[i].prediction.logits).empty());
    }
}

TEST_CASE("Controller: step back undoes steps, and stepping again gives the same tokens") {
    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    for (int i = 0; i < 4; ++i) run_ok(c, step());
    const kvtest::Run four = snapshot_run(*c.snapshot());

    run_ok(c, back(2));
    auto s = c.snapshot();
    REQUIRE(s->trace().size() == 2);
    CHECK(s->generated().size() == four.generated.size() - 2);
    REQUIRE(s->shadow() != nullptr);
    CHECK(s->shadow()->size() == 2);  // the shadow went back with it

    run_ok(c, step());
    run_ok(c, step());
    require_identical(snapshot_run(*c.snapshot()), four);

    // Nothing left to undo is an error, and the trace stays.
    run_ok(c, back(4));
    CHECK(c.snapshot()->trace().empty());
    CHECK(!c.execute(back()));
    CHECK(c.snapshot()->status_error);
}

TEST_CASE("Controller: reset empties the cache, keeps the prompt, and replays the same run") {
    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    for (int i = 0; i < 3; ++i) run_ok(c, step());
    const kvtest::Run before = snapshot_run(*c.snapshot());

    run_ok(c, reset());
    auto s = c.snapshot();
    CHECK(s->trace().empty());
    CHECK(s->generated().empty());
    CHECK(s->prompt() == kPrompt);
    CHECK(s->next() == Session::Next::Prefill);

    for (int i = 0; i < 3; ++i) run_ok(c, step());
    require_identical(snapshot_run(*c.snapshot()), before);
}

TEST_CASE("Controller: with the cache off, the next step recomputes everything and chooses the same token") {
    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    run_ok(c, step());  // prefill, cache on
    run_ok(c, cache(false));
    run_ok(c, step());  // decode, cache off

    auto s = c.snapshot();
    REQUIRE(s->trace().size() == 2);
    CHECK(s->trace()[0].id.cache_on);
    CHECK(!s->trace()[1].id.cache_on);
    CHECK(!s->options().use_cache);
    const kvtest::Run cached = plain_run(model_a(), small_options(), kPrompt, 2);
    REQUIRE(s->trace()[1].prediction.chosen.has_value());
    CHECK(s->trace()[1].prediction.chosen == cached.records[1]->prediction.chosen);
    // Independently: a plain session stepping cache off at the same step gives the same record.
    require_identical(snapshot_run(*s), plain_run(model_a(), small_options(), kPrompt, 2, {1}));
    // The shadow flips it: its step 1 ran with the cache on.
    REQUIRE(s->shadow() != nullptr);
    CHECK((*s->shadow())[1].id.cache_on);
}

TEST_CASE("Controller: a batch of 3 over one block pool shares the prompt's blocks and matches 3 plain sessions") {
    const bool bf16 = GENERATE(false, true);
    INFO((bf16 ? "bf16 weights and KV cache" : "f32"));
    const std::shared_ptr<const Model> model = bf16 ? model_a_bf16() : model_a();
    const std::vector<std::string> suffixes{"", "20", "30,31"};
    const std::vector<std::vector<TokenId>> tails{{}, {20}, {30, 31}};
    const std::vector<TokenId> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};  // 2 full blocks of 4, then a partial one

    Controller c(model, small_options());
    run_ok(c, set_prompt("1,2,3,4,5,6,7,8,9"));
    SessionOptions o = small_options();
    o.block_size = 4;
    o.share_prefix = true;
    BatchOptions b;
    b.n_seq = 3;
    b.suffixes = suffixes;
    run_ok(c, set_options(o, b));
    for (int i = 0; i < 3; ++i) run_ok(c, step());

    auto s = c.snapshot();
    REQUIRE(s->sequences.size() == 3);
    CHECK(s->shadow() == nullptr);  // a batch has no shadow session
    for (size_t i = 0; i < 3; ++i) {
        INFO("sequence " << i);
        std::vector<TokenId> p = prompt;
        p.insert(p.end(), tails[i].begin(), tails[i].end());
        CHECK(s->sequences[i].prompt_ids == p);
        // Independent of pools and batching: one session, ring cache, its own prompt.
        require_identical(snapshot_run(s->sequences[i]), plain_run(model, small_options(), p, 3));
    }
    const PoolView* m = s->pool_at(-1);
    REQUIRE(m != nullptr);
    CHECK(m->block_size == 4);
    CHECK(m->positions_adopted >= 2 * 8);  // sequences 1 and 2 mapped at least the 2 full prompt blocks
    CHECK(m->n_mapped() < m->n_unshared());
}

TEST_CASE("Controller: loading another model folder replaces the model and keeps the prompt") {
    FixtureSpec spec;
    spec.config.n_vocab = 61;
    spec.config.n_layer = 1;
    spec.seed = 11;
    const std::string dir_b = write_fixture(work_dir("gui_controller") / "b", spec).dir.string();

    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    run_ok(c, step());
    const uint64_t generation = c.snapshot()->generation;

    run_ok(c, load_model(dir_b));
    auto s = c.snapshot();
    CHECK(s->model().config().n_vocab == 61);
    CHECK(s->model().config().n_layer == 1);
    CHECK(s->generation > generation);
    CHECK(s->trace().empty());
    CHECK(s->prompt() == kPrompt);

    for (int i = 0; i < 2; ++i) run_ok(c, step());
    require_identical(snapshot_run(*c.snapshot()), plain_run(Model::load(dir_b), small_options(), kPrompt, 2));
}

TEST_CASE("Controller: a bad model folder is an error and the old model stays usable") {
    const auto bad = work_dir("gui_controller") / "bad";
    std::ofstream(bad / "config.json") << "{ \"n_embd\": ";  // cut off mid-file

    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    run_ok(c, step());
    auto before = c.snapshot();

    CHECK(!c.execute(load_model(bad.string())));
    auto s = c.snapshot();
    CHECK(s->status_error);
    CHECK_THAT(s->status, Catch::Contains("config.json"));
    CHECK(s->model_ptr == before->model_ptr);
    CHECK(s->generation == before->generation);
    CHECK(s->trace().size() == 1);

    CHECK(!c.execute(load_model((work_dir("gui_controller") / "no-such-folder").string())));
    CHECK(c.snapshot()->model_ptr == before->model_ptr);

    run_ok(c, step());
    require_identical(snapshot_run(*c.snapshot()), plain_run(model_a(), small_options(), kPrompt, 2));
}

// ---- What the window says: errors in its own words and place, counts, the status line (issue 13) ----

TEST_CASE("Controller: a failed intent's error belongs to the panel that sent it, in the window's words") {
    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    run_ok(c, step());
    const auto file = work_dir("gui_controller") / "not-a-folder.txt";
    std::ofstream(file) << "a file, not a model folder\n";

    // A model load (the picker or a dropped folder): the Model panel, without command-line option names.
    CHECK(!c.execute(load_model(file.string())));
    auto s = c.snapshot();
    CHECK(s->problem.id != 0);
    CHECK(s->problem.place == Place::Model);
    CHECK_THAT(s->problem.text, Catch::Contains(file.string()) &&
                                    Catch::Contains("the model path box wants a folder with config.json and model.safetensors"));
    CHECK_THAT(s->problem.text, !Catch::Contains("--"));
    // A step from Controls succeeds: the model error stays until dismissed or the Model panel succeeds.
    run_ok(c, step());
    CHECK(c.snapshot()->problem.place == Place::Model);
    CHECK(c.snapshot()->problem.id == s->problem.id);

    // A failed export: the Export panel, and it no longer reports the earlier export as its result.
    const std::string good = (work_dir("gui_controller") / "export_ok").string();
    run_ok(c, Command(ExportStep{good}));
    CHECK_THAT(c.snapshot()->last_export, Catch::StartsWith(good));
    CHECK(c.snapshot()->problem.place == Place::Model);  // an Export success does not end a Model error...
    CHECK(!c.execute(Command(ExportStep{"/proc/kvscope-cannot-write-here"})));
    s = c.snapshot();
    CHECK(s->problem.place == Place::Export);
    CHECK_THAT(s->problem.text, Catch::Contains("/proc/kvscope-cannot-write-here"));
    CHECK(s->last_export.empty());
    run_ok(c, Command(ExportStep{good}));
    CHECK(c.snapshot()->problem.id == 0);  // ...but ends an Export one
    CHECK(!c.snapshot()->last_export.empty());
}

TEST_CASE("Window wording: a refused cache lab configuration is named as the window's configuration, not --config") {
    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    run_ok(c, step());
    CHECK(!c.execute(Command(MeasureLab{{"window=x"}})));
    CHECK(c.snapshot()->problem.place == Place::Lab);
    CHECK(c.snapshot()->problem.text == "configuration 'window=x': window wants a whole number, got 'x'");
    CHECK(!c.execute(Command(MeasureLab{{"int8,name=a", "fp8,name=a"}})));
    CHECK(c.snapshot()->problem.text ==
          "configuration 'fp8,name=a': the name 'a' is taken by 'int8,name=a' (give another name=LABEL)");
}

TEST_CASE("Window wording: counts in the singular, option names as the window's boxes, positions and token ids named") {
    CHECK(count_of(1, "query", "queries") == "1 query");
    CHECK(count_of(3, "query", "queries") == "3 queries");
    CHECK(count_of(1, "step") == "1 step");
    CHECK(count_of(0, "step") == "0 steps");
    // The engine names what a message is about ({model}, {-window}); the window says it with its boxes.
    CHECK(render_labels("x: no such folder ({model} wants a folder with config.json and model.safetensors)") ==
          "x: no such folder (the model path box wants a folder with config.json and model.safetensors)");
    CHECK(render_labels("an encoder-decoder model needs a source first ({source})") ==
          "an encoder-decoder model needs a source first (the Source box)");
    CHECK(render_labels("use {dtype} bf16, or pass another {prompt_cache}") ==
          "use kvscope gui --dtype bf16, or pass another prompt cache");

    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    run_ok(c, step());
    run_ok(c, step());
    auto s = c.snapshot();
    const TokenId chosen = *s->trace().back().prediction.chosen;
    // The decode step's one token sits at position 5 (after 5 prompt tokens); the chosen token is an id.
    CHECK_THAT(s->status, Catch::Contains("1 token at position 5") && Catch::Contains("(token id " + std::to_string(chosen) + ")"));
    CHECK_THAT(s->status, !Catch::Contains("token(s)"));
    run_ok(c, back(1));
    CHECK_THAT(c.snapshot()->status, Catch::EndsWith("stepped back to 1 step"));
}

TEST_CASE("Controller: Space then Backspace pressed at once, with both cores busy, end where they started") {
    // Both cores spin while the keys' intents are pushed back to back: none is dropped, and they apply in order.
    std::atomic<bool> stop{false};
    std::vector<std::thread> burners;
    for (int i = 0; i < 2; ++i)
        burners.emplace_back([&] {
            volatile uint64_t x = 0;
            while (!stop.load(std::memory_order_relaxed)) x = x + 1;
        });
    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    run_ok(c, step());
    const auto before = c.snapshot();
    const uint64_t errors = before->n_errors;
    for (int round = 0; round < 20; ++round) {
        REQUIRE(c.push(step()));   // Space
        REQUIRE(c.push(back(1)));  // Backspace, before the worker has even started the step
    }
    c.wait_idle();
    stop = true;
    for (std::thread& t : burners) t.join();
    auto s = c.snapshot();
    CHECK(s->n_errors == errors);
    CHECK(s->trace().size() == 1);
    CHECK(s->generated() == before->generated());
    CHECK_THAT(s->status, Catch::Contains("stepped back to 1 step"));
    require_identical(snapshot_run(*s), snapshot_run(*before));
}

// A chat (SendChat) on a Llama 3 chat folder: each message appends a turn to the cache and runs to the end
// of its reply; the shadow session appends the same turns with the cache off, so it re-prefills the whole
// conversation each turn. Row counts are computed here from the turns' positions.
TEST_CASE("Controller: a chat appends turns; the cache-off shadow re-prefills the conversation; back and compare follow") {
    SessionOptions o;
    o.max_new_tokens = 4;
    Controller c(Model::load(llama3_chat_folder("gui_controller")), o);
    const std::vector<std::string> messages = {"Hello there", "What is a cat?", "Thanks"};
    for (const std::string& m : messages) run_ok(c, SendChat{m});
    auto s = c.snapshot();
    REQUIRE(s->chat_available);
    REQUIRE(s->turns.size() == 3);
    CHECK(s->next() == Session::Next::Done);
    REQUIRE(s->chat.size() == 6);
    for (size_t k = 0; k < 3; ++k) {
        CHECK(s->chat[2 * k].text == messages[k]);
        CHECK(s->chat[2 * k + 1].role == "assistant");
    }
    // With the cache a turn computes its tokens and the previous reply's last one, and reuses every
    // position before that; without, it computes all of them.
    auto expected_rows = [](const std::vector<Turn>& turns) {
        std::vector<std::array<int64_t, 3>> rows;  // reused on, computed on, computed off
        for (size_t k = 0; k < turns.size(); ++k) {
            const int64_t first = turns[k].first_position, n = turns[k].n_appended();
            rows.push_back(k == 0 ? std::array<int64_t, 3>{0, n, n} : std::array<int64_t, 3>{first - 1, n + 1, first + n});
        }
        return rows;
    };
    auto rows_of = [](const Snapshot& snap) {
        std::vector<std::array<int64_t, 3>> rows;
        REQUIRE(snap.shadow() != nullptr);
        for (const TurnCost& t : turn_costs(snap.trace(), *snap.shadow(), snap.step_timings)) {
            CHECK(t.reused_off == 0);
            rows.push_back({t.reused_on, t.computed_on, t.computed_off});
        }
        return rows;
    };
    CHECK(rows_of(*s) == expected_rows(s->turns));

    // The comparison switched off and on replays the turns the same way.
    run_ok(c, SetCompare{false});
    run_ok(c, SetCompare{true});
    CHECK(rows_of(*c.snapshot()) == expected_rows(s->turns));

    // Bad input changes nothing.
    CHECK(!c.execute(SendChat{"  "}));
    CHECK(c.snapshot()->turns.size() == 3);

    // Back over the last turn's steps and its append: two turns, and the shadow went back with them.
    size_t last_turn_steps = 0;
    for (size_t i = 0; i < s->trace().size(); ++i) last_turn_steps += s->trace()[i].id.turn == 2;
    run_ok(c, back(int64_t(last_turn_steps) + 1));
    auto b = c.snapshot();
    REQUIRE(b->turns.size() == 2);
    CHECK(b->chat.size() == 4);
    CHECK(rows_of(*b) == expected_rows(b->turns));
    // The same message again gives the same reply.
    run_ok(c, SendChat{messages[2]});
    CHECK(c.snapshot()->generated() == s->generated());
}

TEST_CASE("Controller: a turn that rolled the cache back is replayed by the comparison, rolled back the same way") {
    // Qwen3's template drops a reply's <think> block when it renders the next turn: the cache rolls back to
    // the common token prefix (chat_conversation.tests.cpp checks where). Forced tokens make the first reply think.
    const std::shared_ptr<const Model> model =
        Model::load(chatml_chat_folder("gui_controller", "qwen3-chat", std::string(chat_template_text(ChatFamily::Qwen3))));
    SessionOptions o;
    o.max_new_tokens = 32;
    std::vector<TokenId> forced = encode_chat(*model->tokenizer(), "<think>\nr\n</think>\n\nans");
    forced.push_back(764);  // <|im_end|>
    o.forced_tokens = forced;
    Controller c(model, o);
    run_ok(c, SendChat{"u1"});
    run_ok(c, SendChat{"u2"});
    auto s = c.snapshot();
    REQUIRE(s->turns.size() == 2);
    const Turn& second = s->turns[1];
    REQUIRE(s->chat.size() == 4);
    REQUIRE(s->chat[1].text == "<think>\nr\n</think>\n\nans");  // the first reply, ended by <|im_end|>
    REQUIRE(second.first_position < s->turns[0].n_appended() + int64_t(forced.size()));  // it rolled back
    // cached: the kept prefix reused, the turn's tokens computed; uncached: everything up to the turn's end
    const std::vector<std::array<int64_t, 3>> expected = {
        {0, s->turns[0].n_appended(), s->turns[0].n_appended()},
        {second.first_position, second.n_appended(), second.first_position + second.n_appended()}};
    auto rows_of = [](const Snapshot& snap) {
        std::vector<std::array<int64_t, 3>> rows;
        REQUIRE(snap.shadow() != nullptr);
        CHECK(snap.shadow()->size() == snap.trace().size());
        for (const TurnCost& t : turn_costs(snap.trace(), *snap.shadow(), snap.step_timings))
            rows.push_back({t.reused_on, t.computed_on, t.computed_off});
        return rows;
    };
    CHECK(rows_of(*s) == expected);
    // Switched off and on, the comparison replays both turns from the turn log, the rollback included.
    run_ok(c, SetCompare{false});
    run_ok(c, SetCompare{true});
    CHECK(rows_of(*c.snapshot()) == expected);
}

TEST_CASE("Controller: a step that overflows float32 is a red status line naming the layer; step back still works") {
    // Token 7's embedding and layer 1's two output biases hold 1.5e38 in column 0: a row of token 7
    // overflows (4.5e38 > FLT_MAX) in layer 1, every other row stays finite (numerics.tests.cpp).
    FixtureSpec spec;
    spec.seed = 41;
    spec.config.tie_word_embeddings = false;
    spec.set.push_back({"wte.weight", 7 * spec.config.n_embd, 1.5e38f});
    spec.set.push_back({"h.1.attn.c_proj.bias", 0, 1.5e38f});
    spec.set.push_back({"h.1.mlp.c_proj.bias", 0, 1.5e38f});
    auto model = Model::load(write_fixture(work_dir("gui_controller") / "overflow", spec).dir.string());
    SessionOptions o = small_options();
    o.forced_tokens = {7};  // the prefill's token is 7, fed by the decode step
    Controller c(model, o);
    run_ok(c, set_prompt("1,2,3"));
    run_ok(c, step());
    CHECK(!c.execute(step()));
    auto s = c.snapshot();
    CHECK(s->status_error);
    CHECK_THAT(s->status, Catch::Contains("step 1 (decode, position 3): layer 1 produced NaN or infinity"));
    CHECK(s->trace().size() == 1);
    CHECK(s->generated() == std::vector<TokenId>{7});
    run_ok(c, back());
    CHECK(c.snapshot()->trace().empty());
    run_ok(c, step());  // the prefill again, as before
    CHECK(c.snapshot()->trace().size() == 1);
}

// ---- The panels' caches (derived_views.h): keyed by the record, so never stale ----

namespace {

// A small Llama (rotary positions) with random weights; another seed is another model of the same shape.
std::shared_ptr<const Model> llama_model(uint64_t seed) {
    const ModelConfig c = parse_config(R"({"model_type": "llama", "vocab_size": 61, "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})", "config.json");
    const std::string dir = kvscope::test::fresh_dir("gui_controller", "llama" + std::to_string(seed)).string();
    write_random_model(dir, c, seed);
    return Model::load(dir);
}

// The panels' caches, asked each "frame" for the newest step as the Logit lens and Rotary panels ask
// (no selection: the step's last query; the last layer, whose query depends on every earlier position).
struct PanelViews {
    LensCache lens;
    RotaryCache rotary;

    // What the panels would draw now equals what a fresh computation from the snapshot gives.
    void check_fresh(const Snapshot& s) {
        REQUIRE(!s.trace().empty());
        const size_t step = s.trace().size() - 1;
        const StepRecord& r = s.trace()[step];
        const int64_t q = lens_position(r, -1);
        const LogitLens& shown = lens.get(s.model(), s.trace().share(step), q);
        const LogitLens fresh = logit_lens(s.model(), r.rows, q - r.cost.first_computed_position, kLensTop);
        REQUIRE(shown.depths.size() == fresh.depths.size());
        for (size_t d = 0; d < fresh.depths.size(); ++d) {
            INFO("lens depth " << d);
            REQUIRE(shown.depths[d].top.size() == fresh.depths[d].top.size());
            for (size_t k = 0; k < fresh.depths[d].top.size(); ++k) {
                CHECK(shown.depths[d].top[k].id == fresh.depths[d].top[k].id);
                CHECK(shown.depths[d].top[k].probability == fresh.depths[d].top[k].probability);
            }
        }
        const ModelConfig& cfg = s.model().config();
        const RotaryShown at = rotary_shown(s.trace(), step, cfg.n_layer - 1, 1, -1, -1);
        const RotaryPlots& plots = rotary.get(cfg, s.trace().share(step), at);
        const RotaryView fresh_view = rotary_view_of(cfg, at);
        CHECK(plots.view.score == fresh_view.score);
        CHECK(plots.view.key_rotated == fresh_view.key_rotated);
        CHECK(plots.view.query_rotated == fresh_view.query_rotated);
        CHECK(plots.by_distance.size() == fresh_view.score_by_distance.size());
    }
};

// The lens's last-depth probabilities and the rotary score: what differs between two runs of one shape.
std::pair<std::vector<float>, double> fingerprint(const Snapshot& s) {
    const size_t step = s.trace().size() - 1;
    const StepRecord& r = s.trace()[step];
    const int64_t q = lens_position(r, -1);
    const LogitLens lens = logit_lens(s.model(), r.rows, q - r.cost.first_computed_position, kLensTop);
    std::vector<float> p;
    for (const TokenProbability& t : lens.depths.back().top) p.push_back(t.probability);
    const ModelConfig& cfg = s.model().config();
    return {p, rotary_view_of(cfg, rotary_shown(s.trace(), step, cfg.n_layer - 1, 1, -1, -1)).score};
}

}  // namespace

TEST_CASE("Panel caches: the logit lens and rotary views follow the record, not the step index") {
    Controller c(llama_model(21), small_options());
    PanelViews views;

    SECTION("a new prompt of the same length") {
        run_ok(c, set_prompt("1,2,3,4,5"));
        run_ok(c, step());
        views.check_fresh(*c.snapshot());
        const auto before = fingerprint(*c.snapshot());
        run_ok(c, set_prompt("6,7,8,9,10"));  // step 0 again, the same query position 4
        run_ok(c, step());
        REQUIRE(fingerprint(*c.snapshot()) != before);
        views.check_fresh(*c.snapshot());
    }
    SECTION("a step back, then a different step in its place") {
        run_ok(c, set_prompt("1,2,3,4,5"));
        for (int i = 0; i < 3; ++i) run_ok(c, step());
        views.check_fresh(*c.snapshot());
        const auto before = fingerprint(*c.snapshot());
        run_ok(c, back());
        // The next step 2 attends without position 1: same index and position, other numbers.
        run_ok(c, EditCache{CacheEditKind::Evict, 1, -1, -1, ""});
        run_ok(c, step());
        REQUIRE(c.snapshot()->trace().size() == 3);
        REQUIRE(fingerprint(*c.snapshot()) != before);
        views.check_fresh(*c.snapshot());
    }
    SECTION("a model switch") {
        run_ok(c, set_prompt("1,2,3,4,5"));
        run_ok(c, step());
        views.check_fresh(*c.snapshot());
        const auto before = fingerprint(*c.snapshot());
        run_ok(c, load_model(llama_model(22)->dir()));  // the same shape, other weights
        run_ok(c, step());
        REQUIRE(fingerprint(*c.snapshot()) != before);
        views.check_fresh(*c.snapshot());
    }
    SECTION("the same record and selection is not computed again") {
        run_ok(c, set_prompt("1,2,3,4,5"));
        run_ok(c, step());
        views.check_fresh(*c.snapshot());
        views.check_fresh(*c.snapshot());
        CHECK(views.lens.makes() == 1);
        CHECK(views.rotary.makes() == 1);
    }
}

// ---- The window's options come from the option table (core/run/options.h) ----

TEST_CASE("Option table: every option with a window label is a Controls box, every script key is in gui --help") {
    // The Controls draw controls_options() in their Session options section; the cache switch and the
    // batch section hold these.
    const std::set<std::string> batch_section = {"no_cache", "block_size", "share_prefix", "sequences", "prompt_cache"};
    const std::vector<const OptionSpec*> controls = controls_options();
    const std::string help = script_options_help();
    for (const OptionSpec& o : option_table()) {
        INFO(o.name);
        if (*o.label && !batch_section.count(o.name))
            CHECK(std::find(controls.begin(), controls.end(), &o) != controls.end());
        if (!*o.script_key) continue;
        CHECK_THAT(help, Catch::Contains(std::string(o.script_key) + "="));
        // The script parser takes the key with its default, and refuses a value of the wrong kind.
        SessionOptions so;
        BatchOptions b;
        CHECK_NOTHROW(set_script_option(so, b, std::string(o.script_key) + "=" + default_text(o)));
        if (o.kind == OptionKind::Int || o.kind == OptionKind::Real)
            CHECK_THROWS_WITH(script_option(std::string(o.script_key) + "=x"), Catch::StartsWith(std::string(o.script_key) + "="));
    }
    for (const OptionSpec* o : controls) CHECK(*o->label);
}

TEST_CASE("Option check: the window refuses what the command line refuses, in its own labels") {
    struct Case {
        const char* what;
        SessionOptions o;
        BatchOptions b;
        std::vector<std::string> given;
    };
    const std::string cache_file = (work_dir("gui_controller") / "refused.kvp").string();
    std::vector<Case> cases;
    auto add = [&](const char* what, auto&& edit, std::vector<std::string> given = {}) {
        Case k{what, small_options(), BatchOptions{}, given};
        edit(k.o, k.b);
        cases.push_back(k);
    };
    add("prompt cache with a window", [&](SessionOptions& o, BatchOptions& b) { b.prompt_cache = cache_file; o.window = 4; });
    add("prompt cache with eviction", [&](SessionOptions& o, BatchOptions& b) {
        b.prompt_cache = cache_file;
        o.eviction.kind = EvictionPolicyKind::H2O;
        o.eviction.budget = 4;
    });
    add("prompt cache with int8 rows", [&](SessionOptions& o, BatchOptions& b) { b.prompt_cache = cache_file; o.kv_quant.format = KvQuant::Int8; });
    add("int8 rows in the paged cache", [&](SessionOptions& o, BatchOptions&) { o.kv_quant.format = KvQuant::Int8; o.block_size = 4; });
    add("eviction with a window", [&](SessionOptions& o, BatchOptions&) {
        o.eviction.kind = EvictionPolicyKind::H2O;
        o.eviction.budget = 4;
        o.window = 4;
    });
    add("int4's group without int4", [&](SessionOptions& o, BatchOptions&) { o.kv_quant.group = 4; }, {"kv_group"});
    add("h2o with snapkv's observation window", [&](SessionOptions& o, BatchOptions&) {
        o.eviction.kind = EvictionPolicyKind::H2O;
        o.eviction.budget = 4;
    }, {"evict_obs"});

    Controller c(model_a(), small_options());
    run_ok(c, set_prompt(kPromptText));
    for (const Case& k : cases) {
        INFO(k.what);
        std::vector<const OptionSpec*> given;
        for (const std::string& name : k.given) given.push_back(option_named(name));
        RunOptions run{k.o, GroupOptions{}};
        run.group.prompt_cache = k.b.prompt_cache;
        const std::vector<std::string> found = problems(run, given);
        REQUIRE(!found.empty());  // what `kvscope generate` refuses (check_options renders it in flags)
        CHECK_THAT(render(found.front(), cli_words), Catch::Contains("--"));
        const auto before = c.snapshot();
        CHECK(!c.execute(Command(SetOptions{k.o, k.b, k.given})));
        const auto s = c.snapshot();
        CHECK(s->problem.text == render_labels(found.front()));
        CHECK_THAT(s->problem.text, !Catch::Contains("--") && !Catch::Contains("{"));
        CHECK(s->generation == before->generation);  // nothing was rebuilt
    }
    // The cache switch is checked too: a prompt cache file needs the cache on.
    BatchOptions with_file;
    with_file.prompt_cache = cache_file;
    run_ok(c, set_options(small_options(), with_file));
    CHECK(!c.execute(cache(false)));
    CHECK(c.snapshot()->problem.text == "prompt cache loads and saves the KV cache's rows: untick KV cache off");
    CHECK(c.snapshot()->options().use_cache);
}
