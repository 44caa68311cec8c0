// kvscope inspect: what a model folder (or GGUF file) holds — config, parameters, tensors, KV cache cost.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "cache/kv_footprint.h"
#include "commands.h"
#include "common.h"
#include "io/json_write.h"

namespace kvscope {
namespace {

// The files Tokenizer::load read: tokenizer.json (+ tokenizer_config.json) when present, else GPT-2's pair.
std::vector<std::string> tokenizer_files(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(fs::path(dir) / "tokenizer.json", ec)) return {"vocab.json", "merges.txt"};
    if (fs::exists(fs::path(dir) / "tokenizer_config.json", ec)) return {"tokenizer.json", "tokenizer_config.json"};
    return {"tokenizer.json"};
}

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

// How the matrices are stored and where, and what a decode token reads of them.
std::string matrices_line(const Weights& w) {
    int64_t in_integers = 0;
    for (int f = 0; f < kBlockFormats; ++f) in_integers += integer_format(BlockFormat(f)) ? w.block_matrices[size_t(f)] : 0;
    const char* how = in_integers == 0                 ? "(computed exactly as float32)"
                      : in_integers == w.blocks_total() ? "(dotted in integers with x rounded to 8 bits, as llama.cpp)"
                                                        : "(Q4_0, Q5_0, Q8_0 and the K types dotted in integers with x "
                                                          "rounded to 8 bits, as llama.cpp; Q4_1 and Q5_1 exactly as float32)";
    const std::string stored = w.blocks_total() > 0 ? w.blocks_text() + " as the file's blocks " + how + ", the rest float32"
                               : w.bf16 ? "bfloat16" : "float32";
    std::string where = "copied into 2 MiB pages at load";
    if (w.mapped)
        where = w.blocks_total() > 0 ? "used from the file's mapping (--map-weights)"
                                     : "used from the file's mapping where no conversion is needed (--map-weights)";
    else if (w.panel_matrices > 0)
        where += ", " + w.panels_text() + ", as many bytes as the file's";
    return stored + ", " + bytes_text(double(w.matrix_bytes)) + " read per decode token (--dtype f32|bf16), " + where;
}

const GgufTensorSummary* gguf_tensor(const Model& model, const std::string& name) {
    for (const GgufTensorSummary& g : model.gguf_tensors())
        if (g.hf_name == name) return &g;
    return nullptr;
}

// "Q6_K, 6.56" : the file's type and its cost per weight, block scales included
std::string bits_text(GgmlType type) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s, %.2f", ggml_type_info(type).name, ggml_type_info(type).bits_per_weight());
    return buf;
}

}  // namespace

