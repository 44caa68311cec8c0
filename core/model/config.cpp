// config.json -> ModelConfig. Every key is checked for kind and range here, so code past this point
// can trust the sizes (positive, divisible, small enough that products fit int64).
#include "model/config.h"

#include <charconv>
#include <cmath>

#include "base/errors.h"
#include "io/json.h"
#include "io/json_write.h"
#include "io/read_file.h"

namespace kvscope {

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 20;    // vocab, positions, width, inner width, heads
constexpr int64_t kMaxLayers = int64_t(1) << 12;
// Parameters counted in f32 bytes must fit comfortably in int64 and size_t.
constexpr int64_t kMaxParams = int64_t(1) << 40;

std::string line_and_column(std::string_view text, size_t offset) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') { ++line; col = 1; }
        else ++col;
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

std::string show_value(const Json& v) {
    switch (v.kind()) {
    case Json::Kind::Null: return "null";
    case Json::Kind::Bool: return v.as_bool() ? "true" : "false";
    case Json::Kind::String: return "string " + json_escape(v.as_string());
    case Json::Kind::Array: return "an array";
    case Json::Kind::Object: return "an object";
    case Json::Kind::Number: {
        if (v.is_integer()) return std::to_string(v.as_integer());
        char buf[32];
        auto r = std::to_chars(buf, buf + sizeof buf, v.as_number());
        return std::string(buf, r.ptr);
    }
    }
    return "?";
}

class Reader {
public:
    Reader(const Json& root, const std::string& path, const char* required_hint)
        : root_(root), path_(path), required_hint_(required_hint) {}

    [[noreturn]] void fail(const std::string& what, const std::string& hint = "") const {
        throw LoadError(path_, what, hint);
    }

    const Json* get(const char* key) const { return root_.find(key); }

    int64_t size(const char* key, int64_t max, bool required, int64_t fallback = 0) const {
        const Json* v = get(key);
        if (!v) {
            if (required) fail(std::string("missing required key ") + key, required_hint_);
            return fallback;
        }
        return size_value(key, *v, max);
    }

    // A size that may also be null or absent (Hugging Face writes "head_dim": null): 0 then.
    int64_t optional_size(const char* key, int64_t max) const {
        const Json* v = get(key);
        return (!v || v->is_null()) ? 0 : size_value(key, *v, max);
    }

    int64_t size_value(const char* key, const Json& v, int64_t max) const {
        if (!v.is_integer())
            fail(std::string(key) + " must be a whole number, found " + show_value(v));
        int64_t x = v.as_integer();
        if (x <= 0) fail(std::string(key) + " must be positive, found " + std::to_string(x));
        if (x > max)
            fail(std::string(key) + " (" + std::to_string(x) + ") is larger than kvscope supports (" +
                 std::to_string(max) + ")");
        return x;
    }

    bool flag(const char* key, bool fallback) const {
        const Json* v = get(key);
        if (!v) return fallback;
        if (!v->is_bool()) fail(std::string(key) + " must be true or false, found " + show_value(*v));
        return v->as_bool();
    }

    // A number the maths needs inside [lo, hi] (lo excluded when `above_lo`): outside, a float32 overflows
    // or divides by zero and every logit is NaN or 0. The ranges hold every released checkpoint by a
    // wide margin; `usual` says what those use.
    double real_in(const char* key, double fallback, double lo, double hi, bool above_lo, const char* usual) const {
        const Json* v = get(key);
        if (!v) return fallback;
        return real_in_value(key, *v, lo, hi, above_lo, usual);
    }

    double real_in_value(const std::string& key, const Json& v, double lo, double hi, bool above_lo,
                         const char* usual) const {
        if (!v.is_number()) fail(key + " must be a number, found " + show_value(v));
        const double x = v.as_number();
        if (std::isfinite(x) && (above_lo ? x > lo : x >= lo) && x <= hi) return x;
        fail(key + " must be a finite number " + (above_lo ? "greater than " : "from ") + show_number(lo) +
                 (above_lo ? " and at most " : " to ") + show_number(hi) + ", found " + show_value(v),
             std::string(usual) + "; this value makes the float32 maths overflow or vanish");
    }

    static std::string show_number(double x) {
        char buf[32];
        auto r = std::to_chars(buf, buf + sizeof buf, x);
        return std::string(buf, r.ptr);
    }

