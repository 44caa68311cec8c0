#pragma once
// The cache lab: what each KV cache configuration costs. A text is teacher-forced through the model
// under several configurations at once: its tokens are fed one per step, decode fashion
// (SessionOptions::forced_tokens), so windows, sinks and quantized rows act exactly as in generation.
// At every position each configuration's next-token distribution is scored against the text's next
// token and against the reference's (the full float32 cache) distribution. `kvscope lab` prints the
// result; the window can draw the same per-position curves.
//
//   LabConfig                  one configuration: its label, its spec and the SessionOptions it runs
//   parse_lab_config(spec)     one --config SPEC (grammar below) -> LabConfig; UsageError naming the spec
//                              in neutral words, "{lab_config} 'SPEC': ..." (run/options.h renders it as
//                              --config or the window's configuration); the keys are the option table's lab
//                              keys, their numbers checked by the table's options
//   split_lab_specs(text)      "full; window=32 ;int8" -> {"full", "window=32", "int8"}: the window's box and
//                              the script's `lab` line list specs separated by ';' (empty parts dropped)
//   lab_config_grammar()       the grammar as help text
//   lab_default_specs(cfg)     the configurations run when none are given
//   residual_split(totals)     int4's cache bytes said apart, "26624 cache bytes = 12288 packed int4 + 14336
//                              float32 residual (the newest 7 positions)"; "" without a residual. The CLI
//                              prints it under its table, the window's lab panel on hover
//   lab_builtin_text()         an English text the default model models well: grammar sentences of its
//                              training corpus (core/text/corpus.cpp), with a paragraph repeated so copying
//                              (induction) pays off; ~230 tokens with the default tokenizer
//   run_cache_lab(model, tokens, configs, progress) -> LabReport
//                              tokens: the text, >= 2 tokens, at most the model's n_positions. The first
//                              configuration whose policy is full and whose rows are float32 is the
//                              reference; without one, "full" is added in front (LabReport::added_reference).
//                              Every session is made before the first step: a refusal (a group that does
//                              not divide head_dim, a text beyond n_positions) is a UsageError naming the
//                              configuration, and nothing has run; so is a name two configurations share
//
// Config grammar: SPEC = PART { "," PART }, each key at most once:
//   full | window=W            policy: every position (full), or the last W (window; = policy=window,budget=W)
//   policy=NAME,budget=N       the same spelled as policy and budget; or an eviction policy (eviction.h):
//                              h2o (recent N/2 + heavy hitters), window+sinks (sinks=S: the first S and the
//                              newest N-S); budget = positions each layer and K/V head keeps between steps
//   sinks=S                    with a window: the first S positions stay visible too
//   f32 | int8 | int4 | fp8    K/V rows as stored (= quant=NAME); kv_quant.h
//   g=G, r=R                   int4 KIVI group size and residual
//   name=LABEL                 the label (default: the spec as written)
//
// Per position i (0 .. N-1, N = tokens - 1) the model has read tokens 0..i and predicts token i+1:
//   loss[i] = −ln p(tokens[i+1]); kl[i] = Σ_v p_ref(v)·(ln p_ref(v) − ln p(v)) in nats; top1[i] = argmax
//   equals the reference's (lowest id on ties); cache_bytes[i] = KvCache::bytes_used() after the step
//   (an eviction policy: the kept rows' bytes, KvCacheView::bytes_kept; positions held = the mean kept)
//   (packed bytes for int8 / fp8 / int4, float32 rows of the int4 residual); step_seconds[i] = wall time
//   of Session::step() (forward pass, cache writes and quantization, the session's bookkeeping; not the
//   lab's scoring). Logits are float32; the scoring runs in double.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "forward/model.h"
#include "run/session.h"

namespace kvscope {

struct LabConfig {
    std::string name;            // the label in tables and charts
    std::string spec;            // as written
    std::string policy = "full"; // full | window (eviction policies: see cache_lab.cpp)
    int64_t budget = 0;          // positions the policy keeps; 0 for full
    SessionOptions options;      // what the session runs with (forced tokens set by the lab)
};

LabConfig parse_lab_config(const std::string& spec);
std::vector<std::string> split_lab_specs(const std::string& text);
// full, a window of 32 with and without 4 sinks (a model with its own sliding layers: H2O with a budget of
// 32 instead), and each row format; int4's group is the largest of 32, 16, 8, 4, 2 that divides head_dim.
// What `kvscope lab` and the window's Cache lab tab run by default.
std::vector<std::string> lab_default_specs(const ModelConfig& cfg);
const char* lab_config_grammar();
const std::string& lab_builtin_text();

struct LabTotals {
    double loss_mean = 0;        // mean of loss
    double loss_delta = 0;       // loss_mean − the reference's
    double kl_mean = 0;          // mean of kl
    double top1_rate = 0;        // fraction of positions whose top-1 agrees, 0..1
    int64_t bytes_total = 0;     // cache bytes after the last step
    int64_t bytes_peak = 0;      // the most cache bytes after any step
    int64_t positions_held = 0;  // positions the cache holds after the last step (KvCache::used)
    double bytes_per_token = 0;  // bytes_total / positions_held
    // int4 (KIVI, no eviction): of bytes_total, the float32 rows of the newest positions not yet packed
    // (kv_quant.h int4_residual_boundary); 0 for other formats. Packed bytes = bytes_total - bytes_residual.
    int64_t residual_positions = 0;
    int64_t bytes_residual = 0;
    double seconds_per_step = 0; // mean of step_seconds
};

struct LabRun {
    LabConfig config;
    std::vector<double> loss;             // (N) nats
    std::vector<double> kl;               // (N) nats, KL(reference ‖ this)
    std::vector<uint8_t> top1;            // (N) 1 = same most likely token as the reference
    std::vector<int64_t> cache_bytes;     // (N) KvCache::bytes_used() after the step
    std::vector<int64_t> positions_held;  // (N) KvCache::used() after the step
    std::vector<double> step_seconds;     // (N) wall time of Session::step()
    LabTotals totals;
};

struct LabReport {
    std::vector<TokenId> tokens;  // the text as fed
    size_t reference = 0;         // index into runs of the reference
    bool added_reference = false; // runs[0] is a "full" the lab added
    std::vector<LabRun> runs;     // one per configuration, in the order given (the added reference first)
};

using LabProgress = std::function<void(int64_t done, int64_t total)>;  // steps done of N

LabReport run_cache_lab(std::shared_ptr<const Model> model, std::span<const TokenId> tokens,
                        std::vector<LabConfig> configs, const LabProgress& progress = {});

std::string residual_split(const LabTotals& totals);

}  // namespace kvscope
