#pragma once
// ModelConfig: the architecture read from a Hugging Face config.json — GPT-2 style (plus kvscope's
// optional extension keys, all defaulting to GPT-2's behaviour) or a Llama-family decoder
// (model_type "llama"). The forward pass reads `family` and the fields below, never model_type strings.
//
// Family::Gpt2   LayerNorm, GELU/ReLU MLP, learned or sinusoidal positions, fused Conv1D c_attn (in, out)
// Family::Llama  RMSNorm, gated MLP (act(gate)·up), rotary positions, nn.Linear q/k/v/o (out, in),
//                n_kv_head K/V heads shared by groups of n_head / n_kv_head query heads; model_type
//                "llama", "qwen2" (the same computation with biases on q, k and v only) and "qwen3"
//                (RMSNorm of each q and k head before rotation), "mistral" (Llama with a sliding window on
//                every layer) and "gemma3_text" (Gemma3ForCausalLM: (1 + weight) norms, four per layer,
//                embeddings scaled by sqrt(C), query_pre_attn_scalar, local/global layers with their own
//                rotary bases, final logit soft-capping)
// Layers may slide their own window (layer_window): Mistral's sliding_window, Qwen2/Qwen3's
// use_sliding_window + max_window_layers (or layer_types), Gemma 3's layer_types / sliding_window_pattern.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

enum class Family { Gpt2, Llama };
enum class Activation { GeluTanh, GeluErf, Relu, Silu };    // "gelu_new" | "gelu" | "relu" | "silu"
// rope_scaling.rope_type: absent | "linear" | "llama3" | "rope_freqs" (kvscope's name for a GGUF file's
// rope_freqs.weight: one divisor per frequency, as llama.cpp's converter writes Llama 3's scaling)
enum class RopeScaling { None, Linear, Llama3, Frequencies };

// Rotary position embeddings of Llama-family models (HF ROPE_INIT_FUNCTIONS).
struct RopeSpec {
    double theta = 10000.0;               // rope_theta
    RopeScaling scaling = RopeScaling::None;
    double factor = 1.0;                  // linear and llama3
    double low_freq_factor = 1.0;         // llama3
    double high_freq_factor = 4.0;        // llama3
    int64_t original_max_positions = 0;   // llama3: original_max_position_embeddings
    std::vector<float> freq_factors{};    // frequencies: (D/2) divisors, inv_freq[i] = 1 / theta^(2i/D) / factor[i]
};
enum class NormPosition { Pre, Post };                        // "pre" | "post"
enum class PositionEmbedding { Learned, Sinusoidal };         // "learned" | "sinusoidal"

struct ModelConfig {
    Family family = Family::Gpt2;
    std::string model_type = "gpt2";  // as config.json says it (for messages and config_to_json only)
    int64_t n_vocab = 0;        // vocab_size
    int64_t n_ctx = 0;          // n_positions: the largest absolute position + 1
    int64_t n_embd = 0;         // C
    int64_t n_layer = 0;        // L
    int64_t n_head = 0;         // H
    int64_t n_inner = 0;        // F; config null or absent = 4 * n_embd
    Activation activation = Activation::GeluTanh;
    double layer_norm_epsilon = 1e-5;
    bool tie_word_embeddings = true;
    // kvscope extensions
    bool qkv_bias = true;
    bool lm_head_bias = false;
    NormPosition norm_position = NormPosition::Pre;
    PositionEmbedding position_embedding = PositionEmbedding::Learned;
    double embedding_scale = 1.0;  // multiplies token embeddings only
    bool final_layer_norm = true;
    // Encoder-decoder models ("model_type": "encoder_decoder"): an encoder stack over the source, and
    // decoder layers with cross-attention to its output. n_layer counts the decoder layers.
    bool encoder_decoder = false;
    int64_t n_encoder_layer = 0;       // E
    int64_t decoder_start_token_id = -1;  // begins every decoder input

