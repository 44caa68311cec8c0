// The trainer: every backward op against double-precision central differences, the forward ops against
// plain loops written here, AdamW against a hand computation, the schedule's end points, determinism,
// a loss that goes down, and parity of the trainer's forward with the engine's on a saved checkpoint.
//
// How the goldens are made: gradients are checked against (f(x+h) - f(x-h)) / 2h of the op's own
// double-precision forward (h = 1e-6), with a random projection of the outputs as the scalar, so every
// output element matters; forward values against naive loops in this file; AdamW's numbers by hand
// (written out next to the test); the engine parity against kvscope's inference forward pass (model.cpp),
// which shares no code with the trainer.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "analysis/heads.h"
#include "base/errors.h"
#include "base/thread_pool.h"
#include "forward/model.h"
#include "run/session.h"
#include "text/corpus.h"
#include "text/tokenizer.h"
#include "train/train.h"
#include "train/train_ops.h"

#include "gradient_check.h"
#include "scratch_dir.h"

using namespace kvscope;

namespace {

using kvtest::check_grad;
using kvtest::dot;
using kvtest::randn;

std::string test_dir(const std::string& name) {
    auto p = kvscope::test::scratch_root() / "train" / name;
    std::filesystem::create_directories(p);
    return p.string();
}

std::string default_dir() { return std::string(KVSCOPE_ASSETS_DIR) + "/default"; }

}  // namespace

TEST_CASE("linear (Conv1D) forward matches loops, backward matches finite differences") {
    const int64_t N = 3, K = 4, M = 5;
    std::vector<double> x = randn(N * K, 1), W = randn(K * M, 2), b = randn(M, 3), w = randn(N * M, 4);
    std::vector<double> y(N * M);
    linear_forward(y.data(), x.data(), W.data(), b.data(), N, K, M);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < M; ++j) {
            double s = b[j];
            for (int64_t k = 0; k < K; ++k) s += x[r * K + k] * W[k * M + j];
            CHECK(y[r * M + j] == Approx(s).epsilon(1e-12));
        }
    auto f = [&] {
        linear_forward(y.data(), x.data(), W.data(), b.data(), N, K, M);
        return dot(y, w);
    };
    std::vector<double> dx(N * K), dW(K * M, 0.0), db(M, 0.0);
    linear_backward(dx.data(), dW.data(), db.data(), w.data(), x.data(), W.data(), N, K, M);
    check_grad("dx", x, dx, f);
    check_grad("dW", W, dW, f);
    check_grad("db", b, db, f);
}

TEST_CASE("matmul blocks: a large product equals the loop result (row blocks run on the pool)") {
    const int64_t M = 300, K = 7, Nn = 9;  // 300 rows: 4 blocks
    std::vector<double> A = randn(M * K, 5), B = randn(K * Nn, 6), Y(M * Nn), Yt(K * Nn);
    matmul_nn(Y.data(), A.data(), B.data(), M, K, Nn, false);
    std::vector<double> C2 = randn(M * Nn, 7);
    matmul_tn(Yt.data(), A.data(), C2.data(), M, K, Nn, false);
    for (int64_t r = 0; r < M; r += 37)
        for (int64_t j = 0; j < Nn; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += A[r * K + k] * B[k * Nn + j];
            CHECK(Y[r * Nn + j] == Approx(s).epsilon(1e-12));
        }
    for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < Nn; ++j) {
            double s = 0;
            for (int64_t r = 0; r < M; ++r) s += A[r * K + k] * C2[r * Nn + j];
            CHECK(Yt[k * Nn + j] == Approx(s).epsilon(1e-10));
        }
}

TEST_CASE("layer norm forward matches loops, backward matches finite differences") {
    const int64_t N = 3, C = 6;
    std::vector<double> x = randn(N * C, 11, 2.0), g = randn(C, 12), b = randn(C, 13), w = randn(N * C, 14);
    std::vector<double> y(N * C), mean(N), rstd(N);
    layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N, C, 1e-5);
    for (int64_t r = 0; r < N; ++r) {
        double m = 0, var = 0;
        for (int64_t c = 0; c < C; ++c) m += x[r * C + c] / C;
        for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - m) * (x[r * C + c] - m) / C;
        for (int64_t c = 0; c < C; ++c)
            CHECK(y[r * C + c] == Approx((x[r * C + c] - m) / std::sqrt(var + 1e-5) * g[c] + b[c]).epsilon(1e-12));
    }
    auto f = [&] {
        layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N, C, 1e-5);
        return dot(y, w);
    };
    f();
    std::vector<double> dx(N * C, 0.0), dg(C, 0.0), db(C, 0.0);
    layer_norm_backward(dx.data(), dg.data(), db.data(), w.data(), x.data(), mean.data(), rstd.data(), g.data(), N, C);
    check_grad("dx", x, dx, f);
    check_grad("dg", g, dg, f);
    check_grad("db", b, db, f);
}

TEST_CASE("gelu_new forward matches the formula, backward matches finite differences") {
    std::vector<double> x = randn(9, 21, 2.0), w = randn(9, 22), y(9);
    gelu_forward(y.data(), x.data(), 9);
    for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        CHECK(y[i] == Approx(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))).epsilon(1e-12));
    }
    auto f = [&] {
        gelu_forward(y.data(), x.data(), 9);
        return dot(y, w);
    };
    std::vector<double> dx(9);
    gelu_backward(dx.data(), w.data(), x.data(), 9);
    check_grad("dx", x, dx, f);
}

