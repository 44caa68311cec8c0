// The paged KV cache (block_pool.h, kv_cache.h), prefix sharing and attention sinks.
//
// Two kinds of expectations:
// - Attention sinks against an independent computation: test_models.h's double-precision reference
//   writes the mask out over the whole sequence (causal, window, plus the first S keys) and never sees
//   a cache; kvscope's logits must agree within 1e-4 and greedy tokens must match.
// - Paged storage, sharing, copy-on-write and step_back against the contiguous ring: the same arithmetic
//   on the same rows, so logits must be bit-identical (memcmp). Pool figures (blocks taken, positions
//   adopted, copies on write) are checked against counts worked out here from the prompt lengths.
#include <catch2/catch.hpp>

#include <memory>

#include "base/errors.h"
#include "cache/block_pool.h"
#include "forward/model.h"
#include "run/session.h"
#include "run/session_batch.h"
#include "session_runs.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

const FixtureModel& fixture() {
    static const FixtureModel fm = small_fixture("paged_cache", 606);
    return fm;
}

std::shared_ptr<const Model> model() {
    static std::shared_ptr<const Model> m = Model::load(fixture().dir.string());
    return m;
}

SessionOptions options(int64_t window, int64_t sinks, int64_t block, int64_t chunk, int64_t n_new) {
    SessionOptions o;
    o.window = window;
    o.sinks = sinks;
    o.block_size = block;
    o.prefill_chunk = chunk;
    o.max_new_tokens = n_new;
    return o;
}

Run run(const SessionOptions& o, const std::vector<int32_t>& prompt) { return run_to_end(model(), o, prompt); }


std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

void step_all(std::vector<Session*>& batch) {
    Workspace ws = make_batch_workspace(batch);
    for (int round = 0; round < 200; ++round) {
        bool done = true;
        for (Session* s : batch) done = done && s->next() == Session::Next::Done;
        if (done) return;
        step_batch(batch, ws);
    }
    FAIL("the batch did not finish");
}

}  // namespace

TEST_CASE("attention sinks equal a masked-attention reference of the same policy", "[paged][sinks][reference]") {
    const int64_t window = GENERATE(3, 6);
    const int64_t sinks = GENERATE(1, 2, 5);
    const int64_t block = GENERATE(0, 4);
    INFO("window " << window << ", sinks " << sinks << ", block " << block);
    const std::vector<int32_t> prompt = random_tokens(uint32_t(window * 10 + sinks), 9, 97);
    const int64_t n_new = 16;

    const GreedyRun greedy = reference_greedy(fixture(), prompt, n_new, window, sinks);
    for (int64_t chunk : {0, 2}) {
        for (bool cached : {true, false}) {
            INFO("chunk " << chunk << ", cached " << cached);
            SessionOptions o = options(window, sinks, block, chunk, n_new);
            o.use_cache = cached;
            Session s(model(), o);
            s.set_prompt(prompt);
            std::vector<int32_t> seq = prompt;
            while (s.next() != Session::Next::Done) {
                const StepRecord& r = s.step();
                if (r.prediction.logits.empty()) continue;
                // The reference's logits of the same sequence at the step's last position.
                const Reference ref = reference_forward(fixture(), seq, window, sinks);
                const auto want = ref.logits.row(ref.logits.rows() - 1);
                const double tol = 1e-4 * std::max(1.0, want.cwiseAbs().maxCoeff());
                for (int64_t i = 0; i < want.size(); ++i)
                    REQUIRE(std::abs(double(r.prediction.logits[size_t(i)]) - want(i)) <= tol);
                seq.push_back(*r.prediction.chosen);
            }
            for (size_t i = 0; i < greedy.tokens.size() && greedy.margins[i] >= 1e-4; ++i)
                REQUIRE(s.parts().generated[i] == greedy.tokens[i]);
        }
    }
}

TEST_CASE("sinks make a difference once the window has slid past them", "[paged][sinks]") {
    // Guards the test above against a reference that ignores sinks: with and without them the logits
    // must differ as soon as a query's window no longer covers position 0.
    const std::vector<int32_t> prompt = random_tokens(5, 12, 97);
    const Run with = run(options(4, 2, 0, 0, 4), prompt);
    const Run without = run(options(4, 0, 0, 0, 4), prompt);
    CHECK(first_mismatch(with.logits[0], without.logits[0]) != "");
}

TEST_CASE("the paged cache gives bit-identical results to the ring", "[paged][parity]") {
    const int64_t block = GENERATE(1, 3, 8, 64);
    const int64_t window = GENERATE(0, 5);
    const int64_t sinks = window ? GENERATE(0, 2) : 0;
    const int64_t chunk = GENERATE(0, 3);
    INFO("block " << block << ", window " << window << ", sinks " << sinks << ", chunk " << chunk);
    const std::vector<int32_t> prompt = random_tokens(uint32_t(block + window), 11, 97);
    const Run ring = run(options(window, sinks, 0, chunk, 14), prompt);
    require_identical(run(options(window, sinks, block, chunk, 14), prompt), ring);
    SessionOptions uncached = options(window, sinks, block, chunk, 14);
    uncached.use_cache = false;
    require_identical(run(uncached, prompt), ring);
}

