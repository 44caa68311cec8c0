// The Llama-family trainer (core/train/llama_ops.h, llama_model.h): every op's backward against
// double-precision central differences of its own forward, every forward against plain loops written
// here; the whole model's loss, logits and every parameter's gradient against PyTorch autograd
// (tests/reference/llama_train_reference.py, float64, written from Hugging Face's modeling_llama rules);
// the engine's logits on a saved model against the trainer's; 1 vs 2 threads bit for bit; the configs refused.
//
// How the goldens are made: finite differences (f(x+h) - f(x-h)) / 2h with h = 1e-6 of a random projection
// of the op's outputs; loops in this file for the forwards; the PyTorch script for the whole model (it reads
// the parameters and the batch this test writes and shares no code with core/); kvscope's inference forward
// pass (forward/model.cpp, which shares no code with the trainer) for the engine parity.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <tuple>

#include "base/errors.h"
#include "base/thread_pool.h"
#include "forward/model.h"
#include "model/rotary.h"
#include "text/tokenizer.h"
#include "train/llama_model.h"
#include "train/llama_ops.h"
#include "train/train.h"

#include "gradient_check.h"
#include "scratch_dir.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

using kvtest::check_grad;
using kvtest::dot;
using kvtest::randn;

}  // namespace

TEST_CASE("RMSNorm forward matches loops, backward matches finite differences (w and Gemma's 1 + w)") {
    const bool plus_one = GENERATE(false, true);
    const int64_t N = 3, C = 6;
    std::vector<double> x = randn(N * C, 11, 2.0), w = randn(C, 12), p = randn(N * C, 14);
    std::vector<double> y(N * C), rstd(N);
    rms_norm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5, plus_one);
    for (int64_t r = 0; r < N; ++r) {
        double ms = 0;
        for (int64_t c = 0; c < C; ++c) ms += x[r * C + c] * x[r * C + c] / C;
        for (int64_t c = 0; c < C; ++c)
            CHECK(y[r * C + c] == Approx(x[r * C + c] / std::sqrt(ms + 1e-5) * (plus_one ? 1 + w[c] : w[c])).epsilon(1e-12));
    }
    auto f = [&] {
        rms_norm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5, plus_one);
        return dot(y, p);
    };
    f();
    std::vector<double> dx(N * C, 0.0), dw(C, 0.0);
    rms_norm_backward(dx.data(), dw.data(), p.data(), x.data(), rstd.data(), w.data(), N, C, plus_one);
    check_grad("dx", x, dx, f);
    check_grad("dw", w, dw, f);
}

TEST_CASE("RoPE: the engine's rotation (rotate_half pairs i, i + D/2) bit for bit; backward is its transpose") {
    const int64_t B = 2, T = 5, H = 3, D = 8, half = D / 2;
    RopeSpec rope;
    rope.theta = 500.0;  // fast-turning pairs, so every pair's angle matters
    std::vector<float> cosf(size_t(T * half)), sinf(size_t(T * half));
    rope_table(cosf.data(), sinf.data(), rope, D, T);
    // The engine's functions on the same rows: rotary_angles + apply_rotary (model/rotary.h).
    const std::vector<float> inv_freq = rotary_inv_freq(rope, D);
    const std::vector<double> x0 = randn(size_t(B * T * H * D), 21);
    std::vector<float> xf(x0.begin(), x0.end()), want = xf;
    for (int64_t r = 0; r < B * T; ++r) {
        std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
        rotary_angles(c.data(), s.data(), inv_freq.data(), r % T, half);
        for (int64_t h = 0; h < H; ++h) apply_rotary(want.data() + (r * H + h) * D, c.data(), s.data(), D);
    }
    rope_forward(xf.data(), cosf.data(), sinf.data(), B, T, H, D);
    CHECK(std::memcmp(xf.data(), want.data(), xf.size() * sizeof(float)) == 0);
    // Position 0 is the identity, and a rotation keeps each pair's length.
    for (int64_t i = 0; i < H * D; ++i) CHECK(xf[size_t(i)] == float(x0[size_t(i)]));
    const int64_t r = T + 3;  // sequence 1, position 3
    for (int64_t i = 0; i < half; ++i) {
        const double a = x0[size_t(r * H * D + i)], b = x0[size_t(r * H * D + i + half)];
        const double a2 = xf[size_t(r * H * D + i)], b2 = xf[size_t(r * H * D + i + half)];
        CHECK(a2 * a2 + b2 * b2 == Approx(a * a + b * b).epsilon(1e-5));
    }

    std::vector<double> cos(cosf.begin(), cosf.end()), sin(sinf.begin(), sinf.end());
    std::vector<double> x = x0, y(x.size()), p = randn(x.size(), 22);
    auto f = [&] {
        y = x;
        rope_forward(y.data(), cos.data(), sin.data(), B, T, H, D);
        return dot(y, p);
    };
    std::vector<double> dx = p;
    rope_backward(dx.data(), cos.data(), sin.data(), B, T, H, D);
    check_grad("dx", x, dx, f);
}

