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
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "cli_commands.h"
#include "cli_common.h"
#include "clock.h"
#include "errors.h"
#include "json.h"
#include "npy.h"
#include "plot.h"
#include "prompt_cache.h"
#include "session_group.h"
#include "thread_pool.h"

namespace kvscope {
namespace {

enum class Layout { Shared, Paged, Ring };
constexpr Layout kLayouts[] = {Layout::Shared, Layout::Paged, Layout::Ring};

const char* layout_name(Layout l) {
    switch (l) {
        case Layout::Shared: return "shared";
        case Layout::Paged: return "paged";
        case Layout::Ring: return "ring";
    }
    return "?";
}

struct Workload {
    std::vector<TokenId> prefix;                // (P)
    std::vector<std::vector<TokenId>> suffixes; // (N_max, S) one per sequence
    int64_t n_new = 0;                          // tokens generated per sequence (the first by the prefill)
    int64_t block_size = 0;                     // B
};

// Figures of one layout at one N. Positions are summed over the sequences.
struct Run {
    Layout layout = Layout::Shared;
    int64_t n_seq = 0;
    int64_t positions_prefill = 0, positions_end = 0;  // cache positions after the prefill / the decode
    int64_t kv_bytes_prefill = 0, kv_bytes_end = 0;    // KV storage held at those moments
    int64_t blocks_prefill = 0, blocks_end = 0;        // distinct pool blocks in use (paged layouts)
    int64_t prefill_computed = 0, prefill_skipped = 0; // prompt positions run through the model / mapped
    int64_t copies_on_write = 0;
    double prefill_seconds = 0, prefill_flops = 0, decode_seconds = 0;
    double rss_kv_bytes = 0;  // resident bytes the run added beyond the sessions' workspaces
    std::vector<std::vector<TokenId>> generated;  // (N, n_new) to check the layouts agree
};

std::vector<TokenId> random_tokens(int64_t n_vocab, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<TokenId> ids(static_cast<size_t>(n));
    for (TokenId& t : ids) t = TokenId(rng() % uint32_t(n_vocab));
    return ids;
}

// Resident set size of this process now, from /proc/self/statm.
double rss_bytes() {
    long pages_total = 0, pages_resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
        std::fclose(f);
    }
    return double(pages_resident) * double(sysconf(_SC_PAGESIZE));
}

double settled_rss() {
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
double workspace_rss(std::shared_ptr<const Model> model, const Workload& w, int64_t n_seq) {
    const double before = settled_rss();
    auto group = make_group(std::move(model), w, Layout::Paged, n_seq);
    return rss_bytes() - before;
}

Run run_layout(std::shared_ptr<const Model> model, const Workload& w, Layout layout, int64_t n_seq,
               double workspace_bytes) {
    Run r;
    r.layout = layout;
    r.n_seq = n_seq;
    const double rss_before = settled_rss();
    auto group = make_group(model, w, layout, n_seq);

    // Prefill: the whole prompt in one step per sequence. The first sharing sequence goes alone (so the
    // others find its blocks); the rest run as one batch.
    const double t0 = seconds_now();
    while (group->next() == Session::Next::Prefill) group->step();
    r.prefill_seconds = seconds_now() - t0;
    for (const Session* s : group->sessions()) {
        const StepRecord& rec = *s->latest();  // each session's one prefill step
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
    for (const Session* s : group->sessions()) r.generated.push_back(s->generated());
    return r;
}

// Prefix once + every sequence's own positions: what an ideal shared cache holds, in bytes.
int64_t ideal_bytes(int64_t positions, int64_t n_seq, int64_t prefix, int64_t bytes_per_position) {
    return (positions - (n_seq - 1) * prefix) * bytes_per_position;
}

// The prompt cache file: computing the prefix, writing it, reading it back, restoring it into a cache,
// and a prompt of prefix + suffix prefilled from scratch vs with the file.
struct FileFigures {
    int64_t positions = 0, file_bytes = 0;
    double fingerprint_seconds = 0, write_seconds = 0;
    Stats compute_prefix, read, restore, full_prompt, with_file;
    int64_t n_prompt = 0;
    bool same_token = false;  // the prompt's first new token is the same with and without the file
};

FileFigures bench_prompt_file(std::shared_ptr<const Model> model, const Workload& w, int64_t R,
                              const std::string& path) {
    FileFigures f;
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
        computed_token = s.generated().at(0);
        return seconds_now() - t0;
    });
    f.with_file = repeat(R, [&] {  // read the file, restore the prefix, compute the suffix
        const double t0 = seconds_now();
        Session s(model, o);
        s.use_prompt_cache(std::make_shared<const PromptCache>(read_prompt_cache(path, fp)));
        s.set_prompt(prompt);
        s.step();
        loaded_token = s.generated().at(0);
        return seconds_now() - t0;
    });
    f.same_token = computed_token == loaded_token;
    return f;
}

std::string mb_text(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", bytes / 1e6);
    return buf;
}

}  // namespace

