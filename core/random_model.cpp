#include "random_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "atomic_file.h"
#include "errors.h"
#include "safetensors.h"

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
