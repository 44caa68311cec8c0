#pragma once
// Shared helpers of the engine tests: fixture models written to disk, an independent reference forward
// pass, and exact comparisons that name the first mismatch.
//
//   fixture_config()                    a small GPT-2 shaped config (every test changes what it needs)
//   write_fixture(dir, spec)            config.json + model.safetensors with seeded N(0, std) values;
//                                       returns the exact values stored (after F16/BF16 rounding)
//   reference_forward(model, tokens, W) logits of every position, plus per-layer q/k/v and per-head
//                                       attention outputs, in double precision (Eigen, dense, whole sequence)
//   reference_greedy(model, prompt, N, W)   greedy continuation by full recompute, with the top-2 margins
//   first_mismatch(a, b)                "" when bit-identical, else the first differing index and values
//
// How the goldens are made: the reference below is written from the model description
// (HF GPT-2 Conv1D layout y = x·W + b, q|k|v along the output dim, pre-/post-LN, interleaved sinusoidal
// positions, causal mask banded by the window over the whole sequence). It shares no code with core/:
// it reads the weight values the fixture chose, not the engine's loaded copies, uses plain double
// matrix products, and computes sinusoids, activations and layer norms itself. The only core/
// functions used here are the writers (config_to_json, write_safetensors) and, for F16 only, the
// encoder f32_to_f16 on values that are exactly representable (checked by a round trip).
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <unistd.h>

#include "model/config.h"
#include "model/safetensors.h"
#include "scratch_dir.h"

namespace kvtest {

using kvscope::Dtype;
using kvscope::ModelConfig;
namespace fs = std::filesystem;

// scratch_root()/area, created (this test process's own: see scratch_dir.h)
inline fs::path work_dir(const std::string& area) {
    fs::path dir = kvscope::test::scratch_root() / area;
    fs::create_directories(dir);
    return dir;
}

// V = 53, n_ctx = 32, C = 24, H = 3 (D = 8), L = 2, F = 96: tiny, but every dimension is distinct.
inline ModelConfig fixture_config() {
    ModelConfig c;
    c.n_vocab = 53;
    c.n_ctx = 32;
    c.n_embd = 24;
    c.n_layer = 2;
    c.n_head = 3;
    c.n_inner = 4 * c.n_embd;
    return c;
}

struct FixtureSpec {
    ModelConfig config = fixture_config();
    Dtype dtype = Dtype::F32;
    bool mixed_dtypes = false;   // tensor i gets F32/F16/BF16 by i % 3 (also misaligns some F32 data)
    bool prefix = false;         // "transformer." before every body name (lm_head.* never)
    bool extra_buffers = false;  // h.{i}.attn.bias (1,1,P,P) and h.{i}.attn.masked_bias () as real checkpoints
    uint32_t seed = 1;
    float stddev = 0.2f;         // large enough that attention is peaked, not uniform
    std::vector<std::string> drop;                             // short names to leave out
    std::map<std::string, std::vector<int64_t>> reshape;       // short name -> shape written instead
    std::vector<std::pair<std::string, std::vector<int64_t>>> add;  // extra tensors (full names)
    std::vector<std::tuple<std::string, int64_t, float>> set;  // (short name, flat index, value) written over
                                                               // the random value; NaN and ±inf allowed
};

struct FixtureTensor {
    std::vector<int64_t> shape;
    std::vector<float> values;   // exactly what the file holds, as float
};

struct FixtureModel {
    fs::path dir;
    ModelConfig config;
    std::map<std::string, FixtureTensor> tensors;  // by short name (no "transformer.")
};

// Round to nearest even, written here rather than taken from core/ (bf16 is the top half of an f32).
inline uint16_t bf16_bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    b += 0x7FFFu + ((b >> 16) & 1u);
    return uint16_t(b >> 16);
}
inline float from_bf16_bits(uint16_t h) {
    uint32_t b = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

// The names and shapes a config implies, in the order the fixture writes them.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> expected_tensors(const ModelConfig& c) {
    const int64_t V = c.n_vocab, P = c.n_ctx, C = c.n_embd, F = c.n_inner;
    std::vector<std::pair<std::string, std::vector<int64_t>>> t;
    t.push_back({"wte.weight", {V, C}});
    if (c.position_embedding == kvscope::PositionEmbedding::Learned) t.push_back({"wpe.weight", {P, C}});
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string h = "h." + std::to_string(il) + ".";
        t.push_back({h + "ln_1.weight", {C}});
        t.push_back({h + "ln_1.bias", {C}});
        t.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
        if (c.qkv_bias) t.push_back({h + "attn.c_attn.bias", {3 * C}});
        t.push_back({h + "attn.c_proj.weight", {C, C}});
        t.push_back({h + "attn.c_proj.bias", {C}});
        t.push_back({h + "ln_2.weight", {C}});
        t.push_back({h + "ln_2.bias", {C}});
        t.push_back({h + "mlp.c_fc.weight", {C, F}});
        t.push_back({h + "mlp.c_fc.bias", {F}});
        t.push_back({h + "mlp.c_proj.weight", {F, C}});
        t.push_back({h + "mlp.c_proj.bias", {C}});
    }
    if (c.final_layer_norm) {
        t.push_back({"ln_f.weight", {C}});
        t.push_back({"ln_f.bias", {C}});
    }
    if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {V, C}});
    if (c.lm_head_bias) t.push_back({"lm_head.bias", {V}});
    return t;
}