int cli_bench_sharing(int argc, char** argv) {
    CliArgs args("bench --sharing",
                 "KV memory and prefill work for N sequences sharing a prompt prefix: paged with sharing, paged "
                 "without, the contiguous ring; and a prompt cache file vs computing the prefix.");
    add_model_option(args);
    args.flag("--sharing", "this benchmark (instead of the speed benchmark)")
        .flag("--gpt2-shape", "random weights of GPT-2 124M's shape (written once to --work)")
        .option("--work", "DIR", "folder for --gpt2-shape's weights (default: kvscope-bench-model)")
        .option("--sequences", "LIST", "numbers of sequences, e.g. 1,2,4 (default 1,2,4,8,16,32)")
        .option("--prefix-tokens", "P", "shared prefix length (default 512)")
        .option("--suffix-tokens", "S", "each sequence's own prompt tokens after the prefix (default 16)")
        .option("--new-tokens", "N", "tokens each sequence generates, the first by the prefill (default 4)")
        .option("--block-size", "B", "positions per block of the paged layouts (default 16)")
        .option("--ring-up-to", "N", "run the ring layout only up to N sequences (default 8: it computes what "
                                     "'paged' computes, at the same cost, and holds as much)")
        .option("--repeat", "R", "runs per prompt-cache-file figure, min / median / max (default 3)")
        .option("--chart", "FILE.png", "write KV memory and prefill time vs N, with and without sharing")
        .flag("--quick", "default model, N = 1, 2, 4, P = 64: checks that everything runs")
        .flag("--json", "print one JSON object");
    add_threads_option(args);
    if (!args.parse(argc, argv)) return 0;
    if (auto chart = args.text("--chart")) ensure_writable(*chart);
    const bool quick = args.has("--quick");
    const int threads = int(args.integer("--threads", default_thread_count(), 1, 256));
    const int64_t R = args.integer("--repeat", quick ? 1 : 3, 1, 1000);
    std::vector<int64_t> counts = parse_id_list(args.text("--sequences").value_or(quick ? "1,2,4" : "1,2,4,8,16,32"),
                                                "--sequences");
    for (int64_t n : counts)
        if (n < 1 || n > 4096) throw UsageError("--sequences: each count must be in 1..4096, got " + std::to_string(n));
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    const int64_t P = args.integer("--prefix-tokens", quick ? 64 : 512, 1, 1 << 20);
    const int64_t S = args.integer("--suffix-tokens", 16, 1, 1 << 20);
    const int64_t n_new = args.integer("--new-tokens", quick ? 2 : 4, 1, 1 << 20);
    const int64_t B = args.integer("--block-size", 16, 1, 1 << 16);
    const int64_t ring_up_to = args.integer("--ring-up-to", quick ? 4096 : 8, 0, 4096);

    const std::string model_dir = bench_model_dir(args);
    ThreadPool::global().set_threads(threads);
    // Freed buffers go back to the system at once, so each run's RSS starts from the same floor.
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_TRIM_THRESHOLD, 256 * 1024);
    const std::shared_ptr<const Model> model = Model::load(model_dir, weight_format_from(args));
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
    w.block_size = B;
    const int64_t bytes_per_position = 2 * c.n_layer * c.n_embd * (model->weights().bf16 ? 2 : 4);  // KV dtype = weights

    {  // page the weights in, so the first run's RSS does not count them
        SessionOptions o;
        o.history = o.record = false;
        o.max_new_tokens = 1;
        Session s(model, o);
        s.set_prompt(w.prefix);
        s.step();
    }

    int64_t n_total = 1;
    for (int64_t n : counts) n_total += n <= ring_up_to ? 3 : 2;
    Progress progress("bench --sharing", n_total);
    std::vector<Run> runs;
    int64_t n_done = 0;
    bool tokens_agree = true;
    for (int64_t n : counts) {
        const double ws_bytes = workspace_rss(model, w, n);
        const size_t first = runs.size();
        for (Layout layout : kLayouts) {
            if (layout == Layout::Ring && n > ring_up_to) continue;
            runs.push_back(run_layout(model, w, layout, n, ws_bytes));
            if (runs.back().generated != runs[first].generated) tokens_agree = false;
            progress.update(++n_done);
        }
    }
    const std::string file = (std::filesystem::temp_directory_path() /
                              ("kvscope-bench-sharing-" + std::to_string(getpid()) + ".kvprompt")).string();
    FileFigures pf;
    try {
        pf = bench_prompt_file(model, w, R, file);
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove(file, ec);
        throw;
    }
    std::error_code ec;
    std::filesystem::remove(file, ec);
    progress.update(++n_done);

    auto find = [&](int64_t n, Layout l) -> const Run* {
        for (const Run& r : runs)
            if (r.n_seq == n && r.layout == l) return &r;
        return nullptr;
    };

    if (auto chart = args.text("--chart")) {
        const std::array<uint8_t, 3> colors[] = {{33, 102, 172}, {214, 96, 77}, {120, 120, 120}};
        LineChart memory{"KV memory held", "sequences N", "MB", {}, false, true};
        LineChart time{"prefill wall time", "sequences N", "seconds", {}, false, true};
        // The ideal first, so the shared line (equal to it after the prefill) is drawn over it.
        LineSeries ideal{"ideal: prefix once + own positions", {60, 170, 90}, {}, {}};
        LineSeries shared_end{"paged, prefix shared, at the end", {140, 190, 230}, {}, {}};
        for (int64_t n : counts) {
            const Run& r = *find(n, Layout::Shared);
            ideal.xs.push_back(double(n));
            ideal.ys.push_back(double(ideal_bytes(r.positions_prefill, n, P, bytes_per_position)) / 1e6);
            shared_end.xs.push_back(double(n));
            shared_end.ys.push_back(double(r.kv_bytes_end) / 1e6);
        }
        memory.series.push_back(ideal);
        memory.series.push_back(shared_end);
        for (Layout l : kLayouts) {
            const std::string label = l == Layout::Shared ? "paged, prefix shared"
                                      : l == Layout::Paged ? "paged, not shared" : "contiguous ring";
            LineSeries m{label + (l == Layout::Shared ? ", after prefill" : ""), colors[int(l)], {}, {}};
            LineSeries s{label, colors[int(l)], {}, {}};
            for (int64_t n : counts) {
                if (!find(n, l)) continue;
                const Run& r = *find(n, l);
                m.xs.push_back(double(n));
                m.ys.push_back(double(r.kv_bytes_prefill) / 1e6);
                s.xs.push_back(double(n));
                s.ys.push_back(r.prefill_seconds);
            }
            memory.series.push_back(m);
            time.series.push_back(s);
        }
        write_line_charts_png(*chart, {memory, time});
    }

    if (args.has("--json")) {
        std::string rows;
        for (const Run& r : runs) {
            const int64_t ideal_p = ideal_bytes(r.positions_prefill, r.n_seq, P, bytes_per_position);
            const int64_t ideal_e = ideal_bytes(r.positions_end, r.n_seq, P, bytes_per_position);
            char ratio_p[32], ratio_e[32], num[4][32];
            std::snprintf(ratio_p, sizeof ratio_p, "%.4f", double(r.kv_bytes_prefill) / double(ideal_p));
            std::snprintf(ratio_e, sizeof ratio_e, "%.4f", double(r.kv_bytes_end) / double(ideal_e));
            std::snprintf(num[0], sizeof num[0], "%.6g", r.prefill_seconds);
            std::snprintf(num[1], sizeof num[1], "%.6g", r.prefill_flops);
            std::snprintf(num[2], sizeof num[2], "%.6g", r.decode_seconds);
            std::snprintf(num[3], sizeof num[3], "%.0f", r.rss_kv_bytes);
            rows += std::string(rows.empty() ? "" : ",\n  ") +
                    json_object({{"sequences", std::to_string(r.n_seq)},
                                 {"layout", json_escape(layout_name(r.layout))},
                                 {"positions_after_prefill", std::to_string(r.positions_prefill)},
                                 {"kv_bytes_after_prefill", std::to_string(r.kv_bytes_prefill)},
                                 {"ideal_bytes_after_prefill", std::to_string(ideal_p)},
                                 {"ratio_after_prefill", ratio_p},
                                 {"blocks_after_prefill", std::to_string(r.blocks_prefill)},
                                 {"positions_at_end", std::to_string(r.positions_end)},
                                 {"kv_bytes_at_end", std::to_string(r.kv_bytes_end)},
                                 {"ideal_bytes_at_end", std::to_string(ideal_e)},
                                 {"ratio_at_end", ratio_e},
                                 {"blocks_at_end", std::to_string(r.blocks_end)},
                                 {"rss_kv_bytes", num[3]},
                                 {"prefill_positions_computed", std::to_string(r.prefill_computed)},
                                 {"prefill_positions_skipped", std::to_string(r.prefill_skipped)},
                                 {"prefill_seconds", num[0]},
                                 {"prefill_flops", num[1]},
                                 {"decode_seconds", num[2]},
                                 {"copies_on_write", std::to_string(r.copies_on_write)}});
        }
        const std::string prompt_file = json_object(
            {{"positions", std::to_string(pf.positions)},
             {"file_bytes", std::to_string(pf.file_bytes)},
             {"fingerprint_seconds", std::to_string(pf.fingerprint_seconds)},
             {"write_seconds", std::to_string(pf.write_seconds)},
             {"compute_prefix_seconds", stats_json(pf.compute_prefix)},
             {"read_seconds", stats_json(pf.read)},
             {"restore_seconds", stats_json(pf.restore)},
             {"prompt_tokens", std::to_string(pf.n_prompt)},
             {"prefill_prompt_seconds", stats_json(pf.full_prompt)},
             {"prefill_prompt_with_file_seconds", stats_json(pf.with_file)},
             {"same_first_token", pf.same_token ? "true" : "false"}});
        std::printf("{\"model\": %s, \"threads\": %d, \"repeat\": %lld, \"prefix_tokens\": %lld, "
                    "\"suffix_tokens\": %lld, \"new_tokens\": %lld, \"block_size\": %lld, "
                    "\"kv_bytes_per_position\": %lld, \"ring_up_to\": %lld, \"tokens_agree\": %s,\n \"runs\": [\n  %s],\n"
                    " \"prompt_file\": %s}\n",
                    json_escape(model_dir).c_str(), threads, (long long)R, (long long)P, (long long)S,
                    (long long)n_new, (long long)B, (long long)bytes_per_position, (long long)ring_up_to,
                    tokens_agree ? "true" : "false",
                    rows.c_str(), prompt_file.c_str());
        return 0;
    }

    std::printf("kvscope bench --sharing — %s, %d threads\n", model_dir.c_str(), threads);
    std::printf("each sequence: a shared prefix of %lld tokens + its own %lld-token suffix, then %lld new tokens; "
                "blocks of %lld positions (%s MB each); KV %.1f KiB per position\n\n",
                (long long)P, (long long)S, (long long)n_new, (long long)B,
                mb_text(double(B * bytes_per_position)).c_str(), double(bytes_per_position) / 1024);
    std::printf("%4s  %-7s | %-26s | %-26s | %8s | %-26s\n", "", "", "KV MB after prefill", "KV MB at the end",
                "RSS MB", "prefill");
    std::printf("%4s  %-7s | %8s %8s %8s | %8s %8s %8s | %8s | %8s %8s %9s %8s\n", "N", "layout", "held", "ideal",
                "ratio", "held", "ideal", "ratio", "KV, end", "computed", "skipped", "seconds", "GFLOP");
    for (const Run& r : runs) {
        const double ideal_p = double(ideal_bytes(r.positions_prefill, r.n_seq, P, bytes_per_position));
        const double ideal_e = double(ideal_bytes(r.positions_end, r.n_seq, P, bytes_per_position));
        std::printf("%4lld  %-7s | %8s %8s %8.3f | %8s %8s %8.3f | %8s | %8lld %8lld %9.3f %8.1f\n", (long long)r.n_seq,
                    layout_name(r.layout), mb_text(double(r.kv_bytes_prefill)).c_str(), mb_text(ideal_p).c_str(),
                    double(r.kv_bytes_prefill) / ideal_p, mb_text(double(r.kv_bytes_end)).c_str(), mb_text(ideal_e).c_str(),
                    double(r.kv_bytes_end) / ideal_e, mb_text(r.rss_kv_bytes).c_str(), (long long)r.prefill_computed,
                    (long long)r.prefill_skipped, r.prefill_seconds, r.prefill_flops / 1e9);
    }
    std::printf("\nideal = (prefix once + every sequence's own positions) x %lld bytes; 'at the end' includes the "
                "%lld new tokens, each sequence's last block only partly full. RSS of KV = resident bytes the run "
                "added by the end, minus its workspaces. Ring run up to N = %lld (--ring-up-to). Generated tokens "
                "equal in every layout: %s.\n",
                (long long)bytes_per_position, (long long)n_new, (long long)ring_up_to, tokens_agree ? "yes" : "NO");
    // The acceptance figure of issue 6 (N = 16), and the largest N.
    std::vector<int64_t> summary;
    if (find(16, Layout::Shared)) summary.push_back(16);
    if (counts.back() != 16) summary.push_back(counts.back());
    for (int64_t n : summary) {
        const Run* r = find(n, Layout::Shared);
        const Run* u = find(n, Layout::Paged);
        const double ideal = double(ideal_bytes(r->positions_prefill, n, P, bytes_per_position));
        std::printf("N = %lld sharing: KV %s MB after the prefill = %.3f x the ideal %s MB (unshared: %s MB); prefill "
                    "computed %lld positions and mapped %lld (the prefix computed once, not %lld times), %.1f of %.1f "
                    "GFLOP, %.2f s vs %.2f s unshared.\n",
                    (long long)n, mb_text(double(r->kv_bytes_prefill)).c_str(), double(r->kv_bytes_prefill) / ideal,
                    mb_text(ideal).c_str(), mb_text(double(u->kv_bytes_prefill)).c_str(), (long long)r->prefill_computed,
                    (long long)r->prefill_skipped, (long long)n, r->prefill_flops / 1e9, u->prefill_flops / 1e9,
                    r->prefill_seconds, u->prefill_seconds);
    }
    std::printf("\nprompt cache file, %lld positions: %s MB; model fingerprint %.3f s (once per model), write %.3f s\n",
                (long long)pf.positions, mb_text(double(pf.file_bytes)).c_str(), pf.fingerprint_seconds,
                pf.write_seconds);
    std::printf("%-56s %s\n", "figure (min / median / max of runs, ms)", "");
    std::printf("%-56s %s\n", ("compute the " + std::to_string(pf.positions) + "-token prefix").c_str(),
                stats_text(pf.compute_prefix, "%.1f", 1e3).c_str());
    std::printf("%-56s %s\n", "read the file (parse + checksum)", stats_text(pf.read, "%.1f", 1e3).c_str());
    std::printf("%-56s %s\n", "restore its rows into an empty cache", stats_text(pf.restore, "%.1f", 1e3).c_str());
    std::printf("%-56s %s\n", ("prefill a " + std::to_string(pf.n_prompt) + "-token prompt from scratch").c_str(),
                stats_text(pf.full_prompt, "%.1f", 1e3).c_str());
    std::printf("%-56s %s  (%.1fx faster; same first token: %s)\n", "the same prompt with the file (read + restore + rest)",
                stats_text(pf.with_file, "%.1f", 1e3).c_str(), pf.full_prompt.median / pf.with_file.median,
                pf.same_token ? "yes" : "NO");
    return 0;
}

}  // namespace kvscope