TEST_CASE("a window returns blocks to the pool; without one every block stays", "[paged]") {
    const int64_t B = 4;
    const std::vector<int32_t> prompt = random_tokens(9, 10, 97);
    for (int64_t window : {0, 6}) {
        SessionOptions o = options(window, 0, B, 0, 30);
        o.history = false;  // no undo entries holding blocks
        Session s(model(), o);
        s.set_prompt(prompt);
        while (s.next() != Session::Next::Done) s.step();
        const StepRecord& r = *latest(s);
        int64_t mapped = 0;
        for (int32_t b : r.cache.block_table) mapped += b >= 0;
        const int64_t positions = 10 + 30 - 1;  // the last token is chosen, not yet written
        if (window == 0) {
            CHECK(mapped == (positions + B - 1) / B);
        } else {
            // Alive: the blocks covering positions next-W+1 .. next-1 (the next query's window).
            const int64_t lo = positions - window + 1;
            CHECK(mapped == (positions - 1) / B - lo / B + 1);
        }
        CHECK(r.cache.pool_blocks - r.cache.pool_free == mapped);
    }
}

TEST_CASE("sequences with a common prefix share its blocks and equal their solo runs", "[paged][sharing]") {
    const int64_t B = 4, n_new = 6;
    const std::vector<int32_t> system = random_tokens(100, 19, 97);  // 4 full blocks and 3 positions
    const std::vector<std::vector<int32_t>> suffixes = {random_tokens(1, 5, 97), random_tokens(2, 1, 97),
                                                        random_tokens(3, 9, 97), random_tokens(4, 3, 97)};
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& s : suffixes) prompts.push_back(concat(system, s));
    REQUIRE(prompts[0][19] != prompts[1][19]);  // the suffixes start differently (else more is shared)

    int64_t pool_blocks = 0;
    for (const auto& p : prompts) pool_blocks += pool_blocks_for(int64_t(p.size()) + n_new, B);
    auto pool = std::make_shared<BlockPool>(2, 4, 8, B, pool_blocks);
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Session*> batch;
    for (size_t i = 0; i < prompts.size(); ++i) {
        SessionOptions o = options(0, 0, B, 0, n_new);
        o.share_prefix = true;
        sessions.push_back(std::make_unique<Session>(model(), o, SessionSetup{pool, -1}));
        sessions.back()->set_prompt(prompts[i]);
        batch.push_back(sessions.back().get());
    }
    step_all(batch);

    for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("sequence " << i);
        require_identical(collect(*sessions[i]), run(options(0, 0, 0, 0, n_new), prompts[i]));
        const StepRecord& first = sessions[i]->trace()[0];
        // Sequence 0 computes everything; each later one maps the 19 system positions (the 5th block
        // only partly) and computes its own suffix.
        CHECK(first.cost.n_adopted == (i == 0 ? 0 : 19));
        CHECK(first.cost.n_rows_computed == int64_t(prompts[i].size()) - first.cost.n_adopted);
        CHECK(first.cost.first_computed_position == first.cost.n_adopted);
    }
    // Blocks: each sequence maps ceil(positions / B) blocks; the 4 full system blocks exist once, and
    // the partly shared 5th block was copied by each later sequence when it wrote its suffix there.
    int64_t mapped = 0;
    for (size_t i = 0; i < prompts.size(); ++i)
        mapped += (int64_t(prompts[i].size()) + n_new - 1 + B - 1) / B;
    const int64_t in_use = mapped - 4 * int64_t(prompts.size() - 1);
    CHECK(pool->stats().in_use == in_use);
    CHECK(pool->stats().copies_on_write == int64_t(prompts.size() - 1));
    CHECK(pool->stats().positions_adopted == 19 * int64_t(prompts.size() - 1));

    // Every session steps all the way back and replays: same results, and the pool ends where it was.
    for (size_t i = prompts.size(); i-- > 0;) {
        Session& s = *sessions[i];
        while (s.step_back()) {}
    }
    CHECK(pool->n_free() == pool->n_blocks());
    step_all(batch);
    for (size_t i = 0; i < prompts.size(); ++i) require_identical(collect(*sessions[i]), run(options(0, 0, 0, 0, n_new), prompts[i]));
    CHECK(pool->stats().in_use == in_use);
}

