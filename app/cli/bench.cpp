// kvscope bench: how fast the engine is, next to what this machine can do. Times batched decode, prefill,
// cached vs uncached steps at growing positions, recording overhead, load time and memory; then
// batch-1 decode in rounds paired with a read-bandwidth probe, and the FMA peak, which give the bounds.
// Every figure is min / median / max over --repeat runs. run_bench computes a BenchReport; bench_report.cpp
// prints it as text or JSON and draws its chart. `bench --sharing` is cli_bench_sharing.cpp, `bench --matmul`
// cli_bench_matmul.cpp.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "base/clock.h"
#include "base/errors.h"
#include "base/thread_pool.h"
#include "bench_report.h"
#include "commands.h"
#include "common.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "kernels/machine_probe.h"
#include "run/session.h"
#include "run/session_batch.h"

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
    Workspace ws = make_batch_workspace(all);
    step_batch(all, ws);  // prefill
    const double t0 = seconds_now();
    while (all[0]->next() != Session::Next::Done) step_batch(all, ws);
    return double(batch * n_decode) / (seconds_now() - t0);
}

// Bytes one decode step must stream: every matrix once as stored for computing (the token embedding only
// when it is the tied lm_head; untied, decode reads one row of it), every norm and bias vector as float32;
// not a learned position table (one row).
int64_t decode_weight_bytes(const Model& model) {
    const ModelConfig& c = model.config();
    const Weights& w = model.weights();
    const int64_t positions = w.position_embedding && c.position_embedding == PositionEmbedding::Learned ? c.n_ctx * c.n_embd : 0;
    const int64_t vectors = w.n_parameters - w.matrix_elements - positions;
    const int64_t embedding = c.n_vocab * c.n_embd;  // (V, C), as stored: blocks, bfloat16 or float32
    const BlockMatrix& blocks = w.token_embedding.blocks;
    const int64_t unread_embedding = c.tie_word_embeddings ? 0
                                     : blocks.data ? embedding / block_layout(blocks.format).elements * block_layout(blocks.format).bytes
                                                   : embedding * (w.bf16 ? 2 : 4);
    return w.matrix_bytes - unread_embedding + 4 * vectors;
}

// Multiply-adds × 2 of one token through the layers' matrices (not the lm_head, which a prefill applies
// to its last position only).
double body_flops_per_token(const Model& model) {
    const ModelConfig& c = model.config();
    const Weights& w = model.weights();
    return 2.0 * double(w.matrix_elements - c.n_vocab * c.n_embd * (c.tie_word_embeddings ? 1 : 2));
}

// Multiply-adds × 2 per prompt token in a P-token prefill's self-attention: each query head's q·k and
// p·v over the positions it sees (its layer's window, if any), averaged over the prompt.
double attention_flops_per_prompt_token(const ModelConfig& c, int64_t P) {
    double pairs = 0;  // (query, key position) pairs over the prompt, all layers: Σ_t min(t + 1, W)
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const int64_t W = c.window_of(il) > 0 ? std::min(c.window_of(il), P) : P;
        pairs += double(W) * double(W + 1) / 2 + double(P - W) * double(W);
    }
    return pairs * double(c.n_head) * 2.0 * 2.0 * double(c.head_dim()) / double(std::max<int64_t>(1, P));
}

struct BenchSettings {
    std::string model_dir;
    int threads = 1;
    int64_t repeat = 1;          // R
    int64_t decode_tokens = 0;   // per decode run
    int64_t prefill_tokens = 0;  // asked for; at most n_ctx - 1 is run
    bool quick = false;
    WeightPlacement placement = WeightPlacement::HugePages;  // --map-weights
};

// The model as float32 and bfloat16 matrices, and the figures that come from loading it: load time over
// R loads, the bytes a decode step streams, the FLOPs of a token.
struct BenchModels {
    std::shared_ptr<const Model> f32, bf16;
};

BenchModels load_bench_models(const BenchSettings& settings, BenchReport& r) {
    r.weights_mapped = settings.placement == WeightPlacement::Mapped;
    Model::load(r.model_dir, WeightFormat::F32, settings.placement);  // first load pages the file in; the
                                                                      // timed ones are what a second start costs
    BenchModels m;
    r.load_seconds = repeat(r.repeat, [&] {
        const double t0 = seconds_now();
        m.f32 = Model::load(r.model_dir, WeightFormat::F32, settings.placement);
        return seconds_now() - t0;
    });
    const ModelConfig& c = m.f32->config();
    r.n_ctx = c.n_ctx;
    m.bf16 = Model::load(r.model_dir, WeightFormat::BF16, settings.placement);
    r.weight_bytes = decode_weight_bytes(*m.f32);
    r.block_matrices = m.f32->weights().blocks_total();
    r.weight_bytes_bf16 = decode_weight_bytes(*m.bf16);
    r.kv_bytes_per_position = 2 * c.n_layer * c.kv_width() * 4;
    r.flops_per_token = body_flops_per_token(*m.f32);
    return m;
}

