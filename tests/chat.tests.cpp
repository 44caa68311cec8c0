// Multi-turn chat in one KV cache (Session::append_turn): each turn computes only its new tokens, and
// what it computes equals one prefill of the whole conversation, for the ring, a windowed ring, a model
// with its own sliding window (Mistral) and the paged cache.
//
// The references are independent runs of the same engine on the same tokens in one set_prompt: the
// engine's contract (kernels.h) is that a row does not depend on how the sequence was chunked, so the
// logits must agree bit for bit, not within a tolerance. The cost numbers are counted here from the
// turn lengths, not read back from the session.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "base/errors.h"
#include "cache/block_pool.h"
#include "forward/model.h"
#include "model/config.h"
#include "model/random_model.h"
#include "run/session.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

// A small Llama-family shape: V = 64, P = 128, C = 48, H = 6 query heads on K = 2 K/V heads (D = 8), L = 2.
ModelConfig small_llama(const std::string& model_type) {
    ModelConfig c = *bench_shape_config("smollm2-135m");
    c.model_type = model_type;
    c.n_vocab = 64;
    c.n_ctx = 128;
    c.n_embd = 48;
    c.n_inner = 96;
    c.n_layer = 2;
    c.n_head = 6;
    c.n_kv_head = 2;
    if (model_type == "mistral") c.layer_window = {5, 5};
    return c;
}

std::shared_ptr<const Model> chat_model(const std::string& model_type) {
    static std::shared_ptr<const Model> llama, mistral;
    std::shared_ptr<const Model>& m = model_type == "mistral" ? mistral : llama;
    if (!m) {
        const std::string dir = kvscope::test::fresh_dir("chat", model_type).string();
        write_random_model(dir, small_llama(model_type), 11);
        m = Model::load(dir);
    }
    return m;
}

struct Layout {
    const char* name;
    const char* model_type;
    SessionOptions options;
};

std::vector<Layout> layouts() {
    SessionOptions ring;
    SessionOptions chunked = ring;
    chunked.prefill_chunk = 2;
    SessionOptions window = ring;  // small enough that the ring wraps, and grows for a longer turn
    window.window = 4;
    window.prefill_chunk = 3;
    SessionOptions window_turns = ring;  // whole turns: the third is longer than the first, so the ring grows
    window_turns.window = 4;
    SessionOptions sinks = window;
    sinks.sinks = 2;
    SessionOptions paged = ring;
    paged.block_size = 4;
    SessionOptions paged_chunked = paged;
    paged_chunked.prefill_chunk = 3;
    return {{"ring", "llama", ring},          {"ring, chunks of 2", "llama", chunked},
            {"window 4", "llama", window},    {"window 4, whole turns", "llama", window_turns},
            {"window 4 + 2 sinks", "llama", sinks},
            {"mistral's window 5", "mistral", ring}, {"paged B=4", "llama", paged},
            {"paged B=4, chunks of 3", "llama", paged_chunked}};
}

void run_turn(Session& s) {
    while (s.next() != Session::Next::Done) s.step();
}

// One prefill of `tokens` in a fresh session: its record holds every position's q, k, v rows and the
// logits of the last.
std::shared_ptr<const StepRecord> single_prefill(const std::shared_ptr<const Model>& model, SessionOptions o,
                                                 const std::vector<TokenId>& tokens) {
    o.max_new_tokens = 1;
    o.prefill_chunk = 0;
    Session s(model, o);
    s.set_prompt(tokens);
    s.step();
    REQUIRE(latest(s)->cost.n_rows_computed == int64_t(tokens.size()));
    return s.trace().share(0);
}

