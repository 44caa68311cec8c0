// kvscope bench: how fast the engine is, next to what this machine can do. Times batched decode, prefill,
// cached vs uncached steps at growing positions, recording overhead, load time and memory; then
// batch-1 decode in rounds paired with a read-bandwidth probe, and the FMA peak, which give the bounds.
// Every figure is min / median / max over --repeat runs. `bench --sharing` is cli_bench_sharing.cpp.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "atomic_file.h"
#include "bench_stats.h"
#include "cli_commands.h"
#include "cli_common.h"
#include "clock.h"
#include "errors.h"
#include "machine_probe.h"
#include "plot.h"
#include "session.h"
#include "thread_pool.h"

namespace kvscope {
namespace {

std::vector<TokenId> random_prompt(const ModelConfig& c, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<TokenId> ids(static_cast<size_t>(n));
    for (TokenId& t : ids) t = TokenId(rng() % uint32_t(c.n_vocab));
    return ids;
}

// Tokens per second of `batch` sequences decoding n_decode tokens together after a short prompt.
double decode_tokens_per_second(std::shared_ptr<const Model> model, int64_t batch, int64_t n_decode, bool record,
                                uint32_t seed) {
    SessionOptions o;
    o.history = record;
    o.record = record;
    o.max_new_tokens = n_decode + 1;
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Session*> all;
    for (int64_t b = 0; b < batch; ++b) {
        sessions.push_back(std::make_unique<Session>(model, o));
        sessions.back()->set_prompt(random_prompt(model->config(), 4, seed + uint32_t(b)));
        all.push_back(sessions.back().get());
    }
    Workspace ws = Session::make_batch_workspace(all);
    Session::step_batch(all, ws);  // prefill
    const double t0 = seconds_now();
    while (all[0]->next() != Session::Next::Done) Session::step_batch(all, ws);
    return double(batch * n_decode) / (seconds_now() - t0);
}

}  // namespace

int cli_bench(int argc, char** argv) {
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--sharing") return cli_bench_sharing(argc, argv);
    CliArgs args("bench", "Decode, prefill and batch throughput, cached vs uncached step times, against the "
                          "bounds this machine's measured bandwidth and FMA peak imply.");
    add_model_option(args);
    args.flag("--gpt2-shape", "bench random weights of GPT-2 124M's shape (written once to --work)")
        .option("--work", "DIR", "folder for --gpt2-shape's weights (default: kvscope-bench-model)")
        .option("--repeat", "R", "runs per figure, reported as min / median / max (default 3)")
        .option("--decode-tokens", "N", "tokens per decode run (default 64)")
        .option("--prefill-tokens", "N", "prompt length for the prefill figure (default 512)")
        .option("--chart", "FILE.png", "write per-step time vs position, cached and uncached")
        .flag("--quick", "small counts: checks that everything runs, figures are not meaningful")
        .flag("--sharing", "instead: KV memory and prefill with and without prefix sharing (bench --sharing --help)")
        .flag("--json", "print one JSON object");
    add_threads_option(args);
    if (!args.parse(argc, argv)) return 0;
    if (auto chart = args.text("--chart")) ensure_writable(*chart);
    const int threads = int(args.integer("--threads", default_thread_count(), 1, 256));
    const bool quick = args.has("--quick");
    const int64_t R = args.integer("--repeat", quick ? 1 : 3, 1, 1000);
    const int64_t n_decode = args.integer("--decode-tokens", quick ? 8 : 64, 1, 1 << 20);

    const std::string model_dir = bench_model_dir(args);

    ThreadPool::global().set_threads(threads);

    Model::load(model_dir);  // first load pages the file in; the timed ones are what a second start costs
    std::shared_ptr<const Model> model;
    const Stats load_seconds = repeat(R, [&] {
        const double t0 = seconds_now();
        model = Model::load(model_dir);
        return seconds_now() - t0;
    });
    const ModelConfig& c = model->config();
    const double C = double(c.n_embd), F = double(c.n_inner), L = double(c.n_layer);
    // Bytes a decode step must stream: every weight matrix once, plus the lm_head; embeddings are one row.
    // (matrices as stored, plus biases and layer norms)
    const double weight_bytes = double(model->weights().matrix_bytes) + 4.0 * L * (3 * C + C + F + C + 4 * C);
    const std::shared_ptr<const Model> model_bf16 = Model::load(model_dir, WeightFormat::BF16);
    const double weight_bytes_bf16 = double(model_bf16->weights().matrix_bytes) + 4.0 * L * (3 * C + C + F + C + 4 * C);
    const double kv_bytes_per_position = 2.0 * L * C * 4.0;
    const double flops_per_token = 2.0 * L * (C * 3 * C + C * C + 2 * C * F);

    Progress progress("bench", 6);
    // What bfloat16 matrices cost in accuracy: the same prefill in both, largest logit difference.
    double bf16_max_diff = 0, bf16_max_logit = 0;
    {
        SessionOptions o;
        o.history = false;
        o.record = false;
        o.max_new_tokens = 1;
        Session a(model, o), b(model_bf16, o);
        const auto prompt = random_prompt(c, std::min<int64_t>(64, c.n_ctx - 1), 5);
        a.set_prompt(prompt);
        b.set_prompt(prompt);
        a.step();
        b.step();
        for (size_t i = 0; i < a.last_logits().size(); ++i) {
            bf16_max_diff = std::max(bf16_max_diff, double(std::abs(a.last_logits()[i] - b.last_logits()[i])));
            bf16_max_logit = std::max(bf16_max_logit, double(std::abs(a.last_logits()[i])));
        }
    }
    progress.update(1);
    const Stats decode4 = repeat(R, [&] { return decode_tokens_per_second(model, 4, n_decode, false, 2); });
    const Stats decode8 = repeat(R, [&] { return decode_tokens_per_second(model, 8, n_decode, false, 3); });
    progress.update(2);

    const int64_t n_prefill = std::min<int64_t>(args.integer("--prefill-tokens", quick ? 32 : 512, 1, 1 << 20), c.n_ctx - 1);
    const Stats prefill = repeat(R, [&] {
        SessionOptions o;
        o.history = false;
        o.record = false;
        o.max_new_tokens = 1;
        Session s(model, o);
        s.set_prompt(random_prompt(c, n_prefill, 7));
        return double(n_prefill) / s.step().cost.seconds;
    });
    progress.update(3);

    // Cached vs uncached: the same decode step at position p, once reading the cache, once recomputing
    // all p+1 positions (step back in between, so both compute the very same token).
    std::vector<int64_t> positions;
    const int64_t last = c.n_ctx - 2;
    for (int64_t p : {16, 64, 128, 256, 384, 512, 640, 768, 896, 1000})
        if (p <= last && (!quick || p <= 128)) positions.push_back(p);
    if (positions.empty() || positions.back() < last / 2) positions.push_back(std::max<int64_t>(1, last));
    std::vector<Stats> cached_ms, uncached_ms;
    for (int64_t p : positions) {
        SessionOptions o;
        o.record = false;
        o.max_new_tokens = 2;
        Session s(model, o);
        s.set_prompt(random_prompt(c, p, 11));
        s.step();  // prefill p tokens; the decode step below is at position p
        cached_ms.push_back(repeat(R, [&] {
            const double t = s.decode_step().cost.seconds;
            s.step_back();
            return t * 1e3;
        }));
        s.set_use_cache(false);
        uncached_ms.push_back(repeat(R, [&] {
            const double t = s.decode_step().cost.seconds;
            s.step_back();
            return t * 1e3;
        }));
    }
    progress.update(4);

    // Recording every step: memory of the trace and what it costs decode.
    const int64_t n_record_decode = quick ? 8 : std::min<int64_t>(200, c.n_ctx / 4);
    const int64_t n_record_prompt = std::min<int64_t>(1024, c.n_ctx - n_record_decode);
    int64_t trace_bytes = 0;
    double recorded_tps = 0, plain_tps = 0;
    for (bool record : {true, false}) {
        SessionOptions o;
        o.record = record;
        o.history = record;
        o.max_new_tokens = n_record_decode;
        Session s(model, o);
        s.set_prompt(random_prompt(c, n_record_prompt, 13));
        s.step();
        const double t0 = seconds_now();
        while (s.next() == Session::Next::Decode) s.decode_step();
        const double tps = double(n_record_decode - 1) / (seconds_now() - t0);
        (record ? recorded_tps : plain_tps) = tps;
        if (record) trace_bytes = s.trace().memory_bytes();
    }
    progress.update(5);
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    const double peak_rss_mb = double(usage.ru_maxrss) / 1024.0;  // before the probe's 1 GiB buffer

    // The machine, measured last so its buffers do not count in the peak RSS above; these bound the rest.
    // Read bandwidth is measured over a buffer exactly as large as what one decode step streams (and over
    // 1 GiB, memory alone): this host's last-level cache is large enough to hold part of a GPT-2 124M and
    // serves decode and the probe alike, so the same working set is the fair yardstick.
    const int64_t mid_position = 4 + n_decode / 2;
    const double streamed = weight_bytes + kv_bytes_per_position * double(mid_position);
    const double streamed_bf16 = weight_bytes_bf16 + kv_bytes_per_position / 2 * double(mid_position);
    const Stats bandwidth_memory = repeat(R, [&] { return measure_read_bandwidth(int64_t(1) << 30, threads); });
    // Batch-1 decode is timed in rounds paired with a bandwidth probe, because the bandwidth this shared
    // host gives drifts by ±10 % over minutes: each round's ratio compares two measurements seconds
    // apart, and the figure reported against the bound is the median of those ratios.
    std::vector<double> bw, bw_bf16, d1, d1_bf16, ratio, ratio_bf16;
    decode_tokens_per_second(model, 1, std::min<int64_t>(n_decode, 8), false, 1);  // warm-up, not counted
    decode_tokens_per_second(model_bf16, 1, std::min<int64_t>(n_decode, 8), false, 1);
    for (int64_t r = 0; r < R; ++r) {
        bw.push_back(measure_read_bandwidth(int64_t(streamed), threads));
        d1.push_back(decode_tokens_per_second(model, 1, n_decode, false, 1));
        ratio.push_back(d1.back() / (bw.back() * 1e9 / streamed));
        bw_bf16.push_back(measure_read_bandwidth(int64_t(streamed_bf16), threads));
        d1_bf16.push_back(decode_tokens_per_second(model_bf16, 1, n_decode, false, 1));
        ratio_bf16.push_back(d1_bf16.back() / (bw_bf16.back() * 1e9 / streamed_bf16));
    }
    const Stats bandwidth = stats_of(bw), bandwidth_bf16 = stats_of(bw_bf16), decode1 = stats_of(d1),
                decode1_bf16 = stats_of(d1_bf16), decode1_vs_bound = stats_of(ratio),
                decode1_bf16_vs_bound = stats_of(ratio_bf16);
    const Stats fma_peak = repeat(R, [&] { return measure_fma_peak(threads); });
    // Bounds from the best run: the machine streams and multiplies at least that fast.
    const double decode_bound = bandwidth.max * 1e9 / streamed;
    const double prefill_bound = fma_peak.max * 1e9 / flops_per_token;
    const double decode_bound_bf16 = bandwidth_bf16.max * 1e9 / streamed_bf16;

    if (auto chart = args.text("--chart")) {
        LineSeries on{"cache on", {33, 102, 172}, {}, {}}, off{"cache off (recompute all positions)", {214, 96, 77}, {}, {}};
        for (size_t i = 0; i < positions.size(); ++i) {
            on.xs.push_back(double(positions[i]));
            on.ys.push_back(cached_ms[i].median);
            off.xs.push_back(double(positions[i]));
            off.ys.push_back(uncached_ms[i].median);
        }
        write_line_chart_png(*chart, "kvscope: time of one decode step vs position", "position of the new token",
                             "ms per step", {on, off}, /*log_y=*/true);
    }

    if (args.has("--json")) {
        JsonOut steps = JsonOut::array();
        for (size_t i = 0; i < positions.size(); ++i)
            steps.push_back({{"position", positions[i]}, {"cached_ms", cached_ms[i]}, {"uncached_ms", uncached_ms[i]}});
        const JsonOut out = {
            {"model", model_dir},
            {"threads", threads},
            {"repeat", R},
            {"machine", {{"read_bandwidth_gb_s", bandwidth},
                         {"read_bandwidth_bf16_set_gb_s", bandwidth_bf16},
                         {"read_bandwidth_1gib_gb_s", bandwidth_memory},
                         {"fma_peak_gflop_s", fma_peak}}},
            {"bounds", {{"weight_bytes_per_token", weight_bytes},
                        {"decode_tokens_per_s", decode_bound},
                        {"prefill_tokens_per_s", prefill_bound},
                        {"weight_bytes_per_token_bf16", weight_bytes_bf16},
                        {"decode_tokens_per_s_bf16", decode_bound_bf16}}},
            {"decode_tokens_per_s", {{"batch1", decode1}, {"batch4", decode4}, {"batch8", decode8}, {"bf16_batch1", decode1_bf16}}},
            {"decode_vs_bound_paired", {{"batch1", decode1_vs_bound}, {"bf16_batch1", decode1_bf16_vs_bound}}},
            {"bf16_max_abs_logit_diff", bf16_max_diff},
            {"max_abs_logit", bf16_max_logit},
            {"prefill_tokens_per_s", prefill},
            {"prefill_tokens", n_prefill},
            {"steps", steps},
            {"recording", {{"prompt", n_record_prompt},
                           {"decode", n_record_decode},
                           {"trace_bytes", trace_bytes},
                           {"decode_tokens_per_s_recorded", recorded_tps},
                           {"decode_tokens_per_s_plain", plain_tps}}},
            {"load_seconds", load_seconds},
            {"peak_rss_mb", peak_rss_mb},
            {"kv_bytes_per_token", kv_bytes_per_position},
            {"kv_bytes_full_context", kv_bytes_per_position * double(c.n_ctx)},
            {"kv_bytes_per_token_bf16", kv_bytes_per_position / 2}};
        std::printf("%s\n", json_text(out, 2).c_str());
        return 0;
    }

    std::printf("kvscope bench — %s, %d threads, min / median / max of %lld runs\n\n", model_dir.c_str(), threads,
                (long long)R);
    std::printf("machine    read bandwidth %s GB/s over the %.0f MB a decode step streams (%s over %.0f MB, %s "
                "over 1 GiB), FMA peak %s GFLOP/s\n",
                stats_text(bandwidth).c_str(), streamed / 1e6, stats_text(bandwidth_bf16).c_str(), streamed_bf16 / 1e6,
                stats_text(bandwidth_memory).c_str(), stats_text(fma_peak).c_str());
    std::printf("model      %.1f MB of weights streamed per decode token, %.1f MFLOP per token, KV %.0f KiB per position\n",
                weight_bytes / 1e6, flops_per_token / 1e6, kv_bytes_per_position / 1024);
    std::printf("bounds     decode %.1f tokens/s (best bandwidth / bytes per token at position %lld; %.1f with bfloat16 "
                "matrices, %.1f MB), prefill %.0f tokens/s (FMA peak / flops per token)\n\n",
                decode_bound, (long long)mid_position, decode_bound_bf16, weight_bytes_bf16 / 1e6, prefill_bound);
    std::printf("%-34s %-28s %s\n", "figure", "min / median / max", "vs bound");
    std::printf("%-34s %-28s %.0f%% (%s%% in %lld rounds, each against its own bandwidth probe)\n",
                "decode, batch 1 (tokens/s)", stats_text(decode1).c_str(), 100 * decode1_vs_bound.median,
                stats_text(decode1_vs_bound, "%.0f", 100).c_str(), (long long)R);
    std::printf("%-34s %-28s %.0f%% (%s%%; max |logit diff| vs f32 %.2g, logits up to %.1f; KV %.0f KiB per position)\n",
                "decode, bf16 weights + KV (tok/s)", stats_text(decode1_bf16).c_str(),
                100 * decode1_bf16_vs_bound.median, stats_text(decode1_bf16_vs_bound, "%.0f", 100).c_str(),
                bf16_max_diff, bf16_max_logit,
                kv_bytes_per_position / 2 / 1024);
    std::printf("%-34s %-28s %.1fx batch 1\n", "decode, batch 4 (tokens/s, total)", stats_text(decode4).c_str(),
                decode4.median / decode1.median);
    std::printf("%-34s %-28s %.1fx batch 1\n", "decode, batch 8 (tokens/s, total)", stats_text(decode8).c_str(),
                decode8.median / decode1.median);
    std::printf("%-34s %-28s %.0f%%\n", ("prefill " + std::to_string(n_prefill) + " tokens (tokens/s)").c_str(),
                stats_text(prefill, "%.0f").c_str(), 100 * prefill.median / prefill_bound);
    std::printf("%-34s %-28s\n", "model load, second start (s)", stats_text(load_seconds, "%.3f").c_str());
    std::printf("\n%9s  %-28s %-28s %s\n", "position", "cached ms", "uncached ms", "uncached / cached");
    for (size_t i = 0; i < positions.size(); ++i)
        std::printf("%9lld  %-28s %-28s %.1fx\n", (long long)positions[i], stats_text(cached_ms[i], "%.2f").c_str(),
                    stats_text(uncached_ms[i], "%.2f").c_str(), uncached_ms[i].median / cached_ms[i].median);
    std::printf("\nrecording %lld-token prompt + %lld decode steps: trace %.1f MB, decode %.1f tokens/s recorded vs "
                "%.1f plain (%.2fx slower)\n",
                (long long)n_record_prompt, (long long)n_record_decode, double(trace_bytes) / 1e6, recorded_tps,
                plain_tps, plain_tps / recorded_tps);
    std::printf("memory    peak RSS %.0f MB; KV cache %.0f KiB per position, %.1f MB at full context (%lld positions)\n",
                peak_rss_mb, kv_bytes_per_position / 1024, kv_bytes_per_position * double(c.n_ctx) / 1e6,
                (long long)c.n_ctx);
    return 0;
}

}  // namespace kvscope
