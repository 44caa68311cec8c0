// kvscope bench --matmul: one matrix shape through the engine's matmul_nk, with its weights in cache and
// streamed from memory, next to this machine's FMA peak and read bandwidth. Decode is a few rows of x
// against every weight, so the two figures bound it from both sides: in cache shows the arithmetic
// alone, from memory what the memory system leaves of it. Figures are min / median / max over --repeat.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "bench_stats.h"
#include "cli_args.h"
#include "cli_commands.h"
#include "cli_common.h"
#include "clock.h"
#include "errors.h"
#include "huge_pages.h"
#include "kernels.h"
#include "machine_probe.h"
#include "thread_pool.h"

namespace kvscope {
namespace {

struct MatmulBench {
    int64_t rows = 8, K = 576, N = 1536;
    bool bf16 = false;
    int threads = 1;
    int64_t repeat = 5;
    bool quick = false;
};

struct MatmulFigures {
    int64_t matrix_bytes = 0, llc_bytes = 0, memory_copies = 0;
    Stats cached_us, memory_us;      // one matmul
    Stats fma_peak_gflop_s, read_gb_s;  // the machine, best read kernel from memory
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
            const WeightRef ref = b.bf16 ? WeightRef(reinterpret_cast<const uint16_t*>(w))
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
    f.matrix_bytes = b.K * b.N * (b.bf16 ? 2 : 4);
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
        for (int64_t c = 0; c < f.memory_copies; ++c) {
            std::byte* to = weights.data() + c * f.matrix_bytes;
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
    seconds_per_matmul(b, weights.data(), f.matrix_bytes, 1, x.data(), y.data(), min_seconds / 3);  // warm
    f.cached_us = repeat(b.repeat, [&] {
        return seconds_per_matmul(b, weights.data(), f.matrix_bytes, 1, x.data(), y.data(), min_seconds) * 1e6;
    });
    f.memory_us = repeat(b.repeat, [&] {
        return seconds_per_matmul(b, weights.data(), f.matrix_bytes, f.memory_copies, x.data(), y.data(), min_seconds) * 1e6;
    });
    const int64_t probe_bytes = b.quick ? int64_t(64) << 20 : memory_bytes;
    f.read_gb_s = repeat(b.repeat, [&] { return probe_read_bandwidth(probe_bytes, b.threads).best(); });
    f.fma_peak_gflop_s = repeat(b.repeat, [&] { return measure_fma_peak(b.threads); });
    return f;
}

double gflop_s(const MatmulBench& b, double us) { return 2.0 * double(b.rows * b.K * b.N) / (us * 1e3); }

void print_matmul_text(const MatmulBench& b, const MatmulFigures& f) {
    const double mb = double(f.matrix_bytes) / 1e6;
    std::printf("matmul y(%lld, %lld) = x(%lld, %lld) W(%lld, %lld)^T, %s weights (%.1f MB), %d thread%s, "
                "last-level cache %lld MiB\n",
                (long long)b.rows, (long long)b.N, (long long)b.rows, (long long)b.K, (long long)b.N, (long long)b.K,
                b.bf16 ? "bfloat16" : "float32", mb, b.threads, b.threads == 1 ? "" : "s",
                (long long)(f.llc_bytes >> 20));
    std::printf("machine      FMA peak %s GFLOP/s, read bandwidth %s GB/s (best of the probe's kernels, %lld MiB)\n",
                stats_text(f.fma_peak_gflop_s).c_str(), stats_text(f.read_gb_s).c_str(),
                (long long)(std::max(int64_t(256) << 20, 4 * f.llc_bytes) >> 20));
    auto line = [&](const char* name, const Stats& us, const std::string& where) {
        const Stats g{gflop_s(b, us.max), gflop_s(b, us.median), gflop_s(b, us.min)};
        const Stats gb{mb * 1e-3 / (us.max * 1e-6), mb * 1e-3 / (us.median * 1e-6), mb * 1e-3 / (us.min * 1e-6)};
        std::printf("%-12s %s us per matmul, %s GFLOP/s (median %.0f %% of the peak), weights read at %s GB/s "
                    "(median %.0f %% of the bandwidth); %s\n",
                    name, stats_text(us).c_str(), stats_text(g).c_str(), 100.0 * g.median / f.fma_peak_gflop_s.median,
                    stats_text(gb).c_str(), 100.0 * gb.median / f.read_gb_s.median, where.c_str());
    };
    line("in cache", f.cached_us,
         f.llc_bytes > 0 && 2 * f.matrix_bytes > f.llc_bytes
             ? "one matrix, again and again (over half the last-level cache: partly read from memory)"
             : "one matrix, again and again");
    line("from memory", f.memory_us,
         std::to_string(f.memory_copies) + " copies in turn (" + std::to_string(f.memory_copies * f.matrix_bytes >> 20) +
             " MiB)");
    // Whichever of arithmetic and memory is slower bounds a matmul; the sum is what no overlap would cost.
    const double arithmetic_us = f.cached_us.median, memory_only_us = mb * 1e-3 / f.read_gb_s.median * 1e6;
    std::printf("overlap      from memory took %.0f us against %.0f us in cache and %.0f us to read the weights "
                "at the probe's rate: %.0f %% of the memory time hidden behind the arithmetic\n",
                f.memory_us.median, arithmetic_us, memory_only_us,
                100.0 * std::clamp((arithmetic_us + memory_only_us - f.memory_us.median) /
                                       std::min(arithmetic_us, memory_only_us), 0.0, 1.0));
    if (b.quick) std::printf("(--quick: small counts; the figures are not meaningful)\n");
}

void print_matmul_json(const MatmulBench& b, const MatmulFigures& f) {
    JsonOut j;
    j["rows"] = b.rows;
    j["k"] = b.K;
    j["n"] = b.N;
    j["dtype"] = b.bf16 ? "bf16" : "f32";
    j["threads"] = b.threads;
    j["matrix_bytes"] = f.matrix_bytes;
    j["llc_bytes"] = f.llc_bytes;
    j["memory_copies"] = f.memory_copies;
    j["cached_us"] = f.cached_us;
    j["memory_us"] = f.memory_us;
    j["fma_peak_gflop_s"] = f.fma_peak_gflop_s;
    j["read_gb_s"] = f.read_gb_s;
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
        .option("--dtype", "f32|bf16", "how the weights are stored (default f32)")
        .option("--repeat", "R", "runs per figure, reported as min / median / max (default 5)")
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
    if (dtype != "f32" && dtype != "bf16") throw UsageError("--dtype must be f32 or bf16, not '" + dtype + "'");
    b.bf16 = dtype == "bf16";
    b.threads = int(args.integer("--threads", default_thread_count(), 1, 256));
    b.repeat = args.integer("--repeat", b.quick ? 1 : 5, 1, 1000);
    if (b.K * b.N * (b.bf16 ? 2 : 4) > (int64_t(1) << 31))
        throw UsageError("--k x --n is a matrix over 2 GiB: give a smaller shape");
    const MatmulFigures f = run_matmul_bench(b);
    if (args.has("--json"))
        print_matmul_json(b, f);
    else
        print_matmul_text(b, f);
    return 0;
}

}  // namespace kvscope
