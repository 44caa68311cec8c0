#include "train/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "io/read_file.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "text/corpus.h"
#include "train/llama_model.h"
#include "train/train_ops.h"

namespace kvscope {

namespace {
// Index of a tensor in param_layout(): wte, wpe, 12 per layer, ln_f.weight, ln_f.bias.
enum LayerParam { Ln1W, Ln1B, AttnW, AttnB, ProjW, ProjB, Ln2W, Ln2B, FcW, FcB, FcProjW, FcProjB, kPerLayer };
constexpr int64_t kWte = 0, kWpe = 1;
int64_t lp(int64_t il, LayerParam k) { return 2 + il * kPerLayer + k; }
}  // namespace

void check_trainable(const ModelConfig& c) {
    if (c.family == Family::Llama) return check_llama_trainable(c);
    auto no = [](const std::string& what) { throw UsageError("train: the trainer supports GPT-2's defaults only: " + what); };
    if (c.n_vocab < 2 || c.n_ctx < 2 || c.n_embd < 1 || c.n_layer < 1 || c.n_head < 1 || c.n_inner < 1)
        no("every size must be positive");
    if (c.n_embd % c.n_head) no("n_embd must be a multiple of n_head");
    if (c.activation != Activation::GeluTanh) no("activation gelu_new");
    if (c.norm_position != NormPosition::Pre) no("pre-LN");
    if (c.position_embedding != PositionEmbedding::Learned) no("learned positions");
    if (!c.tie_word_embeddings || c.lm_head_bias) no("tied embeddings without an lm_head bias");
    if (!c.qkv_bias || !c.final_layer_norm || c.embedding_scale != 1.0) no("qkv bias, final layer norm, no embedding scale");
}

void add_param(std::vector<ParamInfo>& layout, std::string name, std::vector<int64_t> shape) {
    ParamInfo p;
    p.name = std::move(name);
    p.size = 1;
    for (int64_t d : shape) p.size *= d;
    p.decay = shape.size() == 2;
    p.shape = std::move(shape);
    p.offset = layout.empty() ? 0 : layout.back().offset + layout.back().size;
    layout.push_back(std::move(p));
}

std::vector<ParamInfo> param_layout(const ModelConfig& c) {
    if (c.family == Family::Llama) return llama_param_layout(c);
    const int64_t V = c.n_vocab, C = c.n_embd, F = c.n_inner, P = c.n_ctx;
    std::vector<ParamInfo> out;
    auto add = [&](std::string name, std::vector<int64_t> shape) { add_param(out, std::move(name), std::move(shape)); };
    add("wte.weight", {V, C});
    add("wpe.weight", {P, C});
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string h = "h." + std::to_string(il) + ".";
        add(h + "ln_1.weight", {C});
        add(h + "ln_1.bias", {C});
        add(h + "attn.c_attn.weight", {C, 3 * C});
        add(h + "attn.c_attn.bias", {3 * C});
        add(h + "attn.c_proj.weight", {C, C});
        add(h + "attn.c_proj.bias", {C});
        add(h + "ln_2.weight", {C});
        add(h + "ln_2.bias", {C});
        add(h + "mlp.c_fc.weight", {C, F});
        add(h + "mlp.c_fc.bias", {F});
        add(h + "mlp.c_proj.weight", {F, C});
        add(h + "mlp.c_proj.bias", {C});
    }
    add("ln_f.weight", {C});
    add("ln_f.bias", {C});
    return out;
}

int64_t n_params(const ModelConfig& c) {
    const std::vector<ParamInfo> l = param_layout(c);
    return l.back().offset + l.back().size;
}

