// GGUF -> (ModelConfig, Checkpoint): metadata keys become the config.json a folder would carry, tensors get
// their Hugging Face names and layouts back.
#include "model/gguf_model.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "base/errors.h"
#include "model/gguf.h"

namespace kvscope {

namespace {

// llama.cpp's per-layer tensor names -> Hugging Face's (model.layers.N. + the right side).
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

// "" when the name is not one kvscope knows.
std::string hf_name(const std::string& name) {
    if (name == "token_embd.weight") return "model.embed_tokens.weight";
    if (name == "output_norm.weight") return "model.norm.weight";
    if (name == "output.weight") return "lm_head.weight";
    unsigned layer = 0;
    int consumed = 0;
    if (std::sscanf(name.c_str(), "blk.%u.%n", &layer, &consumed) != 1 || consumed == 0) return "";
    auto it = layer_names().find(name.substr(size_t(consumed)));
    if (it == layer_names().end()) return "";
    return "model.layers." + std::to_string(layer) + "." + it->second;
}

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
    double real(const std::string& key, double fallback) const {
        const GgufValue* v = f_.find(arch_ + "." + key);
        if (!v) return fallback;
        if (!v->is_real()) fail(arch_ + "." + key + " must be a number, found " + shown(*v));
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

// The config.json a Hugging Face folder of this model would carry, as text for parse_config.
std::string config_json(const GgufFile& f, const std::string& arch) {
    const Metadata m(f, arch);
    for (const char* key : {"rope.scaling.type", "attention.sliding_window"})
        if (const GgufValue* v = f.find(arch + "." + key); v && !(v->type == GgufValueType::String && v->text == "none"))
            m.fail(arch + "." + key + " is set; kvscope does not read GGUF files with it yet");
    if (f.tensor("rope_freqs.weight"))
        m.fail("holds rope_freqs.weight (Llama 3.1-style rope scaling); kvscope does not read GGUF files with it yet");
    const GgufTensor* embedding = f.tensor("token_embd.weight");
    if (!embedding || embedding->dims.size() != 2) m.fail("tensor token_embd.weight is missing or not a matrix");
    const int64_t heads = m.size("attention.head_count");
    std::string j = "{\"model_type\": \"" + arch + "\"";
    auto add = [&](const char* key, const std::string& value) { j += std::string(", \"") + key + "\": " + value; };
    add("vocab_size", std::to_string(embedding->dims[1]));
    add("hidden_size", std::to_string(m.size("embedding_length")));
    add("num_hidden_layers", std::to_string(m.size("block_count")));
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
    add("rope_theta", number(m.real("rope.freq_base", 10000.0)));
    add("tie_word_embeddings", f.tensor("output.weight") ? "false" : "true");
    if (arch == "llama") add("attention_bias", f.tensor("blk.0.attn_q.bias") ? "true" : "false");
    return j + "}";
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

struct Owned {
    std::shared_ptr<const GgufFile> file;
    std::vector<std::vector<std::byte>> buffers;  // dequantized or un-permuted tensors
};

}  // namespace

GgufModel open_gguf_model(const std::string& path) {
    auto file = std::make_shared<const GgufFile>(path);
    const GgufValue* arch_value = file->find("general.architecture");
    if (!arch_value || arch_value->type != GgufValueType::String)
        throw LoadError(path, "general.architecture is missing", "is this a model file?");
    GgufModel out;
    out.architecture = arch_value->text;
    if (out.architecture != "llama" && out.architecture != "qwen2" && out.architecture != "qwen3")
        throw LoadError(path, "architecture " + out.architecture + " is not supported",
                        "kvscope reads GGUF files of llama, qwen2 and qwen3");
    out.config = parse_config(config_json(*file, out.architecture), path);
    out.tokenizer = gguf_tokenizer_files(*file);
    const ModelConfig& c = out.config;

    auto owned = std::make_shared<Owned>();
    owned->file = file;
    std::vector<TensorView> views;
    for (const GgufTensor& t : file->tensors()) {
        const std::string name = hf_name(t.name);
        if (name.empty())
            throw LoadError(path, "tensor " + t.name + " is not one kvscope knows for architecture " + out.architecture);
        const GgmlTypeInfo& info = ggml_type_info(t.type);
        if (!info.readable)
            throw LoadError(path, "tensor " + t.name + " is " + info.name + ", a type kvscope does not read",
                            "kvscope reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K");
        out.tensors.push_back({t.name, name, t.type, t.shape()});
        TensorView v;
        v.name = name;
        v.shape = t.shape();
        const bool permuted = out.architecture == "llama" && t.dims.size() == 2 &&
                              (t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight"));
        const int64_t heads = t.name.ends_with("attn_q.weight") ? c.n_head : c.kv_heads();
        if (permuted && (t.dims[1] % heads != 0 || (t.dims[1] / heads) % 2 != 0))
            throw LoadError(path, "tensor " + t.name + " has " + std::to_string(t.dims[1]) + " rows, not " +
                                      std::to_string(heads) + " heads of an even size");
        const bool plain = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16;
        v.dtype = t.type == GgmlType::F16 ? Dtype::F16 : t.type == GgmlType::BF16 ? Dtype::BF16 : Dtype::F32;
        const size_t element = dtype_size(v.dtype);
        if (plain && !permuted) {
            v.data = t.data;
            v.n_bytes = t.n_bytes;
        } else {
            const int64_t n = t.n_elements();
            std::vector<std::byte> bytes(size_t(n) * element);
            if (plain) std::memcpy(bytes.data(), t.data, bytes.size());
            else dequantize_row(t.type, t.data, n, reinterpret_cast<float*>(bytes.data()));
            if (permuted) {
                std::vector<std::byte> rows(bytes.size());
                unpermute_rows(bytes.data(), rows.data(), heads, t.dims[1], size_t(t.dims[0]) * element);
                bytes.swap(rows);
            }
            v.data = bytes.data();
            v.n_bytes = bytes.size();
            owned->buffers.push_back(std::move(bytes));
        }
        views.push_back(std::move(v));
    }
    out.checkpoint = Checkpoint::of_tensors(path, std::move(views), owned);
    return out;
}

}  // namespace kvscope
