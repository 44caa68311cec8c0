// Cache edits by hand (cache_edit.h, Session::apply_edit).
//
// Independent computations: the reference forward pass of test_models.h (double, whole sequence) with
// the evicted key masked out for the queries after the edit; a softmax, KL and ranking written here in
// long double for the comparison; and, for patching, a second session whose own cache holds the source
// rows. Exactness: an edit then step back continues bit for bit like a session never edited.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/errors.h"
#include "cache/cache_edit.h"
#include "forward/model.h"
#include "run/session.h"
#include "run/session_group.h"
#include "run/trace.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

// V = 61, n_ctx = 48, C = 32, H = 4 (D = 8), L = 3.
const FixtureModel& gpt2_fixture() {
    static const FixtureModel fm = [] {
        FixtureSpec spec;
        spec.config.n_vocab = 61;
        spec.config.n_ctx = 48;
        spec.config.n_embd = 32;
        spec.config.n_head = 4;
        spec.config.n_inner = 64;
        spec.config.n_layer = 3;
        spec.seed = 91;
        return write_fixture(work_dir("cache_edit") / "gpt2", spec);
    }();
    return fm;
}

std::shared_ptr<const Model> gpt2_model() {
    static std::shared_ptr<const Model> model = Model::load(gpt2_fixture().dir.string());
    return model;
}

std::shared_ptr<const Model> gqa_model() {  // Llama family, 4 query heads on 2 K/V heads, bfloat16
    static std::shared_ptr<const Model> model = Model::load(KVSCOPE_SOURCE_DIR "/assets/llama-gqa");
    return model;
}

SessionOptions greedy(int64_t n_new) {
    SessionOptions o;
    o.max_new_tokens = n_new;
    o.sampling.temperature = 0;
    return o;
}

std::vector<float> bits_of_view(const KvCacheView& v) {  // the view's numbers, for an exact comparison
    std::vector<float> out{float(v.used), float(v.n_evicted), float(v.bytes_kept), float(v.bytes_used)};
    for (int32_t k : v.kept) out.push_back(float(k));
    return out;
}

// Every live K and V row of the cache, (positions, L, K, 2, D).
std::vector<float> cache_rows(const Session& s) {
    const KvCache& c = s.cache();
    std::vector<float> out, row(size_t(c.shape().head_dim));
    for (int64_t p = 0; p < c.next_position(); ++p) {
        if (!c.alive(p)) continue;
        for (int64_t il = 0; il < c.shape().n_layer; ++il)
            for (int64_t h = 0; h < c.shape().n_head; ++h) {
                const KvRows r = c.rows(il, h);
                r.copy_key(p, row.data());
                out.insert(out.end(), row.begin(), row.end());
                r.copy_value(p, row.data());
                out.insert(out.end(), row.begin(), row.end());
                out.push_back(r.evicted(p) ? 1.0f : 0.0f);
            }
    }
    return out;
}

// Decode to the end; every step's logits and cache view, then the final cache rows.
std::vector<std::vector<float>> finish(Session& s) {
    std::vector<std::vector<float>> out;
    while (s.next() != Session::Next::Done) {
        const StepRecord& r = s.step();
        out.push_back(r.prediction.logits);
        out.push_back(bits_of_view(r.cache));
    }
    out.push_back(cache_rows(s));
    return out;
}

void check_same(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        INFO("entry " << i);
        CHECK(first_mismatch(a[i], b[i]) == "");
    }
}

