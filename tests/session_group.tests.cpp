// SessionGroup (session_group.h): N sequences over one block pool, stepped together.
//
// Expectations come from outside the group:
// - Tokens and logits of every sequence equal a solo Session run with a contiguous cache and the same
//   seed (seed + i), bit for bit, with float32 and with bfloat16 weights + KV cache.
// - The pool's events are checked against counts worked out here from the prompt lengths and the block
//   size: which sequence allocated, mapped or copied which blocks.
// - The prompt cache file policy: written after the first prefill, loaded by a later prompt that starts
//   with the same tokens (the same tokens and logits as computing them), left alone when it holds the prompt.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "base/errors.h"
#include "forward/model.h"
#include "run/session_group.h"
#include "session_runs.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

const FixtureModel& fixture() {
    static const FixtureModel fm = small_fixture("session_group", 707);
    return fm;
}

std::shared_ptr<const Model> model(WeightFormat format) {
    static std::shared_ptr<const Model> f32 = Model::load(fixture().dir.string(), WeightFormat::F32);
    static std::shared_ptr<const Model> bf16 = Model::load(fixture().dir.string(), WeightFormat::BF16);
    return format == WeightFormat::BF16 ? bf16 : f32;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// A 9-token system prompt and three 3-token suffixes whose first tokens differ.
std::vector<std::vector<int32_t>> prompts() {
    const std::vector<int32_t> system = random_tokens(11, 9, 97);
    return {concat(system, {5, 17, 29}), concat(system, {6, 18, 30}), concat(system, {7, 19, 31})};
}

Run solo(std::shared_ptr<const Model> m, SessionOptions o, const std::vector<int32_t>& prompt, uint64_t seed) {
    o.block_size = 0;
    o.share_prefix = false;
    o.sampling.seed = seed;
    Session s(std::move(m), o);
    s.set_prompt(prompt);
    while (s.next() != Session::Next::Done) s.step();
    return collect(s);
}

void run_to_end(SessionGroup& g) {
    for (int i = 0; i < 200 && g.next() != Session::Next::Done; ++i) g.step();
    REQUIRE(g.next() == Session::Next::Done);
}

int64_t count(const PoolView& v, PoolEvent::Kind k, int32_t seq) {
    return std::count_if(v.events.begin(), v.events.end(), [&](const PoolEvent& e) { return e.kind == k && e.sequence == seq; });
}

}  // namespace

TEST_CASE("a paged group sharing its prefix equals solo runs, float32 and bfloat16", "[session_group]") {
    const WeightFormat format = GENERATE(WeightFormat::F32, WeightFormat::BF16);
    const double temperature = GENERATE(0.0, 0.8);
    INFO((format == WeightFormat::BF16 ? "bf16" : "f32") << ", temperature " << temperature);
    SessionOptions o;
    o.block_size = 4;
    o.share_prefix = true;
    o.max_new_tokens = 6;
    o.sampling.temperature = temperature;
    o.sampling.seed = 40;
    GroupOptions g;
    g.n_seq = 3;
    SessionGroup group(model(format), o, g);
    group.set_prompts(prompts());
    run_to_end(group);
    REQUIRE(group.pool());
    CHECK(group.pool()->bf16() == (format == WeightFormat::BF16));
    for (int64_t i = 0; i < 3; ++i) {
        INFO("sequence " << i);
        require_identical(collect(group.session(i)), solo(model(format), o, prompts()[size_t(i)], 40 + uint64_t(i)));
    }
    const GroupMemory m = group.memory();
    CHECK(m.shared_positions == 2 * 9);  // sequences 1 and 2 mapped the 9 system positions
    CHECK(m.blocks_shared == 2);         // the two full system blocks; the third was copied on write
}

TEST_CASE("the pool's events name what each sequence did in each step", "[session_group]") {
    SessionOptions o;
    o.block_size = 4;
    o.share_prefix = true;
    o.max_new_tokens = 2;
    GroupOptions g;
    g.n_seq = 3;
    g.pool_views = true;
    SessionGroup group(model(WeightFormat::F32), o, g);
    group.set_prompts(prompts());
    REQUIRE(group.pool_views().size() == 1);
    CHECK(group.pool_views()[0]->events.empty());

    // Prefill. 12 positions in blocks of 4: sequence 0 fills blocks for positions 0-3, 4-7, 8-11. The
    // others map those three (all 9 system positions: the third block holds position 8 too), then write
    // their own suffix at 9-11 into the third block: a copy of sequence 0's, which keeps the original.
    group.step();
    REQUIRE(group.pool_views().size() == 2);
    const PoolView& prefill = *group.pool_views()[1];
    using K = PoolEvent::Kind;
    CHECK(count(prefill, K::Allocated, 0) == 3);
    const int32_t third = prefill.tables[0][2];
    for (int32_t s = 1; s < 3; ++s) {
        INFO("sequence " << s);
        CHECK(count(prefill, K::Allocated, s) == 0);
        CHECK(count(prefill, K::Shared, s) == 3);
        CHECK(count(prefill, K::CopiedOnWrite, s) == 1);
        CHECK(prefill.tables[size_t(s)][0] == prefill.tables[0][0]);
        CHECK(prefill.tables[size_t(s)][1] == prefill.tables[0][1]);
        const int32_t copy = prefill.tables[size_t(s)][2];
        CHECK(copy != third);
        CHECK(prefill.copied_from(copy) == third);
        CHECK(prefill.happened(copy, K::CopiedOnWrite));
    }
    CHECK(prefill.adopted == std::vector<int64_t>{0, 9, 9});
    CHECK(prefill.n_mapped() == 5);    // 3 of sequence 0 + one copy each
    CHECK(prefill.n_unshared() == 9);  // 3 table entries each

    // Decode: position 12 opens a fourth block in every table.
    group.step();
    const PoolView& decode = *group.pool_views()[2];
    for (int32_t s = 0; s < 3; ++s) CHECK(count(decode, K::Allocated, s) == 1);
    CHECK(decode.events.size() == 3);
    const std::vector<PoolEvent> decode_events = decode.events;  // step back drops the view itself

    // Step back undoes it; the undo's releases are no step's events, and the step runs again the same way.
    REQUIRE(group.step_back());
    REQUIRE(group.pool_views().size() == 2);
    group.step();
    CHECK(group.pool_views()[2]->events == decode_events);
}

