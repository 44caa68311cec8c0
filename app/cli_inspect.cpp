// kvscope inspect: what a model folder holds — config, parameters, tensors, KV cache cost.
#include <cstdio>
#include <string>
#include <vector>

#include "cli_commands.h"
#include "cli_common.h"
#include "json.h"

namespace kvscope {
namespace {

std::string bytes_text(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (b >= 1024 && u < 3) {
        b /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
    return buf;
}

struct ArchLine {
    const char* key;
    bool extension;       // a kvscope key, not in Hugging Face's GPT-2 config
    std::string value;    // as config.json spells it
    std::string meaning;  // what it does to the computation
};

std::string number_text(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

// Every key that shapes the architecture, with what its value means for the forward pass.
std::vector<ArchLine> architecture(const ModelConfig& c) {
    const bool pre = c.norm_position == NormPosition::Pre;
    const int64_t ratio = c.n_inner % c.n_embd == 0 ? c.n_inner / c.n_embd : 0;
    const char* act = c.activation == Activation::GeluTanh ? "GELU, tanh approximation (GPT-2's)"
                      : c.activation == Activation::GeluErf ? "GELU, exact: x * Phi(x) with erf"
                                                             : "ReLU: max(0, x)";
    return {
        {"n_inner", false, std::to_string(c.n_inner),
         "feed-forward width F" + (ratio ? " (" + std::to_string(ratio) + " x n_embd)" : std::string(" (its own width)"))},
        {"activation_function", false, to_string(c.activation), std::string("after c_fc: ") + act},
        {"layer_norm_epsilon", false, number_text(c.layer_norm_epsilon), "added to the variance inside the square root"},
        {"tie_word_embeddings", false, c.tie_word_embeddings ? "true" : "false",
         c.tie_word_embeddings ? "one table: the output layer is wte transposed"
                               : "untied: the output layer is its own lm_head.weight [V, C]"},
        {"norm_position", true, to_string(c.norm_position),
         pre ? "pre-LN: normalise, run the sub-layer, add to the residual"
             : "post-LN: add the sub-layer to the residual, then normalise"},
        {"position_embedding", true, to_string(c.position_embedding),
         c.position_embedding == PositionEmbedding::Learned
             ? "learned table wpe [P, C] added to the token embedding"
             : "fixed sin/cos table (PE[t, 2i] = sin, PE[t, 2i+1] = cos), no tensor"},
        {"embedding_scale", true, number_text(c.embedding_scale),
         c.embedding_scale == 1.0 ? "token embeddings used as stored"
                                  : "token embeddings times " + number_text(c.embedding_scale) + " before positions are added"},
        {"qkv_bias", true, c.qkv_bias ? "true" : "false",
         c.qkv_bias ? "q, k, v = x W + b (c_attn.bias)" : "q, k, v = x W, no bias"},
        {"lm_head_bias", true, c.lm_head_bias ? "true" : "false",
         c.lm_head_bias ? "logits + lm_head.bias [V]" : "no bias on the logits"},
        {"final_layer_norm", true, c.final_layer_norm ? "true" : "false",
         c.final_layer_norm ? "ln_f normalises the last hidden state before the output layer"
                            : "no ln_f: the last block's output goes straight to the output layer"},
    };
}

}  // namespace

int cli_inspect(int argc, char** argv) {
    CliArgs args("inspect", "Show a model's config, parameter count, tensors and KV cache cost.");
    add_model_option(args);
    args.flag("--json", "print one JSON object");
    if (!args.parse(argc, argv)) return 0;
    auto model = load_model_from(args);
    const ModelConfig& c = model->config();
    const Weights& w = model->weights();
    const int64_t kv_per_token = 2 * c.n_layer * c.n_embd * int64_t(sizeof(float));

    const std::vector<ArchLine> lines = architecture(c);
    if (args.has("--json")) {
        std::string arch;  // key -> what it means
        for (const ArchLine& l : lines)
            arch += std::string(arch.empty() ? "" : ", ") + json_escape(l.key) + ": " + json_escape(l.meaning);
        std::string tensors;
        for (const TensorInfo& t : w.tensors)
            tensors += std::string(tensors.empty() ? "" : ", ") + "{\"name\": " + json_escape(t.name) +
                       ", \"dtype\": \"" + to_string(t.dtype) + "\", \"shape\": " + shape_text(t.shape) + "}";
        std::printf("{\"model\": %s, \"config\": %s, \"n_parameters\": %lld, \"file_bytes\": %lld, "
                    "\"converted_bytes\": %lld, \"matrix_dtype\": \"%s\", \"matrix_bytes\": %lld, \"kv_bytes_per_token\": %lld, \"kv_bytes_full_context\": %lld, "
                    "\"tokenizer\": %s, \"architecture\": {%s}, \"tensors\": [%s]}\n",
                    json_escape(model->dir()).c_str(), config_to_json(c).c_str(), (long long)w.n_parameters,
                    (long long)w.file_bytes, (long long)w.converted_bytes, w.bf16 ? "bf16" : "f32",
                    (long long)w.matrix_bytes, (long long)kv_per_token,
                    (long long)(kv_per_token * c.n_ctx),
                    model->tokenizer() ? std::to_string(model->tokenizer()->n_vocab()).c_str() : "null",
                    arch.c_str(), tensors.c_str());
        return 0;
    }
    std::printf("model        %s\n", model->dir().c_str());
    std::printf("vocab_size   %lld%s\n", (long long)c.n_vocab,
                model->tokenizer() ? (" (tokenizer: " + std::to_string(model->tokenizer()->n_vocab()) + " tokens)").c_str()
                                   : " (no tokenizer files: --prompt-ids only)");
    std::printf("n_positions  %lld\nn_embd       %lld\nn_layer      %lld\nn_head       %lld  (head_dim %lld)\n\n",
                (long long)c.n_ctx, (long long)c.n_embd, (long long)c.n_layer, (long long)c.n_head,
                (long long)c.head_dim());
    std::printf("architecture (config.json; * = kvscope extension key, absent = GPT-2's value)\n");
    for (const ArchLine& l : lines)
        std::printf("  %-20s %-10s %s\n", (std::string(l.key) + (l.extension ? "*" : "")).c_str(), l.value.c_str(),
                    l.meaning.c_str());
    std::printf("\n");
    std::printf("parameters   %lld (%s as float32; file %s, converted at load: %s)\n",
                (long long)w.n_parameters, bytes_text(double(w.n_parameters) * 4).c_str(),
                bytes_text(double(w.file_bytes)).c_str(), bytes_text(double(w.converted_bytes)).c_str());
    std::printf("matrices     %s, %s read per decode token (--dtype f32|bf16)\n", w.bf16 ? "bfloat16" : "float32",
                bytes_text(double(w.matrix_bytes)).c_str());
    std::printf("KV cache     %s per token (2 x %lld layers x %lld floats), %s at full context (%lld positions)\n\n",
                bytes_text(double(kv_per_token)).c_str(), (long long)c.n_layer, (long long)c.n_embd,
                bytes_text(double(kv_per_token * c.n_ctx)).c_str(), (long long)c.n_ctx);
    std::printf("%-40s %-5s %s\n", "tensor", "dtype", "shape");
    for (const TensorInfo& t : w.tensors)
        std::printf("%-40s %-5s %s\n", t.name.c_str(), to_string(t.dtype), shape_text(t.shape).c_str());
    return 0;
}

}  // namespace kvscope