TEST_CASE("SwiGLU MLP forward matches loops, backward matches finite differences") {
    const int64_t N = 3, C = 4, F = 6;
    std::vector<double> x = randn(N * C, 31), Wg = randn(F * C, 32), Wu = randn(F * C, 33), Wd = randn(C * F, 34);
    std::vector<double> p = randn(N * C, 35), y(N * C), gate(N * F), up(N * F), h(N * F);
    swiglu_mlp_forward(y.data(), gate.data(), up.data(), h.data(), x.data(), Wg.data(), Wu.data(), Wd.data(), N, C, F);
    for (int64_t r = 0; r < N; ++r) {
        std::vector<double> hid(F);
        for (int64_t j = 0; j < F; ++j) {
            double g = 0, u = 0;
            for (int64_t c = 0; c < C; ++c) g += x[r * C + c] * Wg[j * C + c], u += x[r * C + c] * Wu[j * C + c];
            hid[j] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t c = 0; c < C; ++c) {
            double o = 0;
            for (int64_t j = 0; j < F; ++j) o += hid[j] * Wd[c * F + j];
            CHECK(y[r * C + c] == Approx(o).epsilon(1e-12));
        }
    }
    auto f = [&] {
        swiglu_mlp_forward(y.data(), gate.data(), up.data(), h.data(), x.data(), Wg.data(), Wu.data(), Wd.data(), N, C, F);
        return dot(y, p);
    };
    f();
    std::vector<double> dx(N * C), dWg(F * C, 0.0), dWu(F * C, 0.0), dWd(C * F, 0.0), s1(N * F), s2(N * F), s3(N * F);
    swiglu_mlp_backward(dx.data(), dWg.data(), dWu.data(), dWd.data(), s1.data(), s2.data(), s3.data(), p.data(),
                        x.data(), gate.data(), up.data(), h.data(), Wg.data(), Wu.data(), Wd.data(), N, C, F, false);
    check_grad("dx", x, dx, f);
    check_grad("dWg", Wg, dWg, f);
    check_grad("dWu", Wu, dWu, f);
    check_grad("dWd", Wd, dWd, f);
}

TEST_CASE("grouped-query attention with a window: forward matches loops, backward matches finite differences") {
    const int64_t window = GENERATE(0, 3);
    const AttentionShape a{2, 6, 4, 2, 3, 0.7, window};  // 4 query heads over 2 K/V heads of 3 dims
    const int64_t B = a.B, T = a.T, H = a.H, K = a.K, D = a.D;
    std::vector<double> q = randn(B * T * H * D, 41), k = randn(B * T * K * D, 42), v = randn(B * T * K * D, 43);
    std::vector<double> p = randn(B * T * H * D, 44), out(B * T * H * D), att(B * H * T * T);
    gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), a);
    // loops: query head h reads K/V head h / 2; softmax over keys j with t - window < j <= t
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t) {
                const int64_t g = h / 2, lo = window ? std::max<int64_t>(0, t - window + 1) : 0;
                std::vector<double> s(T, 0.0);
                double mx = -1e300, sum = 0;
                for (int64_t j = lo; j <= t; ++j) {
                    for (int64_t e = 0; e < D; ++e)
                        s[j] += q[((b * T + t) * H + h) * D + e] * k[((b * T + j) * K + g) * D + e];
                    s[j] *= 0.7;
                    mx = std::max(mx, s[j]);
                }
                for (int64_t j = lo; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
                for (int64_t j = 0; j < T; ++j)
                    CHECK(att[((b * H + h) * T + t) * T + j] == Approx(j >= lo && j <= t ? s[j] / sum : 0.0).margin(1e-14));
                for (int64_t e = 0; e < D; ++e) {
                    double o = 0;
                    for (int64_t j = lo; j <= t; ++j) o += s[j] / sum * v[((b * T + j) * K + g) * D + e];
                    CHECK(out[((b * T + t) * H + h) * D + e] == Approx(o).epsilon(1e-12));
                }
            }
    auto f = [&] {
        gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), a);
        return dot(out, p);
    };
    f();
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    gqa_attention_backward(dq.data(), dk.data(), dv.data(), p.data(), att.data(), q.data(), k.data(), v.data(), a);
    check_grad("dq", q, dq, f);
    check_grad("dk", k, dk, f);
    check_grad("dv", v, dv, f);
}