// What bfloat16 matrices cost in accuracy: the same prefill in both, largest logit difference.
void measure_bf16_logit_diff(const BenchModels& m, BenchReport& r) {
    SessionOptions o;
    o.history = false;
    o.record = false;
    o.max_new_tokens = 1;
    Session a(m.f32, o), b(m.bf16, o);
    const auto prompt = random_prompt(m.f32->config(), std::min<int64_t>(64, r.n_ctx - 1), 5);
    a.set_prompt(prompt);
    b.set_prompt(prompt);
    a.step();
    b.step();
    for (size_t i = 0; i < a.parts().logits.size(); ++i) {
        r.bf16_max_abs_logit_diff =
            std::max(r.bf16_max_abs_logit_diff, double(std::abs(a.parts().logits[i] - b.parts().logits[i])));
        r.max_abs_logit = std::max(r.max_abs_logit, double(std::abs(a.parts().logits[i])));
    }
}

// Prefill tokens per second of a prompt of --prefill-tokens (at most n_ctx - 1), float32 and bfloat16.
void measure_prefill(const BenchModels& m, const BenchSettings& settings, BenchReport& r) {
    const ModelConfig& c = m.f32->config();
    const int64_t n_prefill = r.prefill_tokens = std::min<int64_t>(settings.prefill_tokens, c.n_ctx - 1);
    r.prefill_attention_flops_per_token = attention_flops_per_prompt_token(c, n_prefill);
    auto prefill_tokens_per_second = [&](const std::shared_ptr<const Model>& model) {
        SessionOptions o;
        o.history = false;
        o.record = false;
        o.max_new_tokens = 1;
        Session s(model, o);
        s.set_prompt(random_prompt(c, n_prefill, 7));
        return double(n_prefill) / s.step().cost.seconds;
    };
    r.prefill = repeat(r.repeat, [&] { return prefill_tokens_per_second(m.f32); });
    r.prefill_bf16 = repeat(r.repeat, [&] { return prefill_tokens_per_second(m.bf16); });
}

// Cached vs uncached: the same decode step at position p, once reading the cache, once recomputing
// all p+1 positions (step back in between, so both compute the very same token). Fills r.steps without
// their bounds; returns the read bandwidth (GB/s) probed beside each position's steps, for those bounds.
std::vector<double> measure_cached_steps(const std::shared_ptr<const Model>& model, const BenchSettings& settings,
                                         BenchReport& r) {
    const ModelConfig& c = model->config();
    const int64_t R = r.repeat;
    std::vector<int64_t> positions;
    const int64_t last = std::min<int64_t>(c.n_ctx - 2, settings.quick ? 128 : 2000);  // long contexts: 2000 shows the trend
    for (int64_t p : {16, 64, 128, 256, 384, 512, 640, 768, 896, 1000, 2000})
        if (p <= last && (!settings.quick || p <= 128)) positions.push_back(p);
    if (positions.empty() || positions.back() < last / 2) positions.push_back(std::max<int64_t>(1, last));
    std::vector<double> step_bandwidth;  // GB/s, probed beside each position's steps
    for (int64_t p : positions) {
        SessionOptions o;
        o.record = false;
        o.max_new_tokens = 2;
        Session s(model, o);
        s.set_prompt(random_prompt(c, p, 11));
        s.step();  // prefill p tokens; the decode step below is at position p
        BenchStep step;
        step.position = p;
        step.cached_ms = repeat(R, [&] {
            const double t = s.step(Phase::Decode).cost.seconds;
            s.step_back();
            return t * 1e3;
        });
        // Its bound from a probe run right after it (floored below, as every bound is): this host's
        // bandwidth drifts by tens of percent over minutes, so one probe for every position could put
        // early steps above their bound.
        const double bytes = double(r.weight_bytes) + double(r.kv_bytes_per_position) * double(p + 1);
        step_bandwidth.push_back(probe_read_bandwidth(int64_t(bytes), r.threads).best());
        s.set_use_cache(false);
        step.uncached_ms = repeat(R, [&] {
            const double t = s.step(Phase::Decode).cost.seconds;
            s.step_back();
            return t * 1e3;
        });
        r.steps.push_back(step);
    }
    return step_bandwidth;
}