// The comparison, written out independently: softmax in long double, KL, argmax, the largest moves.
struct Expected {
    long double kl = 0;
    int32_t top1_before = 0, top1_after = 0;
    std::vector<int32_t> movers;
};
Expected expected(const std::vector<float>& before, const std::vector<float>& after, size_t n) {
    auto probs = [](const std::vector<float>& l) {
        long double mx = -INFINITY, sum = 0;
        for (float x : l) mx = std::max<long double>(mx, x);
        std::vector<long double> p(l.size());
        for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp((long double)l[i] - mx);
        for (auto& x : p) x /= sum;
        return p;
    };
    const auto pb = probs(before), pa = probs(after);
    Expected e;
    for (size_t i = 0; i < pb.size(); ++i) e.kl += pb[i] * std::log(pb[i] / pa[i]);
    for (size_t i = 0; i < pb.size(); ++i) {
        if (before[i] > before[size_t(e.top1_before)]) e.top1_before = int32_t(i);
        if (after[i] > after[size_t(e.top1_after)]) e.top1_after = int32_t(i);
    }
    std::vector<int32_t> ids(pb.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
        return std::fabs(pa[size_t(a)] - pb[size_t(a)]) > std::fabs(pa[size_t(b)] - pb[size_t(b)]);
    });
    e.movers.assign(ids.begin(), ids.begin() + std::ptrdiff_t(n));
    return e;
}

CacheEdit edit_of(CacheEditKind kind, int64_t position, int64_t layer = -1, int64_t head = -1) {
    CacheEdit e;
    e.kind = kind;
    e.position = position;
    e.layer = layer;
    e.kv_head = head;
    return e;
}

}  // namespace

TEST_CASE("an edit then step back continues bit for bit like a session never edited") {
    auto model = GENERATE(as<int>{}, 0, 1) == 0 ? gpt2_model() : gqa_model();
    const std::vector<int32_t> prompt = random_tokens(5, 9, std::min<int64_t>(model->config().n_vocab, 61));
    const int64_t K = model->config().kv_heads(), L = model->config().n_layer;
    struct Case { CacheEditKind kind; int64_t position, layer, head; };
    const Case c = GENERATE_COPY(Case{CacheEditKind::Evict, 3, -1, -1}, Case{CacheEditKind::Evict, 0, 1, -1},
                                 Case{CacheEditKind::Evict, 8, L - 1, K - 1}, Case{CacheEditKind::Patch, 4, -1, -1},
                                 Case{CacheEditKind::Patch, 2, 0, K - 1});
    INFO("kind " << cache_edit_kind_name(c.kind) << " position " << c.position << " layer " << c.layer << " head "
                 << c.head << " model " << model->config().n_head << " heads");
    Session plain(model, greedy(6));
    plain.set_prompt(prompt);
    plain.step();
    plain.step();
    CacheEdit e = edit_of(c.kind, c.position, c.layer, c.head);
    if (c.kind == CacheEditKind::Patch) {
        std::vector<int32_t> other = prompt;
        other[size_t(c.position)] = (other[size_t(c.position)] + 7) % 61;
        e.rows = kv_rows_of_run(model, plain.options(), other, c.position);
    }
    Session edited(model, greedy(6));
    edited.set_prompt(prompt);
    edited.step();
    edited.step();
    const std::vector<float> before = cache_rows(edited);

    SECTION("edit, step back") {
        edited.apply_edit(e);
        CHECK(first_mismatch(cache_rows(edited), before) != "");  // the edit did change the cache
        REQUIRE(edited.step_back());
        CHECK(edited.parts().edits.pending().empty());
        CHECK(first_mismatch(cache_rows(edited), before) == "");
    }
    SECTION("edit, step, step back twice, step again") {
        edited.apply_edit(e);
        const StepRecord& r = edited.step();
        REQUIRE(r.edits.size() == 1);
        CHECK(r.edits[0].edit.position == c.position);
        REQUIRE(edited.step_back());
        CHECK(edited.parts().edits.pending().size() == 1);  // the step's edit is pending again
        REQUIRE(edited.step_back());
        CHECK(edited.parts().edits.pending().empty());
        CHECK(edited.trace().size() == 2);
    }
    SECTION("evict, restore") {
        if (c.kind == CacheEditKind::Patch) return;
        edited.apply_edit(e);
        CacheEdit r = e;
        r.kind = CacheEditKind::Restore;
        const CacheEditRecord& rec = edited.apply_edit(r);
        CHECK(rec.effect.kl == 0);  // back to the unedited cache: the same logits
        CHECK(edited.step_back());
        CHECK(edited.step_back());
    }
    check_same(finish(edited), finish(plain));
}