namespace {

// 2 layers, 4 query heads over K = 2 K/V heads of 8 dims (Q = 32 != C = 16), vocab 50. qwen3: QK-norm and
// layer 0 sliding a window of 3; mistral: both layers slide 3; llama: full attention.
ModelConfig tiny_llama(const std::string& model_type, bool tied, int64_t K = 2) {
    ModelConfig c;
    c.family = Family::Llama;
    c.model_type = model_type;
    c.n_vocab = 50, c.n_ctx = 64, c.n_embd = 16, c.n_inner = 24, c.n_layer = 2;
    c.n_head = 4, c.n_kv_head = K, c.explicit_head_dim = 8;
    c.activation = Activation::Silu;
    c.layer_norm_epsilon = 1e-6;
    c.rope.theta = 100.0;  // every pair turns noticeably within 12 positions
    c.tie_word_embeddings = tied;
    c.qkv_bias = c.attention_bias = false;
    c.qk_norm = model_type == "qwen3";
    if (model_type == "qwen3") c.layer_window = {3, 0};
    if (model_type == "mistral") c.layer_window = {3, 3};
    return c;
}

// Random values everywhere (not the init: unit norm weights would hide their gradients' errors less well).
std::vector<double> random_params(const ModelConfig& c, uint32_t seed) {
    std::vector<double> params(size_t(n_params(c)));
    const std::vector<double> r = randn(params.size(), seed, 0.3);
    for (const ParamInfo& p : param_layout(c))
        for (int64_t i = 0; i < p.size; ++i)
            params[size_t(p.offset + i)] = p.decay ? r[size_t(p.offset + i)] : 1.0 + r[size_t(p.offset + i)];
    return params;
}

struct Batch {
    int64_t B = 2, T = 12;
    std::vector<int32_t> tokens, targets;  // (B, T) each; one target is -1 (not scored)
};
Batch random_batch(int64_t V, uint32_t seed) {
    Batch b;
    std::mt19937 gen(seed);
    std::vector<int32_t> ids(size_t(b.B * (b.T + 1)));
    for (int32_t& t : ids) t = int32_t(gen() % uint32_t(V));
    for (int64_t s = 0; s < b.B; ++s)
        for (int64_t t = 0; t < b.T; ++t) {
            b.tokens.push_back(ids[size_t(s * (b.T + 1) + t)]);
            b.targets.push_back(ids[size_t(s * (b.T + 1) + t + 1)]);
        }
    b.targets[5] = -1;
    return b;
}

template <typename T> std::vector<T> read_raw(const fs::path& p) {
    const std::string bytes = kvscope::test::read_bytes(p);
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
}

std::string json_list(const std::vector<int32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
}

// Writes the case for tests/reference/llama_train_reference.py into `work`.
void write_case(const fs::path& work, const ModelConfig& c, const std::vector<double>& params, const Batch& b) {
    std::ostringstream j;
    j.precision(17);
    j << "{\"config\": {\"vocab_size\": " << c.n_vocab << ", \"hidden_size\": " << c.n_embd
      << ", \"intermediate_size\": " << c.n_inner << ", \"num_hidden_layers\": " << c.n_layer
      << ", \"num_attention_heads\": " << c.n_head << ", \"num_key_value_heads\": " << c.kv_heads()
      << ", \"head_dim\": " << c.head_dim() << ", \"rms_norm_eps\": " << c.layer_norm_epsilon
      << ", \"rope_theta\": " << c.rope.theta << ", \"tie_word_embeddings\": " << (c.tie_word_embeddings ? "true" : "false")
      << ", \"qk_norm\": " << (c.qk_norm ? "true" : "false") << ", \"layer_windows\": [";
    for (int64_t il = 0; il < c.n_layer; ++il) j << (il ? "," : "") << c.window_of(il);
    j << "]}, \"layout\": [";
    bool first = true;
    for (const ParamInfo& p : param_layout(c)) {
        j << (first ? "" : ", ") << "{\"name\": \"" << p.name << "\", \"offset\": " << p.offset << ", \"shape\": [";
        for (size_t i = 0; i < p.shape.size(); ++i) j << (i ? "," : "") << p.shape[i];
        j << "]}";
        first = false;
    }
    j << "], \"B\": " << b.B << ", \"T\": " << b.T << ", \"tokens\": " << json_list(b.tokens)
      << ", \"targets\": " << json_list(b.targets) << "}\n";
    kvscope::test::write_bytes(work / "case.json", j.str());
    kvscope::test::write_bytes(work / "params.f64", std::string(reinterpret_cast<const char*>(params.data()),
                                                                params.size() * sizeof(double)));
}

bool have_torch() {
    return std::system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") == 0;
}

}  // namespace

