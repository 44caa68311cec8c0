#pragma once
// Training the architectures the engine runs: GPT-2 with pre-LN, learned positions, gelu_new, tied
// embeddings and biases on (the GPT-2 defaults of ModelConfig), and the Llama family (llama_model.h:
// RMSNorm, rotary positions, SwiGLU, grouped-query attention, sliding layers, QK-norm, tied or not).
// Other configs are refused by name.
//
//   param_layout(config)          every tensor in safetensors order: GPT-2 (or HF Llama) name, shape, offset
//                                 in the flat parameter vector, whether weight decay applies (matrices only)
//   init_params(config, seed, i)  GPT-2's initialisation: N(0, 0.02), residual projections scaled by
//                                 1/√(2L), biases 0, layer-norm gains 1; positions: the sinusoidal table;
//                                 InitOptions can seed a previous-token head (a prior, then trained).
//                                 Llama family: llama_init_params (InitOptions other than the defaults refused)
//   check_init(config, init)      that refusal alone, for callers checking options before they train
//   TrainModel<S>                 flat params + grads and every activation of one batch;
//                                 loss(tokens, targets, B, T, backward) = mean cross-entropy, and
//                                 (when backward) grads = ∂loss/∂params. S = float, or double for tests;
//                                 forward_logits() after loss(..., false): the (B·T, V) logits
//   adamw_step(...)               one AdamW update of one tensor (PyTorch's AdamW)
//   learning_rate(step, opts)     linear warm-up, then cosine decay to min_lr_ratio·lr
//   train(opts, tokenizer, cb)    the loop: corpus batch, loss, backward, clip, AdamW; cb after each step
//   save_model(dir, ...)          config.json + model.safetensors (+ tokenizer files): a model folder
//
// Deterministic: the corpus is a function of (seed, step, index), the init of the seed, and every
// reduction has a fixed order whatever the thread count (train_ops.h), so equal options give equal bytes.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "text/corpus.h"
#include "text/tokenizer.h"

namespace kvscope {

struct ParamInfo {
    std::string name;            // "h.0.attn.c_attn.weight"
    std::vector<int64_t> shape;  // as in GPT-2 files (Conv1D: (in, out))
    int64_t offset = 0, size = 0;
    bool decay = false;
};
std::vector<ParamInfo> param_layout(const ModelConfig& config);
// Appends a tensor after the last one of `layout` (its offset follows); matrices (2-D) take weight decay.
void add_param(std::vector<ParamInfo>& layout, std::string name, std::vector<int64_t> shape);
int64_t n_params(const ModelConfig& config);
void check_trainable(const ModelConfig& config);  // throws UsageError for what the trainer cannot train
struct InitOptions {
    double attn_std = 0.02;      // std of the c_attn (query/key/value) weights
    double tok_std = 0.02;       // std of the token embeddings (tied: also the output layer)
    double pos_rms = 0.02;       // RMS of the position table (the sinusoidal table, scaled)
    double prev_head_gain = 0;   // > 0: layer 0 head 0 starts as a previous-token head (see init_params)
    double prev_value_gain = 0;  // and writes the previous token's code into the position dims this much
    double circuit_gain = 0;     // > 0: layers 0 and 1 start as a previous-token + induction head pair, head 0
                                 // of each (a prior, then trained; see seed_induction_circuit in train.cpp)
    bool split_stream = false;   // the circuit's residual layout only (positions, empty slice, tokens), no heads
};
std::vector<float> init_params(const ModelConfig& config, uint64_t seed, const InitOptions& init = {});
void check_init(const ModelConfig& config, const InitOptions& init);  // UsageError: init options the family lacks

template <typename S> class LlamaPass;  // llama_model.h

template <typename S> class TrainModel {
public:
    TrainModel(const ModelConfig& config, int64_t max_batch, int64_t seq_len);  // seq_len <= n_ctx
    double loss(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, bool backward);  // (B, T) each
    const ModelConfig& config() const { return config_; }
    const std::vector<ParamInfo>& layout() const { return layout_; }
    std::vector<S> params;       // (n_params)
    std::vector<S> grads;        // (n_params), zeroed and filled by loss(..., backward = true)
    bool mlp = true;             // false: every MLP is skipped (out = mid), an attention-only model
    const std::vector<S>& forward_logits() const;  // (B·T, V) of the last loss(..., false); dlogits after backward

private:
    struct Layer {
        std::vector<S> ln1, ln1_mean, ln1_rstd;  // (N, C), (N), (N)
        std::vector<S> qkv;                      // (N, 3C)
        std::vector<S> att;                      // (B, H, T, T)
        std::vector<S> atty;                     // (N, C) attention output before c_proj
        std::vector<S> mid;                      // (N, C) residual after attention
        std::vector<S> ln2, ln2_mean, ln2_rstd;  // (N, C), (N), (N)
        std::vector<S> fc, fc_gelu;              // (N, F) each
        std::vector<S> out;                      // (N, C) residual after the MLP
    };
    const S* p(int64_t i) const { return params.data() + layout_[size_t(i)].offset; }
    S* g(int64_t i) { return grads.data() + layout_[size_t(i)].offset; }
    ModelConfig config_;
    std::vector<ParamInfo> layout_;
    int64_t max_rows_;
    std::shared_ptr<LlamaPass<S>> llama_;       // Family::Llama: its buffers and passes (those below stay empty)
    std::vector<S> x0;                          // (N, C) embeddings
    std::vector<Layer> layers_;                 // L
    std::vector<S> lnf, lnf_mean, lnf_rstd;     // (N, C), (N), (N)
    std::vector<S> logits, probs;               // (N, V) each; logits become dlogits in backward
    std::vector<S> dres, dln, datty, dtmp;      // (N, C) each
    std::vector<S> dqkv;                        // (N, 3C)
    std::vector<S> dfc, dfc_gelu;               // (N, F) each
};

struct AdamWOptions {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
    double weight_decay = 0.1;  // applied to tensors with ParamInfo::decay
};
// t = 1-based step. p ← p·(1 - lr·wd); m ← β1·m + (1-β1)·g; v ← β2·v + (1-β2)·g²;
// p ← p - lr · (m / (1-β1ᵗ)) / (√(v / (1-β2ᵗ)) + eps)
void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, int64_t t, double lr, double wd,
                const AdamWOptions& opts);