namespace {

// Layer 0 head 0 as a previous-token head, built from the sinusoidal position table: its keys read the
// head_dim/2 fastest (sin, cos) pairs of a position s, its queries the same pairs rotated back one step,
// so q_t·k_s ∝ Σ_i cos(ω_i (t-1-s)), largest at s = t-1. Token embeddings start with zeros in those
// dims, so the head sees clean positions. Training is free to change all of it. An experiment towards
// the two-layer induction circuit (previous-token head, then a layer-1 head keyed on it): in the runs
// recorded in assets/default/README.md, training on repeated random spans wore this head away again
// (score 0.6 at init, 0.1 after 1000 steps) and no induction head formed.
void seed_previous_token_head(const ModelConfig& c, const std::vector<ParamInfo>& layout, std::vector<float>& params,
                              double gain, double value_gain) {
    const int64_t C = c.n_embd, D = C / c.n_head, n_pairs = D / 2;
    auto find = [&](const std::string& name) -> float* {
        for (const ParamInfo& p : layout)
            if (p.name == name) return params.data() + p.offset;
        throw UsageError("train: no tensor " + name);
    };
    float* wte = find("wte.weight");
    for (int64_t v = 0; v < c.n_vocab; ++v) std::fill(wte + v * C, wte + v * C + 2 * n_pairs, 0.0f);
    float* w = find("h.0.attn.c_attn.weight");  // (C, 3C): columns [0, C) queries, [C, 2C) keys
    for (int64_t r = 0; r < C; ++r)
        for (int64_t j = 0; j < D; ++j) w[r * 3 * C + j] = w[r * 3 * C + C + j] = 0.0f;
    // Its values: a random projection of the token dims [2·n_pairs, C); c_proj writes them into the
    // position dims [0, 2·n_pairs), so the next layer finds "the previous token" apart from the current one.
    Rng rng(0x70726576);
    const int64_t n_tok_dims = C - 2 * n_pairs;
    for (int64_t r = 0; r < C; ++r)
        for (int64_t j = 0; j < D; ++j)
            w[r * 3 * C + 2 * C + j] = r < 2 * n_pairs ? 0.0f : float(rng.normal() / std::sqrt(double(n_tok_dims)));
    float* proj = find("h.0.attn.c_proj.weight");  // (C, C): row = attention output dim, column = residual dim
    for (int64_t j = 0; j < D; ++j)
        for (int64_t o = 0; o < C; ++o) proj[j * C + o] = (o == j && j < 2 * n_pairs) ? float(value_gain) : 0.0f;
    for (int64_t i = 0; i < n_pairs; ++i) {
        const double omega = 1.0 / std::pow(10000.0, double(2 * i) / double(C));
        const double cs = gain * std::cos(omega), sn = gain * std::sin(omega);
        const int64_t rs = 2 * i, rc = 2 * i + 1;          // rows: sin(ω t), cos(ω t)
        w[rs * 3 * C + C + 2 * i] = float(gain);            // k = gain·(sin ωs, cos ωs)
        w[rc * 3 * C + C + 2 * i + 1] = float(gain);
        w[rs * 3 * C + 2 * i] = float(cs);                  // q = gain·(sin ω(t-1), cos ω(t-1))
        w[rc * 3 * C + 2 * i] = float(-sn);
        w[rc * 3 * C + 2 * i + 1] = float(cs);
        w[rs * 3 * C + 2 * i + 1] = float(sn);
    }
}

// The two-head induction circuit as a starting point (InitOptions::circuit_gain), in a residual stream
// split three ways: dims [0, D) hold positions (the D/2 fastest sinusoid pairs, nothing else),
// [D, 2D) are left empty for layer 0 to write into, [2D, C) hold the tokens.
//   layer 0 head 0  previous-token head: q·k from the position dims, rotated one step back (as in
//                   seed_previous_token_head); its value is R·token, written into [D, 2D)
//   layer 1 head 0  induction head: key = the [D, 2D) code (R·previous token), query = R·current token,
//                   so position s scores ≈ token(t)·token(s-1); its value copies token(s) back into the
//                   token dims (R2ᵀR2: a rank-D projection), which the tied unembedding reads as token(s)
// R (D, C-2D) and R2 are random with orthonormal-ish rows. Every weight stays trainable; the runs in
// assets/default/README.md show training keeps and sharpens the circuit once it pays off at step 0.
// With heads = false only the split of the residual stream is made (tokens and positions apart, the slice
// between them empty) and every head starts random: does the circuit then form by itself?
void seed_induction_circuit(const ModelConfig& c, const std::vector<ParamInfo>& layout, std::vector<float>& params,
                            double gain, double pos_rms, bool heads) {
    const int64_t C = c.n_embd, D = C / c.n_head, n_tok = C - 2 * D;
    if (c.n_layer < 2 || n_tok < D)
        throw UsageError("train: --circuit-init needs n_layer >= 2 and n_embd >= 3 x head dim");
    auto find = [&](const std::string& name) -> float* {
        for (const ParamInfo& p : layout)
            if (p.name == name) return params.data() + p.offset;
        throw UsageError("train: no tensor " + name);
    };
    float* wte = find("wte.weight");  // (V, C)
    for (int64_t v = 0; v < c.n_vocab; ++v) std::fill(wte + v * C, wte + v * C + 2 * D, 0.0f);
    float* wpe = find("wpe.weight");  // (P, C): positions only in [0, D)
    const std::vector<float> table = sinusoidal_positions(c.n_ctx, C);
    for (int64_t t = 0; t < c.n_ctx; ++t)
        for (int64_t j = 0; j < C; ++j)
            wpe[t * C + j] = j < D ? float(pos_rms * std::sqrt(2.0) * table[size_t(t * C + j)]) : 0.0f;
    if (!heads) return;
    Rng rng(0x63697263);
    auto random_rows = [&](int64_t n_rows) {  // (n_rows, n_tok), entries N(0, 1/n_tok)
        std::vector<double> r(size_t(n_rows * n_tok));
        for (double& x : r) x = rng.normal() / std::sqrt(double(n_tok));
        return r;
    };
    const std::vector<double> R = random_rows(D), R2 = random_rows(D);
    // c_attn (C, 3C): row = input dim, columns [0, C) queries, [C, 2C) keys, [2C, 3C) values; head 0 = first D.
    float* a0 = find("h.0.attn.c_attn.weight");
    float* a1 = find("h.1.attn.c_attn.weight");
    for (float* a : {a0, a1})
        for (int64_t r = 0; r < C; ++r)
            for (int64_t j = 0; j < D; ++j) a[r * 3 * C + j] = a[r * 3 * C + C + j] = a[r * 3 * C + 2 * C + j] = 0.0f;
    for (int64_t i = 0; i < D / 2; ++i) {
        const double omega = 1.0 / std::pow(10000.0, double(2 * i) / double(C));
        const double cs = gain * std::cos(omega), sn = gain * std::sin(omega);
        const int64_t rs = 2 * i, rc = 2 * i + 1;
        a0[rs * 3 * C + C + 2 * i] = a0[rc * 3 * C + C + 2 * i + 1] = float(gain);
        a0[rs * 3 * C + 2 * i] = float(cs), a0[rc * 3 * C + 2 * i] = float(-sn);
        a0[rs * 3 * C + 2 * i + 1] = float(sn), a0[rc * 3 * C + 2 * i + 1] = float(cs);
    }
    for (int64_t r = 0; r < n_tok; ++r)
        for (int64_t j = 0; j < D; ++j) {
            const float rj = float(R[size_t(j * n_tok + r)]);
            a0[(2 * D + r) * 3 * C + 2 * C + j] = rj;                  // layer 0 value: R·token
            a1[(2 * D + r) * 3 * C + j] = float(gain) * rj;            // layer 1 query: R·token
            a1[(2 * D + r) * 3 * C + 2 * C + j] = float(R2[size_t(j * n_tok + r)]);  // layer 1 value: R2·token
        }
    for (int64_t j = 0; j < D; ++j) a1[(D + j) * 3 * C + C + j] = float(gain);  // layer 1 key: the [D, 2D) code
    // c_proj (C, C): row = head output dim, column = residual dim.
    float* p0 = find("h.0.attn.c_proj.weight");
    float* p1 = find("h.1.attn.c_proj.weight");
    for (int64_t j = 0; j < D; ++j)
        for (int64_t o = 0; o < C; ++o) {
            p0[j * C + o] = o == D + j ? 1.0f : 0.0f;
            p1[j * C + o] = o >= 2 * D ? float(gain * R2[size_t(j * n_tok + o - 2 * D)]) : 0.0f;
        }
}

}  // namespace

