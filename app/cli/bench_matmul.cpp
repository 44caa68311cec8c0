// kvscope bench --matmul: one matrix shape through the engine's matmul_nk, with its weights in cache and
// streamed from memory, next to this machine's FMA peak and read bandwidth. Decode is a few rows of x
// against every weight, so the two figures bound it from both sides: in cache shows the arithmetic
// alone, from memory what the memory system leaves of it. Figures are min / median / max over --repeat.
// Each round measures the matmul and then the machine, and the shares of the peak and of the bandwidth
// are per-round ratios: a VM's bandwidth drifts by a third within a minute, and a ratio of medians taken
// seconds apart put one matmul at 71 % of the bandwidth in one run and 105 % in the next.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/errors.h"
#include "base/huge_pages.h"
#include "base/thread_pool.h"
#include "bench_stats.h"
#include "args.h"
#include "commands.h"
#include "common.h"
#include "kernels/kernels.h"
#include "kernels/machine_probe.h"

namespace kvscope {
namespace {

struct MatmulBench {
    int64_t rows = 8, K = 576, N = 1536;
    bool bf16 = false;
    std::optional<BlockFormat> blocks;  // ggml's blocks (random integers, finite scales) instead of floats
    BlockOrder order = BlockOrder::Rows;  // Panels where a model's load would pack them
    int threads = 1;
    int64_t matrix_bytes() const {
        if (blocks) return N * (K / block_layout(*blocks).elements) * block_layout(*blocks).bytes;
        return K * N * (bf16 ? 2 : 4);
    }
    std::string dtype_name() const {
        if (!blocks) return bf16 ? "bfloat16" : "float32";
        return std::string(block_layout(*blocks).name) + (order == BlockOrder::Panels ? " in panels" : " in rows");
    }
    int64_t repeat = 5;
    bool quick = false;
};

struct MatmulFigures {
    int64_t matrix_bytes = 0, llc_bytes = 0, memory_copies = 0;
    Stats cached_us, memory_us;      // one matmul
    Stats fma_peak_gflop_s, read_gb_s;  // the machine, best read kernel from memory
    // Per round: in cache against that round's FMA peak, from memory against its read bandwidth, and the
    // share of the memory time hidden behind the arithmetic (print_matmul_text says how)
    Stats cached_of_peak, memory_of_bandwidth, hidden;
};

// Seconds per matmul over `copies` matrices used in turn, each `bytes` apart in `weights`, for at least
// `min_seconds` (whole passes over the copies).
double seconds_per_matmul(const MatmulBench& b, const std::byte* weights, int64_t bytes, int64_t copies,
                          const float* x, float* y, double min_seconds) {
    int64_t calls = 0;
    const double t0 = seconds_now();
    double elapsed = 0;
    do {
        for (int64_t c = 0; c < copies; ++c) {
            const std::byte* w = weights + c * bytes;
            const WeightRef ref = b.blocks ? WeightRef(BlockMatrix{*b.blocks, w, b.order})
                                  : b.bf16 ? WeightRef(reinterpret_cast<const uint16_t*>(w))
                                           : WeightRef(reinterpret_cast<const float*>(w));
            matmul_nk(y, x, ref, nullptr, b.rows, b.K, b.N);
        }
        calls += copies;
        elapsed = seconds_now() - t0;
    } while (elapsed < min_seconds);
    return elapsed / double(calls);
}

MatmulFigures run_matmul_bench(const MatmulBench& b) {
    MatmulFigures f;
    ThreadPool::global().set_threads(b.threads);
    f.matrix_bytes = b.matrix_bytes();
    f.llc_bytes = last_level_cache_bytes();
    // From memory: copies filling 4x the last-level cache and at least 256 MiB, so no pass finds the
    // previous pass's weights in cache.
    const int64_t memory_bytes = std::max(int64_t(256) << 20, 4 * f.llc_bytes);
    f.memory_copies = std::max<int64_t>(2, (memory_bytes + f.matrix_bytes - 1) / f.matrix_bytes);
    if (b.quick) f.memory_copies = 2;
    HugePageBlock weights(f.matrix_bytes * f.memory_copies);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    {  // one random matrix, copied: the values do not change the time, and copying is fast
        std::vector<float> one(size_t(b.K * b.N));
        for (float& v : one) v = u(rng);
        std::vector<std::byte> blocks(size_t(b.blocks ? f.matrix_bytes : 0));
        if (b.blocks) {  // random bytes; every float16 field then a finite scale of about 1/64
            const BlockLayout layout = block_layout(*b.blocks);
            std::uniform_int_distribution<int> byte(0, 255);
            for (std::byte& v : blocks) v = std::byte(byte(rng));
            const int64_t at = *b.blocks == BlockFormat::Q6_K ? 208 : 0;
            for (int64_t i = 0; i < f.matrix_bytes / layout.bytes; ++i)
                for (int64_t h = 0; h < (layout.elements == 256 && at == 0 ? 2 : 1); ++h) {
                    const uint16_t scale = uint16_t(0x2000 + byte(rng));
                    std::memcpy(blocks.data() + i * layout.bytes + at + 2 * h, &scale, 2);
                }
            if (b.order == BlockOrder::Panels) pack_panels(blocks.data(), *b.blocks, b.N, b.K);
        }
        for (int64_t c = 0; c < f.memory_copies; ++c) {
            std::byte* to = weights.data() + c * f.matrix_bytes;
            if (b.blocks) {
                std::memcpy(to, blocks.data(), blocks.size());
                continue;
            }
            if (!b.bf16) {
                std::memcpy(to, one.data(), size_t(f.matrix_bytes));
                continue;
            }
            uint16_t* w16 = reinterpret_cast<uint16_t*>(to);
            for (size_t i = 0; i < one.size(); ++i) {
                uint32_t bits;
                std::memcpy(&bits, &one[i], 4);
                w16[i] = uint16_t(bits >> 16);
            }
        }
    }
    std::vector<float> x(size_t(b.rows * b.K)), y(size_t(b.rows * b.N));
    for (float& v : x) v = u(rng);
    const double min_seconds = b.quick ? 0.01 : 0.3;
    const int64_t probe_bytes = b.quick ? int64_t(64) << 20 : memory_bytes;
    seconds_per_matmul(b, weights.data(), f.matrix_bytes, 1, x.data(), y.data(), min_seconds / 3);  // warm
    const double flop = 2.0 * double(b.rows * b.K * b.N), bytes = double(f.matrix_bytes);
    std::vector<double> cached_us, memory_us, peak, read, cached_of_peak, memory_of_bandwidth, hidden;
    for (int64_t r = 0; r < b.repeat; ++r) {
        cached_us.push_back(seconds_per_matmul(b, weights.data(), f.matrix_bytes, 1, x.data(), y.data(), min_seconds) * 1e6);
        peak.push_back(measure_fma_peak(b.threads));
        memory_us.push_back(
            seconds_per_matmul(b, weights.data(), f.matrix_bytes, f.memory_copies, x.data(), y.data(), min_seconds) * 1e6);
        read.push_back(probe_read_bandwidth(probe_bytes, b.threads).best());
        cached_of_peak.push_back(flop / (cached_us.back() * 1e3) / peak.back());
        memory_of_bandwidth.push_back(bytes / (memory_us.back() * 1e3) / read.back());
        // Whichever of arithmetic and memory is slower bounds a matmul; their sum is what no overlap costs.
        const double arithmetic = cached_us.back(), reading = bytes / (read.back() * 1e3);
        hidden.push_back(std::clamp((arithmetic + reading - memory_us.back()) / std::min(arithmetic, reading), 0.0, 1.0));
    }
    f.cached_us = stats_of(cached_us);
    f.memory_us = stats_of(memory_us);
    f.fma_peak_gflop_s = stats_of(peak);
    f.read_gb_s = stats_of(read);
    f.cached_of_peak = stats_of(cached_of_peak);
    f.memory_of_bandwidth = stats_of(memory_of_bandwidth);
    f.hidden = stats_of(hidden);
    return f;
}

double gflop_s(const MatmulBench& b, double us) { return 2.0 * double(b.rows * b.K * b.N) / (us * 1e3); }

void print_matmul_text(const MatmulBench& b, const MatmulFigures& f) {
    const double mb = double(f.matrix_bytes) / 1e6;
    const std::string llc = f.llc_bytes > 0 ? std::to_string(f.llc_bytes >> 20) + " MiB" : "not known";
    std::printf("matmul y(%lld, %lld) = x(%lld, %lld) W(%lld, %lld)^T, %s weights (%.1f MB), %d thread%s, "
                "last-level cache %s, %lld round%s\n",
                (long long)b.rows, (long long)b.N, (long long)b.rows, (long long)b.K, (long long)b.N, (long long)b.K,
                b.dtype_name().c_str(), mb, b.threads, b.threads == 1 ? "" : "s", llc.c_str(), (long long)b.repeat,
                b.repeat == 1 ? "" : "s");
    std::printf("machine      FMA peak %s GFLOP/s, read bandwidth %s GB/s (best of the probe's kernels, %lld MiB)\n",
                stats_text(f.fma_peak_gflop_s).c_str(), stats_text(f.read_gb_s).c_str(),
                (long long)(std::max(int64_t(256) << 20, 4 * f.llc_bytes) >> 20));
    auto line = [&](const char* name, const Stats& us, const std::string& share, const std::string& where) {
        const Stats g{gflop_s(b, us.max), gflop_s(b, us.median), gflop_s(b, us.min)};
        const Stats gb{mb * 1e-3 / (us.max * 1e-6), mb * 1e-3 / (us.median * 1e-6), mb * 1e-3 / (us.min * 1e-6)};
        std::printf("%-12s %s us per matmul, %s GFLOP/s, weights read at %s GB/s, %s; %s\n", name,
                    stats_text(us).c_str(), stats_text(g).c_str(), stats_text(gb).c_str(), share.c_str(), where.c_str());
    };
    line("in cache", f.cached_us, stats_text(f.cached_of_peak, "%.0f", 100.0) + " % of the FMA peak",
         f.llc_bytes > 0 && 2 * f.matrix_bytes > f.llc_bytes
             ? "one matrix, again and again (over half the last-level cache: partly read from memory)"
             : "one matrix, again and again");
    line("from memory", f.memory_us, stats_text(f.memory_of_bandwidth, "%.0f", 100.0) + " % of the bandwidth",
         std::to_string(f.memory_copies) + " copies in turn (" + std::to_string(f.memory_copies * f.matrix_bytes >> 20) +
             " MiB)");
    std::printf("overlap      %s %% of the memory time hidden behind the arithmetic: in cache + reading the weights "
                "at the probe's rate - from memory, over the smaller of the two\n",
                stats_text(f.hidden, "%.0f", 100.0).c_str());
    std::printf("(shares: each round's matmul against the FMA peak or bandwidth measured right after it, min / "
                "median / max over the rounds)\n");
    if (b.quick) std::printf("(--quick: small counts; the figures are not meaningful)\n");
}

void print_matmul_json(const MatmulBench& b, const MatmulFigures& f) {
    JsonOut j;
    j["rows"] = b.rows;
    j["k"] = b.K;
    j["n"] = b.N;
    j["dtype"] = b.blocks ? std::string(block_layout(*b.blocks).name) : b.bf16 ? "bf16" : "f32";
    if (b.blocks) j["order"] = b.order == BlockOrder::Panels ? "panels" : "rows";
    j["threads"] = b.threads;
    j["matrix_bytes"] = f.matrix_bytes;
    j["llc_bytes"] = f.llc_bytes;
    j["memory_copies"] = f.memory_copies;
    j["cached_us"] = f.cached_us;
    j["memory_us"] = f.memory_us;
    j["fma_peak_gflop_s"] = f.fma_peak_gflop_s;
    j["read_gb_s"] = f.read_gb_s;
    j["cached_of_peak"] = f.cached_of_peak;
    j["memory_of_bandwidth"] = f.memory_of_bandwidth;
    j["memory_time_hidden"] = f.hidden;
    std::printf("%s\n", json_text(j, 2).c_str());
}

}  // namespace

int cli_bench_matmul(int argc, char** argv) {
    CliArgs args("bench --matmul", "One matrix shape through the engine's matmul (y = x W^T, as every projection "
                                   "of a decode step), with its weights in cache and streamed from memory, "
                                   "against this machine's FMA peak and read bandwidth.");
    args.flag("--matmul", "this benchmark (instead of the speed benchmark)")
        .option("--rows", "T", "rows of x: the batch of a decode step (default 8)")
        .option("--k", "K", "the shared dimension: the width of x (default 576)")
        .option("--n", "N", "weight rows: the outputs (default 1536)")
        .option("--dtype", "f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k",
                "how the weights are stored (default f32); a quantized type: random blocks, K a multiple of its block")
        .option("--repeat", "R", "runs per figure, reported as min / median / max (default 5)")
        .flag("--block-rows", "Q4_0 and Q8_0: keep the blocks in rows, as --map-weights leaves a model's (default: in the "
                              "panels a model's load packs them in, where this build has them and N allows)")
        .flag("--quick", "small counts: checks that everything runs, figures are not meaningful")
        .flag("--json", "print one JSON object");
    add_threads_option(args);
    if (!args.parse(argc, argv)) return 0;
    MatmulBench b;
    b.quick = args.has("--quick");
    b.rows = args.integer("--rows", 8, 1, 4096);
    b.K = args.integer("--k", 576, 1, 1 << 16);
    b.N = args.integer("--n", 1536, 1, 1 << 20);
    const std::string dtype = args.text("--dtype").value_or("f32");
    for (int f = 0; f < kBlockFormats; ++f) {
        std::string name = block_layout(BlockFormat(f)).name;
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        if (name == dtype) b.blocks = BlockFormat(f);
    }
    if (dtype != "f32" && dtype != "bf16" && !b.blocks)
        throw UsageError("--dtype must be f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k, not '" + dtype + "'");
    if (b.blocks && b.K % block_layout(*b.blocks).elements != 0)
        throw UsageError("--k " + std::to_string(b.K) + " is not a multiple of a " + block_layout(*b.blocks).name + " block (" +
                         std::to_string(block_layout(*b.blocks).elements) + " weights)");
    b.bf16 = dtype == "bf16";
    if (b.blocks && !args.has("--block-rows") && panel_rows(*b.blocks) > 0 && b.N % panel_rows(*b.blocks) == 0)
        b.order = BlockOrder::Panels;
    b.threads = int(args.integer("--threads", default_thread_count(), 1, 256));
    b.repeat = args.integer("--repeat", b.quick ? 1 : 5, 1, 1000);
    if (b.matrix_bytes() > (int64_t(1) << 31))
        throw UsageError("--k x --n is a matrix over 2 GiB: give a smaller shape");
    const MatmulFigures f = run_matmul_bench(b);
    if (args.has("--json"))
        print_matmul_json(b, f);
    else
        print_matmul_text(b, f);
    return 0;
}

}  // namespace kvscope