// Every q, k, v row a step computed equals the one prefill's row of the same position and layer. With a
// window the final logits forget early positions, but a wrong cached row still changes the rows that
// read it (and the next layer's rows after them), so this checks every row a chat computed.
void require_rows_equal(const StepRecord& step, const StepRecord& whole) {
    const RecordedRows& a = step.rows;
    const RecordedRows& b = whole.rows;
    const int64_t L = a.n_layer, C = a.n_head * a.head_dim, R = step.cost.n_rows_computed, N = whole.cost.n_rows_computed;
    REQUIRE(int64_t(a.q.size()) == L * R * C);
    for (int64_t il = 0; il < L; ++il)
        for (int64_t r = 0; r < R; ++r) {
            const int64_t pos = step.cost.first_computed_position + r;
            for (auto [x, y, name] : {std::tuple{&a.q, &b.q, "q"}, {&a.k, &b.k, "k"}, {&a.v, &b.v, "v"}}) {
                const std::vector<float> got(x->begin() + (il * R + r) * C, x->begin() + (il * R + r + 1) * C);
                const std::vector<float> want(y->begin() + (il * N + pos) * C, y->begin() + (il * N + pos + 1) * C);
                const std::string m = first_mismatch(got, want);
                INFO("step " << step.id.index << ", layer " << il << ", position " << pos << ", " << name << ": " << m);
                REQUIRE(m.empty());
            }
        }
}

const std::vector<std::vector<TokenId>> kTurns = {{3, 14, 15, 9, 26}, {8, 9, 7, 9}, {3, 23, 8, 46, 2, 6}};
const std::vector<int64_t> kMaxNew = {3, 6, 2};

}  // namespace

TEST_CASE("a three-turn chat computes only each turn's new tokens and ends with one prefill's logits", "[chat]") {
    const std::vector<Layout> all = layouts();
    const Layout& layout = all[size_t(GENERATE(range(0, 8)))];
    INFO(layout.name);
    const auto model = chat_model(layout.model_type);
    if (std::string(layout.model_type) == "mistral") REQUIRE(model->config().has_sliding_layers());
    Session s(model, layout.options);
    std::vector<TokenId> conversation;  // every token in position order, assembled here turn by turn
    for (size_t t = 0; t < kTurns.size(); ++t) {
        INFO("turn " << t);
        const int64_t before = int64_t(conversation.size());
        const size_t first_step = s.trace().size();
        const int64_t capacity_before = s.cache().capacity();
        s.append_turn(kTurns[t], kMaxNew[t], "user");
        // The ring of a windowed session grows only for a longer turn: whole turns, the third (7 rows to
        // prefill: W - 1 + 7 = 10 slots, the first turn needed 5 + 3 = 8).
        if (std::string(layout.name) == "window 4, whole turns")
            CHECK(s.cache().capacity() == (t == 2 ? 10 : 8));
        if (layout.options.window == 0 && t > 0) {
            CHECK(s.cache().capacity() == before + int64_t(kTurns[t].size()) + kMaxNew[t]);
            CHECK(s.cache().capacity() > capacity_before);
        }
        conversation.insert(conversation.end(), kTurns[t].begin(), kTurns[t].end());
        REQUIRE(s.parts().turns.size() == t + 1);
        CHECK(s.parts().turns[t].first_position == before);
        CHECK(s.parts().turns[t].n_appended() == int64_t(kTurns[t].size()));
        CHECK(s.parts().turns[t].role == "user");
        run_turn(s);
        REQUIRE(int64_t(s.parts().generated.size()) == kMaxNew[t]);
        // Turn t > 0 first feeds the previous reply's last token (sampled, never read), then its own.
        const int64_t n_new = int64_t(kTurns[t].size()) + (t > 0 ? 1 : 0), first = t > 0 ? before - 1 : 0;
        int64_t computed = 0, expect_first = first;
        for (size_t i = first_step; i < s.trace().size(); ++i) {
            const StepRecord& r = s.trace()[i];
            CHECK(r.id.turn == int64_t(t));
            if (r.id.phase != Phase::Prefill) continue;
            CHECK(r.cost.first_computed_position == expect_first);
            // Reused: every earlier position the step's first query sees. Without a window all of them.
            const int64_t W = layout.options.window, S = layout.options.sinks;
            const int64_t seen = W == 0 ? expect_first : std::min(expect_first, W - 1) + std::min(S, std::max<int64_t>(0, expect_first - W + 1));
            CHECK(r.cost.n_rows_reused == seen);
            if (layout.options.prefill_chunk == 0) CHECK(r.cost.n_rows_computed == n_new);
            computed += r.cost.n_rows_computed;
            expect_first += r.cost.n_rows_computed;
        }
        CHECK(computed == n_new);
        conversation.insert(conversation.end(), s.parts().generated.begin(), s.parts().generated.end());
        // The logits at the end of each turn's prefill and of its reply equal one prefill of it all.
        std::vector<TokenId> read(conversation.begin(), conversation.end() - 1);
        const std::string m = first_mismatch(s.parts().logits, single_prefill(model, layout.options, read)->prediction.logits);
        INFO(m);
        CHECK(m.empty());
    }
    conversation.pop_back();  // sampled, never read
    const auto whole = single_prefill(model, layout.options, conversation);
    for (size_t i = 0; i < s.trace().size(); ++i) require_rows_equal(s.trace()[i], *whole);
    std::vector<TokenId> positions = s.parts().prompt;
    positions.insert(positions.end(), s.parts().generated.begin(), s.parts().generated.end());
    positions.pop_back();
    CHECK(positions == conversation);
    CHECK(s.cache().next_position() == int64_t(conversation.size()));
}