void check_init(const ModelConfig& c, const InitOptions& init) {
    const InitOptions plain;
    if (c.family == Family::Llama &&
        (init.attn_std != plain.attn_std || init.tok_std != plain.tok_std || init.pos_rms != plain.pos_rms ||
         init.prev_head_gain > 0 || init.circuit_gain > 0 || init.split_stream))
        throw UsageError("train: the initialisation options (seeded heads, stds, positions) are GPT-2's only");
}

std::vector<float> init_params(const ModelConfig& c, uint64_t seed, const InitOptions& init) {
    check_init(c, init);
    if (c.family == Family::Llama) return llama_init_params(c, seed);
    const std::vector<ParamInfo> layout = param_layout(c);
    std::vector<float> params(size_t(n_params(c)), 0.0f);
    Rng rng(mix_seed(seed, 0x696E6974));
    const double residual_std = 0.02 / std::sqrt(2.0 * double(c.n_layer));
    for (const ParamInfo& p : layout) {
        float* w = params.data() + p.offset;
        const bool gain = p.name.find("ln_") != std::string::npos && p.name.ends_with(".weight");
        if (gain) std::fill(w, w + p.size, 1.0f);
        if (!p.decay) continue;  // biases stay 0
        if (p.name == "wpe.weight") {
            // Learned positions start from the sinusoidal table (RMS 0.02 like the token rows): relative
            // offsets are then linear maps of it, so a previous-token head is quick to find.
            const std::vector<float> table = sinusoidal_positions(c.n_ctx, c.n_embd);
            for (int64_t i = 0; i < p.size; ++i) w[i] = float(init.pos_rms * std::sqrt(2.0) * table[size_t(i)]);
            continue;
        }
        const double std = p.name.ends_with("c_proj.weight")   ? residual_std
                           : p.name.ends_with("c_attn.weight") ? init.attn_std
                           : p.name == "wte.weight"            ? init.tok_std
                                                               : 0.02;
        for (int64_t i = 0; i < p.size; ++i) w[i] = float(std * rng.normal());
    }
    if (init.prev_head_gain > 0) seed_previous_token_head(c, layout, params, init.prev_head_gain, init.prev_value_gain);
    if (init.circuit_gain > 0 || init.split_stream)
        seed_induction_circuit(c, layout, params, init.circuit_gain, init.pos_rms, init.circuit_gain > 0);
    return params;
}