TEST_CASE("causal attention forward matches loops, backward matches finite differences") {
    const int64_t B = 2, T = 5, C = 6, H = 2, D = C / H;
    std::vector<double> qkv = randn(B * T * 3 * C, 31), w = randn(B * T * C, 32);
    std::vector<double> out(B * T * C), att(B * H * T * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, H);
    // loops: softmax over keys j <= t of q_t·k_j/√D, then Σ_j a_tj v_j
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t) {
                std::vector<double> s(t + 1);
                double mx = -1e300, sum = 0;
                for (int64_t j = 0; j <= t; ++j) {
                    double d = 0;
                    for (int64_t e = 0; e < D; ++e)
                        d += qkv[(b * T + t) * 3 * C + h * D + e] * qkv[(b * T + j) * 3 * C + C + h * D + e];
                    s[j] = d / std::sqrt(double(D));
                    mx = std::max(mx, s[j]);
                }
                for (double& v : s) sum += (v = std::exp(v - mx));
                for (int64_t j = 0; j < T; ++j)
                    CHECK(att[((b * H + h) * T + t) * T + j] == Approx(j <= t ? s[j] / sum : 0.0).margin(1e-14));
                for (int64_t e = 0; e < D; ++e) {
                    double o = 0;
                    for (int64_t j = 0; j <= t; ++j) o += s[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * D + e];
                    CHECK(out[(b * T + t) * C + h * D + e] == Approx(o).epsilon(1e-12));
                }
            }
    auto f = [&] {
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, H);
        return dot(out, w);
    };
    f();
    std::vector<double> dqkv(B * T * 3 * C);
    attention_backward(dqkv.data(), w.data(), att.data(), qkv.data(), B, T, C, H);
    check_grad("dqkv", qkv, dqkv, f);
}

TEST_CASE("softmax cross-entropy forward matches loops, backward matches finite differences") {
    const int64_t N = 4, V = 7;
    std::vector<double> logits = randn(N * V, 41, 3.0), probs(N * V);
    const std::vector<int32_t> targets = {0, 6, 3, 3};
    double want = 0;
    for (int64_t r = 0; r < N; ++r) {
        double z = 0;
        for (int64_t j = 0; j < V; ++j) z += std::exp(logits[r * V + j]);
        want += -(logits[r * V + targets[r]] - std::log(z)) / N;
    }
    CHECK(cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V) == Approx(want).epsilon(1e-12));
    auto f = [&] { return cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V); };
    f();
    std::vector<double> dlogits(N * V);
    cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V);
    check_grad("dlogits", logits, dlogits, f);
}

