// GGUF -> (ModelConfig, Checkpoint): metadata keys become the config.json a folder would carry, tensors get
// their Hugging Face names and layouts back.
#include "model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "base/errors.h"
#include "base/huge_pages.h"
#include "model/gguf.h"

namespace kvscope {

namespace {

// llama.cpp's per-layer tensor names -> Hugging Face's (model.layers.N. + the right side): Llama, Qwen2, Qwen3.
const std::map<std::string, std::string>& layer_names() {
    static const std::map<std::string, std::string> names = {
        {"attn_norm.weight", "input_layernorm.weight"},   {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},     {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},     {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},         {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},         {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},          {"ffn_down.weight", "mlp.down_proj.weight"},
    };
    return names;
}

// Gemma 3's four norms per layer: llama.cpp's ffn_norm is the norm before the MLP (tensor_mapping.py).
const std::map<std::string, std::string>& gemma3_layer_names() {
    static const std::map<std::string, std::string> names = [] {
        std::map<std::string, std::string> n = layer_names();
        n["ffn_norm.weight"] = "pre_feedforward_layernorm.weight";
        n["post_attention_norm.weight"] = "post_attention_layernorm.weight";
        n["post_ffw_norm.weight"] = "post_feedforward_layernorm.weight";
        return n;
    }();
    return names;
}

// GPT-2 (h.N. + the right side).
const std::map<std::string, std::string>& gpt2_layer_names() {
    static const std::map<std::string, std::string> names = {
        {"attn_norm.weight", "ln_1.weight"},       {"attn_norm.bias", "ln_1.bias"},
        {"attn_qkv.weight", "attn.c_attn.weight"}, {"attn_qkv.bias", "attn.c_attn.bias"},
        {"attn_output.weight", "attn.c_proj.weight"}, {"attn_output.bias", "attn.c_proj.bias"},
        {"ffn_norm.weight", "ln_2.weight"},        {"ffn_norm.bias", "ln_2.bias"},
        {"ffn_up.weight", "mlp.c_fc.weight"},      {"ffn_up.bias", "mlp.c_fc.bias"},
        {"ffn_down.weight", "mlp.c_proj.weight"},  {"ffn_down.bias", "mlp.c_proj.bias"},
    };
    return names;
}

// "" when the name is not one kvscope knows for the architecture.
std::string hf_name(const std::string& arch, const std::string& name) {
    const bool gpt2 = arch == "gpt2";
    if (gpt2) {
        if (name == "token_embd.weight") return "wte.weight";
        if (name == "position_embd.weight") return "wpe.weight";
        if (name == "output_norm.weight") return "ln_f.weight";
        if (name == "output_norm.bias") return "ln_f.bias";
    } else {
        if (name == "token_embd.weight") return "model.embed_tokens.weight";
        if (name == "output_norm.weight") return "model.norm.weight";
    }
    if (name == "output.weight") return "lm_head.weight";
    unsigned layer = 0;
    int consumed = 0;
    if (std::sscanf(name.c_str(), "blk.%u.%n", &layer, &consumed) != 1 || consumed == 0) return "";
    const auto& names = gpt2 ? gpt2_layer_names() : arch == "gemma3" ? gemma3_layer_names() : layer_names();
    auto it = names.find(name.substr(size_t(consumed)));
    if (it == names.end()) return "";
    return (gpt2 ? "h." : "model.layers.") + std::to_string(layer) + "." + it->second;
}

// parse_config's limit on num_hidden_layers / n_layer (config.cpp): block_count is held to it before
// anything is made per layer, so a damaged count is refused by its key instead of filling memory.
constexpr int64_t k_max_layers = int64_t(1) << 12;

class Metadata {
public:
    Metadata(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
    // {arch}.key as a positive integer; `fallback` < 0: required
    int64_t size(const std::string& key, int64_t fallback = -1) const {
        const GgufValue* v = f_.find(arch_ + "." + key);
        if (!v) {
            if (fallback >= 0) return fallback;
            fail(arch_ + "." + key + " is missing");
        }
        if (!v->is_integer() || v->type == GgufValueType::Bool || v->integer <= 0)
            fail(arch_ + "." + key + " must be a positive integer, found " + shown(*v));
        return v->integer;
    }
    // {arch}.block_count, held to parse_config's limit before anything is made per layer
    int64_t layers() const {
        const int64_t n = size("block_count");
        if (n > k_max_layers)
            fail(arch_ + ".block_count (" + std::to_string(n) + ") is larger than kvscope supports (" +
                 std::to_string(k_max_layers) + ")");
        return n;
    }
    double real(const std::string& key, double fallback) const {
        const GgufValue* v = f_.find(arch_ + "." + key);
        if (!v) return fallback;
        if (!v->is_real()) fail(arch_ + "." + key + " must be a number, found " + shown(*v));
        // config.json has no NaN or infinity: refused here by the key, not as JSON the user never wrote
        if (!std::isfinite(v->real)) fail(arch_ + "." + key + " must be a finite number, found " + std::to_string(v->real));
        return v->real;
    }
    [[noreturn]] void fail(const std::string& what) const { throw LoadError(f_.path(), what); }

private:
    static std::string shown(const GgufValue& v) {
        if (v.is_integer()) return std::to_string(v.integer) + " (" + to_string(v.type) + ")";
        return std::string("a ") + to_string(v.type);
    }
    const GgufFile& f_;
    std::string arch_;
};

std::string number(double x) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
}

// rope.scaling.type "linear" + rope.scaling.factor -> rope_scaling {"rope_type": "linear", "factor": f}
// (LlamaModel / Gemma3Model write them so); absent or "none" -> null. Other kinds (yarn, longrope) are
// refused by name. Llama 3's scaling has no keys: llama.cpp's converter writes it as the rope_freqs tensor
// (read_rope_freqs).
std::string rope_scaling_json(const GgufFile& f, const Metadata& m, const std::string& arch) {
    const GgufValue* type = f.find(arch + ".rope.scaling.type");
    const GgufValue* factor = f.find(arch + ".rope.scaling.factor");
    if (type && type->type != GgufValueType::String) m.fail(arch + ".rope.scaling.type must be a string");
    if (!type || type->text == "none") {
        if (factor) m.fail(arch + ".rope.scaling.factor is set without rope.scaling.type");
        return "null";
    }
    if (type->text != "linear")
        m.fail(arch + ".rope.scaling.type is \"" + type->text + "\", a rope scaling kvscope does not read from GGUF");
    if (!factor) m.fail(arch + ".rope.scaling.type is linear but " + arch + ".rope.scaling.factor is missing");
    return "{\"rope_type\": \"linear\", \"factor\": " + number(m.real("rope.scaling.factor", 0)) + "}";
}

// Gemma 3's keys beyond Llama's (Gemma3TextConfig). llama.cpp's converter writes attention.sliding_window
// only; its loader then slides five layers in six with base 10000 and scales queries by 1 / sqrt(head_dim)
// (1 / sqrt(n_embd / n_head) for the 62-layer 27B). attention.sliding_window_pattern (a count, or one bool
// per layer: true slides), rope.freq_base_swa and attention.scale say otherwise where present.
void add_gemma3_keys(const GgufFile& f, const Metadata& m, std::string& j) {
    auto add = [&](const char* key, const std::string& value) { j += std::string(", \"") + key + "\": " + value; };
    add("hidden_activation", "\"gelu_pytorch_tanh\"");
    const int64_t n_layer = m.layers();
    if (f.find("gemma3.attention.sliding_window")) {
        add("sliding_window", std::to_string(m.size("attention.sliding_window")));
        const GgufValue* pattern = f.find("gemma3.attention.sliding_window_pattern");
        if (pattern && pattern->type == GgufValueType::Array) {
            if (pattern->item_type != GgufValueType::Bool || pattern->count() != n_layer)
                m.fail("gemma3.attention.sliding_window_pattern must be a count or one bool per layer");
            std::string types;
            for (int64_t v : pattern->integers) types += std::string(types.empty() ? "" : ", ") + (v ? "\"sliding_attention\"" : "\"full_attention\"");
            add("layer_types", "[" + types + "]");
        } else if (pattern) {
            add("sliding_window_pattern", std::to_string(m.size("attention.sliding_window_pattern")));
        }
    } else {  // no window: every layer attends to everything (llama.cpp's LLAMA_SWA_TYPE_NONE)
        std::string types;
        for (int64_t il = 0; il < n_layer; ++il) types += std::string(il ? ", " : "") + "\"full_attention\"";
        add("layer_types", "[" + types + "]");
    }
    add("rope_local_base_freq", number(m.real("rope.freq_base_swa", 10000.0)));
    const double scale = m.real("attention.scale", 0);
    if (scale < 0 || !std::isfinite(scale)) m.fail("gemma3.attention.scale must be a positive number");
    const double scalar = scale > 0 ? 1.0 / (scale * scale)
                          : n_layer == 62 ? double(m.size("embedding_length") / m.size("attention.head_count"))
                                          : double(m.size("attention.key_length", 256));
    add("query_pre_attn_scalar", number(scalar));
    if (f.find("gemma3.final_logit_softcapping")) add("final_logit_softcapping", number(m.real("final_logit_softcapping", 0)));
}

// The config.json a Hugging Face folder of this model would carry, as text for parse_config.
std::string config_json(const GgufFile& f, const std::string& arch) {
    const Metadata m(f, arch);
    const bool gemma3 = arch == "gemma3";
    if (!gemma3)
        if (const GgufValue* v = f.find(arch + ".attention.sliding_window"); v && !(v->type == GgufValueType::String && v->text == "none"))
            m.fail(arch + ".attention.sliding_window is set; kvscope does not read GGUF files with it yet");
    if (f.tensor("rope_freqs.weight")) {
        if (arch != "llama") m.fail("holds rope_freqs.weight; kvscope reads it for the llama architecture only");
        if (const GgufValue* type = f.find(arch + ".rope.scaling.type"); type && !(type->type == GgufValueType::String && type->text == "none"))
            m.fail("holds rope_freqs.weight and " + arch + ".rope.scaling.type: two rope scalings, kvscope reads one");
    }
    const GgufTensor* embedding = f.tensor("token_embd.weight");
    if (!embedding || embedding->dims.size() != 2) m.fail("tensor token_embd.weight is missing or not a matrix");
    const int64_t heads = m.size("attention.head_count");
    std::string j = "{\"model_type\": \"" + (gemma3 ? std::string("gemma3_text") : arch) + "\"";
    auto add = [&](const char* key, const std::string& value) { j += std::string(", \"") + key + "\": " + value; };
    add("vocab_size", std::to_string(embedding->dims[1]));
    add("hidden_size", std::to_string(m.size("embedding_length")));
    add("num_hidden_layers", std::to_string(m.layers()));
    add("intermediate_size", std::to_string(m.size("feed_forward_length")));
    add("num_attention_heads", std::to_string(heads));
    add("num_key_value_heads", std::to_string(m.size("attention.head_count_kv", heads)));
    if (f.find(arch + ".attention.key_length")) {
        const int64_t d = m.size("attention.key_length");
        if (m.size("attention.value_length", d) != d) m.fail(arch + ".attention.value_length differs from key_length");
        add("head_dim", std::to_string(d));
    }
    add("max_position_embeddings", std::to_string(m.size("context_length")));
    add("rms_norm_eps", number(m.real("attention.layer_norm_rms_epsilon", 1e-6)));
    add("rope_theta", number(m.real("rope.freq_base", gemma3 ? 1000000.0 : 10000.0)));  // Gemma3Model's default
    add("tie_word_embeddings", f.tensor("output.weight") ? "false" : "true");
    add("rope_scaling", rope_scaling_json(f, m, arch));
    if (arch == "llama") add("attention_bias", f.tensor("blk.0.attn_q.bias") ? "true" : "false");
    if (gemma3) add_gemma3_keys(f, m, j);
    return j + "}";
}

// GPT-2's config.json (GPT2Config keys). llama.cpp's converter writes output.weight as a copy of
// token_embd: `tied` says the two are the same bytes (or output.weight is absent).
std::string gpt2_config_json(const GgufFile& f, bool tied) {
    const Metadata m(f, "gpt2");
    const GgufTensor* embedding = f.tensor("token_embd.weight");
    if (!embedding || embedding->dims.size() != 2) m.fail("tensor token_embd.weight is missing or not a matrix");
    const int64_t n_embd = m.size("embedding_length");
    std::string j = "{\"model_type\": \"gpt2\"";
    auto add = [&](const char* key, const std::string& value) { j += std::string(", \"") + key + "\": " + value; };
    add("vocab_size", std::to_string(embedding->dims[1]));
    add("n_positions", std::to_string(m.size("context_length")));
    add("n_embd", std::to_string(n_embd));
    add("n_layer", std::to_string(m.layers()));
    add("n_head", std::to_string(m.size("attention.head_count")));
    add("n_inner", std::to_string(m.size("feed_forward_length", 4 * n_embd)));
    add("layer_norm_epsilon", number(m.real("attention.layer_norm_epsilon", 1e-5)));
    add("activation_function", "\"gelu_new\"");  // llama.cpp's gpt2 graph: GELU, tanh approximation
    add("tie_word_embeddings", tied ? "true" : "false");
    add("qkv_bias", f.tensor("blk.0.attn_qkv.bias") ? "true" : "false");
    return j + "}";
}

// Llama 3's rope scaling as llama.cpp's converter writes it (LlamaModel.generate_extra_tensors): rope_freqs.weight,
// F32, one divisor per frequency (1 for short wavelengths, factor for long ones, smoothed between), which
// ggml's rope applies as theta_i = pos * base^(-2i/D) / rope_freqs[i]. The factors must read back from
// config_to_json's text, so they are held to parse_config's range for them.
void read_rope_freqs(const GgufFile& f, ModelConfig& c) {
    const GgufTensor* t = f.tensor("rope_freqs.weight");
    if (!t) return;
    const int64_t half = c.head_dim() / 2;
    if (t->type != GgmlType::F32)
        throw LoadError(f.path(), std::string("tensor rope_freqs.weight is ") + ggml_type_info(t->type).name +
                                      ", not F32 (llama.cpp writes its per-frequency divisors as F32)");
    if (t->dims.size() != 1 || t->dims[0] != half)
        throw LoadError(f.path(), "tensor rope_freqs.weight holds " + std::to_string(t->n_elements()) + " values" +
                                      (t->dims.size() == 1 ? "" : " in " + std::to_string(t->dims.size()) + " dimensions") +
                                      ", not a list of one per frequency (head_dim / 2 = " + std::to_string(half) + ")");
    std::vector<float> factors(static_cast<size_t>(half));  // (D/2)
    std::memcpy(factors.data(), t->data, factors.size() * sizeof(float));
    for (int64_t i = 0; i < half; ++i) {
        const float x = factors[size_t(i)];
        if (std::isfinite(x) && x >= 1e-3f && x <= 1e4f) continue;
        char shown[32];
        std::snprintf(shown, sizeof shown, "%g", double(x));
        throw LoadError(f.path(), "tensor rope_freqs.weight[" + std::to_string(i) + "] is " + shown +
                                      ", not a divisor from 0.001 to 10000",
                        "Llama 3's are 1 to 32; is the file damaged?");
    }
    c.rope.scaling = RopeScaling::Frequencies;
    c.rope.freq_factors = std::move(factors);
}

// Undo llama.cpp's Q/K row permutation: in the file, row 2i + part of a head holds Hugging Face's row
// part * (D / 2) + i. Rows of `row_bytes` bytes, `heads` heads of D rows each.
void unpermute_rows(const std::byte* from, std::byte* to, int64_t heads, int64_t rows, size_t row_bytes) {
    const int64_t d = rows / heads;
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t r = 0; r < d; ++r) {
            const int64_t hf_row = (r % 2) * (d / 2) + r / 2;
            std::memcpy(to + size_t(h * d + hf_row) * row_bytes, from + size_t(h * d + r) * row_bytes, row_bytes);
        }
}

// Swap a (rows, cols) matrix of `element`-byte values to (cols, rows): GPT-2's Conv1D keeps (in, out),
// llama.cpp's converter transposed c_attn, c_proj and c_fc to (out, in).
void transpose(const std::byte* from, std::byte* to, int64_t rows, int64_t cols, size_t element) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            std::memcpy(to + size_t(c * rows + r) * element, from + size_t(r * cols + c) * element, element);
}