int cli_inspect(int argc, char** argv) {
    CliArgs args("inspect", "Show a model's config, parameter count, tensors and KV cache cost.");
    add_model_option(args);
    args.option("--positions", "N", "the KV bytes stored after N positions (default: the full context)");
    args.option("--chunk", "C", "... written C at a time (default 1: decode); a sliding layer stores W - 1 + C");
    args.flag("--json", "print one JSON object");
    if (!args.parse(argc, argv)) return 0;
    auto model = load_model_from(args);
    const ModelConfig& c = model->config();
    const Weights& w = model->weights();
    // The cache follows the matrices' format (--dtype): float32 or bfloat16 rows. It holds K/V heads
    // (num_key_value_heads x head_dim per layer); beside it, what the same model would cache with full
    // multi-head attention (one K/V head per query head).
    const KvFootprint kv = kv_footprint(c, w.bf16);
    const int64_t kv_per_token = kv.per_token, mha_per_token = kv.per_token_mha;
    // What the cache stores after N positions: a sliding layer only its window plus the chunk being written.
    const int64_t n_held = args.integer("--positions", c.n_ctx, 1, c.n_ctx), chunk = args.integer("--chunk", 1, 1, c.n_ctx);
    const int64_t kv_full_context = kv_bytes_held(c, w.bf16, c.n_ctx, 1), kv_held = kv_bytes_held(c, w.bf16, n_held, chunk);
    // Encoder-decoder: the cross-attention cache, 2 x L x C float32 per source token (core/forward/encoder.h),
    // fixed once the encoder ran.
    // The quantized formats (`generate --kv-quant`); int4 at G = 32 when 32 divides head_dim.
    const KvQuantSpec int4{KvQuant::Int4, 32, 0};
    const bool int4_fits = c.head_dim() % 2 == 0 && c.head_dim() % int4.group == 0;
    const int64_t int8_per_token = kv_quant_per_token(c, {KvQuant::Int8}), fp8_per_token = kv_quant_per_token(c, {KvQuant::Fp8});
    const int64_t int4_per_token = int4_fits ? kv_quant_per_token(c, int4) : 0;
    const int64_t cross_per_source_token = c.encoder_decoder ? 2 * c.n_layer * c.n_embd * int64_t(sizeof(float)) : 0;

    const std::vector<ArchLine> lines = architecture(c);
    if (args.has("--json")) {
        JsonOut arch = JsonOut::object();  // key -> what it means
        for (const ArchLine& l : lines) arch[l.key] = l.meaning;
        JsonOut weight_files = JsonOut::array();  // the files read, relative to the folder
        for (const auto& f : w.checkpoint->files())
            weight_files.push_back(std::filesystem::path(f->path()).filename().string());
        JsonOut tensors = JsonOut::array();
        for (const TensorInfo& t : w.tensors) {
            JsonOut tensor = {{"name", t.name}, {"dtype", to_string(t.dtype)}, {"shape", t.shape}};
            if (const GgufTensorSummary* g = gguf_tensor(*model, t.name)) {  // what the file stores
                tensor["file_name"] = g->name;
                tensor["file_type"] = ggml_type_info(g->type).name;
                tensor["bits_per_weight"] = ggml_type_info(g->type).bits_per_weight();
            }
            tensors.push_back(tensor);
        }
        const JsonOut out = {
            {"model", model->dir()},
            {"config", JsonOut::parse(config_to_json(c))},
            {"n_parameters", w.n_parameters},
            {"file_bytes", w.file_bytes},
            {"weight_files", weight_files},
            {"sharded", w.checkpoint->sharded()},
            {"converted_bytes", w.converted_bytes},
            // a GGUF file: its tensors' bits per weight, block scales included (null for a folder)
            {"file_bits_per_weight", model->gguf_tensors().empty() ? JsonOut()
                                                                   : JsonOut(summarize_types(model->gguf_tensors()).bits_per_weight)},
            {"matrix_dtype", w.bf16 ? "bf16" : "f32"},
            // matrices kept as a GGUF file's blocks (the rest in matrix_dtype): read in place (matmul.h)
            {"block_matrices", w.blocks_total()},
            {"matrix_bytes", w.matrix_bytes},
            {"matrix_placement", w.mapped ? "mapped" : "huge_pages"},
            {"kv_bytes_per_token", kv_per_token},
            {"kv_bytes_full_context", kv_full_context},
            // stored after `positions` written `chunk` at a time, and by each layer (kv_footprint.h)
            {"kv_bytes_held", {{"positions", n_held},
                               {"chunk", chunk},
                               {"bytes", kv_held},
                               {"layer_positions", kv_layer_positions_held(c, n_held, chunk)}}},
            {"kv_heads", c.kv_heads()},
            {"head_dim", c.head_dim()},
            {"norm", c.norm_form()},
            {"kv_bytes_per_token_full_mha", mha_per_token},
            {"kv_bytes_per_token_mqa", kv.per_token_mqa},
            {"kv_dtype", w.bf16 ? "bf16" : "f32"},
            // (L) the model's own sliding window per layer, 0 = full attention
            {"layer_windows", c.layer_window.empty() ? std::vector<int64_t>(size_t(c.n_layer), 0) : c.layer_window},
            {"cross_kv_bytes_per_source_token", cross_per_source_token},
            {"kv_bytes_per_token_quantized", {{"int8", int8_per_token},
                                              {"fp8", fp8_per_token},
                                              {"int4_g32", int4_fits ? JsonOut(int4_per_token) : JsonOut()}}},
            // null without tokenizer files (the model then takes token ids only)
            {"tokenizer", model->tokenizer() ? JsonOut{{"files", tokenizer_files(model->dir())},
                                                       {"n_tokens", model->tokenizer()->n_vocab()}}
                                             : JsonOut()},
            {"architecture", arch},
            {"tensors", tensors}};
        std::printf("%s\n", json_text(out).c_str());
        return 0;
    }
    std::printf("model        %s\n", model->dir().c_str());
    std::printf("vocab_size   %lld%s\n", (long long)c.n_vocab,
                model->tokenizer() ? (" (tokenizer: " + std::to_string(model->tokenizer()->n_vocab()) + " tokens)").c_str()
                                   : " (no tokenizer files: --prompt-ids only)");
    std::printf("n_positions  %lld\nn_embd       %lld\nn_layer      %lld\nn_head       %lld  (head_dim %lld, %lld K/V head%s)\n\n",
                (long long)c.n_ctx, (long long)c.n_embd, (long long)c.n_layer, (long long)c.n_head,
                (long long)c.head_dim(), (long long)c.kv_heads(), c.kv_heads() == 1 ? "" : "s");
    std::printf(c.family == Family::Llama ? "architecture (config.json, Llama family)\n"
                                          : "architecture (config.json; * = kvscope extension key, absent = GPT-2's value)\n");
    for (const ArchLine& l : lines)
        std::printf("  %-24s %-16s %s\n", (std::string(l.key) + (l.extension ? "*" : "")).c_str(), l.value.c_str(),
                    l.meaning.c_str());
    std::printf("\n");
    std::printf("parameters   %lld (%s as float32; file %s, converted at load: %s)\n",
                (long long)w.n_parameters, bytes_text(double(w.n_parameters) * 4).c_str(),
                bytes_text(double(w.file_bytes)).c_str(), bytes_text(double(w.converted_bytes)).c_str());
    if (w.checkpoint->sharded())
        std::printf("weights      %zu shards listed in model.safetensors.index.json\n", w.checkpoint->files().size());
    std::printf("matrices     %s\n", matrices_line(w).c_str());
    std::printf("KV cache     %s per token (2 x %lld layers x %lld %s), %s at full context (%lld positions)\n",
                bytes_text(double(kv_per_token)).c_str(), (long long)c.n_layer, (long long)c.kv_width(),
                w.bf16 ? "bfloat16" : "float32", bytes_text(double(kv_full_context)).c_str(), (long long)c.n_ctx);
    std::printf("             %s per token as int8 or fp8 (--kv-quant)%s\n", bytes_text(double(int8_per_token)).c_str(),
                int4_fits ? (", " + bytes_text(double(int4_per_token)) + " as int4 with G = 32").c_str() : "");
    if (c.kv_heads() != c.n_head)
        std::printf("             %s per token with full multi-head attention (%lld K/V heads instead of %lld)\n",
                    bytes_text(double(mha_per_token)).c_str(), (long long)c.n_head, (long long)c.kv_heads());
    if (c.has_sliding_layers()) {
        std::printf("windows      %s; a sliding layer stores only its window plus the chunk being written\n"
                    "             (W - 1 + C positions, as Hugging Face's DynamicSlidingWindowLayer), a full layer every position\n",
                    c.describe_windows().c_str());
        std::printf("KV held      %s after %lld positions written %lld at a time (--positions, --chunk)\n",
                    bytes_text(double(kv_held)).c_str(), (long long)n_held, (long long)chunk);
    }
    if (c.encoder_decoder)
        std::printf("cross cache  %s per source token (2 x %lld decoder layers x %lld float32), fixed once the encoder ran\n",
                    bytes_text(double(cross_per_source_token)).c_str(), (long long)c.n_layer, (long long)c.n_embd);
    std::printf("\n");
    if (!model->gguf_tensors().empty()) {  // a GGUF file: what it stores, and what kvscope computes with
        const GgufTypeSummary types = summarize_types(model->gguf_tensors());
        std::printf("file types   %.2f bits per weight:", types.bits_per_weight);
        for (size_t i = 0; i < types.types.size(); ++i)
            std::printf("%s %s %lld tensor%s (%.1f%% of weights)", i ? "," : "", ggml_type_info(types.types[i].type).name,
                        (long long)types.types[i].tensors, types.types[i].tensors == 1 ? "" : "s",
                        100.0 * double(types.types[i].weights) / double(std::max<int64_t>(1, types.weights)));
        std::printf("\n\n");
        std::printf("%-46s %-5s %-14s %-26s %s\n", "tensor", "dtype", "shape", "in the file", "bits per weight");
        for (const TensorInfo& t : w.tensors) {
            const GgufTensorSummary* g = gguf_tensor(*model, t.name);
            std::printf("%-46s %-5s %-14s %-26s %s\n", t.name.c_str(), to_string(t.dtype), shape_text(t.shape).c_str(),
                        g ? g->name.c_str() : "", g ? bits_text(g->type).c_str() : "");
        }
        return 0;
    }
    std::printf("%-40s %-5s %s\n", "tensor", "dtype", "shape");
    for (const TensorInfo& t : w.tensors)
        std::printf("%-40s %-5s %s\n", t.name.c_str(), to_string(t.dtype), shape_text(t.shape).c_str());
    return 0;
}

}  // namespace kvscope
