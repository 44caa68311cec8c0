// Encoder-decoder sessions (core/forward/encoder.h, the cross-attention sub-layer in model.cpp, Session's
// source handling) on the shipped assets/encoder-decoder folder.
//
// Numbers against an independent computation live in tests/parity/encoder_decoder.py (PyTorch
// reference, every variant). Here: the engine's own claims — cached, uncached, chunked and batched runs
// are bit-identical; the cross-attention cache is filled once and stays fixed; the cross-attention map
// equals softmax(q·k/√D) recomputed in double in this file from the recorded rows; step_back undoes the
// encoder; and the errors.
#include <catch2/catch.hpp>

#include <cmath>

#include <filesystem>

#include "base/errors.h"
#include "forward/encoder.h"
#include "forward/model.h"
#include "report/export.h"
#include "run/session.h"
#include "run/session_batch.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

std::shared_ptr<const Model> model() {
    static auto m = Model::load(std::string(KVSCOPE_ASSETS_DIR) + "/encoder-decoder");
    return m;
}

const std::vector<TokenId> kSource = {83, 256, 758, 300, 83, 429, 258, 283, 358};

SessionOptions options(int64_t chunk, bool cached, int64_t n_new = 8) {
    SessionOptions o;
    o.prefill_chunk = chunk;
    o.use_cache = cached;
    o.max_new_tokens = n_new;
    return o;
}

std::vector<std::vector<float>> run(const SessionOptions& o, const std::vector<TokenId>& prompt) {
    Session s(model(), o);
    s.set_source(kSource);
    s.set_prompt(prompt);
    std::vector<std::vector<float>> logits;
    while (s.next() != Session::Next::Done)
        if (const StepRecord& r = s.step(); !r.prediction.logits.empty()) logits.push_back(r.prediction.logits);
    return logits;
}

}  // namespace

TEST_CASE("encoder-decoder: cached, uncached, chunked and batched runs are bit-identical", "[encoder_decoder]") {
    const std::vector<TokenId> prompt = {274, 275, 71, 358};
    const auto baseline = run(options(0, true), prompt);
    REQUIRE(baseline.size() == 8);
    for (auto [chunk, cached] : {std::pair{0, false}, {2, true}, {3, false}, {1, true}}) {
        INFO("chunk " << chunk << ", cached " << cached);
        const auto got = run(options(chunk, cached), prompt);
        REQUIRE(got.size() == baseline.size());
        for (size_t i = 0; i < got.size(); ++i) REQUIRE(first_mismatch(got[i], baseline[i]) == "");
    }
    // In a batch with another decoder prompt over the same source.
    Session a(model(), options(0, true)), b(model(), options(2, true));
    for (Session* s : {&a, &b}) s->set_source(kSource);
    a.set_prompt(prompt);
    b.set_prompt({5});
    std::vector<Session*> batch = {&a, &b};
    Workspace ws = make_batch_workspace(batch);
    while (a.next() != Session::Next::Done || b.next() != Session::Next::Done) step_batch(batch, ws);
    size_t k = 0;
    for (size_t i = 0; i < a.trace().size(); ++i)
        if (const std::vector<float>& logits = a.trace()[i].prediction.logits; !logits.empty())
            REQUIRE(first_mismatch(logits, baseline[k++]) == "");
}

TEST_CASE("the decoder input starts with the start token and the cross cache is filled once", "[encoder_decoder]") {
    Session s(model(), options(0, true, 4));
    s.set_source(kSource);
    s.set_prompt({});
    REQUIRE(s.parts().prompt == std::vector<TokenId>{TokenId(model()->config().decoder_start_token_id)});
    CHECK(s.parts().encoder.get() == nullptr);
    const StepRecord& first = s.step();
    CHECK(first.rows.ran_encoder);
    const EncoderOutput* enc = s.parts().encoder.get();
    REQUIRE(enc != nullptr);
    const ModelConfig& c = model()->config();
    CHECK(enc->cross_bytes() == 2 * c.n_layer * int64_t(kSource.size()) * c.n_embd * int64_t(sizeof(float)));
    const std::vector<float> cross_k = enc->cross_k;
    while (s.next() != Session::Next::Done) {
        const StepRecord& r = s.step();
        CHECK_FALSE(r.rows.ran_encoder);
        CHECK(r.rows.encoder.get() == enc);  // the same fixed cache, not a recomputation
    }
    CHECK(first_mismatch(s.parts().encoder.get()->cross_k, cross_k) == "");
    // Stepping back over the first step takes the encoder back; stepping again refills it identically.
    while (s.step_back()) {}
    CHECK(s.parts().encoder.get() == nullptr);
    s.step();
    CHECK(first_mismatch(s.parts().encoder.get()->cross_k, cross_k) == "");
}