TEST_CASE("embedding forward adds token and position rows, backward matches finite differences") {
    const int64_t B = 2, T = 3, C = 4, V = 5;
    const std::vector<int32_t> tokens = {1, 4, 1, 0, 2, 2};  // repeated ids: gradients must add up
    std::vector<double> wte = randn(V * C, 51), wpe = randn(T * C, 52), w = randn(B * T * C, 53), x(B * T * C);
    embedding_forward(x.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    CHECK(x[(1 * T + 2) * C + 3] == wte[2 * C + 3] + wpe[2 * C + 3]);
    auto f = [&] {
        embedding_forward(x.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
        return dot(x, w);
    };
    std::vector<double> dwte(V * C, 0.0), dwpe(T * C, 0.0);
    embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
    check_grad("dwte", wte, dwte, f);
    check_grad("dwpe", wpe, dwpe, f);
}

namespace {
ModelConfig tiny_config() {
    ModelConfig c;
    c.n_vocab = 11;
    c.n_ctx = 8;
    c.n_embd = 8;
    c.n_head = 2;
    c.n_layer = 2;
    c.n_inner = 12;
    return c;
}
}  // namespace

TEST_CASE("the whole model's loss: every parameter's gradient matches finite differences") {
    const ModelConfig c = tiny_config();
    TrainModel<double> model(c, 2, 6);
    // Random values everywhere (not the init: zero biases and unit gains would hide their gradients).
    model.params = randn(model.params.size(), 61, 0.3);
    const std::vector<int32_t> tokens = {1, 5, 9, 2, 2, 7, 0, 10, 3, 3, 4, 8};
    const std::vector<int32_t> targets = {5, 9, 2, 2, 7, 1, 10, 3, 3, 4, 8, 6};
    model.loss(tokens.data(), targets.data(), 2, 6, true);
    const std::vector<double> grads = model.grads;
    for (const ParamInfo& p : model.layout()) {
        std::vector<double> slice(model.params.begin() + p.offset, model.params.begin() + p.offset + p.size);
        std::vector<double> g(grads.begin() + p.offset, grads.begin() + p.offset + p.size);
        auto f = [&] {
            std::copy(slice.begin(), slice.end(), model.params.begin() + p.offset);
            return model.loss(tokens.data(), targets.data(), 2, 6, false);
        };
        check_grad(p.name.c_str(), slice, g, f);
        std::copy(slice.begin(), slice.end(), model.params.begin() + p.offset);
    }
    // Positions 6, 7 are never used with T = 6: their gradient is exactly zero.
    const ParamInfo& wpe = model.layout()[1];
    for (int64_t i = 6 * c.n_embd; i < 8 * c.n_embd; ++i) CHECK(grads[size_t(wpe.offset + i)] == 0.0);
}

TEST_CASE("AdamW: one step equals the hand computation") {
    // p = (0.5, -1), g = (0.1, -0.2), m = v = 0, t = 1, lr = 0.01, wd = 0.1, β = (0.9, 0.95), eps = 1e-8.
    // m = 0.1·g = (0.01, -0.02); v = 0.05·g² = (0.0005, 0.002); m̂ = g; v̂ = g², so the step is
    // g/(|g| + 1e-8) ≈ ±(1 - 1e-7 / |g|·...) — exactly 0.1/(0.1+1e-8) and -0.2/(0.2+1e-8).
    // p1 = 0.5·(1 - 0.001) - 0.01·0.1/(0.1 + 1e-8)  = 0.4995 - 0.0099999990000001 = 0.4895000009999999
    // p2 = -1·(1 - 0.001) + 0.01·0.2/(0.2 + 1e-8)   = -0.999 + 0.0099999995 = -0.9890000005
    float p[2] = {0.5f, -1.0f}, g[2] = {0.1f, -0.2f}, m[2] = {0, 0}, v[2] = {0, 0};
    AdamWOptions o;
    o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8;
    adamw_step(p, g, m, v, 2, 1, 0.01, 0.1, o);
    CHECK(p[0] == Approx(0.4895000009999999).epsilon(1e-7));
    CHECK(p[1] == Approx(-0.9890000005).epsilon(1e-7));
    CHECK(m[0] == Approx(0.01).epsilon(1e-6));
    CHECK(v[1] == Approx(0.002).epsilon(1e-6));
    // Second step with the same gradient and no decay: m = 0.019, v = 0.000975 for element 0;
    // m̂ = 0.019/0.19 = 0.1, v̂ = 0.000975/0.0975 = 0.01 → step 0.1/(0.1 + 1e-8) again.
    adamw_step(p, g, m, v, 2, 2, 0.01, 0.0, o);
    CHECK(p[0] == Approx(0.4895000009999999 - 0.0099999990000001).epsilon(1e-6));
}

TEST_CASE("learning rate: linear warm-up, then cosine down to min_lr_ratio") {
    TrainOptions o;
    o.lr = 1e-3, o.warmup = 10, o.steps = 110, o.min_lr_ratio = 0.1;
    CHECK(learning_rate(0, o) == Approx(1e-4));
    CHECK(learning_rate(9, o) == Approx(1e-3));
    CHECK(learning_rate(60, o) == Approx(1e-4 + 0.5 * 9e-4));  // half-way: cos(π/2) = 0
    CHECK(learning_rate(110, o) == Approx(1e-4));
}

TEST_CASE("initialisation: GPT-2's layout, names and statistics") {
    ModelConfig c = tiny_config();
    c.n_vocab = 300, c.n_embd = 32, c.n_inner = 128;
    const std::vector<ParamInfo> layout = param_layout(c);
    REQUIRE(layout.size() == size_t(2 + 12 * c.n_layer + 2));
    CHECK(layout[2].name == "h.0.ln_1.weight");
    CHECK(layout[4].shape == std::vector<int64_t>{32, 96});
    const std::vector<float> p = init_params(c, 5);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < layout[0].size; ++i) s += p[size_t(i)], s2 += double(p[size_t(i)]) * p[size_t(i)];
    CHECK(std::sqrt(s2 / double(layout[0].size)) == Approx(0.02).epsilon(0.05));
    CHECK(p[size_t(layout[2].offset)] == 1.0f);  // ln gain
    CHECK(p[size_t(layout[3].offset)] == 0.0f);  // ln bias
    CHECK(init_params(c, 5) == p);
    CHECK(init_params(c, 6) != p);
}

TEST_CASE("corpus: deterministic, single-token letters and digits, repeated random spans") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    const std::vector<TokenId> ordinary = ordinary_tokens(tok);
    CHECK(ordinary.size() == 40);  // 19 lowercase + 11 uppercase letters + 10 digits have a " x" token
    for (TokenId id : ordinary) {
        const std::string b = tok.token_bytes(id);
        REQUIRE(b.size() == 2);
        CHECK(b[0] == ' ');
        CHECK(std::isalnum(static_cast<unsigned char>(b[1])));
    }
    const Corpus corpus(tok, 3);
    CHECK(corpus.sequence(5, 1, 200) == corpus.sequence(5, 1, 200));
    CHECK(corpus.sequence(5, 1, 200) != corpus.sequence(5, 2, 200));
    CHECK(Corpus(tok, 4).sequence(5, 1, 200) != corpus.sequence(5, 1, 200));
    // Over many sequences, some contain an ordinary-token span of >= 8 immediately repeated.
    int with_repeat = 0;
    for (int i = 0; i < 20; ++i) {
        const std::vector<TokenId> s = corpus.sequence(0, i, 256);
        bool found = false;  // a span of length L in [8, 32] followed by itself
        for (size_t L = 8; L <= 32 && !found; ++L)
            for (size_t a = 0; a + 2 * L <= s.size() && !found; ++a) {
                bool all = true;
                for (size_t k = 0; k < L && all; ++k)
                    all = s[a + k] == s[a + L + k] && std::count(ordinary.begin(), ordinary.end(), s[a + k]);
                found = all;
            }
        with_repeat += found;
    }
    CHECK(with_repeat >= 10);
    const std::string text = tok.decode(corpus.text(9, 60));
    CHECK(text.find('.') != std::string::npos);
}