    // Llama family (Family::Llama); layer_norm_epsilon holds rms_norm_eps, n_ctx max_position_embeddings.
    int64_t n_kv_head = 0;        // K: num_key_value_heads; 0 = n_head
    int64_t explicit_head_dim = 0;  // head_dim when config.json gives it; 0 = n_embd / n_head
    RopeSpec rope;
    bool attention_bias = false;  // q, k and v projections carry biases (also qkv_bias, which Llama sets alike)
    bool o_bias = false;          // the o projection carries a bias (Llama's attention_bias; never in Qwen2)
    bool mlp_bias = false;        // gate, up and down projections carry biases
    bool qk_norm = false;         // q and k heads RMS-normalised over head_dim before rotation (Qwen3, Gemma 3)
    // Per-layer sliding windows: a query at i sees keys j with i - W < j <= i in a layer with window W
    // (HF masking_utils sliding_window_overlay). Empty or 0 = full causal attention.
    std::vector<int64_t> layer_window;  // (L)
    // Gemma 3 (model_type "gemma3_text")
    bool norm_plus_one = false;         // RMSNorm scales by (1 + weight) (Gemma3RMSNorm); weights.cpp stores 1 + w
    bool sandwich_norm = false;         // post_attention_layernorm on the attention output, pre_ and
                                        // post_feedforward_layernorm around the MLP (Gemma3DecoderLayer)
    double query_pre_attn_scalar = 0;   // scores scaled by this^-0.5; 0 = head_dim
    bool local_rope = false;            // sliding layers rotate with local_rope_theta, unscaled
    double local_rope_theta = 10000.0;  // rope_local_base_freq
    double final_logit_softcap = 0;     // logits = cap * tanh(logits / cap); 0 = off

    int64_t head_dim() const { return explicit_head_dim ? explicit_head_dim : n_embd / n_head; }  // D
    int64_t kv_heads() const { return n_kv_head ? n_kv_head : n_head; }                           // K
    // "LayerNorm", "RMSNorm times the weight" or "RMSNorm times (1 + weight)" (Gemma3RMSNorm): what
    // inspect, --json and the window say of every norm
    std::string norm_form() const {
        return family != Family::Llama ? "LayerNorm" : norm_plus_one ? "RMSNorm times (1 + weight)" : "RMSNorm times the weight";
    }
    // The K/V head query head h reads (HF repeat_kv: head h uses K/V head h // (H / K)).
    int64_t kv_head_of(int64_t h) const { return h / (n_head / kv_heads()); }
    int64_t q_width() const { return n_head * head_dim(); }     // H * D
    int64_t kv_width() const { return kv_heads() * head_dim(); }  // K * D
    int64_t window_of(int64_t il) const { return layer_window.empty() ? 0 : layer_window[size_t(il)]; }  // 0 = full
    bool has_sliding_layers() const {
        for (int64_t w : layer_window) if (w > 0) return true;
        return false;
    }
    // The factor on q·k: HF's scaling (head_dim^-0.5, Gemma 3's query_pre_attn_scalar^-0.5).
    float attention_scale() const;
    // The config.json key n_ctx came from, for messages. Hugging Face does not enforce
    // max_position_embeddings on Llama models; kvscope refuses positions beyond it as it does for GPT-2.
    const char* positions_key() const { return family == Family::Llama ? "max_position_embeddings" : "n_positions"; }
    // "sliding window 512 on layers 0-4, 6-10; full attention elsewhere" (inspect, messages); "" when none.
    std::string describe_windows() const;
};

// Parses and validates config.json text. `path` is used in error messages only.
// Throws LoadError naming the key and the problem (wrong type, impossible value, n_embd % n_head != 0...).
ModelConfig parse_config(std::string_view json_text, const std::string& path);
ModelConfig load_config(const std::string& path);  // reads the file, then parse_config

// Round trip for writers (model generators, inspect): the canonical config.json text.
std::string config_to_json(const ModelConfig& config);

const char* to_string(Activation a);          // "gelu_new" | "gelu" | "relu" | "silu"
const char* to_string(Family f);              // "gpt2" | "llama"
const char* to_string(NormPosition n);        // "pre" | "post"
const char* to_string(PositionEmbedding p);   // "learned" | "sinusoidal"

}  // namespace kvscope