TEST_CASE("whole model: loss, logits and every parameter's gradient equal PyTorch autograd (float64)") {
    if (!have_torch()) {
        WARN("skipped: /usr/bin/python3 with torch and numpy not found (apt install python3-torch)");
        return;
    }
    // tied and untied, with and without QK-norm, no window, one sliding layer, every layer sliding; groups
    // of 2 query heads, and one K/V head for all 4 (multi-query) or one per query head (multi-head)
    const std::vector<std::tuple<std::string, bool, int64_t>> kinds = {
        {"llama", true, 2}, {"llama", false, 2}, {"qwen3", true, 2}, {"qwen3", false, 2},
        {"mistral", false, 2}, {"qwen3", false, 1}, {"llama", true, 4}};
    const Batch b = random_batch(50, 7);
    auto name = [](const std::string& model_type, bool tied, int64_t K) {
        return "reference_" + model_type + (tied ? "_tied_" : "_") + std::to_string(K);
    };
    std::string dirs;
    for (const auto& [model_type, tied, K] : kinds) {
        const ModelConfig c = tiny_llama(model_type, tied, K);
        const fs::path work = kvscope::test::fresh_dir("llama_train", name(model_type, tied, K));
        write_case(work, c, random_params(c, 61), b);
        dirs += " " + work.string();
    }
    const std::string script = KVSCOPE_SOURCE_DIR "/tests/reference/llama_train_reference.py";
    REQUIRE(std::system(("/usr/bin/python3 " + script + dirs).c_str()) == 0);

    for (const auto& [model_type, tied, K] : kinds) {
        INFO(model_type << (tied ? ", tied" : ", untied") << ", " << K << " K/V heads");
        const ModelConfig c = tiny_llama(model_type, tied, K);
        const fs::path work = kvscope::test::scratch_root() / "llama_train" / name(model_type, tied, K);
        TrainModel<double> model(c, b.B, b.T);
        model.params = random_params(c, 61);
        const double loss = model.loss(b.tokens.data(), b.targets.data(), b.B, b.T, false);
        std::ifstream loss_file(work / "loss.txt");
        double ref_loss = 0;
        loss_file >> ref_loss;
        CHECK(loss == Approx(ref_loss).epsilon(1e-12));
        const std::vector<double> ref_logits = read_raw<double>(work / "logits.f64");
        REQUIRE(ref_logits.size() == size_t(b.B * b.T * c.n_vocab));
        for (size_t i = 0; i < ref_logits.size(); ++i) {
            INFO("logit " << i);
            REQUIRE(model.forward_logits()[i] == Approx(ref_logits[i]).margin(1e-12));
        }

        model.loss(b.tokens.data(), b.targets.data(), b.B, b.T, true);
        const std::vector<double> ref = read_raw<double>(work / "grads.f64");
        REQUIRE(ref.size() == model.grads.size());
        // Within 1e-4 relative, element by element; an element far below its tensor's largest gradient is
        // compared with 1% of that largest value instead (relative error of a near-zero is noise).
        for (const ParamInfo& p : model.layout()) {
            double scale = 0, worst = 0;
            int64_t worst_i = 0;
            for (int64_t i = 0; i < p.size; ++i) scale = std::max(scale, std::abs(ref[size_t(p.offset + i)]));
            for (int64_t i = 0; i < p.size; ++i) {
                const double r = ref[size_t(p.offset + i)], g = model.grads[size_t(p.offset + i)];
                const double err = std::abs(g - r) / std::max(std::abs(r), 0.01 * scale);
                if (err > worst) worst = err, worst_i = i;
            }
            INFO(p.name << ": worst element " << worst_i << " (" << model.grads[size_t(p.offset + worst_i)] << " vs "
                        << ref[size_t(p.offset + worst_i)] << "), relative error " << worst << ", largest gradient "
                        << scale);
            CHECK(scale > 0);
            CHECK(worst < 1e-4);
        }
    }
}

