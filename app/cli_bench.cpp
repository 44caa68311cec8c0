// kvscope bench: what the KV cache buys. Decodes one sequence and, at sampled positions, times the same
// step with the cache (one new row) and without it (every position recomputed), stepping back between
// the two so both compute the very same token.
#include <algorithm>
#include <cstdio>
#include <random>

#include "cli_commands.h"
#include "cli_common.h"
#include "errors.h"
#include "session.h"
#include "thread_pool.h"

namespace kvscope {
namespace {

struct Timing {
    double min = 0, median = 0, max = 0;
};

Timing summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v.front(), v[v.size() / 2], v.back()};
}

}  // namespace

int cli_bench(int argc, char** argv) {
    CliArgs args("bench", "Cached vs uncached decode: per-step time vs position, tokens/s.");
    add_model_option(args);
    args.option("--prompt-len", "N", "random prompt length (default 8)")
        .option("--positions", "N", "decode until this position (default: min(n_positions, 256))")
        .option("--samples", "K", "positions at which both modes are timed (default 8)")
        .option("--repeat", "R", "timings per sample, reported as min/median/max (default 3)")
        .flag("--json", "print one JSON object");
    add_threads_option(args);
    if (!args.parse(argc, argv)) return 0;
    apply_threads(args);
    auto model = load_model_from(args);
    const ModelConfig& c = model->config();
    const int64_t prompt_len = args.integer("--prompt-len", 8, 1, c.n_ctx - 1);
    const int64_t last = args.integer("--positions", std::min<int64_t>(c.n_ctx, 256), prompt_len + 1, c.n_ctx);
    const int64_t n_samples = args.integer("--samples", 8, 1, 1000);
    const int64_t repeat = args.integer("--repeat", 3, 1, 1000);

    std::mt19937 rng(1234);
    std::vector<TokenId> prompt(static_cast<size_t>(prompt_len));
    for (auto& t : prompt) t = TokenId(rng() % uint32_t(c.n_vocab));
    SessionOptions options;
    options.record = false;
    options.max_new_tokens = last - prompt_len;
    Session session(model, options);
    session.set_prompt(prompt);
    session.step();  // prefill

    std::vector<int64_t> sample_at;
    for (int64_t i = 1; i <= n_samples; ++i)
        sample_at.push_back(prompt_len + (last - 1 - prompt_len) * i / n_samples);
    struct Row {
        int64_t position;
        Timing cached, uncached;
    };
    std::vector<Row> rows;
    double decode_seconds = 0;
    int64_t decoded = 0;
    Progress progress("bench", last - prompt_len);
    while (session.next() == Session::Next::Decode) {
        const int64_t position = session.cache().next_position();
        if (std::find(sample_at.begin(), sample_at.end(), position) != sample_at.end()) {
            std::vector<double> on, off;
            for (int64_t r = 0; r < repeat; ++r) {
                on.push_back(session.decode_step().seconds);
                session.step_back();
                session.set_use_cache(false);
                off.push_back(session.decode_step().seconds);
                session.step_back();
                session.set_use_cache(true);
            }
            rows.push_back({position, summarize(on), summarize(off)});
        }
        decode_seconds += session.decode_step().seconds;
        ++decoded;
        progress.update(decoded);
    }
    const double tps = decoded / decode_seconds;

    if (args.has("--json")) {
        std::string items;
        for (const Row& r : rows) {
            char buf[256];
            std::snprintf(buf, sizeof buf,
                          "%s{\"position\": %lld, \"cached_ms\": [%.4f, %.4f, %.4f], \"uncached_ms\": [%.4f, %.4f, %.4f]}",
                          items.empty() ? "" : ", ", (long long)r.position, r.cached.min * 1e3, r.cached.median * 1e3,
                          r.cached.max * 1e3, r.uncached.min * 1e3, r.uncached.median * 1e3, r.uncached.max * 1e3);
            items += buf;
        }
        std::printf("{\"threads\": %d, \"decode_tokens_per_s\": %.3f, \"decoded\": %lld, \"steps\": [%s]}\n",
                    ThreadPool::global().n_threads(), tps, (long long)decoded, items.c_str());
        return 0;
    }
    std::printf("model %s, %lld decode steps from position %lld, cache on: %.1f tokens/s\n\n", model->dir().c_str(),
                (long long)decoded, (long long)prompt_len, tps);
    std::printf("%9s  %26s  %26s  %8s\n", "position", "cached ms (min/med/max)", "uncached ms (min/med/max)", "speedup");
    for (const Row& r : rows)
        std::printf("%9lld  %8.3f %8.3f %8.3f  %8.3f %8.3f %8.3f  %7.1fx\n", (long long)r.position, r.cached.min * 1e3,
                    r.cached.median * 1e3, r.cached.max * 1e3, r.uncached.min * 1e3, r.uncached.median * 1e3,
                    r.uncached.max * 1e3, r.uncached.median / r.cached.median);
    return 0;
}

}  // namespace kvscope
