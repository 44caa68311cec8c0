// The config keys that shape the forward pass, each with a sentence on what its value does.
#include "model/architecture.h"

#include <algorithm>
#include <cstdio>

namespace kvscope {
namespace {

std::string number_text(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

const char* flag(bool b) { return b ? "true" : "false"; }

// "32 per-frequency divisors from the GGUF file, 1 .. 8": frequency i is divided by factors[i].
std::string describe_freq_factors(const std::vector<float>& factors) {
    const auto [lo, hi] = std::minmax_element(factors.begin(), factors.end());
    if (lo == factors.end()) return "no per-frequency divisors";
    return std::to_string(factors.size()) + " per-frequency divisors from the GGUF file, " + number_text(*lo) + " .. " +
           number_text(*hi);
}

}  // namespace

namespace {

// Llama-family keys (Hugging Face's LlamaConfig names); "differs" compares with GPT-2's computation.
std::vector<ArchLine> llama_architecture(const ModelConfig& c) {
    const int64_t group = c.n_head / c.kv_heads();
    const std::string kv = std::to_string(c.kv_heads());
    const char* rope_kind = c.rope.scaling == RopeScaling::Linear        ? "linear"
                            : c.rope.scaling == RopeScaling::Llama3      ? "llama3"
                            : c.rope.scaling == RopeScaling::Frequencies ? "rope_freqs"
                                                                         : nullptr;
    const std::string act = c.activation == Activation::Silu ? "silu" : "gelu_pytorch_tanh";
    const char* family = c.model_type == "qwen2" ? "Qwen2" : c.model_type == "qwen3" ? "Qwen3"
                       : c.model_type == "mistral" ? "Mistral" : c.model_type == "gemma3_text" ? "Gemma 3" : "Llama";
    std::vector<ArchLine> lines = {
        {"model_type", false, c.model_type, family,
         std::string("RMSNorm, gated MLP, rotary positions, nn.Linear [out, in] weights") +
             (c.qk_norm ? "; q and k heads RMS-normalised (q_norm, k_norm) before rotation" : "") +
             (c.sandwich_norm ? "; RMSNorm times (1 + weight), post_attention_layernorm on the attention output, "
                                "pre_/post_feedforward_layernorm around the MLP, embeddings times sqrt(hidden_size)"
                              : ""),
         true},
        {"num_key_value_heads", false, kv, group == 1 ? "MHA" : c.kv_heads() == 1 ? "MQA" : "GQA x" + std::to_string(group),
         group == 1 ? "every query head has its own K/V head"
                    : "K/V heads cached: query head h reads K/V head h / " + std::to_string(group) +
                          " (the cache is " + std::to_string(group) + "x smaller than full multi-head)",
         group != 1},
        {"head_dim", false, std::to_string(c.head_dim()), "D=" + std::to_string(c.head_dim()),
         c.explicit_head_dim ? "given: q is H x D wide, not hidden_size" : "hidden_size / num_attention_heads",
         c.head_dim() * c.n_head != c.n_embd},
        {"intermediate_size", false, std::to_string(c.n_inner), "F=" + std::to_string(c.n_inner),
         "gated MLP: down_proj(" + act + "(gate_proj x) * up_proj x)", true},
        {"rms_norm_eps", false, number_text(c.layer_norm_epsilon), "RMSNorm",
         "RMSNorm: x / sqrt(mean(x^2) + eps), then times " + c.norm_form().substr(std::string("RMSNorm times ").size()) +
             "; no mean, no bias",
         true},
        {"rope_theta", false, number_text(c.rope.theta), "RoPE " + number_text(c.rope.theta),
         "rotary positions: q and k rotated (rotate-half pairs i, i + D/2); the cache holds rotated keys", true},
        // rope_scaling: null (or absent) reads "null" in its value; its chip says what that means
        {"rope_scaling", false, rope_kind ? rope_kind : "null", rope_kind ? rope_kind : "RoPE unscaled",
         c.rope.scaling == RopeScaling::None ? "frequencies 1 / theta^(2i/D)"
         : c.rope.scaling == RopeScaling::Linear      ? "frequencies divided by " + number_text(c.rope.factor)
         : c.rope.scaling == RopeScaling::Frequencies ? describe_freq_factors(c.rope.freq_factors)
                                                      : "llama3: long wavelengths divided by " + number_text(c.rope.factor) +
                                                            ", short kept, smoothed between",
         c.rope.scaling != RopeScaling::None},
        {"tie_word_embeddings", false, flag(c.tie_word_embeddings), c.tie_word_embeddings ? "tied head" : "untied head",
         c.tie_word_embeddings ? "one table: the output layer is embed_tokens transposed"
                               : "untied: the output layer is its own lm_head.weight [V, C]",
         !c.tie_word_embeddings},
        {"attention_bias", false, flag(c.attention_bias), c.attention_bias ? "attn bias" : "no attn bias",
         !c.attention_bias ? "no biases in attention"
         : c.o_bias        ? "q, k, v and o projections add biases"
                           : "q, k and v projections add biases, o does not (Qwen2)",
         !c.attention_bias},
        {"mlp_bias", false, flag(c.mlp_bias), c.mlp_bias ? "mlp bias" : "no mlp bias",
         c.mlp_bias ? "gate, up and down projections add biases" : "no biases in the MLP", !c.mlp_bias},
    };
    if (c.has_sliding_layers()) {
        int64_t window = 0;
        for (int64_t w : c.layer_window) window = w > 0 ? w : window;
        lines.push_back({"sliding_window", false, std::to_string(window), "window " + std::to_string(window),
                         c.describe_windows() + " (a query at i sees keys i-W+1..i); a sliding layer stores only its "
                                                "window plus the chunk being written",
                         true});
    }
    if (c.query_pre_attn_scalar > 0)
        lines.push_back({"query_pre_attn_scalar", false, number_text(c.query_pre_attn_scalar),
                         "scale " + number_text(c.query_pre_attn_scalar) + "^-0.5",
                         "scores are q.k times query_pre_attn_scalar^-0.5 (not head_dim^-0.5)", true});
    if (c.local_rope)
        lines.push_back({"rope_local_base_freq", false, number_text(c.local_rope_theta),
                         "local RoPE " + number_text(c.local_rope_theta),
                         "sliding layers rotate with this base and no rope_scaling; full layers with rope_theta", true});
    if (c.final_logit_softcap > 0)
        lines.push_back({"final_logit_softcapping", false, number_text(c.final_logit_softcap),
                         "softcap " + number_text(c.final_logit_softcap), "logits = cap * tanh(logits / cap)", true});
    return lines;
}

}  // namespace

std::vector<ArchLine> architecture(const ModelConfig& c) {
    if (c.family == Family::Llama) return llama_architecture(c);
    const ModelConfig gpt2;  // the defaults are GPT-2's behaviour
    const bool pre = c.norm_position == NormPosition::Pre;
    const bool learned = c.position_embedding == PositionEmbedding::Learned;
    const int64_t ratio = c.n_inner % c.n_embd == 0 ? c.n_inner / c.n_embd : 0;
    const char* act = c.activation == Activation::GeluTanh ? "GELU, tanh approximation (GPT-2's)"
                      : c.activation == Activation::GeluErf ? "GELU, exact: x * Phi(x) with erf"
                      : c.activation == Activation::Relu    ? "ReLU: max(0, x)"
                                                             : "SiLU: x * sigmoid(x)";
    const char* act_label = c.activation == Activation::GeluTanh ? "GELU (tanh)"
                            : c.activation == Activation::GeluErf ? "GELU (erf)"
                            : c.activation == Activation::Relu    ? "ReLU"
                                                                   : "SiLU";
    const std::string scale = number_text(c.embedding_scale);
    std::vector<ArchLine> lines;
    if (c.encoder_decoder) {
        lines.push_back({"model_type", false, "encoder_decoder", "encoder-decoder",
                         "an encoder reads the source once; the decoder cross-attends to it at every step", true});
        lines.push_back({"n_encoder_layer", true, std::to_string(c.n_encoder_layer), "E=" + std::to_string(c.n_encoder_layer),
                         "encoder layers, self-attention without a mask; n_layer counts the decoder's", true});
        lines.push_back({"decoder_start_token_id", true, std::to_string(c.decoder_start_token_id),
                         "start " + std::to_string(c.decoder_start_token_id),
                         "the token that begins every decoder input (before the prompt)", true});
    }
    std::vector<ArchLine> keys = {
        {"n_inner", false, std::to_string(c.n_inner), "F=" + std::to_string(c.n_inner),
         "feed-forward width F" + (ratio ? " (" + std::to_string(ratio) + " x n_embd)" : std::string(" (its own width)")),
         c.n_inner != 4 * c.n_embd},
        {"activation_function", false, to_string(c.activation), act_label, std::string("after c_fc: ") + act,
         c.activation != gpt2.activation},
        {"layer_norm_epsilon", false, number_text(c.layer_norm_epsilon), "eps " + number_text(c.layer_norm_epsilon),
         "added to the variance inside the square root", c.layer_norm_epsilon != gpt2.layer_norm_epsilon},
        {"tie_word_embeddings", false, flag(c.tie_word_embeddings), c.tie_word_embeddings ? "tied head" : "untied head",
         c.tie_word_embeddings ? "one table: the output layer is wte transposed"
                               : "untied: the output layer is its own lm_head.weight [V, C]",
         c.tie_word_embeddings != gpt2.tie_word_embeddings},
        {"norm_position", true, to_string(c.norm_position), pre ? "pre-LN" : "post-LN",
         pre ? "pre-LN: normalise, run the sub-layer, add to the residual"
             : "post-LN: add the sub-layer to the residual, then normalise",
         c.norm_position != gpt2.norm_position},
        {"position_embedding", true, to_string(c.position_embedding), learned ? "learned pos" : "sinusoidal pos",
         learned ? "learned table wpe [P, C] added to the token embedding"
                 : "fixed sin/cos table (PE[t, 2i] = sin, PE[t, 2i+1] = cos), no tensor",
         c.position_embedding != gpt2.position_embedding},
        {"embedding_scale", true, scale, "emb x" + scale,
         c.embedding_scale == 1.0 ? "token embeddings used as stored"
                                  : "token embeddings times " + scale + " before positions are added",
         c.embedding_scale != gpt2.embedding_scale},
        {"qkv_bias", true, flag(c.qkv_bias), c.qkv_bias ? "qkv bias" : "no qkv bias",
         c.qkv_bias ? "q, k, v = x W + b (c_attn.bias)" : "q, k, v = x W, no bias", c.qkv_bias != gpt2.qkv_bias},
        {"lm_head_bias", true, flag(c.lm_head_bias), c.lm_head_bias ? "head bias" : "no head bias",
         c.lm_head_bias ? "logits + lm_head.bias [V]" : "no bias on the logits", c.lm_head_bias != gpt2.lm_head_bias},
        {"final_layer_norm", true, flag(c.final_layer_norm), c.final_layer_norm ? "ln_f" : "no ln_f",
         c.final_layer_norm ? "ln_f normalises the last hidden state before the output layer"
                            : "no ln_f: the last block's output goes straight to the output layer",
         c.final_layer_norm != gpt2.final_layer_norm},
    };
    lines.insert(lines.end(), keys.begin(), keys.end());
    return lines;
}

}  // namespace kvscope
