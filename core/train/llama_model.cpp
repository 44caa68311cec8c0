#include "train/llama_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/errors.h"
#include "text/corpus.h"
#include "train/llama_ops.h"
#include "train/train.h"
#include "train/train_ops.h"

namespace kvscope {

void check_llama_trainable(const ModelConfig& c) {
    auto no = [&](const std::string& what) {
        throw UsageError("train: the Llama-family trainer does not handle " + what + " (model_type " + c.model_type + ")");
    };
    if (c.model_type != "llama" && c.model_type != "qwen3" && c.model_type != "mistral")
        no("this model_type: it trains llama, qwen3 and mistral");
    if (c.n_vocab < 2 || c.n_ctx < 2 || c.n_embd < 1 || c.n_layer < 1 || c.n_head < 1 || c.n_inner < 1)
        no("sizes below 1: every size must be positive");
    if (c.n_head % c.kv_heads() || c.head_dim() < 2 || c.head_dim() % 2)
        no("these heads: num_attention_heads must be a multiple of num_key_value_heads, head_dim even");
    if (c.activation != Activation::Silu) no("hidden_act other than silu");
    if (c.attention_bias || c.qkv_bias || c.o_bias || c.mlp_bias) no("biases (attention_bias, mlp_bias)");
    if (c.norm_plus_one || c.sandwich_norm || c.embedding_scale != 1.0 || c.query_pre_attn_scalar > 0 ||
        c.local_rope || c.final_logit_softcap > 0)
        no("Gemma 3's (1 + w) norms, sandwich norms, embedding scale, query_pre_attn_scalar, local rope or soft-capping");
    if (c.qk_norm != (c.model_type == "qwen3")) no("QK-norm outside qwen3 (the engine reads it from model_type qwen3)");
    if (!c.layer_window.empty() && int64_t(c.layer_window.size()) != c.n_layer) no("a window list not of n_layer entries");
    const int64_t w0 = c.window_of(0);
    for (int64_t il = 0; il < c.n_layer; ++il) {
        if (c.window_of(il) < 0) no("a negative sliding window");
        if (c.model_type == "llama" && c.window_of(il) > 0)
            no("a sliding window on llama (LlamaConfig has none: use qwen3)");
        if (c.model_type == "mistral" && c.window_of(il) != w0) no("windows that differ by layer on mistral (use qwen3)");
    }
}

std::vector<ParamInfo> llama_param_layout(const ModelConfig& c) {
    const int64_t V = c.n_vocab, C = c.n_embd, F = c.n_inner, Q = c.q_width(), KV = c.kv_width(), D = c.head_dim();
    std::vector<ParamInfo> out;
    auto add = [&](std::string name, std::vector<int64_t> shape) { add_param(out, std::move(name), std::move(shape)); };
    add("model.embed_tokens.weight", {V, C});
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        add(p + "input_layernorm.weight", {C});
        add(p + "self_attn.q_proj.weight", {Q, C});  // nn.Linear: (out, in)
        add(p + "self_attn.k_proj.weight", {KV, C});
        add(p + "self_attn.v_proj.weight", {KV, C});
        if (c.qk_norm) {
            add(p + "self_attn.q_norm.weight", {D});
            add(p + "self_attn.k_norm.weight", {D});
        }
        add(p + "self_attn.o_proj.weight", {C, Q});
        add(p + "post_attention_layernorm.weight", {C});
        add(p + "mlp.gate_proj.weight", {F, C});
        add(p + "mlp.up_proj.weight", {F, C});
        add(p + "mlp.down_proj.weight", {C, F});
    }
    add("model.norm.weight", {C});
    if (!c.tie_word_embeddings) add("lm_head.weight", {V, C});
    return out;
}

std::vector<float> llama_init_params(const ModelConfig& c, uint64_t seed) {
    const std::vector<ParamInfo> layout = llama_param_layout(c);
    std::vector<float> params(size_t(layout.back().offset + layout.back().size), 0.0f);
    Rng rng(mix_seed(seed, 0x6C6C616D));
    for (const ParamInfo& p : layout) {
        float* w = params.data() + p.offset;
        if (!p.decay) std::fill(w, w + p.size, 1.0f);  // every 1-D tensor is a norm weight
        else
            for (int64_t i = 0; i < p.size; ++i) w[i] = float(0.02 * rng.normal());
    }
    return params;
}