TEST_CASE("identical prompts share every block; sampling apart copies the last one on write", "[paged][sharing][cow]") {
    const int64_t B = 8, n_new = 10;
    const std::vector<int32_t> prompt = random_tokens(7, 13, 97);
    auto pool = std::make_shared<BlockPool>(2, 4, 8, B, 3 * pool_blocks_for(13 + n_new, B));
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Session*> batch;
    std::vector<Run> solo;
    for (int i = 0; i < 3; ++i) {
        SessionOptions o = options(0, 0, B, 0, n_new);
        o.sampling.temperature = 1.5;
        o.sampling.seed = uint64_t(10 + i);
        SessionOptions ring = o;
        ring.block_size = 0;
        solo.push_back(run(ring, prompt));
        o.share_prefix = true;
        sessions.push_back(std::make_unique<Session>(model(), o, SessionSetup{pool, -1}));
        sessions.back()->set_prompt(prompt);
        batch.push_back(sessions.back().get());
    }
    step_all(batch);
    for (int i = 0; i < 3; ++i) {
        INFO("sequence " << i);
        require_identical(collect(*sessions[size_t(i)]), solo[size_t(i)]);
        CHECK(sessions[size_t(i)]->trace()[0].cost.n_adopted == (i == 0 ? 0 : 12));  // all but the last prompt token
    }
    // Positions 8..12 sit in a block all three map; sequences 1 and 2 write position 12 into it during
    // their prefill and copy it first. Sequence 0 then owns it alone.
    CHECK(pool->stats().copies_on_write == 2);
    CHECK(solo[0].generated != solo[1].generated);  // the samples did go apart
}

TEST_CASE("step_back across a copy-on-write restores the shared block", "[paged][cow][step]") {
    const int64_t B = 4;
    const std::vector<int32_t> prompt = random_tokens(8, 6, 97);
    auto pool = std::make_shared<BlockPool>(2, 4, 8, B, 12);
    SessionOptions o = options(0, 0, B, 0, 5);
    o.share_prefix = true;
    Session a(model(), o, SessionSetup{pool, -1}), b(model(), o, SessionSetup{pool, -1});
    a.set_prompt(prompt);
    b.set_prompt(prompt);
    a.step();
    b.step();  // adopts 5 positions, copies block 1 to write position 5
    const Run b_first = collect(b);
    while (b.next() != Session::Next::Done) b.step();
    const Run b_full = collect(b);
    while (b.step_back()) {}
    // a steps on alone, writing into block 1 in place (b released its reference).
    while (a.next() != Session::Next::Done) a.step();
    while (b.next() != Session::Next::Done) b.step();
    require_identical(collect(b), b_full);
    require_identical(collect(a), run(options(0, 0, 0, 0, 5), prompt));
    CHECK(b_first.logits.size() == 1);
}

TEST_CASE("a pool too small for a step refuses it before anything changes", "[paged][errors]") {
    const std::vector<int32_t> prompt = random_tokens(3, 10, 97);
    auto pool = std::make_shared<BlockPool>(2, 4, 8, 4, 2);  // 8 positions; the prompt needs 3 blocks
    Session s(model(), options(0, 0, 4, 0, 2), SessionSetup{pool, -1});
    s.set_prompt(prompt);
    REQUIRE_THROWS_AS(s.step(), UsageError);
    CHECK(s.trace().size() == 0);
    CHECK(s.cache().next_position() == 0);
    CHECK(pool->n_free() == 2);
    CHECK_FALSE(s.step_back());
}

TEST_CASE("option checks for sinks and blocks", "[paged][errors]") {
    SessionOptions o;
    o.sinks = 2;
    CHECK_THROWS_AS(validate(o), UsageError);  // sinks without a window
    o.window = 4;
    CHECK_NOTHROW(validate(o));
    o.share_prefix = true;
    CHECK_THROWS_AS(validate(o), UsageError);  // sharing without blocks
    o.block_size = 16;
    CHECK_NOTHROW(validate(o));
    o.block_size = -1;
    CHECK_THROWS_AS(validate(o), UsageError);
}

TEST_CASE("bfloat16 caches: paged, ring and uncached runs stay bit-identical", "[paged][bf16]") {
    auto bf16 = Model::load(fixture().dir.string(), WeightFormat::BF16);
    const std::vector<int32_t> prompt = random_tokens(12, 11, 97);
    auto run_bf16 = [&](int64_t block, bool cached) {
        SessionOptions o = options(5, 2, block, 3, 12);
        o.use_cache = cached;
        Session s(bf16, o);
        s.set_prompt(prompt);
        while (s.next() != Session::Next::Done) s.step();
        CHECK(s.cache().format().bf16());
        return collect(s);
    };
    const Run ring = run_bf16(0, true);
    require_identical(run_bf16(4, true), ring);
    require_identical(run_bf16(4, false), ring);
    require_identical(run_bf16(0, false), ring);
}