TEST_CASE("whole model: every parameter's gradient matches finite differences (QK-norm, a sliding layer, untied)") {
    const ModelConfig c = tiny_llama("qwen3", false);
    const Batch b = random_batch(c.n_vocab, 8);
    TrainModel<double> model(c, b.B, b.T);
    model.params = random_params(c, 67);
    model.loss(b.tokens.data(), b.targets.data(), b.B, b.T, true);
    const std::vector<double> grads = model.grads;
    for (const ParamInfo& p : model.layout()) {
        std::vector<double> slice(model.params.begin() + p.offset, model.params.begin() + p.offset + p.size);
        std::vector<double> g(grads.begin() + p.offset, grads.begin() + p.offset + p.size);
        auto f = [&] {
            std::copy(slice.begin(), slice.end(), model.params.begin() + p.offset);
            return model.loss(b.tokens.data(), b.targets.data(), b.B, b.T, false);
        };
        check_grad(p.name, slice, g, f);
        std::copy(slice.begin(), slice.end(), model.params.begin() + p.offset);
    }
}

TEST_CASE("a saved Llama-family model loads in the engine, whose logits equal the trainer's forward") {
    const auto [model_type, tied] =
        GENERATE(table<std::string, bool>({{"llama", true}, {"qwen3", false}, {"mistral", true}}));
    INFO(model_type);
    const ModelConfig c = tiny_llama(model_type, tied);
    const std::vector<double> pd = random_params(c, 71);
    const std::vector<float> params(pd.begin(), pd.end());
    const fs::path dir = kvscope::test::fresh_dir("llama_train", "engine_" + model_type);
    save_model(dir.string(), c, params, "");
    const auto model = Model::load(dir.string());
    CHECK(model->config().model_type == model_type);
    CHECK(model->config().qk_norm == c.qk_norm);
    CHECK(model->config().layer_window == c.layer_window);
    CHECK(model->config().tie_word_embeddings == tied);

    const int64_t T = 12;
    TrainModel<float> tm(c, 1, T);
    tm.params = params;
    for (uint32_t seed : {1u, 2u, 3u}) {
        const Batch b = random_batch(c.n_vocab, seed);  // its first sequence
        tm.loss(b.tokens.data(), b.targets.data(), 1, T, false);
        KvCache cache = model->make_cache(T, 0);
        Workspace ws(model->config(), 1, 1, T);
        for (int64_t t = 0; t < T; ++t) {  // one token at a time: the logits of every position
            std::vector<float> logits(size_t(c.n_vocab));
            Chunk ch;
            ch.cache = &cache;
            ch.tokens = b.tokens.data() + t;
            ch.n_tokens = 1;
            ch.logits = logits.data();
            forward(*model, std::span<Chunk>(&ch, 1), ws);
            for (int64_t j = 0; j < c.n_vocab; ++j) {
                INFO("sequence " << seed << ", position " << t << ", logit " << j);
                REQUIRE(logits[size_t(j)] == Approx(tm.forward_logits()[size_t(t * c.n_vocab + j)]).margin(1e-4));
            }
        }
    }
}

