// kvscope bench --sharing: what prefix sharing and a prompt cache file save (issue 6 item 6).
//
// N sequences start with the same P-token prefix (a system prompt), each continues with its own S-token
// suffix and then decodes a few tokens. For every N the same work runs in three layouts:
//   shared   paged cache, one pool, prefix sharing: later sequences map the prefix's blocks
//   paged    paged cache, one pool, no sharing: every sequence computes and stores its whole prompt
//   ring     the contiguous cache: every sequence preallocates prompt + new tokens
// and the bench reports the KV memory held (distinct pool blocks x block bytes; the ring's buffers),
// the ideal (prefix once + every sequence's own positions, in positions x bytes per position), the
// process RSS those caches added, prefill positions computed and skipped, prefill wall time and FLOPs.
// Then the prompt cache file: prefilling the prefix vs reading it from a file and restoring it.
// run_sharing computes a SharingReport; bench_sharing_report.cpp prints it as text or JSON and draws its chart.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/errors.h"
#include "base/thread_pool.h"
#include "bench_sharing_report.h"
#include "commands.h"
#include "common.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "io/ownership.h"
#include "run/prompt_cache.h"
#include "run/session_group.h"

namespace kvscope {
namespace {

struct Workload {
    std::vector<TokenId> prefix;                // (P)
    std::vector<std::vector<TokenId>> suffixes; // (N_max, S) one per sequence
    int64_t n_new = 0;                          // tokens generated per sequence (the first by the prefill)
    int64_t block_size = 0;                     // B
};

std::vector<TokenId> random_tokens(int64_t n_vocab, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<TokenId> ids(static_cast<size_t>(n));
    for (TokenId& t : ids) t = TokenId(rng() % uint32_t(n_vocab));
    return ids;
}

// Resident set size of this process now, from /proc/self/statm.
int64_t rss_bytes() {
    long pages_total = 0, pages_resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
        std::fclose(f);
    }
    return int64_t(pages_resident) * int64_t(sysconf(_SC_PAGESIZE));
}

int64_t settled_rss() {
    malloc_trim(0);
    return rss_bytes();
}

// N sequences with their prompts set; nothing computed yet. A paged pool reserves its storage untouched,
// so only the ring's buffers are resident at this point.
std::unique_ptr<SessionGroup> make_group(std::shared_ptr<const Model> model, const Workload& w, Layout layout,
                                         int64_t n_seq) {
    SessionOptions o;
    o.history = false;
    o.record = false;
    o.max_new_tokens = w.n_new;
    o.n_top = 0;
    if (layout != Layout::Ring) o.block_size = w.block_size;
    o.share_prefix = layout == Layout::Shared;
    GroupOptions g;
    g.n_seq = n_seq;
    auto group = std::make_unique<SessionGroup>(std::move(model), o, g);
    std::vector<std::vector<TokenId>> prompts;
    for (int64_t i = 0; i < n_seq; ++i) {
        prompts.push_back(w.prefix);
        prompts.back().insert(prompts.back().end(), w.suffixes[size_t(i)].begin(), w.suffixes[size_t(i)].end());
    }
    group->set_prompts(std::move(prompts));
    return group;
}

// Resident bytes N sessions' workspaces take (set up a paged group, whose pool is not touched yet).
int64_t workspace_rss(std::shared_ptr<const Model> model, const Workload& w, int64_t n_seq) {
    const int64_t before = settled_rss();
    auto group = make_group(std::move(model), w, Layout::Paged, n_seq);
    return rss_bytes() - before;
}

// Prefix once + every sequence's own positions: what an ideal shared cache holds, in bytes.
int64_t ideal_bytes(int64_t positions, int64_t n_seq, int64_t prefix, int64_t bytes_per_position) {
    return (positions - (n_seq - 1) * prefix) * bytes_per_position;
}

// One layout at N sequences; `generated` receives each sequence's tokens (N, n_new), to check the layouts agree.
SharingRun run_layout(std::shared_ptr<const Model> model, const Workload& w, Layout layout, int64_t n_seq,
                      int64_t workspace_bytes, int64_t bytes_per_position,
                      std::vector<std::vector<TokenId>>& generated) {
    SharingRun r;
    r.layout = layout;
    r.n_seq = n_seq;
    const int64_t rss_before = settled_rss();
    auto group = make_group(model, w, layout, n_seq);

    // Prefill: the whole prompt in one step per sequence. The first sharing sequence goes alone (so the
    // others find its blocks); the rest run as one batch.
    const double t0 = seconds_now();
    while (group->next() == Session::Next::Prefill) group->step();
    r.prefill_seconds = seconds_now() - t0;
    for (const Session* s : group->sessions()) {
        const StepRecord& rec = *latest(*s);  // each session's one prefill step
        r.prefill_computed += rec.cost.n_rows_computed;
        r.prefill_skipped += rec.cost.n_adopted;
        r.prefill_flops += rec.cost.flops;
    }
    GroupMemory m = group->memory();
    r.positions_prefill = m.positions;
    r.kv_bytes_prefill = m.bytes;
    r.blocks_prefill = m.blocks_distinct;

    const double t1 = seconds_now();
    while (group->next() != Session::Next::Done) group->step();
    r.decode_seconds = seconds_now() - t1;
    m = group->memory();
    r.positions_end = m.positions;
    r.kv_bytes_end = m.bytes;
    r.blocks_end = m.blocks_distinct;
    r.copies_on_write = m.copies_on_write;
    r.rss_kv_bytes = rss_bytes() - rss_before - workspace_bytes;
    const int64_t P = int64_t(w.prefix.size());
    r.ideal_bytes_prefill = ideal_bytes(r.positions_prefill, n_seq, P, bytes_per_position);
    r.ideal_bytes_end = ideal_bytes(r.positions_end, n_seq, P, bytes_per_position);
    generated.clear();
    for (const Session* s : group->sessions()) generated.push_back(s->parts().generated);
    return r;
}

// The prompt cache file's figures (PromptFileFigures), the file written to and removed from `path`.
PromptFileFigures bench_prompt_file(std::shared_ptr<const Model> model, const Workload& w, int64_t R,
                                    const std::string& path) {
    PromptFileFigures f;
    f.positions = int64_t(w.prefix.size());
    double t = seconds_now();
    const ModelFingerprint fp = model_fingerprint(*model, model->weights().bf16);
    f.fingerprint_seconds = seconds_now() - t;

    SessionOptions o;
    o.history = false;
    o.record = false;
    o.max_new_tokens = 1;
    o.n_top = 0;
    std::unique_ptr<Session> prefix_session;
    f.compute_prefix = repeat(R, [&] {
        prefix_session = std::make_unique<Session>(model, o);
        prefix_session->set_prompt(w.prefix);
        return prefix_session->step().cost.seconds;
    });
    t = seconds_now();
    write_prompt_cache(path, fp, w.prefix, prefix_session->cache());
    f.write_seconds = seconds_now() - t;
    f.file_bytes = int64_t(std::filesystem::file_size(path));

    std::shared_ptr<const PromptCache> pc;
    f.read = repeat(R, [&] {
        const double t0 = seconds_now();
        pc = std::make_shared<const PromptCache>(read_prompt_cache(path, fp));
        return seconds_now() - t0;
    });
    f.restore = repeat(R, [&] {
        KvCache cache = model->make_cache(f.positions + 1, 0, 0);
        const double t0 = seconds_now();
        restore_prompt_cache(*pc, f.positions, cache);
        return seconds_now() - t0;
    });

    std::vector<TokenId> prompt = w.prefix;
    prompt.insert(prompt.end(), w.suffixes[0].begin(), w.suffixes[0].end());
    f.n_prompt = int64_t(prompt.size());
    TokenId computed_token = -1, loaded_token = -2;
    f.full_prompt = repeat(R, [&] {  // timed like the next one, from making the session on
        const double t0 = seconds_now();
        Session s(model, o);
        s.set_prompt(prompt);
        s.step();
        computed_token = s.parts().generated.at(0);
        return seconds_now() - t0;
    });
    f.with_file = repeat(R, [&] {  // read the file, restore the prefix, compute the suffix
        const double t0 = seconds_now();
        Session s(model, o);
        s.use_prompt_cache(std::make_shared<const PromptCache>(read_prompt_cache(path, fp)));
        s.set_prompt(prompt);
        s.step();
        loaded_token = s.parts().generated.at(0);
        return seconds_now() - t0;
    });
    f.same_token = computed_token == loaded_token;
    return f;
}

struct SharingSettings {
    std::string model_dir;
    WeightFormat format = WeightFormat::F32;
    int threads = 1;
    int64_t repeat = 1;                  // R
    std::vector<int64_t> sequences;      // the N to run, ascending, distinct
    int64_t prefix_tokens = 0, suffix_tokens = 0, new_tokens = 0, block_size = 0, ring_up_to = 0;
    WeightPlacement placement = WeightPlacement::HugePages;  // --map-weights
};

// Runs every layout at every N, then the prompt cache file; prints only the progress line.
SharingReport run_sharing(const SharingSettings& settings) {
    const int64_t P = settings.prefix_tokens, S = settings.suffix_tokens, n_new = settings.new_tokens;
    const std::vector<int64_t>& counts = settings.sequences;
    SharingReport r;
    r.model_dir = settings.model_dir;
    r.threads = settings.threads;
    r.repeat = settings.repeat;
    r.sequences = counts;
    r.prefix_tokens = P;
    r.suffix_tokens = S;
    r.new_tokens = n_new;
    r.block_size = settings.block_size;
    r.ring_up_to = settings.ring_up_to;

    ThreadPool::global().set_threads(settings.threads);
    // Freed buffers go back to the system at once, so each run's RSS starts from the same floor.
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_TRIM_THRESHOLD, 256 * 1024);
    const std::shared_ptr<const Model> model = Model::load(settings.model_dir, settings.format, settings.placement);
    const ModelConfig& c = model->config();
    if (P + S + n_new > c.n_ctx)
        throw UsageError("prefix " + std::to_string(P) + " + suffix " + std::to_string(S) + " + new tokens " +
                         std::to_string(n_new) + " exceeds the model's n_positions (" + std::to_string(c.n_ctx) +
                         "); use --gpt2-shape or shorter --prefix-tokens");