// Undo llama.cpp's Gemma norm shift: its converter stores 1 + weight (Gemma3RMSNorm scales by 1 + weight).
void undo_norm_shift(float* weights, int64_t n) {
    for (int64_t i = 0; i < n; ++i) weights[i] -= 1.0f;
}

// What llama.cpp's converter did to one tensor, undone here in this order.
struct Undo {
    bool unpermute = false;  // llama: Q and K rows
    bool transpose = false;  // gpt2: c_attn, c_proj, c_fc
    bool norm_shift = false; // gemma3: every norm weight
    bool any() const { return unpermute || transpose || norm_shift; }
};

Undo undo_of(const std::string& arch, const GgufTensor& t) {
    Undo u;
    const bool matrix = t.dims.size() == 2;
    u.unpermute = arch == "llama" && matrix && (t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight"));
    u.transpose = arch == "gpt2" && matrix &&
                  (t.name.ends_with("attn_qkv.weight") || t.name.ends_with("attn_output.weight") ||
                   t.name.ends_with("ffn_up.weight") || t.name.ends_with("ffn_down.weight"));
    u.norm_shift = arch == "gemma3" && t.name.ends_with("norm.weight");
    return u;
}

// GPT-2 files carry output.weight as a copy of token_embd.weight: the model is tied when the bytes match.
bool gpt2_output_is_embedding(const GgufFile& f) {
    const GgufTensor* out = f.tensor("output.weight");
    const GgufTensor* embd = f.tensor("token_embd.weight");
    return !out || (embd && out->type == embd->type && out->dims == embd->dims && out->n_bytes == embd->n_bytes &&
                    std::memcmp(out->data, embd->data, out->n_bytes) == 0);
}

struct Owned {
    std::shared_ptr<const GgufFile> file;
    std::vector<std::vector<std::byte>> buffers;         // dequantized or un-permuted tensors
    HugePageArena block_rows;  // matrices of blocks with rows put back in order, read where they are (weights.cpp)
};

}  // namespace