// Recording every step: memory of the trace and what it costs decode.
void measure_recording(const std::shared_ptr<const Model>& model, const BenchSettings& settings, BenchReport& r) {
    const ModelConfig& c = model->config();
    BenchRecording& rec = r.recording;
    rec.decode = settings.quick ? 8 : std::min<int64_t>(200, c.n_ctx / 4);
    rec.prompt = std::min<int64_t>(1024, c.n_ctx - rec.decode);
    for (bool record : {true, false}) {
        SessionOptions o;
        o.record = record;
        o.history = record;
        o.max_new_tokens = rec.decode;
        Session s(model, o);
        s.set_prompt(random_prompt(c, rec.prompt, 13));
        s.step();
        const double t0 = seconds_now();
        while (s.next() == Session::Next::Decode) s.step(Phase::Decode);
        const double tps = double(rec.decode - 1) / (seconds_now() - t0);
        (record ? rec.tokens_per_s_recorded : rec.tokens_per_s_plain) = tps;
        if (record) rec.trace_bytes = s.trace().memory_bytes();
    }
}

// The machine, measured last so its buffers do not count in the peak RSS: read bandwidth from memory
// alone, over a buffer four times the last-level cache and at least 1 GiB. Sets each cached step's bound
// from the bandwidth probed beside it; returns the floor every bound may claim, the best a kernel reached
// and never less than the plain gemv from memory.
double measure_memory_bandwidth(const std::vector<double>& step_bandwidth, BenchReport& r) {
    const int64_t R = r.repeat;
    const int threads = r.threads;
    r.llc_bytes = last_level_cache_bytes();
    r.large_buffer_bytes = std::max(int64_t(1) << 30, 4 * r.llc_bytes);
    r.read_large_sequential_gb_s = repeat(R, [&] { return measure_read_bandwidth(r.large_buffer_bytes, threads, ReadKernel::Sequential); });
    r.read_large_streams_gb_s = repeat(R, [&] { return measure_read_bandwidth(r.large_buffer_bytes, threads, ReadKernel::Streams); });
    r.read_large_gemv_gb_s = repeat(R, [&] { return measure_read_bandwidth(r.large_buffer_bytes, threads, ReadKernel::Gemv); });
    const double floor_gb_s = r.read_large_gemv_gb_s.max;
    for (size_t i = 0; i < r.steps.size(); ++i) {
        BenchStep& step = r.steps[i];
        const double bytes = double(r.weight_bytes) + double(r.kv_bytes_per_position) * double(step.position + 1);
        step.bound_ms = bytes / (std::max(step_bandwidth[i], floor_gb_s) * 1e9) * 1e3;
    }
    return floor_gb_s;
}

// Batch-1 decode is timed in rounds paired with a bandwidth probe, because the bandwidth this shared
// host gives drifts by ±10 % over minutes: each round's ratio compares two measurements seconds
// apart, and the figure reported against the bound is the median of those ratios. Then the FMA peak and
// the bounds, from the best run: the machine streams and multiplies at least that fast.
void measure_decode_against_bounds(const BenchModels& m, int64_t n_decode, double floor_gb_s, BenchReport& r) {
    const int threads = r.threads;
    const double streamed = r.streamed_bytes, streamed_bf16 = r.streamed_bytes_bf16;
    std::vector<double> bw, bw_bf16, d1, d1_bf16, ratio, ratio_bf16;
    decode_tokens_per_second(m.f32, 1, std::min<int64_t>(n_decode, 8), false, 1);  // warm-up, not counted
    decode_tokens_per_second(m.bf16, 1, std::min<int64_t>(n_decode, 8), false, 1);
    for (int64_t round = 0; round < r.repeat; ++round) {
        bw.push_back(std::max(probe_read_bandwidth(int64_t(streamed), threads).best(), floor_gb_s));
        d1.push_back(decode_tokens_per_second(m.f32, 1, n_decode, false, 1));
        ratio.push_back(d1.back() / (bw.back() * 1e9 / streamed));
        bw_bf16.push_back(std::max(probe_read_bandwidth(int64_t(streamed_bf16), threads).best(), floor_gb_s));
        d1_bf16.push_back(decode_tokens_per_second(m.bf16, 1, n_decode, false, 1));
        ratio_bf16.push_back(d1_bf16.back() / (bw_bf16.back() * 1e9 / streamed_bf16));
    }
    r.read_bandwidth_gb_s = stats_of(bw);
    r.read_bandwidth_bf16_gb_s = stats_of(bw_bf16);
    r.decode1 = stats_of(d1);
    r.decode1_bf16 = stats_of(d1_bf16);
    r.decode1_vs_bound = stats_of(ratio);
    r.decode1_bf16_vs_bound = stats_of(ratio_bf16);
    r.fma_peak_gflop_s = repeat(r.repeat, [&] { return measure_fma_peak(threads); });
    r.decode_bound = r.read_bandwidth_gb_s.max * 1e9 / streamed;
    r.prefill_bound = r.fma_peak_gflop_s.max * 1e9 / (r.flops_per_token + r.prefill_attention_flops_per_token);
    r.decode_bound_bf16 = r.read_bandwidth_bf16_gb_s.max * 1e9 / streamed_bf16;
}