TEST_CASE("evicting a position in every layer equals the reference with that key masked out") {
    const FixtureModel& fm = gpt2_fixture();
    const std::vector<int32_t> prompt = random_tokens(11, 10, 61);
    const int64_t evicted = GENERATE(as<int64_t>{}, 0, 4, 9);
    Session s(gpt2_model(), greedy(4));
    s.set_prompt(prompt);
    s.step();
    s.apply_edit(edit_of(CacheEditKind::Evict, evicted));
    s.step();
    s.step();
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), s.parts().generated.begin(), s.parts().generated.end());
    const Reference ref = reference_forward(fm, seq, 0, 0, false, {{evicted, int64_t(prompt.size())}});
    for (size_t i = 1; i < s.trace().size(); ++i) {
        const StepRecord& r = s.trace()[i];
        const auto row = ref.logits.row(r.last_position());
        const double tol = 1e-4 * std::max(1.0, row.cwiseAbs().maxCoeff());
        for (int64_t t = 0; t < row.size(); ++t) {
            INFO("step " << i << " token " << t);
            REQUIRE(std::abs(double(r.prediction.logits[size_t(t)]) - row(t)) <= tol);
        }
    }
    // The trace's attention views know the key was gone: weight exactly 0 for every head after the edit.
    const AttentionMap m = attention_map(s.trace(), 1, 2, 3);
    const int64_t col = evicted - m.key_positions[0];
    CHECK(m.visible[size_t(col)] == 0);
    CHECK(m.weights[size_t(col)] == 0.0f);
}

TEST_CASE("an edit's comparison is the next step's logits with and without it") {
    const std::vector<int32_t> prompt = random_tokens(21, 8, 61);
    const int64_t layer = GENERATE(as<int64_t>{}, -1, 0, 2);
    Session plain(gpt2_model(), greedy(3)), edited(gpt2_model(), greedy(3));
    for (Session* s : {&plain, &edited}) {
        s->set_prompt(prompt);
        s->step();
    }
    CacheEditRecord rec = edited.apply_edit(edit_of(CacheEditKind::Evict, 2, layer));
    CacheEditRecord second = edited.apply_edit(edit_of(CacheEditKind::Evict, 5, layer));
    CHECK(rec.n_changed == (layer < 0 ? 3 : 1) * 4);
    // The next steps of both sessions feed the same token: the predictions are the "before" and "after".
    const std::vector<float> unedited = plain.step().prediction.logits;
    const StepRecord& next = edited.step();
    CHECK(next.edits.size() == 2);
    const Expected e = expected(unedited, next.prediction.logits, 5);
    CHECK(second.effect.position == next.id.first_position);
    CHECK(second.effect.token == next.id.tokens[0]);
    CHECK_THAT(second.effect.kl, Catch::Matchers::WithinAbs(double(e.kl), 1e-9 + 1e-6 * double(e.kl)));
    CHECK(second.effect.kl > 0);
    CHECK(second.effect.top1_before == e.top1_before);
    CHECK(second.effect.top1_after == e.top1_after);
    REQUIRE(second.effect.movers.size() == 5);
    for (size_t i = 0; i < 5; ++i) CHECK(second.effect.movers[i].token == e.movers[i]);
}

TEST_CASE("a patch with another run's rows gives that run's next logits") {
    // The two prompts differ only at the last position: patched in every layer, the cache holds exactly
    // what the other prompt's cache holds, so the next step equals the other prompt followed by the same
    // token, run in one prefill (chunked == cached, kernels.h).
    const std::vector<int32_t> a = random_tokens(31, 7, 61);
    std::vector<int32_t> b = a;
    b.back() = (b.back() + 11) % 61;
    Session s(gpt2_model(), greedy(3));
    s.set_prompt(a);
    s.step();
    CacheEdit e = edit_of(CacheEditKind::Patch, 6);
    e.rows = kv_rows_of_run(gpt2_model(), s.options(), b, 6);
    e.source = "b";
    const CacheEditRecord& rec = s.apply_edit(e);
    CHECK(rec.n_changed == 3 * 4);
    const std::vector<float> patched = s.step().prediction.logits;
    std::vector<int32_t> b_next = b;
    b_next.push_back(s.trace()[1].id.tokens[0]);
    Session other(gpt2_model(), greedy(1));
    other.set_prompt(b_next);
    CHECK(first_mismatch(other.step().prediction.logits, patched) == "");
    // The attention views of the step after the patch read the patched rows: the other run's numbers.
    for (int64_t il = 0; il < 3; ++il)
        for (int64_t h = 0; h < 4; ++h) {
            INFO("layer " << il << " head " << h);
            const AttentionMap m = attention_map(s.trace(), 1, il, h), o = attention_map(other.trace(), 0, il, h);
            const std::vector<float> last(o.weights.end() - std::ptrdiff_t(o.n_key), o.weights.end());
            CHECK(first_mismatch(m.weights, last) == "");
            const std::vector<float> out(o.output.end() - 8, o.output.end());
            CHECK(first_mismatch(m.output, out) == "");
        }
}