TEST_CASE("corpus: min_repeat repeats short random spans until the segment is long") {
    // Spans of exactly 2 tokens repeated to >= 24 tokens: each segment is "x y x y ...", then "\n".
    const Tokenizer tok = Tokenizer::load(default_dir());
    CorpusMix mix;
    mix.text = 0, mix.copy = 0, mix.min_span = 2, mix.max_span = 2, mix.min_repeat = 24;
    const std::vector<TokenId> s = Corpus(tok, 3, mix).sequence(0, 0, 60);
    for (size_t i = 0; i + 2 < 24; ++i) CHECK(s[i] == s[i + 2]);
    CHECK(s[24] == tok.encode("\n").at(0));
    CorpusMix plain = mix;
    plain.min_repeat = 0;  // 2-3 copies: the newline comes after 4 or 6 tokens
    const std::vector<TokenId> p = Corpus(tok, 3, plain).sequence(0, 0, 60);
    CHECK((p[4] == tok.encode("\n").at(0) || p[6] == tok.encode("\n").at(0)));
}

TEST_CASE("initialisation: prev_head_gain makes layer 0 head 0 a previous-token head before any training") {
    // Measured through the engine (heads.h: mean attention from t to t-1 on grammar text), which shares no
    // code with init_params. Without the option every head is near uniform (about 0.04 on 128 tokens).
    ModelConfig c = tiny_config();
    c.n_vocab = 768, c.n_ctx = 256, c.n_embd = 64, c.n_head = 4, c.n_layer = 2, c.n_inner = 256;
    InitOptions init;
    init.prev_head_gain = 5, init.pos_rms = 0.1, init.tok_std = 0.1;
    const std::string dir = test_dir("prev_head_init");
    save_model(dir, c, init_params(c, 1, init), default_dir());
    const std::vector<HeadScore> seeded = head_scores(Model::load(dir));
    save_model(dir, c, init_params(c, 1), default_dir());
    const std::vector<HeadScore> plain = head_scores(Model::load(dir));
    INFO("seeded head: " << seeded[0].previous_token << ", next head: " << seeded[1].previous_token);
    CHECK(seeded[0].previous_token > 0.4);
    for (size_t i = 1; i < seeded.size(); ++i) CHECK(seeded[i].previous_token < 0.1);
    for (const HeadScore& h : plain) CHECK(h.previous_token < 0.1);
}

TEST_CASE("training is deterministic: equal options give equal weights, whatever the thread count") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    TrainOptions o;
    o.config = tiny_config();
    o.config.n_ctx = 32, o.config.n_embd = 16, o.config.n_inner = 64;
    o.steps = 3, o.batch = 2, o.seq_len = 32, o.warmup = 1;
    ThreadPool::global().set_threads(2);
    const TrainResult a = train(o, tok);
    const TrainResult b = train(o, tok);
    ThreadPool::global().set_threads(1);
    const TrainResult c = train(o, tok);
    ThreadPool::global().set_threads(default_thread_count());
    REQUIRE(a.params.size() == b.params.size());
    CHECK(std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(a.params.data(), c.params.data(), a.params.size() * sizeof(float)) == 0);
    CHECK(a.losses == c.losses);
    o.seed = 2;
    CHECK(train(o, tok).params != a.params);
}

TEST_CASE("curriculum: a copy phase of short sequences runs in the same buffers and changes the result") {
    // copy_seq 8 with batch 2 x seq 32 trains 8 sequences of 8 tokens per step during the phase.
    const Tokenizer tok = Tokenizer::load(default_dir());
    TrainOptions o;
    o.config = tiny_config();
    o.config.n_ctx = 32, o.config.n_embd = 16, o.config.n_inner = 64;
    o.steps = 4, o.batch = 2, o.seq_len = 32, o.warmup = 1;
    const TrainResult plain = train(o, tok);
    o.copy_phase = 2, o.copy_seq = 8;
    std::vector<int64_t> tokens;
    const TrainResult a = train(o, tok, [&](const TrainProgress& p) { tokens.push_back(p.tokens); });
    CHECK(tokens == std::vector<int64_t>{64, 128, 192, 256});
    CHECK(train(o, tok).params == a.params);
    CHECK(a.params != plain.params);
    CHECK(a.losses[2] != plain.losses[2]);  // same step-2 batch, weights that differ after the phase
    CHECK(a.losses.size() == 4);
}