GgufModel open_gguf_model(const std::string& path) {
    auto file = std::make_shared<const GgufFile>(path);
    const GgufValue* arch_value = file->find("general.architecture");
    if (!arch_value || arch_value->type != GgufValueType::String)
        throw LoadError(path, "general.architecture is missing", "is this a model file?");
    GgufModel out;
    const std::string& arch = out.architecture = arch_value->text;
    if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "gemma3" && arch != "gpt2")
        throw LoadError(path, "architecture " + arch + " is not supported",
                        "kvscope reads GGUF files of llama, qwen2, qwen3, gemma3 and gpt2");
    const bool tied_gpt2 = arch == "gpt2" && gpt2_output_is_embedding(*file);
    out.config = parse_config(arch == "gpt2" ? gpt2_config_json(*file, tied_gpt2) : config_json(*file, arch), path);
    read_rope_freqs(*file, out.config);
    out.tokenizer = gguf_tokenizer_files(*file);
    const ModelConfig& c = out.config;

    auto owned = std::make_shared<Owned>();
    owned->file = file;
    std::vector<TensorView> views;
    for (const GgufTensor& t : file->tensors()) {
        if (t.name == "rope_freqs.weight") {  // in the config (read_rope_freqs), not a weight
            out.tensors.push_back({t.name, "", t.type, t.shape()});
            continue;
        }
        const std::string name = hf_name(arch, t.name);
        if (name.empty())
            throw LoadError(path, "tensor " + t.name + " is not one kvscope knows for architecture " + arch);
        const GgmlTypeInfo& info = ggml_type_info(t.type);
        if (!info.readable)
            throw LoadError(path, "tensor " + t.name + " is " + info.name + ", a type kvscope does not read",
                            "kvscope reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K");
        out.tensors.push_back({t.name, name, t.type, t.shape()});
        if (tied_gpt2 && t.name == "output.weight") continue;  // the embedding again
        const Undo undo = undo_of(arch, t);
        TensorView v;
        v.name = name;
        v.shape = t.shape();
        const int64_t heads = t.name.ends_with("attn_q.weight") ? c.n_head : c.kv_heads();
        if (undo.unpermute && (t.dims[1] % heads != 0 || (t.dims[1] / heads) % 2 != 0))
            throw LoadError(path, "tensor " + t.name + " has " + std::to_string(t.dims[1]) + " rows, not " +
                                      std::to_string(heads) + " heads of an even size");
        const bool plain = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16;
        // A quantized matrix goes on as its blocks (weights.cpp keeps them for matmul_nk); Q and K rows of a
        // llama file are put back in Hugging Face's order a whole row (of blocks) at a time. GPT-2's transposed
        // matrices are dequantized as before: a block runs along the row the transpose would cut.
        const std::optional<BlockFormat> blocks = block_format(t.type);
        if (blocks && t.dims.size() == 2 && !undo.transpose && !undo.norm_shift) {
            v.dtype = block_dtype(*blocks);
            if (!undo.unpermute) {
                v.data = t.data;
                v.n_bytes = t.n_bytes;
            } else {
                std::byte* moved = owned->block_rows.allocate(int64_t(t.n_bytes));
                // a row: dims[0] / elements blocks (the reader checked dims[0] against the block size)
                unpermute_rows(t.data, moved, heads, t.dims[1], size_t(t.dims[0] / info.block_elements * info.block_bytes));
                v.data = moved;
                v.n_bytes = t.n_bytes;
            }
            views.push_back(std::move(v));
            continue;
        }
        v.dtype = undo.norm_shift || !plain ? Dtype::F32 : t.type == GgmlType::F16 ? Dtype::F16 : t.type == GgmlType::BF16 ? Dtype::BF16 : Dtype::F32;
        const size_t element = dtype_size(v.dtype);
        if (plain && !undo.any()) {
            v.data = t.data;
            v.n_bytes = t.n_bytes;
        } else {
            const int64_t n = t.n_elements();
            std::vector<std::byte> bytes(size_t(n) * element);
            if (v.dtype != Dtype::F32) std::memcpy(bytes.data(), t.data, bytes.size());
            else dequantize_row(t.type, t.data, n, reinterpret_cast<float*>(bytes.data()));
            if (undo.unpermute || undo.transpose) {
                std::vector<std::byte> moved(bytes.size());
                if (undo.unpermute) unpermute_rows(bytes.data(), moved.data(), heads, t.dims[1], size_t(t.dims[0]) * element);
                else transpose(bytes.data(), moved.data(), t.dims[1], t.dims[0], element);
                bytes.swap(moved);
            }
            if (undo.transpose) v.shape = {t.dims[0], t.dims[1]};
            if (undo.norm_shift) undo_norm_shift(reinterpret_cast<float*>(bytes.data()), n);
            v.data = bytes.data();
            v.n_bytes = bytes.size();
            owned->buffers.push_back(std::move(bytes));
        }
        views.push_back(std::move(v));
    }
    out.checkpoint = Checkpoint::of_tensors(path, std::move(views), owned, file->mapped());
    return out;
}

GgufTypeSummary summarize_types(const std::vector<GgufTensorSummary>& tensors) {
    GgufTypeSummary out;
    double bits = 0;
    for (const GgufTensorSummary& t : tensors) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        auto it = std::find_if(out.types.begin(), out.types.end(), [&](const GgufTypeShare& s) { return s.type == t.type; });
        if (it == out.types.end()) it = out.types.insert(out.types.end(), GgufTypeShare{t.type, 0, 0});
        ++it->tensors;
        it->weights += n;
        out.weights += n;
        bits += double(n) * ggml_type_info(t.type).bits_per_weight();
    }
    std::stable_sort(out.types.begin(), out.types.end(), [](const GgufTypeShare& a, const GgufTypeShare& b) { return a.weights > b.weights; });
    out.bits_per_weight = out.weights > 0 ? bits / double(out.weights) : 0;
    return out;
}

}  // namespace kvscope