TEST_CASE("cross_attention_map equals softmax(q k / sqrt(D)) over every source position", "[encoder_decoder]") {
    Session s(model(), options(0, true, 3));
    s.set_source(kSource);
    s.set_prompt({274, 275});
    while (s.next() != Session::Next::Done) s.step();
    const ModelConfig& c = model()->config();
    const int64_t D = c.head_dim(), C = c.n_embd, S = int64_t(kSource.size());
    for (size_t step = 0; step < s.trace().size(); ++step)
        for (int64_t il = 0; il < c.n_layer; ++il)
            for (int64_t h = 0; h < c.n_head; ++h) {
                const AttentionMap m = cross_attention_map(s.trace(), step, il, h);
                const StepRecord& r = s.trace()[step];
                REQUIRE(m.n_query == r.cost.n_rows_computed);
                REQUIRE(m.n_key == S);
                for (int64_t i = 0; i < m.n_query; ++i) {
                    // The reference: scores and softmax in double from the recorded q and the cache.
                    const float* q = r.rows.cross_q.data() + (il * m.n_query + i) * C + h * D;
                    std::vector<double> w(static_cast<size_t>(S));
                    double max_score = -INFINITY, sum = 0;
                    for (int64_t j = 0; j < S; ++j) {
                        const float* k = r.rows.encoder->cross_key(il, h, j);
                        double dot = 0;
                        for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * double(k[d]);
                        w[size_t(j)] = dot / std::sqrt(double(D));
                        max_score = std::max(max_score, w[size_t(j)]);
                    }
                    for (double& x : w) sum += (x = std::exp(x - max_score));
                    for (int64_t j = 0; j < S; ++j) {
                        REQUIRE(m.visible[size_t(i * S + j)] == 1);
                        REQUIRE(std::abs(double(m.weights[size_t(i * S + j)]) - w[size_t(j)] / sum) < 1e-6);
                    }
                }
            }
    CHECK_THROWS_AS(cross_attention_map(s.trace(), 0, c.n_layer, 0), UsageError);
}

TEST_CASE("encoder-decoder errors", "[encoder_decoder][errors]") {
    Session s(model(), options(0, true));
    CHECK_THROWS_AS(s.set_prompt({5}), UsageError);  // no source yet
    CHECK_THROWS_AS(s.set_source({}), UsageError);
    CHECK_THROWS_AS(s.set_source({TokenId(model()->config().n_vocab)}), UsageError);
    CHECK_THROWS_AS(s.set_source(std::vector<TokenId>(size_t(model()->config().n_ctx) + 1, 5)), UsageError);
    SessionOptions sharing = options(0, true);
    sharing.block_size = 4;
    sharing.share_prefix = true;
    Session shared(model(), sharing);
    shared.set_source(kSource);
    CHECK_THROWS_AS(shared.set_prompt({5}), UsageError);  // K/V depend on the source: not shareable by tokens

    FixtureSpec spec;  // a decoder-only model takes no source
    const FixtureModel fm = write_fixture(work_dir("encoder_decoder") / "decoder_only", spec);
    Session plain(Model::load(fm.dir.string()), options(0, true));
    CHECK_THROWS_AS(plain.set_source({1, 2}), UsageError);
}

TEST_CASE("an encoder-decoder trace exports cross-attention maps, and the encoder's on the step that ran it", "[encoder_decoder][export]") {
    Session s(model(), options(0, true, 2));
    s.set_source(kSource);
    s.set_prompt({274});
    while (s.next() != Session::Next::Done) s.step();
    const std::string dir = (work_dir("encoder_decoder") / "export").string();
    std::filesystem::remove_all(dir);
    export_trace(s.trace(), model()->tokenizer(), dir);
    namespace fs = std::filesystem;
    for (const char* f : {"step_0000/cross_l01_h03_weights.npy", "step_0000/cross_l00_h00_weights.png",
                          "step_0000/encoder_l01_h03_weights.npy", "step_0000/cross_q.npy", "step_0001/cross_l00_h00_weights.npy"})
        CHECK(fs::exists(fs::path(dir) / f));
    CHECK_FALSE(fs::exists(fs::path(dir) / "step_0001/encoder_l00_h00_weights.npy"));  // it ran once
}