TEST_CASE("a tiny training run: the loss goes down") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    TrainOptions o;
    o.config = tiny_config();
    o.config.n_ctx = 64, o.config.n_embd = 32, o.config.n_head = 2, o.config.n_layer = 1, o.config.n_inner = 128;
    o.steps = 60, o.batch = 4, o.seq_len = 64, o.warmup = 5, o.lr = 3e-3;
    const TrainResult r = train(o, tok);
    REQUIRE(r.losses.size() == 60);
    double last = 0;
    for (size_t i = 50; i < 60; ++i) last += r.losses[i] / 10;
    INFO("first loss " << r.losses[0] << ", mean of the last 10 " << last);
    CHECK(r.losses[0] == Approx(std::log(768.0)).epsilon(0.05));  // uniform guess at the start
    CHECK(last < r.losses[0] - 1.5);
}

TEST_CASE("a saved checkpoint loads in the engine, and the engine's loss equals the trainer's") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    ModelConfig c = tiny_config();
    c.n_vocab = tok.n_vocab(), c.n_ctx = 16, c.n_embd = 16, c.n_inner = 64;
    std::vector<float> params = init_params(c, 77);
    for (size_t i = 0; i < params.size(); ++i) params[i] += 0.05f * float(std::sin(double(i)));  // no zero biases
    const std::string dir = test_dir("checkpoint");
    save_model(dir, c, params, default_dir());
    auto model = Model::load(dir);
    REQUIRE(model->tokenizer());
    CHECK(model->config().n_layer == 2);

    const std::vector<int32_t> seq = {10, 200, 37, 5, 600, 91, 91, 3, 44};
    const int64_t T = int64_t(seq.size()) - 1;
    TrainModel<float> tm(c, 1, T);
    tm.params = params;
    const double trainer = tm.loss(seq.data(), seq.data() + 1, 1, T, false);
    double engine = 0;
    for (int64_t t = 1; t <= T; ++t) {  // last-row logits of each prefix, from the engine
        SessionOptions so;
        so.max_new_tokens = 1;
        Session s(model, so);
        s.set_prompt(std::vector<TokenId>(seq.begin(), seq.begin() + t));
        s.step(Phase::Prefill);
        const std::vector<float>& l = s.parts().logits;
        double mx = l[0], z = 0;
        for (float x : l) mx = std::max(mx, double(x));
        for (float x : l) z += std::exp(double(x) - mx);
        engine += -(double(l[size_t(seq[size_t(t)])]) - mx - std::log(z)) / double(T);
    }
    CHECK(trainer == Approx(engine).epsilon(1e-5));
}

TEST_CASE("large shapes (matmuls split into blocks on the pool): float gradients equal double gradients") {
    ModelConfig c = tiny_config();
    c.n_vocab = 300, c.n_ctx = 128, c.n_embd = 64, c.n_head = 4, c.n_inner = 256;
    const int64_t B = 4, T = 128;
    TrainModel<float> f(c, B, T);
    TrainModel<double> d(c, B, T);
    f.params = init_params(c, 9);
    d.params.assign(f.params.begin(), f.params.end());
    std::mt19937 gen(3);
    std::vector<int32_t> tok(size_t(B * T + 1));
    for (int32_t& t : tok) t = int32_t(gen() % 300);
    const double lf = f.loss(tok.data(), tok.data() + 1, B, T, true);
    const double ld = d.loss(tok.data(), tok.data() + 1, B, T, true);
    CHECK(lf == Approx(ld).epsilon(1e-5));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < f.grads.size(); ++i) {
        worst = std::max(worst, std::abs(double(f.grads[i]) - d.grads[i]));
        scale = std::max(scale, std::abs(d.grads[i]));
    }
    INFO("max |float - double| gradient " << worst << " of max " << scale);
    CHECK(worst < 1e-4 * scale);
}

TEST_CASE("corpus: distinct spans never repeat a token inside a span") {
    // Spans of 10 drawn without replacement from the 40 ordinary tokens, 2-3 copies each: the first 10
    // tokens of a spans-only sequence are pairwise different, and the next 10 repeat them.
    const Tokenizer tok = Tokenizer::load(default_dir());
    CorpusMix mix{.text = 0, .copy = 0, .min_span = 10, .max_span = 10};
    mix.distinct = true;
    int with_duplicate_plain = 0;
    for (int i = 0; i < 30; ++i) {
        const std::vector<TokenId> s = Corpus(tok, 5, mix).sequence(0, i, 40);
        CHECK(std::set<TokenId>(s.begin(), s.begin() + 10).size() == 10);
        CHECK(std::equal(s.begin(), s.begin() + 10, s.begin() + 10));
        CorpusMix plain = mix;
        plain.distinct = false;
        const std::vector<TokenId> p = Corpus(tok, 5, plain).sequence(0, i, 40);
        with_duplicate_plain += std::set<TokenId>(p.begin(), p.begin() + 10).size() < 10;
    }
    // With replacement, 10 draws from 40 repeat a token with probability 1 - 40!/(30!·40^10) ≈ 0.7.
    CHECK(with_duplicate_plain >= 10);
    mix.min_span = mix.max_span = 60;  // longer than the alphabet: capped at all 40 tokens
    const std::vector<TokenId> s = Corpus(tok, 5, mix).sequence(0, 0, 40);
    CHECK(std::set<TokenId>(s.begin(), s.end()).size() == 40);
}

