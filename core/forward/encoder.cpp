#include "forward/encoder.h"

#include <cmath>
#include <cstring>

#include "base/errors.h"
#include "base/thread_pool.h"
#include "forward/layers.h"
#include "forward/model.h"
#include "kernels/kernels.h"

namespace kvscope {

std::shared_ptr<const EncoderOutput> encode(const Model& model, std::span<const TokenId> source, bool record) {
    const ModelConfig& cfg = model.config();
    const Weights& w = model.weights();
    if (!cfg.encoder_decoder) throw UsageError("this model has no encoder: {encoder_source} is for encoder-decoder models");
    const int64_t S = int64_t(source.size()), C = cfg.n_embd, H = cfg.n_head, D = cfg.head_dim(), F = cfg.n_inner;
    const int64_t E = cfg.n_encoder_layer, L = cfg.n_layer;
    if (S == 0) throw UsageError("the source is empty");
    if (S > cfg.n_ctx)
        throw UsageError("the source has " + std::to_string(S) + " tokens, the model's n_positions is " + std::to_string(cfg.n_ctx));
    for (TokenId id : source) model.check_token(id);

    auto out = std::make_shared<EncoderOutput>();
    out->source.assign(source.begin(), source.end());
    out->n_layer = L;
    out->n_head = H;
    out->head_dim = D;
    out->n_encoder_layer = E;
    if (record)
        for (auto* buf : {&out->q, &out->k, &out->v}) buf->assign(size_t(E * S * C), 0.0f);

    std::vector<float> x(size_t(S * C)), xn(size_t(S * C)), qkv(size_t(S * 3 * C)), attn(size_t(S * C)),
        proj(size_t(S * C)), hidden(size_t(S * F));  // (S, C), (S, C), (S, 3C), (S, C), (S, C), (S, F)
    std::vector<float> scratch(size_t(H * S));         // (H, S) softmax weights, one row per head task
    for (int64_t s = 0; s < S; ++s) embed(cfg, w, source[size_t(s)], s, x.data() + s * C);

    const float scale = 1.0f / std::sqrt(float(D));
    const KeyRange every_source{0, 0, S - 1};  // no mask: each source position sees all of them
    for (int64_t il = 0; il < E; ++il) {
        const LayerWeights& lw = w.encoder_layers[size_t(il)];
        const float* in = sublayer_input(cfg, x.data(), xn.data(), lw.ln_1_weight, lw.ln_1_bias, S);
        matmul_kn(qkv.data(), in, lw.attn_weight, lw.attn_bias, S, C, 3 * C);  // (S, 3C)
        if (record)
            for (int64_t s = 0; s < S; ++s)
                for (auto [buf, col] : {std::pair{&out->q, 0}, {&out->k, 1}, {&out->v, 2}})
                    std::memcpy(buf->data() + (il * S + s) * C, qkv.data() + s * 3 * C + col * C, size_t(C) * sizeof(float));
        ThreadPool::global().parallel_for(H, [&](int64_t h) {
            for (int64_t s = 0; s < S; ++s)
                head_attention(attn.data() + s * C + h * D, scratch.data() + h * S, qkv.data() + s * 3 * C + h * D,
                               qkv.data() + C + h * D, qkv.data() + 2 * C + h * D, 3 * C, every_source, D, scale);
        });
        matmul_kn(proj.data(), attn.data(), lw.attn_proj_weight, lw.attn_proj_bias, S, C, C);  // (S, C)
        sublayer_output(cfg, x.data(), proj.data(), lw.ln_1_weight, lw.ln_1_bias, S);
        mlp_sublayer(cfg, lw, x.data(), xn.data(), hidden.data(), proj.data(), S);
    }
    if (w.encoder_ln_f_weight)
        layer_norm(x.data(), x.data(), w.encoder_ln_f_weight, w.encoder_ln_f_bias, S, C, float(cfg.layer_norm_epsilon));

    // The cross-attention cache: every decoder layer's keys and values of the source, computed once.
    out->cross_k.assign(size_t(L * H * S * D), 0.0f);
    out->cross_v.assign(size_t(L * H * S * D), 0.0f);
    std::vector<float> kv(size_t(S * 2 * C));  // (S, 2C)
    for (int64_t il = 0; il < L; ++il) {
        const LayerWeights& lw = w.layers[size_t(il)];
        matmul_kn(kv.data(), x.data(), lw.cross_kv_weight, lw.cross_kv_bias, S, C, 2 * C);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s) {
                std::memcpy(out->cross_k.data() + ((il * H + h) * S + s) * D, kv.data() + s * 2 * C + h * D,
                            size_t(D) * sizeof(float));
                std::memcpy(out->cross_v.data() + ((il * H + h) * S + s) * D, kv.data() + s * 2 * C + C + h * D,
                            size_t(D) * sizeof(float));
            }
    }
    const double per_row = 2.0 * double(C * 3 * C + C * C + 2 * C * F);
    out->flops = double(E) * (per_row * double(S) + 4.0 * double(C) * double(S * S)) + double(L) * 2.0 * double(S * C * 2 * C);
    return out;
}

}  // namespace kvscope