    // Returns the string of a key that must be one of `allowed` (nullptr-terminated), or nullptr if absent.
    const std::string* choice(const char* key, const char* const* allowed) const {
        const Json* v = get(key);
        if (!v) return nullptr;
        std::string list;
        for (const char* const* a = allowed; *a; ++a) list += std::string(list.empty() ? "" : ", ") + *a;
        if (!v->is_string()) fail(std::string(key) + " must be a string (one of " + list + "), found " + show_value(*v));
        for (const char* const* a = allowed; *a; ++a)
            if (v->as_string() == *a) return &v->as_string();
        fail(std::string(key) + " " + json_escape(v->as_string()) + " is not supported", "use one of " + list);
    }


private:
    const Json& root_;
    const std::string& path_;
    const char* required_hint_;
};

constexpr double kMaxRopeTheta = 1e12, kMaxEps = 0.1;
constexpr const char* kRopeThetaUsual = "real checkpoints use 10000 (Llama 2, Gemma 3 local) to 1e6 (Qwen2.5, Gemma 3 global)";
constexpr const char* kEpsUsual = "real checkpoints use 1e-6 or 1e-5";

constexpr const char* kGpt2Keys = "a GPT-2 config.json has vocab_size, n_positions, n_embd, n_layer and n_head";
constexpr const char* kLlamaKeys =
    "a Llama config.json has vocab_size, max_position_embeddings, hidden_size, intermediate_size, "
    "num_hidden_layers and num_attention_heads";

// Which layers slide their window W (> 0; 0 = none at all): config.json's layer_types list when it has
// one ("sliding_attention" | "full_attention" per layer, as newer Hugging Face configs write it), else
// `slides(il)`, the family's own rule. (L) windows, 0 = full attention.
template <class Slides>
std::vector<int64_t> layer_windows(const Reader& r, int64_t n_layer, int64_t window, Slides&& slides) {
    std::vector<int64_t> out(size_t(n_layer), 0);
    const Json* types = r.get("layer_types");
    if (!types || types->is_null()) {
        for (int64_t il = 0; il < n_layer; ++il) out[size_t(il)] = slides(il) ? window : 0;
        return out;
    }
    if (!types->is_array()) r.fail("layer_types must be a list, found " + show_value(*types));
    const auto& list = types->as_array();
    if (int64_t(list.size()) != n_layer)
        r.fail("layer_types has " + std::to_string(list.size()) + " entries, num_hidden_layers is " +
               std::to_string(n_layer));
    for (int64_t il = 0; il < n_layer; ++il) {
        const Json& t = list[size_t(il)];
        const bool sliding = t.is_string() && t.as_string() == "sliding_attention";
        if (!sliding && !(t.is_string() && t.as_string() == "full_attention"))
            r.fail("layer_types[" + std::to_string(il) + "] is " + show_value(t) +
                   ", not \"sliding_attention\" or \"full_attention\"");
        out[size_t(il)] = sliding ? window : 0;
    }
    return out;
}

// rope_scaling "rope_freqs" (kvscope's own: config_to_json writes it for a GGUF file's rope_freqs.weight, so
// the text reads back): "factors", one divisor per frequency. The count is checked against head_dim later.
std::vector<float> parse_freq_factors(const Reader& r, const Json& s) {
    const Json* list = s.find("factors");
    if (!list || !list->is_array()) r.fail("rope_scaling (rope_freqs) needs factors, a list of numbers");
    std::vector<float> out;
    for (size_t i = 0; i < list->as_array().size(); ++i)
        out.push_back(float(r.real_in_value("rope_scaling.factors[" + std::to_string(i) + "]", list->as_array()[i], 1e-3,
                                            1e4, false, "Llama 3's are 1 to 32")));
    return out;
}

// rope_scaling: null, or {"rope_type" (or the older "type"): "default" | "linear" | "llama3" | "rope_freqs", ...}.
// Other kinds (dynamic, yarn, longrope, ...) change more than the frequencies: refused by name.
RopeSpec parse_rope(const Reader& r, const Json& root) {
    RopeSpec rope;
    rope.theta = r.real_in("rope_theta", 10000.0, 1, kMaxRopeTheta, true, kRopeThetaUsual);
    const Json* s = root.find("rope_scaling");
    if (!s || s->is_null()) return rope;
    if (!s->is_object()) r.fail("rope_scaling must be null or an object, found " + show_value(*s));
    const Json* kind = s->find("rope_type");
    if (!kind) kind = s->find("type");
    if (!kind || !kind->is_string()) r.fail("rope_scaling has no rope_type string", "kvscope reads \"linear\" and \"llama3\"");
    const std::string& k = kind->as_string();
    if (k == "default") return rope;
    if (k == "rope_freqs") {
        rope.scaling = RopeScaling::Frequencies;
        rope.freq_factors = parse_freq_factors(r, *s);
        return rope;
    }
    if (k != "linear" && k != "llama3")
        r.fail("rope_scaling type " + json_escape(k) + " is not supported", "kvscope reads \"linear\" and \"llama3\"");
    auto number = [&](const char* key) {
        const Json* v = s->find(key);
        if (!v) r.fail(std::string("rope_scaling (") + k + ") needs " + key);
        // factor < 1 would shrink positions (Hugging Face warns "factor field must be a float >= 1")
        if (std::string(key) == "factor")
            return r.real_in_value("rope_scaling.factor", *v, 1, 1e4, false, "Llama 3 uses 8 or 32, linear scaling 2 to 16");
        return r.real_in_value(std::string("rope_scaling.") + key, *v, 1e-3, 1e4, false, "Llama 3 uses 1 and 4");
    };
    rope.factor = number("factor");
    rope.scaling = RopeScaling::Linear;
    if (k == "llama3") {
        rope.scaling = RopeScaling::Llama3;
        rope.low_freq_factor = number("low_freq_factor");
        rope.high_freq_factor = number("high_freq_factor");
        if (!(rope.high_freq_factor > rope.low_freq_factor))
            r.fail("rope_scaling.high_freq_factor must be larger than low_freq_factor");
        const Json* old = s->find("original_max_position_embeddings");
        if (!old) r.fail("rope_scaling (llama3) needs original_max_position_embeddings");
        rope.original_max_positions = r.size_value("original_max_position_embeddings", *old, kMaxDim);
    }
    return rope;
}

// model_type "llama" (LlamaForCausalLM) and "qwen2" (Qwen2ForCausalLM): Hugging Face's LlamaConfig and
// Qwen2Config keys and defaults. Qwen2 is Llama with biases on q, k and v (Qwen2Attention: q/k/v_proj
// bias=True, o_proj bias=False).
// Qwen3 (Qwen3ForCausalLM) adds q_norm / k_norm (Qwen3Attention) and its head_dim defaults to 128.
ModelConfig parse_llama(const Reader& r, const Json& root, const std::string& model_type) {
    const bool qwen2 = model_type == "qwen2", qwen3 = model_type == "qwen3";
    const bool mistral = model_type == "mistral", gemma = model_type == "gemma3_text";
    ModelConfig c;
    c.family = Family::Llama;
    c.model_type = model_type;
    c.qk_norm = qwen3 || gemma;
    c.norm_plus_one = c.sandwich_norm = gemma;
    c.n_vocab = r.size("vocab_size", kMaxDim, true);
    c.n_ctx = r.size("max_position_embeddings", kMaxDim, true);
    c.n_embd = r.size("hidden_size", kMaxDim, true);
    c.n_inner = r.size("intermediate_size", kMaxDim, true);
    c.n_layer = r.size("num_hidden_layers", kMaxLayers, true);
    c.n_head = r.size("num_attention_heads", kMaxDim, true);
    c.n_kv_head = r.optional_size("num_key_value_heads", kMaxDim);
    c.explicit_head_dim = r.optional_size("head_dim", kMaxDim);
    if (qwen3 && !r.get("head_dim")) c.explicit_head_dim = 128;  // Qwen3Config's default
    if (gemma && !r.get("head_dim")) c.explicit_head_dim = 256;  // Gemma3TextConfig's default
    static const char* const activations[] = {"silu", "gelu_pytorch_tanh", nullptr};
    // Gemma3MLP reads hidden_activation (default gelu_pytorch_tanh); the others hidden_act (silu).
    const char* act_key = gemma ? "hidden_activation" : "hidden_act";
    c.activation = gemma ? Activation::GeluTanh : Activation::Silu;
    if (const std::string* a = r.choice(act_key, activations))
        c.activation = *a == "silu" ? Activation::Silu : Activation::GeluTanh;
    c.layer_norm_epsilon = r.real_in("rms_norm_eps", 1e-6, 0, kMaxEps, true, kEpsUsual);
    c.tie_word_embeddings = r.flag("tie_word_embeddings", gemma);  // Gemma3TextConfig ties by default
    if (gemma) c.embedding_scale = double(float(std::sqrt(double(c.n_embd))));  // Gemma3TextScaledWordEmbedding
    if (qwen2 || qwen3) {
        c.attention_bias = qwen2 || r.flag("attention_bias", false);
        c.o_bias = qwen3 && c.attention_bias;
        // Qwen2Config / Qwen3Config.__post_init__: sliding_window counts only with use_sliding_window,
        // and then slides layers il >= max_window_layers (unless layer_types says otherwise).
        const bool slide = r.flag("use_sliding_window", false);
        const int64_t window = !slide ? 0 : !r.get("sliding_window") ? 4096 : r.optional_size("sliding_window", kMaxDim);
        const int64_t full_below = r.size("max_window_layers", kMaxLayers, false, 28);  // Qwen2Config's default
        c.layer_window = layer_windows(r, c.n_layer, window, [&](int64_t il) { return window > 0 && il >= full_below; });
    } else if (mistral) {  // MistralAttention: no biases; every layer slides when sliding_window is set
        const Json* sw = r.get("sliding_window");
        const int64_t window = !sw ? 4096 : r.optional_size("sliding_window", kMaxDim);  // MistralConfig's default
        c.layer_window.assign(size_t(c.n_layer), window);
    } else if (gemma) {
        c.attention_bias = r.flag("attention_bias", false);
        c.o_bias = c.attention_bias;
        const int64_t window = r.size("sliding_window", kMaxDim, false, 4096);  // Gemma3TextConfig's default
        const int64_t pattern = r.size("sliding_window_pattern", kMaxLayers, false, 6);
        c.layer_window = layer_windows(r, c.n_layer, window, [&](int64_t il) { return (il + 1) % pattern != 0; });
        c.query_pre_attn_scalar = r.real_in("query_pre_attn_scalar", 256.0, 1, 1e6, false, "Gemma 3 uses 256 or head_dim");
        c.local_rope = true;
        c.local_rope_theta = r.real_in("rope_local_base_freq", 10000.0, 1, kMaxRopeTheta, true, kRopeThetaUsual);
        if (const Json* cap = r.get("final_logit_softcapping"); cap && !cap->is_null())
            c.final_logit_softcap = r.real_in_value("final_logit_softcapping", *cap, 0.01, 1e6, false, "Gemma 2 uses 30");
        // Gemma3Attention keeps attn_logit_softcapping but never passes it to the attention function,
        // so upstream applies no cap to the scores: nor does kvscope (the key is read and ignored).
        if (r.flag("use_bidirectional_attention", false))
            r.fail("use_bidirectional_attention true is not supported", "kvscope runs causal decoders");
    } else {
        c.attention_bias = r.flag("attention_bias", false);
        c.o_bias = c.attention_bias;
        c.mlp_bias = r.flag("mlp_bias", false);
    }
    c.qkv_bias = c.attention_bias;
    // transformers 5 writes rope_parameters (per layer type for Gemma 3) instead of rope_theta /
    // rope_scaling / rope_local_base_freq: not read yet, so refused rather than run with defaults.
    if (r.get("rope_parameters") && !r.get("rope_theta"))
        r.fail("rope_parameters is not read yet", "write rope_theta and rope_scaling (transformers 4 layout)");
    c.rope = parse_rope(r, root);
    if (c.n_head % c.kv_heads() != 0)
        r.fail("num_attention_heads (" + std::to_string(c.n_head) + ") is not divisible by num_key_value_heads (" +
               std::to_string(c.kv_heads()) + ")");
    if (!c.explicit_head_dim && c.n_embd % c.n_head != 0)
        r.fail("hidden_size (" + std::to_string(c.n_embd) + ") is not divisible by num_attention_heads (" +
               std::to_string(c.n_head) + ") and there is no head_dim");
    if (c.head_dim() % 2 != 0)
        r.fail("head_dim " + std::to_string(c.head_dim()) + " is odd; rotary embeddings rotate pairs of dimensions");
    if (c.rope.scaling == RopeScaling::Frequencies && int64_t(c.rope.freq_factors.size()) != c.head_dim() / 2)
        r.fail("rope_scaling.factors has " + std::to_string(c.rope.freq_factors.size()) + " entries, not head_dim / 2 = " +
               std::to_string(c.head_dim() / 2));
    __int128 C = c.n_embd, F = c.n_inner, L = c.n_layer, Q = c.q_width(), KV = c.kv_width();
    __int128 per_layer = 2 * C + C * Q + 2 * C * KV + Q * C + 3 * C * F + (Q + 2 * KV + C) + (2 * F + C);
    __int128 params = __int128(c.n_vocab) * C * (c.tie_word_embeddings ? 1 : 2) + L * per_layer + C;
    if (params > kMaxParams)
        r.fail("the sizes describe about " + std::to_string(int64_t(params >> 30)) +
                   " Gi parameters, more than kvscope supports (" + std::to_string(kMaxParams >> 30) + " Gi)",
               "check vocab_size, hidden_size, intermediate_size and num_hidden_layers");
    return c;
}

}  // namespace