template <typename S>
LlamaPass<S>::LlamaPass(const ModelConfig& c, const std::vector<ParamInfo>& layout, int64_t max_batch, int64_t seq_len)
    : config_(c), max_rows_(max_batch * seq_len), seq_len_(seq_len) {
    // Offsets by position in llama_param_layout's order.
    size_t i = 0;
    embed_off_ = layout[i++].offset;
    off_.resize(size_t(c.n_layer));
    for (auto& o : off_) {
        o.fill(-1);
        for (Part part : {InLn, Wq, Wk, Wv, QNorm, KNorm, Wo, PostLn, Wg, Wu, Wd})
            if (c.qk_norm || (part != QNorm && part != KNorm)) o[part] = layout[i++].offset;
    }
    norm_off_ = layout[i++].offset;
    head_off_ = c.tie_word_embeddings ? embed_off_ : layout[i++].offset;

    const size_t N = size_t(max_rows_), C = size_t(c.n_embd), F = size_t(c.n_inner), V = size_t(c.n_vocab);
    const size_t H = size_t(c.n_head), K = size_t(c.kv_heads()), Q = size_t(c.q_width()), KV = size_t(c.kv_width());
    const size_t T = size_t(seq_len), half = size_t(c.head_dim() / 2);
    cos_.resize(T * half), sin_.resize(T * half);
    rope_table(cos_.data(), sin_.data(), c.rope, c.head_dim(), seq_len);
    x0_.resize(N * C);
    layers_.resize(size_t(c.n_layer));
    for (Layer& l : layers_) {
        l.ln1.resize(N * C), l.rstd1.resize(N);
        l.q.resize(N * Q), l.k.resize(N * KV), l.v.resize(N * KV);
        if (c.qk_norm) l.qn.resize(N * Q), l.kn.resize(N * KV), l.q_rstd.resize(N * H), l.k_rstd.resize(N * K);
        l.att.resize(size_t(max_batch) * H * T * T);
        l.atty.resize(N * Q), l.mid.resize(N * C);
        l.ln2.resize(N * C), l.rstd2.resize(N);
        l.gate.resize(N * F), l.up.resize(N * F), l.h.resize(N * F);
        l.out.resize(N * C);
    }
    lnf_.resize(N * C), rstdf_.resize(N);
    logits_.resize(N * V), probs_.resize(N * V);
    dres_.resize(N * C), dln_.resize(N * C);
    datty_.resize(N * Q), dq_.resize(N * Q), dqn_.resize(c.qk_norm ? N * Q : 0);
    dk_.resize(N * KV), dkn_.resize(c.qk_norm ? N * KV : 0), dv_.resize(N * KV);
    dgate_.resize(N * F), dup_.resize(N * F), dh_.resize(N * F);
}

// LlamaDecoderLayer: mid = in + o_proj(attention(rope(norm?(q)), rope(norm?(k)), v)) of input_layernorm(in);
// out = mid + mlp(post_attention_layernorm(mid)).
template <typename S>
void LlamaPass<S>::forward_layer(int64_t il, const S* params, const S* in, int64_t B, int64_t T, bool mlp) {
    const ModelConfig& c = config_;
    const int64_t N = B * T, C = c.n_embd, F = c.n_inner, H = c.n_head, K = c.kv_heads(), D = c.head_dim();
    const int64_t Q = H * D, KV = K * D;
    const double eps = c.layer_norm_epsilon;
    Layer& l = layers_[size_t(il)];
    const auto& o = off_[size_t(il)];
    auto p = [&](Part part) { return params + o[part]; };
    rms_norm_forward(l.ln1.data(), l.rstd1.data(), in, p(InLn), N, C, eps, false);
    proj_forward(l.q.data(), l.ln1.data(), p(Wq), N, C, Q);
    proj_forward(l.k.data(), l.ln1.data(), p(Wk), N, C, KV);
    proj_forward(l.v.data(), l.ln1.data(), p(Wv), N, C, KV);
    if (c.qk_norm) {  // Qwen3Attention: q_norm / k_norm over each head's D dims, before the rotation
        rms_norm_forward(l.qn.data(), l.q_rstd.data(), l.q.data(), p(QNorm), N * H, D, eps, false);
        rms_norm_forward(l.kn.data(), l.k_rstd.data(), l.k.data(), p(KNorm), N * K, D, eps, false);
    }
    S* qr = c.qk_norm ? l.qn.data() : l.q.data();
    S* kr = c.qk_norm ? l.kn.data() : l.k.data();
    rope_forward(qr, cos_.data(), sin_.data(), B, T, H, D);
    rope_forward(kr, cos_.data(), sin_.data(), B, T, K, D);
    const AttentionShape shape{B, T, H, K, D, 1.0 / std::sqrt(double(D)), c.window_of(il)};
    gqa_attention_forward(l.atty.data(), l.att.data(), qr, kr, l.v.data(), shape);
    proj_forward(l.mid.data(), l.atty.data(), p(Wo), N, Q, C);
    for (int64_t i = 0; i < N * C; ++i) l.mid[size_t(i)] += in[i];
    if (!mlp) {
        std::copy(l.mid.begin(), l.mid.begin() + N * C, l.out.begin());
        return;
    }
    rms_norm_forward(l.ln2.data(), l.rstd2.data(), l.mid.data(), p(PostLn), N, C, eps, false);
    swiglu_mlp_forward(l.out.data(), l.gate.data(), l.up.data(), l.h.data(), l.ln2.data(), p(Wg), p(Wu), p(Wd), N, C, F);
    for (int64_t i = 0; i < N * C; ++i) l.out[size_t(i)] += l.mid[size_t(i)];
}