template <typename S>
TrainModel<S>::TrainModel(const ModelConfig& config, int64_t max_batch, int64_t seq_len)
    : config_(config), layout_(param_layout(config)), max_rows_(max_batch * seq_len) {
    check_trainable(config);
    if (seq_len > config.n_ctx) throw UsageError("train: sequence length exceeds n_positions");
    if (config.family == Family::Llama) {
        params.assign(size_t(n_params(config)), S(0));
        grads.assign(params.size(), S(0));
        llama_ = std::make_shared<LlamaPass<S>>(config, layout_, max_batch, seq_len);
        return;
    }
    const size_t N = size_t(max_rows_), C = size_t(config.n_embd), F = size_t(config.n_inner);
    const size_t V = size_t(config.n_vocab), H = size_t(config.n_head), T = size_t(seq_len);
    params.assign(size_t(n_params(config)), S(0));
    grads.assign(params.size(), S(0));
    x0.resize(N * C);
    layers_.resize(size_t(config.n_layer));
    for (Layer& l : layers_) {
        l.ln1.resize(N * C), l.ln1_mean.resize(N), l.ln1_rstd.resize(N);
        l.qkv.resize(N * 3 * C);
        l.att.resize(size_t(max_batch) * H * T * T);
        l.atty.resize(N * C), l.mid.resize(N * C);
        l.ln2.resize(N * C), l.ln2_mean.resize(N), l.ln2_rstd.resize(N);
        l.fc.resize(N * F), l.fc_gelu.resize(N * F);
        l.out.resize(N * C);
    }
    lnf.resize(N * C), lnf_mean.resize(N), lnf_rstd.resize(N);
    logits.resize(N * V), probs.resize(N * V);
    dres.resize(N * C), dln.resize(N * C), datty.resize(N * C), dtmp.resize(N * C);
    dqkv.resize(N * 3 * C);
    dfc.resize(N * F), dfc_gelu.resize(N * F);
}