// Runs every figure and returns them with the settings; prints only the progress line.
BenchReport run_bench(const BenchSettings& settings) {
    const int64_t R = settings.repeat, n_decode = settings.decode_tokens;
    BenchReport r;
    r.model_dir = settings.model_dir;
    r.threads = settings.threads;
    r.repeat = R;
    ThreadPool::global().set_threads(settings.threads);
    const BenchModels m = load_bench_models(settings, r);

    Progress progress("bench", 6);
    measure_bf16_logit_diff(m, r);
    progress.update(1);
    r.decode4 = repeat(R, [&] { return decode_tokens_per_second(m.f32, 4, n_decode, false, 2); });
    r.decode8 = repeat(R, [&] { return decode_tokens_per_second(m.f32, 8, n_decode, false, 3); });
    progress.update(2);
    measure_prefill(m, settings, r);
    progress.update(3);
    const std::vector<double> step_bandwidth = measure_cached_steps(m.f32, settings, r);
    progress.update(4);
    measure_recording(m.f32, settings, r);
    progress.update(5);
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    r.peak_rss_mb = double(usage.ru_maxrss) / 1024.0;  // before the probe's 1 GiB buffer

    // What one decode step streams, at the middle of a decode run. Read bandwidth is measured over a buffer
    // exactly as large as that (and over 1 GiB, memory alone): this host's last-level cache is large enough
    // to hold part of a GPT-2 124M and serves decode and the probe alike, so the same working set is the
    // fair yardstick.
    r.mid_position = 4 + n_decode / 2;
    r.streamed_bytes = double(r.weight_bytes) + double(r.kv_bytes_per_position) * double(r.mid_position);
    r.streamed_bytes_bf16 = double(r.weight_bytes_bf16) + double(r.kv_bytes_per_position) / 2 * double(r.mid_position);
    const double floor_gb_s = measure_memory_bandwidth(step_bandwidth, r);
    measure_decode_against_bounds(m, n_decode, floor_gb_s, r);
    return r;
}

}  // namespace

int cli_bench(int argc, char** argv) {
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--sharing") return cli_bench_sharing(argc, argv);
        else if (std::string(argv[i]) == "--matmul") return cli_bench_matmul(argc, argv);
    CliArgs args("bench", "Decode, prefill and batch throughput, cached vs uncached step times, against the "
                          "bounds this machine's measured bandwidth and FMA peak imply.");
    add_bench_model_options(args);
    args.option("--repeat", "R", "runs per figure, reported as min / median / max (default 3)")
        .option("--decode-tokens", "N", "tokens per decode run (default 64)")
        .option("--prefill-tokens", "N", "prompt length for the prefill figure (default 512)")
        .option("--chart", "FILE", "write per-step time vs position, cached and uncached (PNG; SVG if FILE ends in .svg)")
        .flag("--quick", "small counts: checks that everything runs, figures are not meaningful")
        .flag("--sharing", "instead: KV memory and prefill with and without prefix sharing (bench --sharing --help)")
        .flag("--matmul", "instead: one matrix shape, weights in cache and from memory (bench --matmul --help)")
        .flag("--json", "print one JSON object");
    add_plot_options(args, false);
    add_threads_option(args);
    if (!args.parse(argc, argv)) return 0;
    if (args.has("--dtype"))
        throw UsageError("bench measures float32 and bfloat16 matrices side by side: --dtype does not apply here "
                         "(bench --sharing and lab take it)");
    const std::optional<std::string> chart = args.text("--chart");
    if (args.has("--scale") && !chart) throw UsageError("--scale sets the size of the --chart PNG: give --chart FILE");
    OutputSet outputs;
    const PlotOutput chart_out = chart ? check_chart_output(args, "--chart", *chart, &outputs) : PlotOutput{};
    BenchSettings settings;
    settings.quick = args.has("--quick");
    settings.threads = int(args.integer("--threads", default_thread_count(), 1, 256));
    settings.repeat = args.integer("--repeat", settings.quick ? 1 : 3, 1, 1000);
    settings.decode_tokens = args.integer("--decode-tokens", settings.quick ? 8 : 64, 1, 1 << 20);
    settings.prefill_tokens = args.integer("--prefill-tokens", settings.quick ? 32 : 512, 1, 1 << 20);
    settings.model_dir = bench_model_dir(args, outputs);
    settings.placement = weight_placement_from(args);

    const BenchReport report = run_bench(settings);
    if (chart) write_chart(report, *chart, chart_out);
    if (args.has("--json"))
        print_json(report);
    else
        print_text(report);
    return 0;
}

}  // namespace kvscope