// dres_ holds ∂loss/∂out on entry and ∂loss/∂in on return.
template <typename S>
void LlamaPass<S>::backward_layer(int64_t il, const S* params, S* grads, const S* in, int64_t B, int64_t T, bool mlp) {
    const ModelConfig& c = config_;
    const int64_t N = B * T, C = c.n_embd, F = c.n_inner, H = c.n_head, K = c.kv_heads(), D = c.head_dim();
    const int64_t Q = H * D, KV = K * D;
    Layer& l = layers_[size_t(il)];
    const auto& o = off_[size_t(il)];
    auto p = [&](Part part) { return params + o[part]; };
    auto g = [&](Part part) { return grads + o[part]; };
    // MLP: out = mid + mlp(ln2(mid)); dres becomes ∂loss/∂mid
    if (mlp) {
        swiglu_mlp_backward(dln_.data(), g(Wg), g(Wu), g(Wd), dgate_.data(), dup_.data(), dh_.data(), dres_.data(),
                            l.ln2.data(), l.gate.data(), l.up.data(), l.h.data(), p(Wg), p(Wu), p(Wd), N, C, F, false);
        rms_norm_backward(dres_.data(), g(PostLn), dln_.data(), l.mid.data(), l.rstd2.data(), p(PostLn), N, C, false);
    }
    // attention: mid = in + o_proj(atty)
    proj_backward(datty_.data(), g(Wo), dres_.data(), l.atty.data(), p(Wo), N, Q, C, false);
    const AttentionShape shape{B, T, H, K, D, 1.0 / std::sqrt(double(D)), c.window_of(il)};
    S* dqr = c.qk_norm ? dqn_.data() : dq_.data();
    S* dkr = c.qk_norm ? dkn_.data() : dk_.data();
    gqa_attention_backward(dqr, dkr, dv_.data(), datty_.data(), l.att.data(), q_rotated(l), k_rotated(l), l.v.data(),
                           shape);
    rope_backward(dqr, cos_.data(), sin_.data(), B, T, H, D);
    rope_backward(dkr, cos_.data(), sin_.data(), B, T, K, D);
    if (c.qk_norm) {
        std::fill(dq_.begin(), dq_.begin() + N * Q, S(0));
        std::fill(dk_.begin(), dk_.begin() + N * KV, S(0));
        rms_norm_backward(dq_.data(), g(QNorm), dqn_.data(), l.q.data(), l.q_rstd.data(), p(QNorm), N * H, D, false);
        rms_norm_backward(dk_.data(), g(KNorm), dkn_.data(), l.k.data(), l.k_rstd.data(), p(KNorm), N * K, D, false);
    }
    proj_backward(dln_.data(), g(Wq), dq_.data(), l.ln1.data(), p(Wq), N, C, Q, false);
    proj_backward(dln_.data(), g(Wk), dk_.data(), l.ln1.data(), p(Wk), N, C, KV, true);
    proj_backward(dln_.data(), g(Wv), dv_.data(), l.ln1.data(), p(Wv), N, C, KV, true);
    rms_norm_backward(dres_.data(), g(InLn), dln_.data(), in, l.rstd1.data(), p(InLn), N, C, false);
}

template <typename S>
double LlamaPass<S>::loss(const S* params, S* grads, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                          bool backward, bool mlp) {
    const int64_t N = B * T, C = config_.n_embd, V = config_.n_vocab, L = config_.n_layer;
    if (N > max_rows_ || T > seq_len_) throw UsageError("train: batch larger than the model was sized for");
    // forward; positions restart at 0 in every sequence, and the rope table is indexed by t (T <= seq_len_)
    embed_forward(x0_.data(), tokens, params + embed_off_, N, C);
    for (int64_t il = 0; il < L; ++il)
        forward_layer(il, params, il ? layers_[size_t(il - 1)].out.data() : x0_.data(), B, T, mlp);
    const S* last = layers_.back().out.data();
    rms_norm_forward(lnf_.data(), rstdf_.data(), last, params + norm_off_, N, C, config_.layer_norm_epsilon, false);
    matmul_nt(logits_.data(), lnf_.data(), params + head_off_, N, C, V, false);  // lm_head: (V, C), or tied
    const double loss_value = cross_entropy_forward(probs_.data(), logits_.data(), targets, N, V);
    if (!backward) return loss_value;

    // backward: dres_ carries ∂loss/∂(residual stream) down through the layers
    S* dlogits = logits_.data();
    cross_entropy_backward(dlogits, probs_.data(), targets, N, V);
    matmul_nn(dln_.data(), dlogits, params + head_off_, N, V, C, false);
    matmul_tn(grads + head_off_, dlogits, lnf_.data(), N, V, C, true);
    std::fill(dres_.begin(), dres_.begin() + N * C, S(0));
    rms_norm_backward(dres_.data(), grads + norm_off_, dln_.data(), last, rstdf_.data(), params + norm_off_, N, C, false);
    for (int64_t il = L - 1; il >= 0; --il)
        backward_layer(il, params, grads, il ? layers_[size_t(il - 1)].out.data() : x0_.data(), B, T, mlp);
    embed_backward(grads + embed_off_, dres_.data(), tokens, N, C);
    return loss_value;
}

template class LlamaPass<float>;
template class LlamaPass<double>;

}  // namespace kvscope