ModelConfig parse_config(std::string_view json_text, const std::string& path) {
    Json root;
    try {
        root = Json::parse(json_text);
    } catch (const JsonError& e) {
        std::string what = e.what();
        // Lead with line and column: people open config.json in an editor, not a hex viewer.
        size_t colon = what.find(": ");
        std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
        throw LoadError(path, "not valid JSON at " + line_and_column(json_text, e.offset) + " (byte " +
                                  std::to_string(e.offset) + "): " + detail);
    }
    if (!root.is_object()) throw LoadError(path, std::string("expected a JSON object, found ") + root.kind_name());
    // model_type picks the family; absent is a GPT-2 folder (kvscope's own generators leave it out).
    std::string model_type = "gpt2";
    if (const Json* t = root.find("model_type")) {
        if (!t->is_string()) throw LoadError(path, "model_type must be a string, found " + show_value(*t));
        model_type = t->as_string();
    }
    if (model_type == "llama" || model_type == "qwen2" || model_type == "qwen3" || model_type == "mistral" ||
        model_type == "gemma3_text")
        return parse_llama(Reader(root, path, kLlamaKeys), root, model_type);
    if (model_type != "gpt2" && model_type != "encoder_decoder")
        throw LoadError(path, "model_type " + json_escape(model_type) + " is not supported",
                        "kvscope reads gpt2, encoder_decoder, llama, qwen2, qwen3, mistral and gemma3_text folders");
    Reader r(root, path, kGpt2Keys);

    ModelConfig c;
    c.n_vocab = r.size("vocab_size", kMaxDim, true);
    c.n_ctx = r.size("n_positions", kMaxDim, true);
    c.n_embd = r.size("n_embd", kMaxDim, true);
    c.n_layer = r.size("n_layer", kMaxLayers, true);
    c.n_head = r.size("n_head", kMaxDim, true);
    const Json* inner = r.get("n_inner");
    c.n_inner = (!inner || inner->is_null()) ? 4 * c.n_embd : r.size_value("n_inner", *inner, kMaxDim);

    static const char* const activations[] = {"gelu_new", "gelu_pytorch_tanh", "gelu", "relu", nullptr};
    if (const std::string* a = r.choice("activation_function", activations)) {
        if (*a == "gelu") c.activation = Activation::GeluErf;
        else if (*a == "relu") c.activation = Activation::Relu;
        else c.activation = Activation::GeluTanh;
    }
    c.layer_norm_epsilon = r.real_in("layer_norm_epsilon", 1e-5, 0, kMaxEps, true, kEpsUsual);
    c.tie_word_embeddings = r.flag("tie_word_embeddings", true);

    c.qkv_bias = r.flag("qkv_bias", true);
    c.lm_head_bias = r.flag("lm_head_bias", false);
    static const char* const norms[] = {"pre", "post", nullptr};
    if (const std::string* s = r.choice("norm_position", norms))
        c.norm_position = *s == "post" ? NormPosition::Post : NormPosition::Pre;
    static const char* const positions[] = {"learned", "sinusoidal", nullptr};
    if (const std::string* s = r.choice("position_embedding", positions))
        c.position_embedding = *s == "sinusoidal" ? PositionEmbedding::Sinusoidal : PositionEmbedding::Learned;
    c.embedding_scale = r.real_in("embedding_scale", 1.0, 1e-3, 1e3, false, "real checkpoints use 1 or sqrt(n_embd)");
    c.final_layer_norm = r.flag("final_layer_norm", true);
    if (model_type == "encoder_decoder") {
        c.encoder_decoder = true;
        if (!r.get("n_encoder_layer") || !r.get("decoder_start_token_id"))
            r.fail("an encoder_decoder config.json needs n_encoder_layer and decoder_start_token_id",
                   "assets/README.md lists the keys of this format");
        c.n_encoder_layer = r.size("n_encoder_layer", kMaxLayers, true);
        const Json& start = *r.get("decoder_start_token_id");
        if (!start.is_integer() || start.as_integer() < 0)
            r.fail("decoder_start_token_id must be a token id (a whole number >= 0), found " + show_value(start));
        c.decoder_start_token_id = start.as_integer();
        if (c.decoder_start_token_id >= c.n_vocab)
            r.fail("decoder_start_token_id " + std::to_string(c.decoder_start_token_id) + " is outside the vocabulary [0, " +
                   std::to_string(c.n_vocab) + ")");
    }

    if (c.n_embd % c.n_head != 0)
        r.fail("n_embd (" + std::to_string(c.n_embd) + ") is not divisible by n_head (" +
               std::to_string(c.n_head) + ")");
    if (c.position_embedding == PositionEmbedding::Sinusoidal && c.n_embd % 2 != 0)
        r.fail("position_embedding \"sinusoidal\" needs an even n_embd, found " + std::to_string(c.n_embd));

    // pass: parameter count, in a type that cannot overflow with the caps above (each term < 2^57).
    __int128 C = c.n_embd, F = c.n_inner, L = c.n_layer;
    __int128 per_layer = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (C * F + F) + (F * C + C);
    __int128 params = __int128(c.n_vocab) * C + __int128(c.n_ctx) * C + L * per_layer + 2 * C;
    if (c.encoder_decoder)  // encoder layers, and per decoder layer a norm, q, k|v and the output projection
        params += __int128(c.n_encoder_layer) * per_layer + L * (2 * C + (C * C + C) + (2 * C * C + 2 * C) + (C * C + C));
    if (!c.tie_word_embeddings) params += __int128(c.n_vocab) * C;
    if (params > kMaxParams)
        r.fail("the sizes describe about " + std::to_string(int64_t(params >> 30)) +
                   " Gi parameters, more than kvscope supports (" + std::to_string(kMaxParams >> 30) + " Gi)",
               "check vocab_size, n_embd, n_inner and n_layer");
    return c;
}