inline bool never_prefixed(const std::string& name) { return name.rfind("lm_head.", 0) == 0; }

inline int64_t n_elements(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// Bytes of `values` in `dtype`; `values` are first rounded to what the dtype can hold (in place).
inline std::vector<std::byte> encode(std::vector<float>& values, Dtype dtype) {
    std::vector<std::byte> bytes;
    auto put16 = [&](uint16_t h) {
        bytes.push_back(std::byte(h & 0xFF));
        bytes.push_back(std::byte(h >> 8));
    };
    for (float& v : values) {
        if (dtype == Dtype::F32) {
            uint32_t b;
            std::memcpy(&b, &v, 4);
            for (int k = 0; k < 4; ++k) bytes.push_back(std::byte((b >> (8 * k)) & 0xFF));
        } else if (dtype == Dtype::BF16) {
            const uint16_t h = bf16_bits(v);
            v = from_bf16_bits(h);
            put16(h);
        } else if (!std::isfinite(v)) {
            put16(kvscope::f32_to_f16(v));  // NaN or ±inf: the f16 exponent all ones, as asked
        } else {
            // Multiples of 2^-8 below 8 in magnitude are exact in f16 (10 fraction bits), so the value
            // the reference uses is known without trusting a converter.
            v = std::round(std::clamp(v, -7.9f, 7.9f) * 256.0f) / 256.0f;
            const uint16_t h = kvscope::f32_to_f16(v);
            if (kvscope::f16_to_f32(h) != v) throw std::logic_error("f16 encoding of an exact value is not exact");
            put16(h);
        }
    }
    return bytes;
}

inline FixtureModel write_fixture(const fs::path& dir, const FixtureSpec& spec) {
    fs::create_directories(dir);
    FixtureModel m;
    m.dir = dir;
    m.config = spec.config;
    {
        // ctest -j runs test cases of one executable in parallel processes that write the same
        // fixture: each writes its own temporary file and renames it into place (atomic).
        const fs::path tmp = dir / ("config.json.tmp-" + std::to_string(::getpid()));
        std::ofstream(tmp, std::ios::trunc) << kvscope::config_to_json(spec.config);
        fs::rename(tmp, dir / "config.json");
    }
    std::mt19937 rng(spec.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<kvscope::TensorToWrite> out;
    int index = 0;
    for (auto [name, shape] : expected_tensors(spec.config)) {
        const bool is_gain = name.find("ln_") != std::string::npos && name.ends_with(".weight");
        const bool is_ln_bias = name.find("ln_") != std::string::npos && name.ends_with(".bias");
        std::vector<float> values(size_t(n_elements(shape)));
        for (float& v : values) {
            const float z = normal(rng);
            v = is_gain ? 1.0f + 0.1f * z : is_ln_bias ? 0.1f * z : spec.stddev * z;
        }
        for (const auto& [set_name, at, value] : spec.set)
            if (set_name == name) values.at(size_t(at)) = value;
        bool skip = false;
        for (const auto& d : spec.drop) skip = skip || d == name;
        if (auto it = spec.reshape.find(name); it != spec.reshape.end()) {
            shape = it->second;
            values.resize(size_t(n_elements(shape)), 0.5f);
        }
        const Dtype dtype = spec.mixed_dtypes ? Dtype(index++ % 3) : spec.dtype;
        std::vector<std::byte> bytes = encode(values, dtype);
        m.tensors[name] = {shape, values};
        if (skip) continue;
        const std::string full = (spec.prefix && !never_prefixed(name) ? "transformer." : "") + name;
        out.push_back({full, dtype, shape, std::move(bytes)});
    }
    if (spec.extra_buffers) {
        const int64_t P = spec.config.n_ctx;
        for (int64_t il = 0; il < spec.config.n_layer; ++il) {
            const std::string h = (spec.prefix ? "transformer.h." : "h.") + std::to_string(il) + ".attn.";
            std::vector<float> tril(size_t(P * P));
            for (int64_t i = 0; i < P; ++i)
                for (int64_t j = 0; j < P; ++j) tril[size_t(i * P + j)] = j <= i ? 1.0f : 0.0f;
            out.push_back({h + "bias", Dtype::F32, {1, 1, P, P}, encode(tril, Dtype::F32)});
            std::vector<float> masked{-1e4f};
            out.push_back({h + "masked_bias", Dtype::F32, {}, encode(masked, Dtype::F32)});
        }
    }
    for (const auto& [name, shape] : spec.add) {
        std::vector<float> values(size_t(n_elements(shape)), 0.25f);
        out.push_back({name, Dtype::F32, shape, encode(values, Dtype::F32)});
    }
    {
        // The same race as config.json's: kvscope's writer refuses a model.safetensors another test
        // process renamed in but has not yet recorded as written, so each process writes its own file.
        const fs::path tmp = dir / ("model.safetensors.tmp-" + std::to_string(::getpid()));
        fs::remove(tmp);
        kvscope::write_safetensors(tmp.string(), out);
        fs::rename(tmp, dir / "model.safetensors");
    }
    return m;
}

// ---------------------------------------------------------------------------------------------------
// Reference forward pass (double precision, whole sequence, explicit mask).

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowD = Eigen::Matrix<double, 1, Eigen::Dynamic>;

inline MatD as_matrix(const FixtureTensor& t) {
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : t.shape[0];
    MatD m(rows, cols);
    for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = double(t.values[size_t(i)]);
    return m;
}
inline RowD as_row(const FixtureTensor& t) { return as_matrix(t).row(0); }

struct Reference {
    MatD logits;                           // (T, V), every position
    std::vector<MatD> q, k, v;             // [L] (T, C)
    std::vector<std::vector<MatD>> heads;  // [L][H] (T, D) attention output of each head before c_proj
};

inline MatD reference_layer_norm(const MatD& x, const RowD& g, const RowD& b, double eps) {
    MatD y(x.rows(), x.cols());
    for (int64_t t = 0; t < x.rows(); ++t) {
        const double mean = x.row(t).mean();
        const double var = (x.row(t).array() - mean).square().mean();
        y.row(t) = ((x.row(t).array() - mean) / std::sqrt(var + eps)).matrix().cwiseProduct(g) + b;
    }
    return y;
}

inline double reference_activation(kvscope::Activation a, double x) {
    switch (a) {
        case kvscope::Activation::GeluTanh:
            return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        case kvscope::Activation::GeluErf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        case kvscope::Activation::Relu: return x > 0 ? x : 0.0;
        case kvscope::Activation::Silu: return x / (1.0 + std::exp(-x));
    }
    return 0;
}

// window 0: plain causal mask; window W: query i sees keys j with i-W < j <= i, and with sinks S
// also the keys j < S (StreamingLLM's attention sinks). kv_bf16: keys and values are stored as a
// bfloat16 cache stores them (rounded to float, then to bfloat16 nearest-even) before attention.
// hidden_keys {j, i0}: key j is masked out for the queries i >= i0 (a key evicted from the cache before
// query i0 attended), in every layer and head.
inline Reference reference_forward(const FixtureModel& m, const std::vector<int32_t>& tokens, int64_t window,
                                   int64_t sinks = 0, bool kv_bf16 = false,
                                   const std::vector<std::pair<int64_t, int64_t>>& hidden_keys = {}) {
    const ModelConfig& c = m.config;
    const int64_t T = int64_t(tokens.size()), C = c.n_embd, H = c.n_head, D = C / H;
    auto W = [&](const std::string& name) { return as_matrix(m.tensors.at(name)); };
    auto B = [&](const std::string& name) { return as_row(m.tensors.at(name)); };

    // Embeddings.
    const MatD wte = W("wte.weight");
    MatD x(T, C);
    for (int64_t t = 0; t < T; ++t) {
        x.row(t) = wte.row(tokens[size_t(t)]) * c.embedding_scale;
        if (c.position_embedding == kvscope::PositionEmbedding::Learned) {
            x.row(t) += W("wpe.weight").row(t);
        } else {
            for (int64_t i = 0; i < C; ++i) {
                const double freq = std::pow(10000.0, double(i - i % 2) / double(C));
                x(t, i) += i % 2 == 0 ? std::sin(double(t) / freq) : std::cos(double(t) / freq);
            }
        }
    }
    // The mask, written out over the whole sequence.
    MatD mask = MatD::Zero(T, T);  // 1 = visible
    for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= i; ++j)
            if (window == 0 || j > i - window || j < sinks) mask(i, j) = 1;
    for (const auto& [j, i0] : hidden_keys)
        for (int64_t i = i0; i < T; ++i) mask(i, j) = 0;

    Reference ref;
    ref.heads.resize(size_t(c.n_layer));
    const double eps = c.layer_norm_epsilon;
    const bool pre = c.norm_position == kvscope::NormPosition::Pre;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string h = "h." + std::to_string(il) + ".";
        auto attention = [&](const MatD& in) {
            MatD qkv = in * W(h + "attn.c_attn.weight");  // (T, 3C)
            if (c.qkv_bias) qkv.rowwise() += B(h + "attn.c_attn.bias");
            if (kv_bf16)
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t i = C; i < 3 * C; ++i) qkv(t, i) = from_bf16_bits(bf16_bits(float(qkv(t, i))));
            ref.q.push_back(qkv.leftCols(C));
            ref.k.push_back(qkv.middleCols(C, C));
            ref.v.push_back(qkv.rightCols(C));
            MatD concat(T, C);
            for (int64_t hd = 0; hd < H; ++hd) {
                const MatD q = qkv.middleCols(hd * D, D), k = qkv.middleCols(C + hd * D, D),
                           v = qkv.middleCols(2 * C + hd * D, D);
                MatD scores = q * k.transpose() / std::sqrt(double(D));  // (T, T)
                MatD weights = MatD::Zero(T, T);
                for (int64_t i = 0; i < T; ++i) {
                    double mx = -INFINITY;
                    for (int64_t j = 0; j < T; ++j)
                        if (mask(i, j) != 0) mx = std::max(mx, scores(i, j));
                    double sum = 0;
                    for (int64_t j = 0; j < T; ++j)
                        if (mask(i, j) != 0) sum += weights(i, j) = std::exp(scores(i, j) - mx);
                    weights.row(i) /= sum;
                }
                MatD out = weights * v;  // (T, D)
                concat.middleCols(hd * D, D) = out;
                ref.heads[size_t(il)].push_back(out);
            }
            MatD y = concat * W(h + "attn.c_proj.weight");
            y.rowwise() += B(h + "attn.c_proj.bias");
            return y;
        };
        auto mlp = [&](const MatD& in) {
            MatD hidden = in * W(h + "mlp.c_fc.weight");
            hidden.rowwise() += B(h + "mlp.c_fc.bias");
            hidden = hidden.unaryExpr([&](double z) { return reference_activation(c.activation, z); });
            MatD y = hidden * W(h + "mlp.c_proj.weight");
            y.rowwise() += B(h + "mlp.c_proj.bias");
            return y;
        };
        if (pre) {
            x += attention(reference_layer_norm(x, B(h + "ln_1.weight"), B(h + "ln_1.bias"), eps));
            x += mlp(reference_layer_norm(x, B(h + "ln_2.weight"), B(h + "ln_2.bias"), eps));
        } else {
            x = reference_layer_norm(x + attention(x), B(h + "ln_1.weight"), B(h + "ln_1.bias"), eps);
            x = reference_layer_norm(x + mlp(x), B(h + "ln_2.weight"), B(h + "ln_2.bias"), eps);
        }
    }
    if (c.final_layer_norm) x = reference_layer_norm(x, B("ln_f.weight"), B("ln_f.bias"), eps);
    const MatD head = c.tie_word_embeddings ? wte : W("lm_head.weight");
    ref.logits = x * head.transpose();
    if (c.lm_head_bias) ref.logits.rowwise() += B("lm_head.bias");
    return ref;
}