TEST_CASE("Llama-family gradients are bit-identical on 1 and 2 threads (float)") {
    ModelConfig c = tiny_llama("qwen3", false);
    c.n_vocab = 300, c.n_embd = 64, c.n_inner = 96;  // 4 × 64 rows: every matmul splits into blocks
    c.n_head = 8;  // groups of 4 query heads: their sum into dk, dv has an order that could vary
    const int64_t B = 4, T = 64;
    std::mt19937 gen(5);
    std::vector<int32_t> tok(size_t(B * T + 1));
    for (int32_t& t : tok) t = int32_t(gen() % 300);
    auto run = [&](int threads) {
        ThreadPool::global().set_threads(threads);
        TrainModel<float> m(c, B, T);
        m.params = init_params(c, 3);
        const double loss = m.loss(tok.data(), tok.data() + 1, B, T, true);
        return std::make_pair(loss, m.grads);
    };
    const auto two = run(2), one = run(1);
    ThreadPool::global().set_threads(default_thread_count());
    CHECK(two.first == one.first);
    REQUIRE(two.second.size() == one.second.size());
    CHECK(std::memcmp(two.second.data(), one.second.data(), one.second.size() * sizeof(float)) == 0);
    double norm = 0;
    for (float g : one.second) norm += double(g) * g;
    CHECK(norm > 0);
}

TEST_CASE("Llama-family layout and initialisation: Hugging Face names and shapes, N(0, 0.02), norms 1") {
    const ModelConfig c = tiny_llama("qwen3", false);
    const std::vector<ParamInfo> l = param_layout(c);
    REQUIRE(l.size() == size_t(1 + 11 * c.n_layer + 2));
    CHECK(l[0].name == "model.embed_tokens.weight");
    CHECK(l[2].name == "model.layers.0.self_attn.q_proj.weight");
    CHECK(l[2].shape == std::vector<int64_t>{32, 16});  // (H·D, C): nn.Linear (out, in)
    CHECK(l[3].shape == std::vector<int64_t>{16, 16});  // k_proj (K·D, C)
    CHECK(l[5].name == "model.layers.0.self_attn.q_norm.weight");
    CHECK(l[7].shape == std::vector<int64_t>{16, 32});  // o_proj (C, H·D)
    CHECK(l[10].shape == std::vector<int64_t>{24, 16});  // up_proj (F, C)
    CHECK(l.back().name == "lm_head.weight");
    CHECK(param_layout(tiny_llama("llama", true)).back().name == "model.norm.weight");
    const std::vector<float> p = init_params(c, 5);
    double s2 = 0;
    for (int64_t i = 0; i < l[0].size; ++i) s2 += double(p[size_t(i)]) * p[size_t(i)];
    CHECK(std::sqrt(s2 / double(l[0].size)) == Approx(0.02).epsilon(0.1));
    for (const ParamInfo& t : l)
        if (!t.decay)
            CHECK(std::all_of(p.begin() + t.offset, p.begin() + t.offset + t.size, [](float x) { return x == 1.0f; }));
    CHECK(init_params(c, 5) == p);
    CHECK(init_params(c, 6) != p);
    InitOptions seeded;
    seeded.circuit_gain = 1;
    CHECK_THROWS_AS(init_params(c, 5, seeded), UsageError);
}

TEST_CASE("check_trainable refuses, by name, the Llama-family configs the trainer does not handle") {
    auto refused = [](ModelConfig c, const std::string& word) {
        INFO(word);
        CHECK_THROWS_WITH(check_trainable(c), Catch::Contains(word));
    };
    CHECK_NOTHROW(check_trainable(tiny_llama("llama", true)));
    CHECK_NOTHROW(check_trainable(tiny_llama("qwen3", false)));
    CHECK_NOTHROW(check_trainable(tiny_llama("mistral", true)));
    ModelConfig c = tiny_llama("llama", true);
    c.model_type = "gemma3_text";
    refused(c, "gemma3_text");
    c = tiny_llama("llama", true), c.model_type = "qwen2";
    refused(c, "qwen2");
    c = tiny_llama("llama", true), c.attention_bias = c.qkv_bias = true;
    refused(c, "biases");
    c = tiny_llama("llama", true), c.mlp_bias = true;
    refused(c, "biases");
    c = tiny_llama("llama", true), c.activation = Activation::GeluTanh;
    refused(c, "silu");
    c = tiny_llama("llama", true), c.layer_window = {3, 0};
    refused(c, "sliding window on llama");
    c = tiny_llama("mistral", true), c.layer_window = {3, 0};
    refused(c, "differ by layer");
    c = tiny_llama("llama", true), c.qk_norm = true;
    refused(c, "QK-norm");
    c = tiny_llama("qwen3", true), c.norm_plus_one = true;
    refused(c, "(1 + w)");
    c = tiny_llama("llama", true), c.n_kv_head = 3;
    refused(c, "num_key_value_heads");
}