ModelConfig load_config(const std::string& path) {
    return parse_config(read_file_bounded(path, k_config_file,
                                          "a model folder needs config.json, model.safetensors, vocab.json and merges.txt"),
                        path);
}

float ModelConfig::attention_scale() const {
    if (query_pre_attn_scalar > 0) return float(std::pow(query_pre_attn_scalar, -0.5));  // Gemma3Attention.scaling
    return 1.0f / std::sqrt(float(head_dim()));
}

std::string ModelConfig::describe_windows() const {
    // Runs of consecutive layers with the same window: "0-4, 6-10" (every family has one window value).
    std::string sliding, full;
    int64_t window = 0;
    for (int64_t il = 0; il < n_layer;) {
        const int64_t w = window_of(il);
        int64_t end = il;
        while (end + 1 < n_layer && window_of(end + 1) == w) ++end;
        std::string& list = w > 0 ? sliding : full;
        if (!list.empty()) list += ", ";
        list += std::to_string(il);
        if (end > il) list.append("-").append(std::to_string(end));
        window = w > 0 ? w : window;
        il = end + 1;
    }
    if (sliding.empty()) return "";
    std::string out = "layers " + sliding + " slide a window of " + std::to_string(window);
    if (!full.empty()) out.append("; layers ").append(full).append(" attend to every position");
    return out;
}