struct GreedyRun {
    std::vector<int32_t> tokens;   // generated
    std::vector<double> margins;   // top-1 minus top-2 logit at each choice
};

inline GreedyRun reference_greedy(const FixtureModel& m, std::vector<int32_t> seq, int64_t n_new, int64_t window,
                                  int64_t sinks = 0) {
    GreedyRun run;
    for (int64_t s = 0; s < n_new; ++s) {
        const Reference ref = reference_forward(m, seq, window, sinks);
        const RowD last = ref.logits.row(ref.logits.rows() - 1);
        int32_t best = 0;
        for (int32_t i = 1; i < int32_t(last.size()); ++i)
            if (last(i) > last(best)) best = i;
        double second = -INFINITY;
        for (int32_t i = 0; i < int32_t(last.size()); ++i)
            if (i != best) second = std::max(second, last(i));
        run.tokens.push_back(best);
        run.margins.push_back(last(best) - second);
        seq.push_back(best);
    }
    return run;
}

// ---------------------------------------------------------------------------------------------------
// Exact comparison.

inline std::string first_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size())
        return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            std::ostringstream s;
            s.precision(9);
            s << "first mismatch at [" << i << "]: " << a[i] << " vs " << b[i];
            return s.str();
        }
    return "";
}

// The small model of the paged-cache and session-group tests: V = 97, n_ctx = 80, C = 32, H = 4 (D = 8),
// F = 64, L = 2, written once per test area.
inline FixtureModel small_fixture(const std::string& area, uint32_t seed) {
    FixtureSpec spec;
    spec.config.n_vocab = 97;
    spec.config.n_ctx = 80;
    spec.config.n_embd = 32;
    spec.config.n_head = 4;
    spec.config.n_inner = 64;
    spec.config.n_layer = 2;
    spec.seed = seed;
    return write_fixture(work_dir(area) / "model", spec);
}

inline std::vector<int32_t> random_tokens(uint32_t seed, int64_t n, int64_t n_vocab) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(n_vocab - 1));
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = pick(rng);
    return t;
}

}  // namespace kvtest
