#pragma once
// The Llama-family model the trainer trains (Family::Llama configs), with Hugging Face's tensor names so a
// saved folder loads in the engine like a downloaded checkpoint. TrainModel (train.h) owns one
// LlamaPass when its config is a Llama-family one; this file is its arithmetic.
//
//   check_llama_trainable(config)      throws UsageError naming what the Llama path does not train
//   llama_param_layout(config)         model.embed_tokens.weight, per layer input_layernorm,
//                                      self_attn.{q,k,v}_proj (out, in), [q_norm, k_norm], o_proj,
//                                      post_attention_layernorm, mlp.{gate,up,down}_proj; model.norm;
//                                      lm_head.weight unless tied. Matrices carry weight decay.
//   llama_init_params(config, seed)    every matrix N(0, 0.02) (LlamaPreTrainedModel: initializer_range), norms 1
//   LlamaPass<S>                       the activations of one batch and the forward / backward over them
//
// Trainable: model_type "llama" (no window), "qwen3" (QK-norm; sliding layers through layer_types) and
// "mistral" (one window on every layer), SiLU, no biases, no Gemma-only features — what config_to_json
// writes and the engine reads back as the same computation.
#include <array>
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace kvscope {

struct ParamInfo;  // train.h

void check_llama_trainable(const ModelConfig& config);
std::vector<ParamInfo> llama_param_layout(const ModelConfig& config);
std::vector<float> llama_init_params(const ModelConfig& config, uint64_t seed);

// T = positions per sequence, N = B·T rows, C = hidden, Q = H·D, KV = K·D, F = MLP width, V = vocab.
template <typename S> class LlamaPass {
public:
    LlamaPass(const ModelConfig& config, const std::vector<ParamInfo>& layout, int64_t max_batch, int64_t seq_len);
    // Mean cross-entropy of the (B, T) batch (targets < 0 not scored); when backward, grads += ∂loss/∂params
    // (TrainModel zeroes them first). mlp = false skips every MLP (out = mid).
    double loss(const S* params, S* grads, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                bool backward, bool mlp);
    const std::vector<S>& logits() const { return logits_; }  // (N, V) of the last forward (dlogits after backward)

private:
    struct Layer {
        std::vector<S> ln1, rstd1;          // (N, C), (N)
        std::vector<S> q, k, v;             // (N, Q), (N, KV), (N, KV): projections (k, v are what the cache holds
                                            // before rotation); without QK-norm q, k are rotated in place
        std::vector<S> qn, kn;              // (N, Q), (N, KV): QK-norm's output, rotated in place (QK-norm only)
        std::vector<S> q_rstd, k_rstd;      // (N·H), (N·K)
        std::vector<S> att;                 // (B, H, T, T)
        std::vector<S> atty;                // (N, Q) attention output before o_proj
        std::vector<S> mid;                 // (N, C) residual after attention
        std::vector<S> ln2, rstd2;          // (N, C), (N)
        std::vector<S> gate, up, h;         // (N, F) each
        std::vector<S> out;                 // (N, C) residual after the MLP
    };
    void forward_layer(int64_t il, const S* params, const S* in, int64_t B, int64_t T, bool mlp);
    void backward_layer(int64_t il, const S* params, S* grads, const S* in, int64_t B, int64_t T, bool mlp);
    const S* q_rotated(const Layer& l) const { return config_.qk_norm ? l.qn.data() : l.q.data(); }
    const S* k_rotated(const Layer& l) const { return config_.qk_norm ? l.kn.data() : l.k.data(); }
    enum Part { InLn, Wq, Wk, Wv, QNorm, KNorm, Wo, PostLn, Wg, Wu, Wd, kParts };
    ModelConfig config_;
    std::vector<std::array<int64_t, kParts>> off_;  // (L) offset of each layer tensor in params (-1: absent)
    int64_t embed_off_ = 0, norm_off_ = 0, head_off_ = 0;  // head_off_ = embed_off_ when tied
    int64_t max_rows_, seq_len_;
    std::vector<S> cos_, sin_;               // (T, D/2)
    std::vector<S> x0_;                      // (N, C) embeddings
    std::vector<Layer> layers_;              // L
    std::vector<S> lnf_, rstdf_;             // (N, C), (N)
    std::vector<S> logits_, probs_;          // (N, V) each; logits become dlogits in backward
    std::vector<S> dres_, dln_;              // (N, C) each
    std::vector<S> datty_, dq_, dqn_;        // (N, Q) each
    std::vector<S> dk_, dkn_, dv_;           // (N, KV) each
    std::vector<S> dgate_, dup_, dh_;        // (N, F) each
};

}  // namespace kvscope