    Workload w;
    w.prefix = random_tokens(c.n_vocab, P, 21);
    for (int64_t i = 0; i < counts.back(); ++i) {
        w.suffixes.push_back(random_tokens(c.n_vocab, S, 1000 + uint32_t(i)));
        w.suffixes.back()[0] = TokenId(i % c.n_vocab);  // no two suffixes start alike, so none shares a block
    }
    w.n_new = n_new;
    w.block_size = settings.block_size;
    r.kv_bytes_per_position = 2 * c.n_layer * c.kv_width() * (model->weights().bf16 ? 2 : 4);  // KV dtype = weights

    {  // page the weights in, so the first run's RSS does not count them
        SessionOptions o;
        o.history = o.record = false;
        o.max_new_tokens = 1;
        Session s(model, o);
        s.set_prompt(w.prefix);
        s.step();
    }

    int64_t n_total = 1;
    for (int64_t n : counts) n_total += n <= r.ring_up_to ? 3 : 2;
    Progress progress("bench --sharing", n_total);
    int64_t n_done = 0;
    for (int64_t n : counts) {
        const int64_t ws_bytes = workspace_rss(model, w, n);
        std::vector<std::vector<TokenId>> first, generated;  // (N, n_new) of the first layout, of this one
        for (Layout layout : kLayouts) {
            if (layout == Layout::Ring && n > r.ring_up_to) continue;
            r.runs.push_back(run_layout(model, w, layout, n, ws_bytes, r.kv_bytes_per_position, generated));
            if (layout == kLayouts[0]) first = generated;
            if (generated != first) r.tokens_agree = false;
            progress.update(++n_done);
        }
    }
    const std::string file = (std::filesystem::temp_directory_path() /
                              ("kvscope-bench-sharing-" + std::to_string(getpid()) + ".kvprompt")).string();
    try {
        r.prompt_file = bench_prompt_file(model, w, settings.repeat, file);
    } catch (...) {
        remove_written(file);
        throw;
    }
    remove_written(file);
    progress.update(++n_done);
    return r;
}

}  // namespace