template <typename S>
double TrainModel<S>::loss(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, bool backward) {
    const int64_t N = B * T, C = config_.n_embd, F = config_.n_inner, V = config_.n_vocab, H = config_.n_head;
    const int64_t L = config_.n_layer;
    const double eps = config_.layer_norm_epsilon;
    if (N > max_rows_ || T > config_.n_ctx) throw UsageError("train: batch larger than the model was sized for");
    for (int64_t i = 0; i < N; ++i)
        if (tokens[i] < 0 || tokens[i] >= V || targets[i] < -1 || targets[i] >= V)
            throw UsageError("train: token id outside the vocabulary");
    if (llama_) {
        if (backward) std::fill(grads.begin(), grads.end(), S(0));
        return llama_->loss(params.data(), grads.data(), tokens, targets, B, T, backward, mlp);
    }
    const int64_t ln_f = 2 + L * kPerLayer;

    // forward
    embedding_forward(x0.data(), tokens, p(kWte), p(kWpe), B, T, C);
    for (int64_t il = 0; il < L; ++il) {
        Layer& l = layers_[size_t(il)];
        const S* in = il ? layers_[size_t(il - 1)].out.data() : x0.data();
        layer_norm_forward(l.ln1.data(), l.ln1_mean.data(), l.ln1_rstd.data(), in, p(lp(il, Ln1W)), p(lp(il, Ln1B)), N,
                           C, eps);
        linear_forward(l.qkv.data(), l.ln1.data(), p(lp(il, AttnW)), p(lp(il, AttnB)), N, C, 3 * C);
        attention_forward(l.atty.data(), l.att.data(), l.qkv.data(), B, T, C, H);
        linear_forward(l.mid.data(), l.atty.data(), p(lp(il, ProjW)), p(lp(il, ProjB)), N, C, C);
        for (int64_t i = 0; i < N * C; ++i) l.mid[size_t(i)] += in[i];
        layer_norm_forward(l.ln2.data(), l.ln2_mean.data(), l.ln2_rstd.data(), l.mid.data(), p(lp(il, Ln2W)),
                           p(lp(il, Ln2B)), N, C, eps);
        if (!mlp) {
            std::copy(l.mid.begin(), l.mid.begin() + N * C, l.out.begin());
            continue;
        }
        linear_forward(l.fc.data(), l.ln2.data(), p(lp(il, FcW)), p(lp(il, FcB)), N, C, F);
        gelu_forward(l.fc_gelu.data(), l.fc.data(), N * F);
        linear_forward(l.out.data(), l.fc_gelu.data(), p(lp(il, FcProjW)), p(lp(il, FcProjB)), N, F, C);
        for (int64_t i = 0; i < N * C; ++i) l.out[size_t(i)] += l.mid[size_t(i)];
    }
    const S* last = layers_.back().out.data();
    layer_norm_forward(lnf.data(), lnf_mean.data(), lnf_rstd.data(), last, p(ln_f), p(ln_f + 1), N, C, eps);
    matmul_nt(logits.data(), lnf.data(), p(kWte), N, C, V, false);  // tied: logits = lnf · wteᵀ
    const double loss_value = cross_entropy_forward(probs.data(), logits.data(), targets, N, V);
    if (!backward) return loss_value;

    // backward: dres carries ∂loss/∂(residual stream) down through the layers
    std::fill(grads.begin(), grads.end(), S(0));
    S* dlogits = logits.data();
    cross_entropy_backward(dlogits, probs.data(), targets, N, V);
    matmul_nn(dln.data(), dlogits, p(kWte), N, V, C, false);
    matmul_tn(g(kWte), dlogits, lnf.data(), N, V, C, true);
    std::fill(dres.begin(), dres.begin() + N * C, S(0));
    layer_norm_backward(dres.data(), g(ln_f), g(ln_f + 1), dln.data(), last, lnf_mean.data(), lnf_rstd.data(),
                        p(ln_f), N, C);
    for (int64_t il = L - 1; il >= 0; --il) {
        Layer& l = layers_[size_t(il)];
        const S* in = il ? layers_[size_t(il - 1)].out.data() : x0.data();
        // MLP: out = mid + c_proj(gelu(c_fc(ln_2(mid)))); without it ∂loss/∂mid = ∂loss/∂out
        if (mlp) {
            linear_backward(dfc_gelu.data(), g(lp(il, FcProjW)), g(lp(il, FcProjB)), dres.data(), l.fc_gelu.data(),
                            p(lp(il, FcProjW)), N, F, C);
            gelu_backward(dfc.data(), dfc_gelu.data(), l.fc.data(), N * F);
            linear_backward(dln.data(), g(lp(il, FcW)), g(lp(il, FcB)), dfc.data(), l.ln2.data(), p(lp(il, FcW)), N, C, F);
            layer_norm_backward(dres.data(), g(lp(il, Ln2W)), g(lp(il, Ln2B)), dln.data(), l.mid.data(),
                                l.ln2_mean.data(), l.ln2_rstd.data(), p(lp(il, Ln2W)), N, C);
        }
        // attention: mid = in + c_proj(attn(c_attn(ln_1(in))))
        linear_backward(datty.data(), g(lp(il, ProjW)), g(lp(il, ProjB)), dres.data(), l.atty.data(),
                        p(lp(il, ProjW)), N, C, C);
        attention_backward(dqkv.data(), datty.data(), l.att.data(), l.qkv.data(), B, T, C, H);
        linear_backward(dln.data(), g(lp(il, AttnW)), g(lp(il, AttnB)), dqkv.data(), l.ln1.data(), p(lp(il, AttnW)), N,
                        C, 3 * C);
        layer_norm_backward(dres.data(), g(lp(il, Ln1W)), g(lp(il, Ln1B)), dln.data(), in, l.ln1_mean.data(),
                            l.ln1_rstd.data(), p(lp(il, Ln1W)), N, C);
    }
    embedding_backward(g(kWte), g(kWpe), dres.data(), tokens, B, T, C);
    return loss_value;
}