TEST_CASE("train() runs a Llama-family config: the loss goes down, equal on 1 and 2 threads") {
    // The corpus is made of tokens, so the default model's tokenizer gives the vocabulary (768).
    const Tokenizer tok = Tokenizer::load(std::string(KVSCOPE_ASSETS_DIR) + "/default");
    TrainOptions o;
    o.config = tiny_llama("qwen3", true);
    o.config.n_embd = 32, o.config.n_inner = 64;
    o.steps = 30, o.batch = 4, o.seq_len = 32, o.warmup = 3, o.lr = 3e-3;
    ThreadPool::global().set_threads(2);
    const TrainResult a = train(o, tok);
    o.steps = 3;
    const TrainResult b = train(o, tok);
    ThreadPool::global().set_threads(1);
    const TrainResult c = train(o, tok);
    ThreadPool::global().set_threads(default_thread_count());
    INFO("first loss " << a.losses[0] << ", last " << a.losses.back());
    CHECK(a.losses[0] == Approx(std::log(double(tok.n_vocab()))).epsilon(0.05));  // uniform guess at the start
    CHECK(a.losses.back() < a.losses[0] - 1.0);
    CHECK(b.params == c.params);
    CHECK(b.losses == c.losses);
}

TEST_CASE("Llama-family attention-only forward: the MLPs get no gradient, the loss is the MLP-free model's") {
    const ModelConfig c = tiny_llama("qwen3", false);
    const Batch b = random_batch(c.n_vocab, 9);
    TrainModel<double> model(c, b.B, b.T);
    model.params = random_params(c, 73);
    model.loss(b.tokens.data(), b.targets.data(), b.B, b.T, true);  // the MLP buffers hold a full pass's values
    model.mlp = false;
    const double loss = model.loss(b.tokens.data(), b.targets.data(), b.B, b.T, true);
    for (const ParamInfo& p : model.layout()) {
        const bool mlp_part = p.name.find("mlp.") != std::string::npos ||
                              p.name.find("post_attention") != std::string::npos;
        const bool any = std::any_of(model.grads.begin() + p.offset, model.grads.begin() + p.offset + p.size,
                                     [](double g) { return g != 0.0; });
        INFO(p.name);
        CHECK(any != mlp_part);
    }
    // Independently: with every down_proj zeroed the full model's MLPs add exactly nothing.
    model.mlp = true;
    for (const ParamInfo& p : model.layout())
        if (p.name.find("down_proj") != std::string::npos)
            std::fill(model.params.begin() + p.offset, model.params.begin() + p.offset + p.size, 0.0);
    CHECK(model.loss(b.tokens.data(), b.targets.data(), b.B, b.T, false) == Approx(loss).epsilon(1e-12));
}

TEST_CASE("Llama-family float gradients equal double gradients at a shape whose matmuls split into blocks") {
    ModelConfig c = tiny_llama("qwen3", false);
    c.n_vocab = 300, c.n_embd = 64, c.n_inner = 96, c.n_head = 8;
    const int64_t B = 4, T = 64;
    TrainModel<float> f(c, B, T);
    TrainModel<double> d(c, B, T);
    f.params = init_params(c, 9);
    d.params.assign(f.params.begin(), f.params.end());
    std::mt19937 gen(4);
    std::vector<int32_t> tok(size_t(B * T + 1));
    for (int32_t& t : tok) t = int32_t(gen() % 300);
    const double lf = f.loss(tok.data(), tok.data() + 1, B, T, true);
    CHECK(lf == Approx(d.loss(tok.data(), tok.data() + 1, B, T, true)).epsilon(1e-6));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < f.grads.size(); ++i) {
        worst = std::max(worst, std::abs(double(f.grads[i]) - d.grads[i]));
        scale = std::max(scale, std::abs(d.grads[i]));
    }
    INFO("max |float - double| gradient " << worst << " of max " << scale);
    CHECK(worst < 1e-4 * scale);
}