TEST_CASE("step_back undoes a turn's first step, then the append itself, exactly", "[chat]") {
    const std::vector<Layout> all = layouts();
    const Layout& layout = all[size_t(GENERATE(range(0, 8)))];
    INFO(layout.name);
    SessionOptions o = layout.options;
    o.sampling.temperature = 1.0;  // the RNG state matters: a restored one samples the same tokens
    o.sampling.seed = 7;
    const auto model = chat_model(layout.model_type);
    Session s(model, o);
    std::vector<std::vector<TokenId>> prompts, replies;  // after each turn
    std::vector<size_t> steps;                            // trace length after each turn
    for (size_t t = 0; t < kTurns.size(); ++t) {
        s.append_turn(kTurns[t], kMaxNew[t], "user");
        run_turn(s);
        prompts.push_back(s.parts().prompt);
        replies.push_back(s.parts().generated);
        steps.push_back(s.trace().size());
    }
    std::vector<std::shared_ptr<const StepRecord>> first_run;
    for (size_t i = 0; i < s.trace().size(); ++i) first_run.push_back(s.trace().share(i));
    // Each step of a second run equals the first run's: tokens, every recorded row, the prediction.
    auto same_as_first_run = [&](size_t from) {
        REQUIRE(s.trace().size() <= first_run.size());
        for (size_t i = from; i < s.trace().size(); ++i) {
            const StepRecord &a = s.trace()[i], &b = *first_run[i];
            INFO("step " << i);
            REQUIRE(a.id.tokens == b.id.tokens);
            REQUIRE(a.id.turn == b.id.turn);
            for (auto [x, y] : {std::pair{&a.rows.q, &b.rows.q}, {&a.rows.k, &b.rows.k}, {&a.rows.v, &b.rows.v},
                                {&a.prediction.logits, &b.prediction.logits}}) {
                INFO(first_mismatch(*x, *y));
                REQUIRE(first_mismatch(*x, *y).empty());
            }
        }
    };

    // Back to right after the third append: its steps undone, the append still there.
    while (s.trace().size() > steps[1]) REQUIRE(s.step_back());
    CHECK(s.parts().turns.size() == 3);
    CHECK(s.parts().generated.empty());
    CHECK(s.next() == Session::Next::Prefill);
    REQUIRE(s.step_back());  // the append
    CHECK(s.trace().size() == steps[1]);
    CHECK(s.parts().prompt == prompts[1]);
    CHECK(s.parts().generated == replies[1]);
    CHECK(s.options().max_new_tokens == kMaxNew[1]);
    CHECK(s.parts().turns.size() == 2);
    CHECK(s.next() == Session::Next::Done);
    CHECK(first_mismatch(s.parts().logits, first_run[steps[1] - 1]->prediction.logits).empty());
    // Again: the same tokens and rows (cache rows and RNG state restored).
    s.append_turn(kTurns[2], kMaxNew[2], "user");
    run_turn(s);
    CHECK(s.parts().generated == replies[2]);
    same_as_first_run(steps[1]);

    // All the way back through the three turns (checkpoints taken before the cache grew), then forward.
    // After each undo every slot the cache says holds position p is the slot p lives in: p itself until
    // the ring wraps, then sinks + (p - sinks) mod (S - sinks) (kv_cache.h), with the grown S.
    auto slots_consistent = [&] {
        const KvCache& c = s.cache();
        const int64_t S = c.capacity(), k = c.visibility().sinks;
        for (int64_t slot = 0; slot < S; ++slot) {
            const int64_t p = c.slot_positions()[size_t(slot)];
            if (p < 0) continue;
            const int64_t expected = c.pages().active() || p < S ? p : k + (p - k) % (S - k);
            INFO("slot " << slot << " says position " << p);
            REQUIRE(slot == expected);
        }
    };
    while (s.step_back()) slots_consistent();
    CHECK(s.trace().size() == 0);
    CHECK(s.parts().turns.size() == 1);
    CHECK(s.parts().prompt == kTurns[0]);
    CHECK(s.options().max_new_tokens == kMaxNew[0]);
    for (size_t t = 0; t < kTurns.size(); ++t) {
        if (t > 0) s.append_turn(kTurns[t], kMaxNew[t], "user");
        run_turn(s);
        CHECK(s.parts().prompt == prompts[t]);
        CHECK(s.parts().generated == replies[t]);
    }
    same_as_first_run(0);
}