TEST_CASE("bad edits are refused with one line and change nothing") {
    Session s(gpt2_model(), greedy(4)), plain(gpt2_model(), greedy(4));
    const std::vector<int32_t> prompt = random_tokens(41, 6, 61);
    for (Session* x : {&s, &plain}) x->set_prompt(prompt);
    CHECK_THROWS_AS(s.apply_edit(edit_of(CacheEditKind::Evict, 0)), UsageError);  // nothing in the cache yet
    for (Session* x : {&s, &plain}) x->step();
    s.apply_edit(edit_of(CacheEditKind::Evict, 1, 0));
    plain.apply_edit(edit_of(CacheEditKind::Evict, 1, 0));
    CacheEdit wrong_rows = edit_of(CacheEditKind::Patch, 2);
    wrong_rows.rows.assign(10, 0.0f);
    for (const CacheEdit& bad :
         {edit_of(CacheEditKind::Evict, 6), edit_of(CacheEditKind::Evict, -1), edit_of(CacheEditKind::Evict, 2, 3),
          edit_of(CacheEditKind::Evict, 2, -2), edit_of(CacheEditKind::Evict, 2, 0, 4),
          edit_of(CacheEditKind::Restore, 2), edit_of(CacheEditKind::Evict, 1, 0), wrong_rows}) {
        INFO(cache_edit_kind_name(bad.kind) << " " << bad.position << " " << bad.layer << " " << bad.kv_head);
        try {
            s.apply_edit(bad);
            FAIL("accepted");
        } catch (const UsageError& e) {
            const std::string what = e.what();
            CHECK(what.find('\n') == std::string::npos);
            CHECK(!what.empty());
        }
    }
    CHECK(s.parts().edits.pending().size() == 1);
    CHECK_THROWS_AS(kv_rows_of_run(gpt2_model(), s.options(), prompt, 6), UsageError);
    check_same(finish(s), finish(plain));
}

TEST_CASE("a group of one sequence edits and steps back through the group; a batch and a paged cache refuse") {
    const std::vector<int32_t> prompt = random_tokens(51, 6, 61);
    SessionGroup one(gpt2_model(), greedy(3));
    one.set_prompts({prompt});
    one.step();
    const std::vector<float> before = cache_rows(one.session(0));
    one.apply_edit(edit_of(CacheEditKind::Evict, 3));
    CHECK(one.session(0).parts().edits.pending().size() == 1);
    REQUIRE(one.step_back());  // the edit, not the step
    CHECK(one.session(0).parts().edits.pending().empty());
    CHECK(one.session(0).trace().size() == 1);
    CHECK(first_mismatch(cache_rows(one.session(0)), before) == "");

    GroupOptions two;
    two.n_seq = 2;
    SessionGroup batch(gpt2_model(), greedy(3), two);
    batch.set_prompts({prompt, prompt});
    batch.step();
    CHECK_THROWS_AS(batch.apply_edit(edit_of(CacheEditKind::Evict, 3)), UsageError);

    SessionOptions paged = greedy(3);
    paged.block_size = 4;
    Session s(gpt2_model(), paged);
    s.set_prompt(prompt);
    s.step();
    CHECK_THROWS_AS(s.apply_edit(edit_of(CacheEditKind::Evict, 3)), UsageError);
    CHECK(s.parts().edits.pending().empty());
}
