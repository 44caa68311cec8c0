#include "forward/layers.h"

#include "kernels/kernels.h"

namespace kvscope {

void embed(const ModelConfig& cfg, const Weights& w, TokenId token, int64_t position, float* out) {
    const int64_t C = cfg.n_embd;
    embedding_row(w, C, token, out);
    if (!w.position_embedding) {
        if (cfg.embedding_scale != 1.0)
            for (int64_t i = 0; i < C; ++i) out[i] *= float(cfg.embedding_scale);
        return;
    }
    const float* pe = w.position_embedding + position * C;
    for (int64_t i = 0; i < C; ++i) out[i] = out[i] * float(cfg.embedding_scale) + pe[i];
}

void normalize(const ModelConfig& cfg, float* y, const float* x, const float* gain, const float* bias, int64_t T) {
    if (cfg.family == Family::Llama) rms_norm(y, x, gain, T, cfg.n_embd, float(cfg.layer_norm_epsilon));
    else layer_norm(y, x, gain, bias, T, cfg.n_embd, float(cfg.layer_norm_epsilon));
}

const float* sublayer_input(const ModelConfig& cfg, const float* x, float* xn, const float* gain, const float* bias,
                            int64_t T) {
    if (cfg.norm_position != NormPosition::Pre) return x;
    normalize(cfg, xn, x, gain, bias, T);
    return xn;
}

void sublayer_output(const ModelConfig& cfg, float* x, const float* y, const float* gain, const float* bias, int64_t T) {
    add(x, y, T * cfg.n_embd);
    if (cfg.norm_position == NormPosition::Post) normalize(cfg, x, x, gain, bias, T);
}

void mlp_sublayer(const ModelConfig& cfg, const LayerWeights& lw, float* x, float* xn, float* hidden, float* proj,
                  int64_t T) {
    const int64_t C = cfg.n_embd, F = cfg.n_inner;
    const float* in = sublayer_input(cfg, x, xn, lw.ln_2_weight, lw.ln_2_bias, T);
    if (cfg.family == Family::Llama) {  // LlamaMLP: down(act(gate(x)) * up(x)), nn.Linear (out, in) weights
        float* gate = hidden;          // (T, F)
        float* up = hidden + T * F;    // (T, F)
        const MatmulTarget gate_up[] = {{gate, lw.gate_weight, lw.gate_bias, F}, {up, lw.fc_weight, lw.fc_bias, F}};
        matmul_nk_shared(in, T, C, gate_up);
        if (cfg.activation == Activation::Silu) {
            silu_multiply(gate, up, T * F);
        } else {
            gelu_tanh(gate, T * F);
            multiply(gate, up, T * F);
        }
        matmul_nk(proj, gate, lw.fc_proj_weight, lw.fc_proj_bias, T, F, C);  // (T, C)
        if (lw.mlp_out_norm_weight) normalize(cfg, proj, proj, lw.mlp_out_norm_weight, nullptr, T);  // Gemma 3
        sublayer_output(cfg, x, proj, lw.ln_2_weight, lw.ln_2_bias, T);
        return;
    }
    matmul_kn(hidden, in, lw.fc_weight, lw.fc_bias, T, C, F);  // (T, F)
    switch (cfg.activation) {
        case Activation::GeluTanh: gelu_tanh(hidden, T * F); break;
        case Activation::GeluErf: gelu_erf(hidden, T * F); break;
        case Activation::Relu: relu(hidden, T * F); break;
        case Activation::Silu: silu(hidden, T * F); break;
    }
    matmul_kn(proj, hidden, lw.fc_proj_weight, lw.fc_proj_bias, T, F, C);  // (T, C)
    sublayer_output(cfg, x, proj, lw.ln_2_weight, lw.ln_2_bias, T);
}

}  // namespace kvscope