TEST_CASE("an uncached step in a chat recomputes the whole conversation and predicts the same", "[chat]") {
    const std::vector<Layout> all = layouts();
    const Layout& layout = all[size_t(GENERATE(range(0, 8)))];
    INFO(layout.name);
    const auto model = chat_model(layout.model_type);
    Session cached(model, layout.options), uncached(model, layout.options);
    for (size_t t = 0; t < kTurns.size(); ++t) {
        cached.append_turn(kTurns[t], kMaxNew[t], "user");
        run_turn(cached);
        uncached.set_use_cache(t == 0);  // turn 1 with the cache, later turns re-prefill everything
        const int64_t end = int64_t(uncached.parts().prompt.size() + uncached.parts().generated.size());
        uncached.append_turn(kTurns[t], kMaxNew[t], "user");
        if (t > 0) {
            const StepRecord& r = uncached.step();  // the turn's first prefill step
            CHECK_FALSE(r.id.cache_on);
            CHECK(r.cost.first_computed_position == 0);
            CHECK(r.cost.n_rows_reused == 0);
            const int64_t chunk = layout.options.prefill_chunk;
            CHECK(r.cost.n_rows_computed == end - 1 + (chunk > 0 ? std::min<int64_t>(chunk, int64_t(kTurns[t].size()) + 1)
                                                              : int64_t(kTurns[t].size()) + 1));
        }
        run_turn(uncached);
        CHECK(uncached.parts().generated == cached.parts().generated);
        INFO("turn " << t << ": " << first_mismatch(uncached.parts().logits, cached.parts().logits));
        CHECK(first_mismatch(uncached.parts().logits, cached.parts().logits).empty());
    }
}

