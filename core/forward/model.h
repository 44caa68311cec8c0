#pragma once
// A loaded model (config, weights, optional tokenizer) and the forward pass over chunks of new tokens.
//
// One forward call takes one chunk per sequence (a prefill chunk of any length or a 1-token decode —
// the same code), runs every layer over all chunks' rows together, appends their K/V to each
// sequence's cache at absolute positions next_position()..+n-1, and returns each chunk's last-row logits.
//
//   Model::load(dir, format, placement)   config.json + model.safetensors (+ vocab.json/merges.txt if
//                                 present), or one GGUF file (gguf_model.h); format: matrices in float32 (default) or bfloat16; placement:
//                                 matrices in 2 MiB pages (default) or, where no conversion is needed, in
//                                 the file's mapping (weights.h)
//   Workspace(config, rows, chunks, keys)   every buffer a forward needs, allocated once
//   forward(model, chunks, ws)    see above; throws UsageError if a chunk does not fit its cache. Says in
//                                 each chunk's non_finite_layer where a NaN or infinity first appeared (the
//                                 caller decides: session.h refuses the step)
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "forward/encoder.h"
#include "model/config.h"
#include "model/gguf_model.h"
#include "model/weights.h"
#include "text/tokenizer.h"

namespace kvscope {

class Model {
public:
    static std::shared_ptr<const Model> load(const std::string& dir, WeightFormat format = WeightFormat::F32,
                                             WeightPlacement placement = WeightPlacement::HugePages);

    const ModelConfig& config() const { return config_; }
    const Weights& weights() const { return weights_; }
    const std::string& dir() const { return dir_; }
    const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // null: no tokenizer files in dir
    // A GGUF file's tensors as it stores them (llama.cpp's names, file types); empty for a folder
    const std::vector<GgufTensorSummary>& gguf_tensors() const { return gguf_tensors_; }
    // A GGUF file's tokenizer keys as the tokenizer_config.json text a folder would carry (its chat
    // template, bos and eos tokens); empty for a folder, which has the file itself
    const std::string& gguf_tokenizer_config() const { return gguf_tokenizer_config_; }
    const std::vector<float>& rotary_inv_freq() const { return rotary_inv_freq_; }  // (D/2); empty: no rotary
    // (D/2) the frequencies of sliding layers when they have their own base (Gemma 3's
    // rope_local_base_freq, unscaled); empty: every layer uses rotary_inv_freq()
    const std::vector<float>& local_rotary_inv_freq() const { return local_rotary_inv_freq_; }
    void check_token(TokenId id) const;   // throws UsageError for ids outside [0, V)

    // A ring cache; bfloat16 rows when the matrices are bfloat16 (--dtype bf16), else float32; packed
    // rows when `quant` names a format (kv_quant.h). A model's sliding layers store only their window
    // plus the chunk being written; chunk = the first chunk expected (KvCache resizes them to each chunk).
    KvCache make_cache(int64_t capacity, int64_t window, int64_t sinks = 0, KvQuantSpec quant = {}, int64_t chunk = 1) const;

private:
    ModelConfig config_;
    Weights weights_;
    std::string dir_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::vector<GgufTensorSummary> gguf_tensors_;
    std::string gguf_tokenizer_config_;
    std::vector<float> rotary_inv_freq_;
    std::vector<float> local_rotary_inv_freq_;
};

// What the forward pass saves of a chunk when asked (the trace's raw material).
struct ChunkProbe {
    std::vector<float> q, k, v;  // (L, T, H*D) each; k and v per query head (a K/V head shared by a group
                                 // of query heads appears once for each of them)
    std::vector<float> cross_q;  // (L, T, C) cross-attention queries (encoder-decoder models), else empty
    std::vector<float> residual; // (L + 1, T, C) the residual stream entering each layer, then leaving the
                                 // last (before the final norm): what a logit lens reads
};

struct Chunk {
    KvCache* cache = nullptr;
    const TokenId* tokens = nullptr;  // (T)
    int64_t n_tokens = 0;             // T
    float* logits = nullptr;          // (V) logits of the chunk's last row; null = not needed
    ChunkProbe* probe = nullptr;      // null = record nothing (costs nothing)
    const EncoderOutput* encoder = nullptr;  // encoder-decoder models: the source's cross-attention cache
    double flops = 0;                 // out: floating-point operations spent on this chunk
    float* queries = nullptr;         // out when given: (L, T, H*D) each row's queries as attention read them
                                      // (what an eviction policy scores keys with; eviction.h)
    int64_t non_finite_layer = -1;    // out: the first layer whose output rows hold a NaN or ±inf; L = the
                                      // output layer (final norm, lm_head, soft-cap) made the logits so;
                                      // -1 = every number finite (finite.h)
};

class Workspace {
public:
    Workspace() = default;
    Workspace(const ModelConfig& config, int64_t max_rows, int64_t max_chunks, int64_t max_keys);
    int64_t max_rows() const { return max_rows_; }
    int64_t max_chunks() const { return max_chunks_; }
    int64_t max_keys() const { return max_keys_; }

private:
    friend void forward(const Model&, std::span<Chunk>, Workspace&);
    int64_t max_rows_ = 0, max_chunks_ = 0, max_keys_ = 0;
    std::vector<float> x;       // (T, C) residual stream
    std::vector<float> xn;      // (T, C) normalised input of a sub-layer
    std::vector<float> qkv;     // (T, 3C) GPT-2 rows q|k|v; Llama q (T, H*D) then k, v (T, K*D) each
    std::vector<float> rotary;  // (T, 2, D/2) cos and sin of each row's position (rotary models), then
                                // the same for sliding layers' own frequencies when there are any
    std::vector<float> attn;    // (T, H*D) attention output before the output projection
    std::vector<float> proj;    // (T, C) sub-layer output
    std::vector<float> hidden;  // (T, F), or (2, T, F) for a gated MLP
    std::vector<float> scratch; // (chunks, H, keys) softmax weights per attention task
    std::vector<float> last;    // (chunks, C) final hidden state of each chunk's last row
    std::vector<float> logits;  // (chunks, V) a batch's logits before they go to each chunk (chunks > 1)
};

void forward(const Model& model, std::span<Chunk> chunks, Workspace& ws);

}  // namespace kvscope
