#pragma once
// ModelConfig: the architecture read from a Hugging Face GPT-2 style config.json, plus kvscope's
// optional extension keys (all defaulting to GPT-2's behaviour).
#include <cstdint>
#include <string>
#include <string_view>

namespace kvscope {

enum class Activation { GeluTanh, GeluErf, Relu };          // "gelu_new" | "gelu" | "relu"
enum class NormPosition { Pre, Post };                        // "pre" | "post"
enum class PositionEmbedding { Learned, Sinusoidal };         // "learned" | "sinusoidal"

struct ModelConfig {
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

    int64_t head_dim() const { return n_embd / n_head; }  // D
};

// Parses and validates config.json text. `path` is used in error messages only.
// Throws LoadError naming the key and the problem (wrong type, impossible value, n_embd % n_head != 0...).
ModelConfig parse_config(std::string_view json_text, const std::string& path);
ModelConfig load_config(const std::string& path);  // reads the file, then parse_config

// Round trip for writers (model generators, inspect): the canonical config.json text.
std::string config_to_json(const ModelConfig& config);

const char* to_string(Activation a);          // "gelu_new" | "gelu" | "relu"
const char* to_string(NormPosition n);        // "pre" | "post"
const char* to_string(PositionEmbedding p);   // "learned" | "sinusoidal"

}  // namespace kvscope
