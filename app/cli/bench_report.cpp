// Printers of `kvscope bench`: text, JSON and the per-step chart, each reading only a BenchReport.
#include "bench_report.h"

#include "io/json_write.h"
#include "report/plot.h"

namespace kvscope {

void print_text(const BenchReport& r, FILE* out) {
    const double kv_kib = double(r.kv_bytes_per_position) / 1024;
    std::fprintf(out, "kvscope bench — %s, %d threads, min / median / max of %lld runs\n\n", r.model_dir.c_str(),
                 r.threads, (long long)r.repeat);
    std::fprintf(out, "machine    read bandwidth %s GB/s over the %.0f MB a decode step streams (%s over %.0f MB), "
                      "FMA peak %s GFLOP/s\n",
                 stats_text(r.read_bandwidth_gb_s).c_str(), r.streamed_bytes / 1e6,
                 stats_text(r.read_bandwidth_bf16_gb_s).c_str(), r.streamed_bytes_bf16 / 1e6,
                 stats_text(r.fma_peak_gflop_s).c_str());
    std::fprintf(out, "           from memory (%.0f MB buffer): sequential %s, 8 streams %s, gemv %s GB/s; "
                      "each figure is the best of the three kernels and never below that gemv\n",
                 double(r.large_buffer_bytes) / 1e6, stats_text(r.read_large_sequential_gb_s).c_str(),
                 stats_text(r.read_large_streams_gb_s).c_str(), stats_text(r.read_large_gemv_gb_s).c_str());
    if (r.llc_bytes > 0) {
        const double llc = double(r.llc_bytes);
        const char* fits = r.streamed_bytes <= llc        ? "the float32 and bfloat16 sets fit in it"
                           : r.streamed_bytes_bf16 <= llc ? "the bfloat16 set fits in it"
                                                          : nullptr;
        std::fprintf(out, "           last-level cache %.0f MB%s%s%s\n", llc / 1e6, fits ? ": WARNING " : "",
                     fits ? fits : "",
                     fits ? ", so their decode figures and bandwidth are partly served from cache and flatter "
                            "this machine"
                          : "");
    } else
        std::fprintf(out, "           last-level cache size not known (no /sys/devices/system/cpu/cpu0/cache)\n");
    std::fprintf(out, "model      %.1f MB of weights streamed per decode token, %.1f MFLOP per token in the matrices "
                      "(+ %.1f in attention, averaged over a %lld-token prompt), KV %.0f KiB per position\n",
                 double(r.weight_bytes) / 1e6, r.flops_per_token / 1e6, r.prefill_attention_flops_per_token / 1e6,
                 (long long)r.prefill_tokens, kv_kib);
    std::fprintf(out, "bounds     decode %.1f tokens/s (best bandwidth / bytes per token at position %lld; %.1f with "
                      "bfloat16 matrices, %.1f MB), prefill %.0f tokens/s (FMA peak / flops per prompt token)\n\n",
                 r.decode_bound, (long long)r.mid_position, r.decode_bound_bf16, double(r.weight_bytes_bf16) / 1e6,
                 r.prefill_bound);
    std::fprintf(out, "%-34s %-28s %s\n", "figure", "min / median / max", "vs bound");
    std::fprintf(out, "%-34s %-28s %.0f%% (%s%% in %lld rounds, each against its own bandwidth probe)\n",
                 "decode, batch 1 (tokens/s)", stats_text(r.decode1).c_str(), 100 * r.decode1_vs_bound.median,
                 stats_text(r.decode1_vs_bound, "%.0f", 100).c_str(), (long long)r.repeat);
    std::fprintf(out, "%-34s %-28s %.0f%% (%s%%; max |logit diff| vs f32 %.2g, logits up to %.1f; KV %.0f KiB per "
                      "position)\n",
                 "decode, bf16 weights + KV (tok/s)", stats_text(r.decode1_bf16).c_str(),
                 100 * r.decode1_bf16_vs_bound.median, stats_text(r.decode1_bf16_vs_bound, "%.0f", 100).c_str(),
                 r.bf16_max_abs_logit_diff, r.max_abs_logit, kv_kib / 2);
    std::fprintf(out, "%-34s %-28s %.1fx batch 1\n", "decode, batch 4 (tokens/s, total)", stats_text(r.decode4).c_str(),
                 r.decode4.median / r.decode1.median);
    std::fprintf(out, "%-34s %-28s %.1fx batch 1\n", "decode, batch 8 (tokens/s, total)", stats_text(r.decode8).c_str(),
                 r.decode8.median / r.decode1.median);
    std::fprintf(out, "%-34s %-28s %.0f%%\n",
                 ("prefill " + std::to_string(r.prefill_tokens) + " tokens (tokens/s)").c_str(),
                 stats_text(r.prefill, "%.0f").c_str(), 100 * r.prefill.median / r.prefill_bound);
    std::fprintf(out, "%-34s %-28s %.0f%%\n", "prefill, bf16 weights (tokens/s)", stats_text(r.prefill_bf16, "%.0f").c_str(),
                 100 * r.prefill_bf16.median / r.prefill_bound);
    std::fprintf(out, "%-34s %-28s %s\n", "model load, second start (s)", stats_text(r.load_seconds, "%.3f").c_str(),
                 r.weights_mapped ? "matrices used from the file's mapping (--map-weights)"
                 : r.block_matrices > 0 ? "matrices copied into 2 MiB pages, the quantized ones as their blocks"
                                        : "matrices copied into 2 MiB pages");
    std::fprintf(out, "\n%9s  %-28s %-9s %-28s %s\n", "position", "cached ms", "vs bound", "uncached ms",
                 "uncached / cached");
    for (const BenchStep& s : r.steps)
        std::fprintf(out, "%9lld  %-28s %-9s %-28s %.1fx\n", (long long)s.position,
                     stats_text(s.cached_ms, "%.2f").c_str(),
                     (std::to_string(int(100 * s.bound_ms / s.cached_ms.median + 0.5)) + "%").c_str(),
                     stats_text(s.uncached_ms, "%.2f").c_str(), s.uncached_ms.median / s.cached_ms.median);
    std::fprintf(out, "(vs bound: the weights and the position + 1 K/V rows a cached step reads, at the bandwidth a "
                      "probe measured right after that position's steps (never below the gemv from memory), over the median "
                      "step)\n");
    const BenchRecording& rec = r.recording;
    std::fprintf(out, "\nrecording %lld-token prompt + %lld decode steps: trace %.1f MB, decode %.1f tokens/s recorded "
                      "vs %.1f plain (%.2fx slower)\n",
                 (long long)rec.prompt, (long long)rec.decode, double(rec.trace_bytes) / 1e6,
                 rec.tokens_per_s_recorded, rec.tokens_per_s_plain, rec.tokens_per_s_plain / rec.tokens_per_s_recorded);
    std::fprintf(out, "memory    peak RSS %.0f MB; KV cache %.0f KiB per position, %.1f MB at full context (%lld "
                      "positions)\n",
                 r.peak_rss_mb, kv_kib, double(r.kv_bytes_per_position * r.n_ctx) / 1e6, (long long)r.n_ctx);
}

void print_json(const BenchReport& r, FILE* out) {
    JsonOut steps = JsonOut::array();
    for (const BenchStep& s : r.steps)
        steps.push_back({{"position", s.position}, {"cached_ms", s.cached_ms}, {"uncached_ms", s.uncached_ms},
                         {"bound_ms", s.bound_ms}});
    const JsonOut j = {
        {"model", r.model_dir},
        {"threads", r.threads},
        {"repeat", r.repeat},
        {"machine", {{"read_bandwidth_gb_s", r.read_bandwidth_gb_s},
                     {"read_bandwidth_bf16_set_gb_s", r.read_bandwidth_bf16_gb_s},
                     {"llc_bytes", r.llc_bytes},
                     {"large_buffer_bytes", r.large_buffer_bytes},
                     {"read_large_gb_s", {{"sequential", r.read_large_sequential_gb_s},
                                          {"streams", r.read_large_streams_gb_s},
                                          {"gemv", r.read_large_gemv_gb_s}}},
                     {"fma_peak_gflop_s", r.fma_peak_gflop_s}}},
        {"bounds", {{"weight_bytes_per_token", r.weight_bytes},
                    {"decode_tokens_per_s", r.decode_bound},
                    {"prefill_tokens_per_s", r.prefill_bound},
                    {"weight_bytes_per_token_bf16", r.weight_bytes_bf16},
                    {"decode_tokens_per_s_bf16", r.decode_bound_bf16},
                    {"matrix_flops_per_token", r.flops_per_token},
                    {"prefill_attention_flops_per_token", r.prefill_attention_flops_per_token}}},
        {"decode_tokens_per_s",
         {{"batch1", r.decode1}, {"batch4", r.decode4}, {"batch8", r.decode8}, {"bf16_batch1", r.decode1_bf16}}},
        {"decode_vs_bound_paired", {{"batch1", r.decode1_vs_bound}, {"bf16_batch1", r.decode1_bf16_vs_bound}}},
        {"bf16_max_abs_logit_diff", r.bf16_max_abs_logit_diff},
        {"max_abs_logit", r.max_abs_logit},
        {"prefill_tokens_per_s", r.prefill},
        {"prefill_bf16_tokens_per_s", r.prefill_bf16},
        {"prefill_tokens", r.prefill_tokens},
        {"steps", steps},
        {"recording", {{"prompt", r.recording.prompt},
                       {"decode", r.recording.decode},
                       {"trace_bytes", r.recording.trace_bytes},
                       {"decode_tokens_per_s_recorded", r.recording.tokens_per_s_recorded},
                       {"decode_tokens_per_s_plain", r.recording.tokens_per_s_plain}}},
        {"load_seconds", r.load_seconds},
        {"weights_placement", r.weights_mapped ? "mapped" : "huge_pages"},
        {"block_matrices", r.block_matrices},  // kept as a GGUF file's blocks, placed as the others
        {"peak_rss_mb", r.peak_rss_mb},
        {"kv_bytes_per_token", r.kv_bytes_per_position},
        {"kv_bytes_full_context", r.kv_bytes_per_position * r.n_ctx},
        {"kv_bytes_per_token_bf16", r.kv_bytes_per_position / 2}};
    std::fprintf(out, "%s\n", json_text(j, 2).c_str());
}

void write_chart(const BenchReport& r, const std::string& path, const PlotOutput& out) {
    LineSeries on{"cache on", {33, 102, 172}, {}, {}}, off{"cache off (recompute all positions)", {214, 96, 77}, {}, {}};
    for (const BenchStep& s : r.steps) {
        on.xs.push_back(double(s.position));
        on.ys.push_back(s.cached_ms.median);
        off.xs.push_back(double(s.position));
        off.ys.push_back(s.uncached_ms.median);
    }
    write_line_charts(path, {LineChart{"kvscope: time of one decode step vs position", "position of the new token",
                                       "ms per step", {on, off}, /*log_y=*/true}},
                      out, 900, 520);
}

}  // namespace kvscope