TEST_CASE("attention-only forward: gradients match finite differences, the MLPs get none") {
    const ModelConfig c = tiny_config();
    TrainModel<double> model(c, 2, 6);
    model.params = randn(model.params.size(), 67, 0.3);
    model.mlp = false;
    const std::vector<int32_t> tokens = {1, 5, 9, 2, 2, 7, 0, 10, 3, 3, 4, 8};
    const std::vector<int32_t> targets = {5, 9, 2, 2, 7, 1, 10, 3, 3, 4, 8, 6};
    const double loss = model.loss(tokens.data(), targets.data(), 2, 6, true);
    const std::vector<double> grads = model.grads;
    for (const ParamInfo& p : model.layout()) {
        std::vector<double> slice(model.params.begin() + p.offset, model.params.begin() + p.offset + p.size);
        std::vector<double> g(grads.begin() + p.offset, grads.begin() + p.offset + p.size);
        if (p.name.find("mlp") != std::string::npos || p.name.find("ln_2") != std::string::npos) {
            for (double x : g) CHECK(x == 0.0);
            continue;
        }
        auto f = [&] {
            std::copy(slice.begin(), slice.end(), model.params.begin() + p.offset);
            return model.loss(tokens.data(), targets.data(), 2, 6, false);
        };
        check_grad(p.name.c_str(), slice, g, f);
        std::copy(slice.begin(), slice.end(), model.params.begin() + p.offset);
    }
    // Independently: the full model with every MLP's output projection (weight and bias) zeroed adds
    // exactly nothing after attention, so its loss equals the attention-only loss.
    model.mlp = true;
    for (const ParamInfo& p : model.layout())
        if (p.name.find("mlp.c_proj") != std::string::npos)
            std::fill(model.params.begin() + p.offset, model.params.begin() + p.offset + p.size, 0.0);
    CHECK(model.loss(tokens.data(), targets.data(), 2, 6, false) == Approx(loss).epsilon(1e-12));
}

TEST_CASE("training options: frozen tables stay put, the attention-only warm-up leaves the MLPs alone") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    TrainOptions o;
    o.config = tiny_config();
    o.config.n_ctx = 32, o.config.n_embd = 16, o.config.n_inner = 64;
    o.steps = 3, o.batch = 2, o.seq_len = 32, o.warmup = 1;
    o.tok_lr = 0, o.pos_lr = 0, o.attn_only = 3;
    o.adamw.weight_decay = 0;  // the MLP weights would otherwise shrink (decay applies without a gradient)
    ModelConfig c = o.config;
    c.n_vocab = tok.n_vocab();
    const std::vector<float> init = init_params(c, o.seed);
    const TrainResult r = train(o, tok);
    for (const ParamInfo& p : param_layout(c)) {
        const bool same = std::equal(r.params.begin() + p.offset, r.params.begin() + p.offset + p.size, init.begin() + p.offset);
        const bool fixed = p.name == "wte.weight" || p.name == "wpe.weight" || p.name.find("mlp") != std::string::npos ||
                           p.name.find("ln_2") != std::string::npos;
        INFO(p.name);
        CHECK(same == fixed);
    }
}

TEST_CASE("initialisation: circuit_gain starts head 0 of layers 0 and 1 as previous-token and induction heads") {
    // Measured through the engine (heads.h), which shares no code with init_params. Without the option
    // every head is near uniform: previous-token about 0.04 on 128 tokens, induction about 0.03.
    ModelConfig c = tiny_config();
    c.n_vocab = 768, c.n_ctx = 256, c.n_embd = 128, c.n_head = 4, c.n_layer = 2, c.n_inner = 512;
    InitOptions init;
    init.circuit_gain = 2, init.pos_rms = 0.3, init.tok_std = 0.3;
    const std::string dir = test_dir("circuit_init");
    save_model(dir, c, init_params(c, 1, init), default_dir());
    const std::vector<HeadScore> s = head_scores(Model::load(dir));
    INFO("layer 0 head 0 previous-token " << s[0].previous_token << ", layer 1 head 0 induction " << s[4].induction);
    CHECK(s[0].previous_token > 0.6);
    CHECK(s[4].induction > 0.4);
    for (size_t i = 0; i < s.size(); ++i) {
        if (i != 0) CHECK(s[i].previous_token < 0.15);
        if (i != 4) CHECK(s[i].induction < 0.1);
    }
    // split_stream alone: the same layout (token rows zero in dims [0, 64), positions zero from dim 32),
    // heads left random, so no head stands out.
    InitOptions split;
    split.split_stream = true, split.pos_rms = 0.3, split.tok_std = 0.3;
    const std::vector<float> p = init_params(c, 1, split);
    const std::vector<ParamInfo> layout = param_layout(c);
    double tok_low = 0, tok_high = 0, pos_high = 0;
    for (int64_t v = 0; v < c.n_vocab; ++v)
        for (int64_t j = 0; j < 128; ++j) (j < 64 ? tok_low : tok_high) += std::abs(p[size_t(layout[0].offset + v * 128 + j)]);
    for (int64_t t = 0; t < c.n_ctx; ++t)
        for (int64_t j = 32; j < 128; ++j) pos_high += std::abs(p[size_t(layout[1].offset + t * 128 + j)]);
    CHECK(tok_low == 0.0);
    CHECK(tok_high > 0.0);
    CHECK(pos_high == 0.0);
    save_model(dir, c, p, default_dir());
    for (const HeadScore& h : head_scores(Model::load(dir))) CHECK((h.previous_token < 0.15 && h.induction < 0.1));
    c.n_layer = 1;  // the circuit needs two layers
    CHECK_THROWS_AS(init_params(c, 1, init), UsageError);
}