TEST_CASE("a chat stops at a stop token, and reset starts the conversation over", "[chat]") {
    const auto model = chat_model("llama");
    SessionOptions o;
    o.sampling.temperature = 1.0;  // random weights repeat one token greedily; sampled replies vary
    o.sampling.seed = 3;
    Session free_run(model, o);
    free_run.append_turn(kTurns[0], 6, "user");
    run_turn(free_run);
    const std::vector<TokenId> reply = free_run.parts().generated;
    CHECK_FALSE(stopped_by_token(free_run));
    // Stop at the first token of the reply that did not come earlier in it: the reply ends right there.
    size_t at = 1;
    while (at < reply.size() && std::find(reply.begin(), reply.begin() + long(at), reply[at]) != reply.begin() + long(at)) ++at;
    INFO("reply " << ::Catch::Detail::stringify(reply));
    REQUIRE(at < reply.size());
    o.stop_tokens = {reply[at]};
    Session s(model, o);
    s.append_turn(kTurns[0], 6, "user");
    run_turn(s);
    CHECK(s.parts().generated == std::vector<TokenId>(reply.begin(), reply.begin() + long(at) + 1));
    CHECK(stopped_by_token(s));
    s.append_turn(kTurns[1], 2, "user");
    CHECK(s.next() == Session::Next::Prefill);
    run_turn(s);
    CHECK(s.parts().turns.size() == 2);
    s.reset();
    CHECK(s.parts().turns.size() == 1);
    CHECK(s.parts().prompt == kTurns[0]);
    CHECK(s.options().max_new_tokens == 6);
    CHECK(s.trace().size() == 0);
    run_turn(s);
    CHECK(s.parts().generated == std::vector<TokenId>(reply.begin(), reply.begin() + long(at) + 1));
}

TEST_CASE("a turn that does not fit is refused in one line, before anything changes", "[chat]") {
    const auto model = chat_model("llama");
    auto one_line = [](auto&& f) {
        try {
            f();
        } catch (const UsageError& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    Session s(model, SessionOptions{});
    s.set_prompt(kTurns[0]);
    CHECK_THAT(one_line([&] { s.append_turn(kTurns[1], 2); }), Catch::Contains("prefill it before a new turn"));
    run_turn(s);
    CHECK_THAT(one_line([&] { s.append_turn({}, 2); }), Catch::Equals("the new turn is empty"));
    CHECK_THAT(one_line([&] { s.append_turn({64}, 2); }), Catch::Contains("64"));
    // 5 prompt + 16 generated = 21 so far; a turn of 107 fills the 128 positions: no room for a reply
    const std::string too_long = one_line([&] { s.append_turn(std::vector<TokenId>(107, 1), 2); });
    CHECK_THAT(too_long, Catch::Equals("the conversation so far (21 tokens) + this turn (107) = 128 leaves no room for a "
                                       "reply in the model's max_position_embeddings (128)"));
    CHECK(s.parts().turns.size() == 1);
    CHECK(s.next() == Session::Next::Done);
    // The reply limit is a cap, not a reservation (issue 43, finding 10): 21 + 5 + 103 = 129 > 128 is
    // taken, the reply stops where the context ends, 128 - 26 = 102 tokens on.
    s.append_turn({1, 2, 3, 4, 5}, 103);
    CHECK(s.parts().turns.back().max_new_tokens == 102);
    run_turn(s);
    CHECK(s.parts().generated.size() == 102);
    CHECK(s.cache().next_position() == 127);

    SECTION("a paged session's own pool grows; a shared pool must have the blocks free") {
        SessionOptions paged;
        paged.block_size = 4;
        paged.max_new_tokens = 2;
        Session own(model, paged);
        own.set_prompt(kTurns[0]);
        run_turn(own);
        const int64_t blocks = own.cache().pages().pool()->n_blocks();
        CHECK(blocks == pool_blocks_for(7, 4));
        own.append_turn(std::vector<TokenId>(20, 5), 3);
        CHECK(own.cache().pages().pool()->n_blocks() == pool_blocks_for(7 + 20 + 3, 4));
        run_turn(own);

        const ModelConfig& c = model->config();
        auto pool = std::make_shared<BlockPool>(c.n_layer, c.kv_heads(), c.head_dim(), 4, 4);
        Session shared(model, paged, SessionSetup{pool, 0});
        shared.set_prompt(kTurns[0]);  // 5 + 2 - 1 positions in the cache: 2 blocks of the 4
        run_turn(shared);
        CHECK_THAT(one_line([&] { shared.append_turn(std::vector<TokenId>(10, 5), 2); }),
                   Catch::Equals("the shared block pool has 2 of its 4 blocks free; this turn needs 3 more to reach 19 positions"));
        CHECK(pool->n_blocks() == 4);
        shared.append_turn({5, 6}, 1);  // 12 positions: the free block is enough
        run_turn(shared);
    }
}