template <typename S> const std::vector<S>& TrainModel<S>::forward_logits() const {
    return llama_ ? llama_->logits() : logits;
}

template class TrainModel<float>;
template class TrainModel<double>;

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, int64_t t, double lr, double wd,
                const AdamWOptions& o) {
    const double c1 = 1.0 - std::pow(o.beta1, double(t)), c2 = 1.0 - std::pow(o.beta2, double(t));
    for (int64_t i = 0; i < n; ++i) {
        m[i] = float(o.beta1 * m[i] + (1.0 - o.beta1) * g[i]);
        v[i] = float(o.beta2 * v[i] + (1.0 - o.beta2) * double(g[i]) * g[i]);
        const double step = (m[i] / c1) / (std::sqrt(v[i] / c2) + o.eps);
        p[i] = float(double(p[i]) * (1.0 - lr * wd) - lr * step);
    }
}

double learning_rate(int64_t step, const TrainOptions& o) {
    if (step < o.warmup) return o.lr * double(step + 1) / double(o.warmup);
    const double span = double(std::max<int64_t>(1, o.steps - o.warmup));
    const double progress = std::min(1.0, double(step - o.warmup) / span);
    const double floor = o.lr * o.min_lr_ratio;
    return floor + 0.5 * (o.lr - floor) * (1.0 + std::cos(3.141592653589793 * progress));
}