TEST_CASE("corpus: span_newline false joins random spans without a newline") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    const TokenId nl = tok.encode("\n").at(0);
    CorpusMix mix{.text = 0, .copy = 0, .min_span = 5, .max_span = 5};
    const std::vector<TokenId> with = Corpus(tok, 8, mix).sequence(0, 0, 100);
    mix.span_newline = false;
    const std::vector<TokenId> without = Corpus(tok, 8, mix).sequence(0, 0, 100);
    CHECK(std::count(with.begin(), with.end(), nl) >= 5);  // 100 tokens hold at least 6 segments of 10-15
    CHECK(std::count(without.begin(), without.end(), nl) == 0);
    // The same draws: dropping the newlines from the first sequence gives the second.
    std::vector<TokenId> stripped;
    for (TokenId t : with)
        if (t != nl) stripped.push_back(t);
    CHECK(std::equal(stripped.begin(), stripped.end(), without.begin()));
    mix.text = 1;  // other segments are still separated by newlines
    const std::vector<TokenId> text = Corpus(tok, 8, mix).sequence(0, 0, 100);
    CHECK(std::count(text.begin(), text.end(), nl) >= 1);
}

TEST_CASE("corpus: whole-vocabulary segments repeat a span after a gap that varies") {
    // Spans of 12 ids from the whole vocabulary, 0-20 filler ids, the span again (vocab_repeats 2), or
    // twice more (3). Found here by search: the offset p > 0 where the first 12 tokens come back.
    const Tokenizer tok = Tokenizer::load(default_dir());
    CorpusMix mix{.text = 0, .copy = 0};
    mix.vocab = 1;
    mix.vocab_min_span = mix.vocab_max_span = 12;
    mix.vocab_gap = 20;
    const TokenId eot = *tok.end_of_text();
    std::set<int64_t> periods;
    std::set<TokenId> ids;
    for (int i = 0; i < 30; ++i) {
        const std::vector<TokenId> s = Corpus(tok, 9, mix).sequence(0, i, 44);
        int64_t period = 0;
        for (int64_t p = 12; p <= 32 && !period; ++p)
            if (std::equal(s.begin(), s.begin() + 12, s.begin() + p)) period = p;
        CHECK(period >= 12);
        periods.insert(period);
        ids.insert(s.begin(), s.end());
        CHECK(std::find(s.begin(), s.end(), eot) == s.end());
    }
    CHECK(periods.size() >= 8);  // 30 draws of 21 equally likely gaps: P(< 8 distinct) is negligible
    // Far more than the 40 letter/digit tokens of the random spans, and well beyond the byte tokens.
    CHECK(ids.size() > 300);
    CHECK(*ids.rbegin() >= 600);
    mix.vocab_repeats = 3;
    mix.vocab_gap = 0;
    const std::vector<TokenId> s = Corpus(tok, 9, mix).sequence(0, 0, 36);
    CHECK(std::equal(s.begin(), s.begin() + 12, s.begin() + 12));
    CHECK(std::equal(s.begin(), s.begin() + 12, s.begin() + 24));
}

TEST_CASE("softmax cross-entropy: rows with target -1 are not scored (no loss, no gradient, not in the mean)") {
    const int64_t N = 5, V = 6;
    std::vector<double> logits = randn(N * V, 43, 3.0), probs(N * V);
    const std::vector<int32_t> targets = {2, -1, 5, -1, 0};
    double want = 0;
    for (int64_t r : {0, 2, 4}) {
        double z = 0;
        for (int64_t j = 0; j < V; ++j) z += std::exp(logits[r * V + j]);
        want += -(logits[r * V + targets[r]] - std::log(z)) / 3;
    }
    CHECK(cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V) == Approx(want).epsilon(1e-12));
    auto f = [&] { return cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V); };
    f();
    std::vector<double> dlogits(N * V, 1.0);
    cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V);
    for (int64_t j = 0; j < V; ++j) CHECK(dlogits[1 * V + j] == 0.0);
    check_grad("dlogits", logits, dlogits, f);
}

TEST_CASE("corpus: the predictable flags mark exactly the copies of a whole-vocabulary span after their first id") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    CorpusMix mix{.text = 0, .copy = 0};
    mix.vocab = 1;
    mix.vocab_min_span = mix.vocab_max_span = 10;
    mix.vocab_gap = 0;
    mix.vocab_repeats = 3;
    std::vector<uint8_t> flags;
    const std::vector<TokenId> s = Corpus(tok, 4, mix).sequence(0, 0, 30, &flags);
    CHECK(s == Corpus(tok, 4, mix).sequence(0, 0, 30));  // asking for the flags changes no token
    REQUIRE(flags.size() == 30);
    // span (0-9), copy (10-19), copy (20-29): the first span and each copy's first id cannot be predicted
    for (int64_t i = 0; i < 30; ++i) CHECK(int(flags[size_t(i)]) == ((i >= 10 && i % 10 != 0) ? 1 : 0));
    mix.vocab = 0;  // no vocab segments: everything is scored
    Corpus(tok, 4, mix).sequence(0, 0, 30, &flags);
    CHECK(std::count(flags.begin(), flags.end(), uint8_t(1)) == 30);
}

