#pragma once
// What `kvscope bench` measured, and its printers (llama-bench's printer / markdown_printer / json_printer):
// cli_bench.cpp computes a BenchReport; these only read it.
//
//   BenchReport                      the settings, the machine, the bounds and every figure of one run
//   print_text(r, out)               the tables docs/benchmarks.md and docs/bench.txt quote
//   print_json(r, out)               one JSON object (bench_compare.sh and bench_llama.sh read it)
//   write_chart(r, path, out)        PNG or SVG: one decode step's time vs position, cache on and off
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "report/plot.h"

namespace kvscope {

// One decode step at `position`, reading the cache vs recomputing all position + 1 rows; bound_ms is what
// reading the weights and the position + 1 K/V rows takes at the bandwidth a probe measured right after
// the cached steps, never below the gemv over the large buffer (as every bound).
struct BenchStep {
    int64_t position = 0;
    Stats cached_ms, uncached_ms;
    double bound_ms = 0;
};

// Recording every step: the trace's memory and what recording costs decode.
struct BenchRecording {
    int64_t prompt = 0, decode = 0;         // tokens prefilled, decode steps taken
    int64_t trace_bytes = 0;
    double tokens_per_s_recorded = 0, tokens_per_s_plain = 0;
};

struct BenchReport {
    // settings
    std::string model_dir;
    int threads = 0;
    int64_t repeat = 0;                     // R: runs per figure, each figure min / median / max of them
    int64_t n_ctx = 0;                      // the model's positions
    int64_t prefill_tokens = 0;             // prompt length of the prefill figure
    // the model: what one token costs
    int64_t weight_bytes = 0;               // streamed per decode token: every matrix, biases, norms (f32)
    int64_t weight_bytes_bf16 = 0;          // the same with bfloat16 matrices
    int64_t kv_bytes_per_position = 0;      // f32 K and V of every layer (bf16: half)
    double flops_per_token = 0;             // through the layers' matrices
    // the machine, measured after everything else: read bandwidth, the best of the probe's kernels
    // (machine_probe.h), over what a decode step streams at mid_position (f32 and bf16 sets), and each
    // kernel over a buffer of max(1 GiB, 4 x the last-level cache), memory alone
    int64_t mid_position = 0;
    double streamed_bytes = 0, streamed_bytes_bf16 = 0;
    int64_t llc_bytes = 0;                  // 0: not known
    int64_t large_buffer_bytes = 0;
    Stats read_bandwidth_gb_s, read_bandwidth_bf16_gb_s, fma_peak_gflop_s;
    Stats read_large_sequential_gb_s, read_large_streams_gb_s, read_large_gemv_gb_s;
    // bounds from the best machine run, never below the gemv over the large buffer
    double decode_bound = 0, decode_bound_bf16 = 0, prefill_bound = 0;  // tokens/s
    // figures
    Stats decode1, decode1_bf16, decode4, decode8;       // tokens/s (batch 4, 8: total)
    Stats decode1_vs_bound, decode1_bf16_vs_bound;       // per round: decode / its own probe's bound
    double bf16_max_abs_logit_diff = 0, max_abs_logit = 0;  // the same prefill in f32 and bf16
    Stats prefill, prefill_bf16;                         // tokens/s, float32 and bfloat16 matrices
    Stats load_seconds;                                  // model load, second start
    std::vector<BenchStep> steps;
    BenchRecording recording;
    double peak_rss_mb = 0;                              // before the machine probe's buffers
    int64_t block_matrices = 0;                          // matrices kept as a GGUF file's blocks
    bool weights_mapped = false;                         // --map-weights: matrices read from the file's
                                                         // mapping, not copied into 2 MiB pages
    double prefill_attention_flops_per_token = 0;        // self-attention's, averaged over the prefill's prompt
};

void print_text(const BenchReport& r, FILE* out = stdout);
void print_json(const BenchReport& r, FILE* out = stdout);
void write_chart(const BenchReport& r, const std::string& path, const PlotOutput& out);

}  // namespace kvscope