TEST_CASE("a group writes its prompt cache file once and a later prompt loads it", "[session_group]") {
    const WeightFormat format = GENERATE(WeightFormat::F32, WeightFormat::BF16);
    const std::filesystem::path file = work_dir("session_group") /
                                       (format == WeightFormat::BF16 ? "prompt_bf16.kvprompt" : "prompt_f32.kvprompt");
    std::filesystem::remove(file);
    SessionOptions o;
    o.max_new_tokens = 4;
    GroupOptions g;
    g.prompt_cache = file.string();
    const std::vector<int32_t> base = random_tokens(3, 10, 97);
    {
        SessionGroup group(model(format), o, g);
        group.set_prompts({base});
        REQUIRE(group.prompt_cache_file());
        CHECK_FALSE(group.prompt_cache_file()->existed);
        run_to_end(group);
        CHECK(group.prompt_cache_file()->written);
        CHECK(group.prompt_cache_file()->written_positions == 10);
        // Reset reads the file again: the same prompt now comes from it, and it is left as it is.
        group.reset();
        CHECK(group.prompt_cache_file()->existed);
        run_to_end(group);
        CHECK(group.prompt_cache_file()->loaded_positions == 9);  // all but the last, which predicts
        CHECK_FALSE(group.prompt_cache_file()->written);
    }
    const std::vector<int32_t> longer = concat(base, {1, 2, 3});
    SessionGroup group(model(format), o, g);
    group.set_prompts({longer});
    run_to_end(group);
    CHECK(group.memory().cache_file_positions == 10);
    require_identical(collect(group.session(0)), solo(model(format), o, longer, 0));
}

TEST_CASE("a prompt cache file is never shortened, and a read-only one never written", "[session_group]") {
    const std::filesystem::path file = work_dir("session_group") / "never_shortened.kvprompt";
    std::filesystem::remove(file);
    SessionOptions o;
    o.max_new_tokens = 2;
    GroupOptions g;
    g.prompt_cache = file.string();
    const std::vector<int32_t> base = random_tokens(5, 11, 97);
    auto run = [&](const std::vector<int32_t>& prompt, bool read_only) {
        GroupOptions go = g;
        go.prompt_cache_read_only = read_only;
        SessionGroup group(model(WeightFormat::F32), o, go);
        group.set_prompts({prompt});
        run_to_end(group);
        return *group.prompt_cache_file();
    };
    auto bytes = [&] {
        std::ifstream f(file, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    using Left = PromptCacheFileState::Left;
    CHECK(run(base, false).written);
    const std::string eleven = bytes();

    // A prompt the file holds and more of: loaded, and the file keeps its 11 positions.
    const PromptCacheFileState shorter = run({base.begin(), base.begin() + 3}, false);
    CHECK(shorter.loaded_positions == 2);
    CHECK_FALSE(shorter.written);
    CHECK(shorter.left == Left::HoldsLonger);
    CHECK(bytes() == eleven);

    // Read-only: a longer prompt loads the 11 positions and the file stays as it was.
    const PromptCacheFileState ro = run(concat(base, {1, 2}), true);
    CHECK(ro.loaded_positions == 11);
    CHECK_FALSE(ro.written);
    CHECK(ro.left == Left::ReadOnly);
    CHECK(bytes() == eleven);

    // Without read-only the longer prompt replaces it.
    CHECK(run(concat(base, {1, 2}), false).written_positions == 13);
    CHECK(bytes() != eleven);
}

TEST_CASE("a group refuses what it cannot do and keeps what it had", "[session_group]") {
    SessionOptions o;
    o.max_new_tokens = 4;
    GroupOptions g;
    g.n_seq = 2;
    SessionGroup group(model(WeightFormat::F32), o, g);
    CHECK_THROWS_AS(group.set_prompts({{1, 2, 3}}), UsageError);  // one prompt for two sequences
    group.set_prompts({{1, 2, 3}, {4, 5}});
    CHECK_THROWS_AS(group.set_prompts({{1, 2, 3}, std::vector<int32_t>(79, 1)}), UsageError);  // 79 + 4 > 80
    CHECK(group.session(1).parts().prompt == std::vector<int32_t>{4, 5});
    CHECK_FALSE(group.step_back());
    g.prompt_cache = "x.kvprompt";
    CHECK_THROWS_AS(SessionGroup(model(WeightFormat::F32), o, g), UsageError);  // a file needs one sequence
}