TEST_CASE("corpus: vocab_partial copies start at a random id of the span and run to its end") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    CorpusMix mix{.text = 0, .copy = 0};
    mix.vocab = 1;
    mix.vocab_min_span = mix.vocab_max_span = 10;
    mix.vocab_gap = 0;
    mix.vocab_partial = true;
    mix.span_newline = false;
    std::set<int64_t> starts;
    for (int i = 0; i < 40; ++i) {
        std::vector<uint8_t> flags;
        const std::vector<TokenId> s = Corpus(tok, 6, mix).sequence(0, i, 20, &flags);
        // s[10] is span id j (found by search: whole-vocabulary spans rarely hold an id twice), and
        // s[10..20-j) must then be span[j..10)
        int64_t j = -1;
        for (int64_t k = 0; k < 9 && j < 0; ++k)
            if (s[size_t(k)] == s[10]) j = k;
        REQUIRE(j >= 0);
        starts.insert(j);
        CHECK(std::equal(s.begin() + j, s.begin() + 10, s.begin() + 10));
        CHECK(int(flags[10]) == 0);
        // the copy's other ids (at least one: starts are 0..8) are scored, the next segment's span is not
        for (int64_t k = 11; k < 20 - j; ++k) CHECK(int(flags[size_t(k)]) == 1);
        if (j > 0) CHECK(int(flags[size_t(20 - j)]) == 0);
    }
    CHECK(starts.size() >= 6);  // 40 draws of 9 equally likely starts
}

TEST_CASE("corpus: vocab_prefix puts 0..N unscored random ids before the first segment") {
    const Tokenizer tok = Tokenizer::load(default_dir());
    CorpusMix mix{.text = 0, .copy = 0};
    mix.vocab = 1;
    mix.vocab_min_span = mix.vocab_max_span = 10;
    mix.vocab_gap = 0;
    mix.span_newline = false;
    {
        // off (the default): the first segment starts at position 0, span then its copy
        std::vector<uint8_t> flags;
        const std::vector<TokenId> s = Corpus(tok, 8, mix).sequence(0, 0, 20, &flags);
        CHECK(std::equal(s.begin(), s.begin() + 10, s.begin() + 10));
    }
    mix.vocab_prefix = 20;
    std::set<int64_t> starts;
    for (int i = 0; i < 40; ++i) {
        std::vector<uint8_t> flags;
        const std::vector<TokenId> s = Corpus(tok, 8, mix).sequence(0, i, 40, &flags);
        CHECK(s == Corpus(tok, 8, mix).sequence(0, i, 40));  // asking for the flags changes no token
        // the first segment (span of 10, its copy) starts after the prefix: find it
        int64_t k = -1;
        for (int64_t j = 0; j <= 20 && k < 0; ++j)
            if (std::equal(s.begin() + j, s.begin() + j + 10, s.begin() + j + 10)) k = j;
        REQUIRE(k >= 0);
        starts.insert(k);
        for (int64_t j = 0; j <= k + 10; ++j) CHECK(int(flags[size_t(j)]) == 0);  // prefix, span, copy's first id
        for (int64_t j = k + 11; j < k + 20; ++j) CHECK(int(flags[size_t(j)]) == 1);
    }
    CHECK(starts.size() >= 10);  // 40 draws of 21 equally likely prefix lengths
}

TEST_CASE("corpus: vocab_pool_share draws spans from a small pool, so ids repeat inside them") {
    // Spans of 20 ids, gap 0, then the span again. From a pool of 5 ids a span has at most 5 distinct ids
    // (and, over 20 draws, almost surely exactly 5); from the whole vocabulary nearly 20.
    const Tokenizer tok = Tokenizer::load(default_dir());
    CorpusMix mix{.text = 0, .copy = 0};
    mix.vocab = 1;
    mix.vocab_min_span = mix.vocab_max_span = 20;
    mix.vocab_gap = 0;
    mix.span_newline = false;
    auto distinct = [](const std::vector<TokenId>& s) { return std::set<TokenId>(s.begin(), s.begin() + 20).size(); };
    const std::vector<TokenId> off = Corpus(tok, 3, mix).sequence(0, 0, 40);
    mix.vocab_pool_share = 1;
    mix.vocab_pool_min = mix.vocab_pool_max = 5;
    std::set<TokenId> ids;
    for (int i = 0; i < 20; ++i) {
        const std::vector<TokenId> s = Corpus(tok, 3, mix).sequence(0, i, 40);
        CHECK(distinct(s) <= 5);
        CHECK(std::equal(s.begin(), s.begin() + 20, s.begin() + 20));  // the copy is still the span
        ids.insert(s.begin(), s.begin() + 20);
    }
    CHECK(ids.size() > 50);  // each span has its own pool, drawn from the whole vocabulary
    mix.vocab_pool_share = 0;
    CHECK(Corpus(tok, 3, mix).sequence(0, 0, 40) == off);  // off: the pool sizes change nothing
    CHECK(distinct(off) >= 15);
}