int cli_bench_sharing(int argc, char** argv) {
    CliArgs args("bench --sharing",
                 "KV memory and prefill work for N sequences sharing a prompt prefix: paged with sharing, paged "
                 "without, the contiguous ring; and a prompt cache file vs computing the prefix.");
    add_bench_model_options(args);
    args.flag("--sharing", "this benchmark (instead of the speed benchmark)")
        .option("--sequences", "LIST", "numbers of sequences, e.g. 1,2,4 (default 1,2,4,8,16,32)")
        .option("--prefix-tokens", "P", "shared prefix length (default 512)")
        .option("--suffix-tokens", "S", "each sequence's own prompt tokens after the prefix (default 16)")
        .option("--new-tokens", "N", "tokens each sequence generates, the first by the prefill (default 4)");
    add_option(args, "block_size", "positions per block of the paged layouts (default 16)")
        .option("--ring-up-to", "N", "run the ring layout only up to N sequences (default 8: it computes what "
                                     "'paged' computes, at the same cost, and holds as much)")
        .option("--repeat", "R", "runs per prompt-cache-file figure, min / median / max (default 3)")
        .option("--chart", "FILE", "write KV memory and prefill time vs N, with and without sharing (PNG; SVG if FILE "
                                   "ends in .svg)")
        .flag("--quick", "default model, N = 1, 2, 4, P = 64: checks that everything runs")
        .flag("--json", "print one JSON object");
    add_plot_options(args, false);
    add_threads_option(args);
    if (!args.parse(argc, argv)) return 0;
    const std::optional<std::string> chart = args.text("--chart");
    if (args.has("--scale") && !chart) throw UsageError("--scale sets the size of the --chart PNG: give --chart FILE");
    OutputSet outputs;
    const PlotOutput chart_out = chart ? check_chart_output(args, "--chart", *chart, &outputs) : PlotOutput{};
    const bool quick = args.has("--quick");
    SharingSettings settings;
    settings.threads = int(args.integer("--threads", default_thread_count(), 1, 256));
    settings.repeat = args.integer("--repeat", quick ? 1 : 3, 1, 1000);
    std::vector<int64_t>& counts = settings.sequences;
    counts = parse_id_list(args.text("--sequences").value_or(quick ? "1,2,4" : "1,2,4,8,16,32"), "--sequences");
    for (int64_t n : counts)
        if (n < 1 || n > 4096) throw UsageError("--sequences: each count must be in 1..4096, got " + std::to_string(n));
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    settings.prefix_tokens = args.integer("--prefix-tokens", quick ? 64 : 512, 1, 1 << 20);
    settings.suffix_tokens = args.integer("--suffix-tokens", 16, 1, 1 << 20);
    settings.new_tokens = args.integer("--new-tokens", quick ? 2 : 4, 1, 1 << 20);
    settings.block_size = option_integer(args, "block_size", 16);
    settings.ring_up_to = args.integer("--ring-up-to", quick ? 4096 : 8, 0, 4096);
    settings.model_dir = bench_model_dir(args, outputs);
    settings.format = weight_format_from(args);
    settings.placement = weight_placement_from(args);

    const SharingReport report = run_sharing(settings);
    if (chart) write_chart(report, *chart, chart_out);
    if (args.has("--json"))
        print_json(report);
    else
        print_text(report);
    return 0;
}

}  // namespace kvscope