TrainResult train(const TrainOptions& o, const Tokenizer& tokenizer,
                  const std::function<void(const TrainProgress&)>& on_step) {
    ModelConfig config = o.config;
    config.n_vocab = tokenizer.n_vocab();
    if (o.steps < 1 || o.batch < 1 || o.seq_len < 2) throw UsageError("train: steps, batch must be >= 1, seq_len >= 2");
    if (o.seq_len > config.n_ctx)
        throw UsageError("train: --seq " + std::to_string(o.seq_len) + " exceeds n_positions " +
                         std::to_string(config.n_ctx));
    check_trainable(config);
    const Corpus corpus(tokenizer, o.seed, o.mix);
    const Corpus copy_corpus(tokenizer, o.seed, o.copy_mix);
    const int64_t copy_seq = o.copy_seq > 0 ? std::min(o.copy_seq, o.seq_len) : o.seq_len;
    const int64_t copy_batch = std::max<int64_t>(1, o.batch * o.seq_len / copy_seq);
    TrainModel<float> model(config, o.batch, o.seq_len);
    if (!o.start_params.empty() && o.start_params.size() != size_t(n_params(config)))
        throw UsageError("train: " + std::to_string(o.start_params.size()) + " start weights for a model of " +
                         std::to_string(n_params(config)) + " parameters");
    model.params = o.start_params.empty() ? init_params(config, o.seed, o.init) : o.start_params;
    std::vector<float> m(model.params.size(), 0.0f), v(model.params.size(), 0.0f);
    std::vector<int32_t> tokens(size_t(o.batch * o.seq_len)), targets(tokens.size());

    TrainResult result;
    const auto start = std::chrono::steady_clock::now();
    int64_t n_tokens = 0;
    for (int64_t step = 0; step < o.steps; ++step) {
        const bool copying = step < o.copy_phase;
        const Corpus& c = copying ? copy_corpus : corpus;
        const int64_t B = copying ? copy_batch : o.batch, T = copying ? copy_seq : o.seq_len;
        for (int64_t b = 0; b < B; ++b) {
            std::vector<uint8_t> predictable;
            const std::vector<TokenId> seq = c.sequence(step, b, T + 1, o.score_predictable_only ? &predictable : nullptr);
            std::copy(seq.begin(), seq.end() - 1, tokens.begin() + b * T);
            std::copy(seq.begin() + 1, seq.end(), targets.begin() + b * T);
            if (o.score_predictable_only)
                for (int64_t t = 0; t < T; ++t)
                    if (!predictable[size_t(t + 1)]) targets[size_t(b * T + t)] = -1;
        }
        model.mlp = step >= o.attn_only;
        const double loss = model.loss(tokens.data(), targets.data(), B, T, true);
        n_tokens += B * T;
        if (!std::isfinite(loss)) throw UsageError("train: the loss diverged at step " + std::to_string(step) +
                                                   " (try a smaller --lr)");
        double norm2 = 0;
        for (float gi : model.grads) norm2 += double(gi) * gi;
        const double norm = std::sqrt(norm2);
        if (o.clip > 0 && norm > o.clip) {
            const float s = float(o.clip / norm);
            for (float& gi : model.grads) gi *= s;
        }
        const double lr = learning_rate(step, o);
        for (const ParamInfo& p : model.layout()) {
            const bool tok = p.name == "wte.weight" || p.name == "model.embed_tokens.weight", pos = p.name == "wpe.weight";
            const double scale = tok ? o.tok_lr : pos ? o.pos_lr : 1.0;
            if (scale == 0) continue;  // frozen: not even weight decay
            const double wd = p.decay && (o.emb_decay || !(tok || pos)) ? o.adamw.weight_decay : 0.0;
            adamw_step(model.params.data() + p.offset, model.grads.data() + p.offset, m.data() + p.offset,
                       v.data() + p.offset, p.size, step + 1, lr * scale, wd, o.adamw);
        }
        result.losses.push_back(loss);
        if (on_step) {
            TrainProgress pr;
            pr.step = step + 1;
            pr.n_steps = o.steps;
            pr.loss = loss;
            pr.lr = lr;
            pr.grad_norm = norm;
            pr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            pr.tokens = n_tokens;
            pr.params = &model.params;
            on_step(pr);
        }
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.params = std::move(model.params);
    return result;
}

void save_model(const std::string& dir, const ModelConfig& config, const std::vector<float>& params,
                const std::string& tokenizer_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(dir, ec)) fs::create_directories(dir, ec);
    if (ec) throw LoadError(dir, "cannot create folder: " + ec.message());
    make_output_folder("", dir);  // a folder holding files kvscope did not write is refused, not overwritten
    std::vector<TensorToWrite> tensors;
    for (const ParamInfo& p : param_layout(config)) {
        TensorToWrite t;
        t.name = p.name;
        t.shape = p.shape;
        t.bytes.resize(size_t(p.size) * sizeof(float));
        std::memcpy(t.bytes.data(), params.data() + p.offset, t.bytes.size());
        tensors.push_back(std::move(t));
    }
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
    write_file_atomic((fs::path(dir) / "config.json").string(), config_to_json(config));
    if (tokenizer_dir.empty() || fs::equivalent(tokenizer_dir, dir, ec)) return;
    const bool json = fs::exists(fs::path(tokenizer_dir) / "tokenizer.json", ec);  // what Tokenizer::load reads
    const std::vector<std::string> names = json ? std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}
                                                : std::vector<std::string>{"vocab.json", "merges.txt"};
    for (const std::string& name : names) {
        if (json && !fs::exists(fs::path(tokenizer_dir) / name, ec)) continue;  // tokenizer_config.json is optional
        write_file_atomic((fs::path(dir) / name).string(),  // through the writer that records them
                          read_file_bounded((fs::path(tokenizer_dir) / name).string(), k_tokenizer_file));
    }
}

std::vector<float> load_params(const std::string& dir, const ModelConfig& config) {
    const std::string path = (std::filesystem::path(dir) / "model.safetensors").string();
    const SafetensorsFile file(path);
    std::vector<float> params(size_t(n_params(config)));
    for (const ParamInfo& p : param_layout(config)) {
        const TensorView* t = file.find(p.name);
        if (!t) throw LoadError(path, "has no tensor " + p.name + ", which a model of this config.json has");
        if (t->dtype != Dtype::F32 || t->shape != p.shape)
            throw LoadError(path, p.name + " is " + to_string(t->dtype) + " " + shape_text(t->shape) +
                                      "; training starts from F32 " + shape_text(p.shape));
        std::memcpy(params.data() + p.offset, t->data, size_t(p.size) * sizeof(float));
    }
    return params;
}

}  // namespace kvscope