std::string config_to_json(const ModelConfig& c) {
    JsonOut j;
    if (c.family == Family::Llama) {  // every key the forward pass reads, so a prompt-cache fingerprint covers them
        j["model_type"] = c.model_type;
        j["vocab_size"] = c.n_vocab;
        j["max_position_embeddings"] = c.n_ctx;
        j["hidden_size"] = c.n_embd;
        j["intermediate_size"] = c.n_inner;
        j["num_hidden_layers"] = c.n_layer;
        j["num_attention_heads"] = c.n_head;
        j["num_key_value_heads"] = c.kv_heads();
        j["head_dim"] = c.head_dim();
        j["hidden_act"] = c.activation == Activation::Silu ? "silu" : "gelu_pytorch_tanh";
        j["rms_norm_eps"] = double(c.layer_norm_epsilon);
        j["rope_theta"] = double(c.rope.theta);
        if (c.rope.scaling != RopeScaling::None) {
            JsonOut s;
            s["rope_type"] = c.rope.scaling == RopeScaling::Linear   ? "linear"
                             : c.rope.scaling == RopeScaling::Llama3 ? "llama3"
                                                                     : "rope_freqs";
            if (c.rope.scaling == RopeScaling::Frequencies) s["factors"] = c.rope.freq_factors;
            else s["factor"] = double(c.rope.factor);
            if (c.rope.scaling == RopeScaling::Llama3) {
                s["low_freq_factor"] = double(c.rope.low_freq_factor);
                s["high_freq_factor"] = double(c.rope.high_freq_factor);
                s["original_max_position_embeddings"] = c.rope.original_max_positions;
            }
            j["rope_scaling"] = s;
        }
        j["tie_word_embeddings"] = c.tie_word_embeddings;
        if (c.model_type != "qwen2" && c.model_type != "mistral")  // fixed by their model_type
            j["attention_bias"] = c.attention_bias;
        if (c.model_type == "llama") j["mlp_bias"] = c.mlp_bias;
        // The windows as data: every family reads layer_types and sliding_window back the same way.
        int64_t window = 0;
        for (int64_t w : c.layer_window) window = w > 0 ? w : window;
        if (c.model_type == "qwen2" || c.model_type == "qwen3") j["use_sliding_window"] = window > 0;
        if (window > 0 || c.model_type == "mistral") {
            if (window > 0) j["sliding_window"] = window;
            else j["sliding_window"] = nullptr;
            if (c.model_type != "mistral") {
                std::vector<std::string> types;
                for (int64_t il = 0; il < c.n_layer; ++il)
                    types.push_back(c.window_of(il) > 0 ? "sliding_attention" : "full_attention");
                j["layer_types"] = types;
            }
        }
        if (c.model_type == "gemma3_text") {
            j["hidden_activation"] = c.activation == Activation::Silu ? "silu" : "gelu_pytorch_tanh";
            j["query_pre_attn_scalar"] = double(c.query_pre_attn_scalar);
            j["rope_local_base_freq"] = double(c.local_rope_theta);
            if (c.final_logit_softcap > 0) j["final_logit_softcapping"] = double(c.final_logit_softcap);
            else j["final_logit_softcapping"] = nullptr;
        }
        return json_text(j, 2) + "\n";
    }
    j["model_type"] = c.encoder_decoder ? "encoder_decoder" : "gpt2";
    if (c.encoder_decoder) {
        j["n_encoder_layer"] = c.n_encoder_layer;
        j["decoder_start_token_id"] = c.decoder_start_token_id;
    }
    j["vocab_size"] = c.n_vocab;
    j["n_positions"] = c.n_ctx;
    j["n_embd"] = c.n_embd;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_inner"] = c.n_inner;
    j["activation_function"] = to_string(c.activation);
    j["layer_norm_epsilon"] = double(c.layer_norm_epsilon);  // a double prints as a real: 1.0, never 1
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["qkv_bias"] = c.qkv_bias;
    j["lm_head_bias"] = c.lm_head_bias;
    j["norm_position"] = to_string(c.norm_position);
    j["position_embedding"] = to_string(c.position_embedding);
    j["embedding_scale"] = double(c.embedding_scale);
    j["final_layer_norm"] = c.final_layer_norm;
    return json_text(j, 2) + "\n";
}

const char* to_string(Activation a) {
    switch (a) {
    case Activation::GeluTanh: return "gelu_new";
    case Activation::GeluErf: return "gelu";
    case Activation::Relu: return "relu";
    case Activation::Silu: return "silu";
    }
    return "?";
}

const char* to_string(Family f) { return f == Family::Llama ? "llama" : "gpt2"; }

const char* to_string(NormPosition n) { return n == NormPosition::Post ? "post" : "pre"; }

const char* to_string(PositionEmbedding p) {
    return p == PositionEmbedding::Sinusoidal ? "sinusoidal" : "learned";
}

}  // namespace kvscope