struct TrainOptions {
    ModelConfig config;          // n_vocab is taken from the tokenizer
    int64_t steps = 1500;
    int64_t batch = 8;           // sequences per step
    int64_t seq_len = 256;       // tokens per sequence (<= n_ctx)
    double lr = 2e-3;
    double min_lr_ratio = 0.1;
    int64_t warmup = 100;
    double clip = 1.0;           // global gradient norm; 0 = off
    uint64_t seed = 1;
    CorpusMix mix;               // segment kinds of the generated corpus
    InitOptions init;
    // Curriculum: the first copy_phase steps train on repeated random spans only (copy_mix), in sequences
    // of copy_seq tokens (0: seq_len), batch·seq_len / copy_seq of them per step. Short sequences with
    // short spans are where the induction circuit forms at this size (assets/default/README.md).
    int64_t copy_phase = 0;
    int64_t copy_seq = 0;
    CorpusMix copy_mix{.text = 0, .copy = 0, .min_span = 6, .max_span = 12};
    int64_t attn_only = 0;       // the first attn_only steps skip the MLPs (their weights wait untouched)
    double tok_lr = 1, pos_lr = 1;  // learning-rate factors of wte and wpe (0 freezes the table)
    bool emb_decay = true;       // weight decay on wte and wpe too (GPT-2 style: every matrix)
    AdamWOptions adamw;
    std::vector<float> start_params;  // (n_params) weights to start from (a fine-tune); empty: init_params
    bool score_predictable_only = false;  // the loss skips the ids of vocab segments no model can predict
                                          // (first span, gaps, first id of each copy): only copies carry gradient
};
double learning_rate(int64_t step, const TrainOptions& opts);  // step 0-based

struct TrainProgress {
    int64_t step = 0, n_steps = 0;  // steps done, total
    double loss = 0, lr = 0, grad_norm = 0;
    double seconds = 0;              // since the start
    int64_t tokens = 0;              // trained on so far
    const std::vector<float>* params = nullptr;
};
struct TrainResult {
    std::vector<float> params;
    std::vector<double> losses;      // (steps) loss of each step's batch, before its update
    double seconds = 0;
};
TrainResult train(const TrainOptions& opts, const Tokenizer& tokenizer,
                  const std::function<void(const TrainProgress&)>& on_step = {});

// The F32 weights of model folder `dir` in param_layout(config)'s order; LoadError when a tensor is missing,
// not F32 or of another shape.
std::vector<float> load_params(const std::string& dir, const ModelConfig& config);

// Writes dir/config.json and dir/model.safetensors (F32, param_layout's names); copies vocab.json and
// merges.txt (or tokenizer.json and tokenizer_config.json) from tokenizer_dir when it is not empty. Throws LoadError when a file cannot be written.
void save_model(const std::string& dir, const ModelConfig& config, const std::vector<float>& params,
                const std::string& tokenizer_dir);

}  // namespace kvscope
