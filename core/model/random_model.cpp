#include "model/random_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "model/safetensors.h"

namespace kvscope {

ModelConfig gpt2_small_config() {
    ModelConfig c;
    c.n_vocab = 50257;
    c.n_ctx = 1024;
    c.n_embd = 768;
    c.n_layer = 12;
    c.n_head = 12;
    c.n_inner = 3072;
    return c;
}

namespace {

// The config.json of a Hugging Face Llama-family checkpoint, as far as the forward pass reads it.
ModelConfig llama_shape(const std::string& model_type, int64_t V, int64_t P, int64_t C, int64_t F, int64_t L,
                        int64_t H, int64_t K, double rope_theta, double rms_norm_eps) {
    ModelConfig c;
    c.family = Family::Llama;
    c.model_type = model_type;
    c.n_vocab = V;
    c.n_ctx = P;
    c.n_embd = C;
    c.n_inner = F;
    c.n_layer = L;
    c.n_head = H;
    c.n_kv_head = K;
    c.activation = Activation::Silu;
    c.layer_norm_epsilon = rms_norm_eps;
    c.rope.theta = rope_theta;
    c.tie_word_embeddings = true;
    c.attention_bias = c.qkv_bias = model_type == "qwen2";  // Qwen2: q, k and v biases, none on o
    c.qk_norm = model_type == "qwen3";
    return c;
}

}  // namespace

const std::vector<std::string>& bench_shape_names() {
    static const std::vector<std::string> names = {"gpt2", "smollm2-135m", "qwen2.5-0.5b"};
    return names;
}

std::optional<ModelConfig> bench_shape_config(const std::string& name) {
    if (name == "gpt2") return gpt2_small_config();
    // HuggingFaceTB/SmolLM2-135M and Qwen/Qwen2.5-0.5B config.json
    if (name == "smollm2-135m") return llama_shape("llama", 49152, 8192, 576, 1536, 30, 9, 3, 100000.0, 1e-5);
    if (name == "qwen2.5-0.5b") return llama_shape("qwen2", 151936, 32768, 896, 4864, 24, 14, 2, 1000000.0, 1e-6);
    return std::nullopt;
}

void write_random_model(const std::string& dir, const ModelConfig& c, uint64_t seed) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw UsageError("cannot create folder " + dir + ": " + ec.message());
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<TensorToWrite> tensors;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, float std) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = mean + std * normal(rng);
        TensorToWrite t{name, Dtype::F32, std::move(shape), std::vector<std::byte>(v.size() * sizeof(float))};
        std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
        tensors.push_back(std::move(t));
    };
    const int64_t V = c.n_vocab, P = c.n_ctx, C = c.n_embd, F = c.n_inner;
    if (c.family == Family::Llama) {  // nn.Linear weights (out, in)
        const int64_t Q = c.q_width(), KV = c.kv_width(), D = c.head_dim();
        const float out_std = 0.02f / std::sqrt(2.0f * float(c.n_layer));
        add("model.embed_tokens.weight", {V, C}, 0, 0.02f);
        for (int64_t il = 0; il < c.n_layer; ++il) {
            const std::string p = "model.layers." + std::to_string(il) + ".";
            add(p + "input_layernorm.weight", {C}, 1, 0.05f);
            add(p + "self_attn.q_proj.weight", {Q, C}, 0, 0.02f);
            add(p + "self_attn.k_proj.weight", {KV, C}, 0, 0.02f);
            add(p + "self_attn.v_proj.weight", {KV, C}, 0, 0.02f);
            if (c.attention_bias) {
                add(p + "self_attn.q_proj.bias", {Q}, 0, 0.02f);
                add(p + "self_attn.k_proj.bias", {KV}, 0, 0.02f);
                add(p + "self_attn.v_proj.bias", {KV}, 0, 0.02f);
            }
            if (c.qk_norm) {
                add(p + "self_attn.q_norm.weight", {D}, 1, 0.05f);
                add(p + "self_attn.k_norm.weight", {D}, 1, 0.05f);
            }
            add(p + "self_attn.o_proj.weight", {C, Q}, 0, out_std);
            if (c.o_bias) add(p + "self_attn.o_proj.bias", {C}, 0, 0.02f);
            add(p + "post_attention_layernorm.weight", {C}, 1, 0.05f);
            add(p + "mlp.gate_proj.weight", {F, C}, 0, 0.02f);
            add(p + "mlp.up_proj.weight", {F, C}, 0, 0.02f);
            add(p + "mlp.down_proj.weight", {C, F}, 0, out_std);
            if (c.mlp_bias) {
                add(p + "mlp.gate_proj.bias", {F}, 0, 0.02f);
                add(p + "mlp.up_proj.bias", {F}, 0, 0.02f);
                add(p + "mlp.down_proj.bias", {C}, 0, 0.02f);
            }
        }
        add("model.norm.weight", {C}, 1, 0.05f);
        if (!c.tie_word_embeddings) add("lm_head.weight", {V, C}, 0, 0.02f);
        write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}, {"kvscope", "random weights"}});
        write_file_atomic(dir + "/config.json", config_to_json(c));
        return;
    }
    add("wte.weight", {V, C}, 0, 0.02f);
    if (c.position_embedding == PositionEmbedding::Learned) add("wpe.weight", {P, C}, 0, 0.01f);
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string h = "h." + std::to_string(il) + ".";
        add(h + "ln_1.weight", {C}, 1, 0.05f);
        add(h + "ln_1.bias", {C}, 0, 0.02f);
        add(h + "attn.c_attn.weight", {C, 3 * C}, 0, 0.02f);
        if (c.qkv_bias) add(h + "attn.c_attn.bias", {3 * C}, 0, 0.02f);
        add(h + "attn.c_proj.weight", {C, C}, 0, 0.02f / std::sqrt(2.0f * float(c.n_layer)));
        add(h + "attn.c_proj.bias", {C}, 0, 0.02f);
        add(h + "ln_2.weight", {C}, 1, 0.05f);
        add(h + "ln_2.bias", {C}, 0, 0.02f);
        add(h + "mlp.c_fc.weight", {C, F}, 0, 0.02f);
        add(h + "mlp.c_fc.bias", {F}, 0, 0.02f);
        add(h + "mlp.c_proj.weight", {F, C}, 0, 0.02f / std::sqrt(2.0f * float(c.n_layer)));
        add(h + "mlp.c_proj.bias", {C}, 0, 0.02f);
    }
    if (c.final_layer_norm) {
        add("ln_f.weight", {C}, 1, 0.05f);
        add("ln_f.bias", {C}, 0, 0.02f);
    }
    if (!c.tie_word_embeddings) add("lm_head.weight", {V, C}, 0, 0.02f);
    if (c.lm_head_bias) add("lm_head.bias", {V}, 0, 0.02f);
    write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}, {"kvscope", "random weights"}});
    write_file_atomic(dir + "/config.json", config_to_json(c));
}

}  // namespace kvscope
