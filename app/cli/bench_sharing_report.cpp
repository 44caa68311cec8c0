// Printers of `kvscope bench --sharing`: text, JSON and the memory / prefill-time chart, each reading only a
// SharingReport.
#include "bench_sharing_report.h"

#include "io/json_write.h"
#include "report/plot.h"

namespace kvscope {
namespace {

std::string mb_text(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", bytes / 1e6);
    return buf;
}

}  // namespace

const char* layout_name(Layout l) {
    switch (l) {
        case Layout::Shared: return "shared";
        case Layout::Paged: return "paged";
        case Layout::Ring: return "ring";
    }
    return "?";
}

const SharingRun* SharingReport::find(int64_t n_seq, Layout layout) const {
    for (const SharingRun& r : runs)
        if (r.n_seq == n_seq && r.layout == layout) return &r;
    return nullptr;
}

void print_text(const SharingReport& r, FILE* out) {
    const int64_t B = r.block_size;
    std::fprintf(out, "kvscope bench --sharing — %s, %d threads\n", r.model_dir.c_str(), r.threads);
    std::fprintf(out, "each sequence: a shared prefix of %lld tokens + its own %lld-token suffix, then %lld new tokens; "
                      "blocks of %lld positions (%s MB each); KV %.1f KiB per position\n\n",
                 (long long)r.prefix_tokens, (long long)r.suffix_tokens, (long long)r.new_tokens, (long long)B,
                 mb_text(double(B * r.kv_bytes_per_position)).c_str(), double(r.kv_bytes_per_position) / 1024);
    std::fprintf(out, "%4s  %-7s | %-26s | %-26s | %8s | %-26s\n", "", "", "KV MB after prefill", "KV MB at the end",
                 "RSS MB", "prefill");
    std::fprintf(out, "%4s  %-7s | %8s %8s %8s | %8s %8s %8s | %8s | %8s %8s %9s %8s\n", "N", "layout", "held", "ideal",
                 "ratio", "held", "ideal", "ratio", "KV, end", "computed", "skipped", "seconds", "GFLOP");
    for (const SharingRun& run : r.runs) {
        const double ideal_p = double(run.ideal_bytes_prefill), ideal_e = double(run.ideal_bytes_end);
        std::fprintf(out, "%4lld  %-7s | %8s %8s %8.3f | %8s %8s %8.3f | %8s | %8lld %8lld %9.3f %8.1f\n",
                     (long long)run.n_seq, layout_name(run.layout), mb_text(double(run.kv_bytes_prefill)).c_str(),
                     mb_text(ideal_p).c_str(), double(run.kv_bytes_prefill) / ideal_p,
                     mb_text(double(run.kv_bytes_end)).c_str(), mb_text(ideal_e).c_str(),
                     double(run.kv_bytes_end) / ideal_e, mb_text(double(run.rss_kv_bytes)).c_str(),
                     (long long)run.prefill_computed, (long long)run.prefill_skipped, run.prefill_seconds,
                     run.prefill_flops / 1e9);
    }
    std::fprintf(out, "\nideal = (prefix once + every sequence's own positions) x %lld bytes; 'at the end' includes the "
                      "%lld new tokens, each sequence's last block only partly full. RSS of KV = resident bytes the run "
                      "added by the end, minus its workspaces. Ring run up to N = %lld (--ring-up-to). Generated tokens "
                      "equal in every layout: %s.\n",
                 (long long)r.kv_bytes_per_position, (long long)r.new_tokens, (long long)r.ring_up_to,
                 r.tokens_agree ? "yes" : "NO");
    // The acceptance figure of issue 6 (N = 16), and the largest N.
    std::vector<int64_t> summary;
    if (r.find(16, Layout::Shared)) summary.push_back(16);
    if (r.sequences.back() != 16) summary.push_back(r.sequences.back());
    for (int64_t n : summary) {
        const SharingRun* s = r.find(n, Layout::Shared);
        const SharingRun* u = r.find(n, Layout::Paged);
        const double ideal = double(s->ideal_bytes_prefill);
        std::fprintf(out, "N = %lld sharing: KV %s MB after the prefill = %.3f x the ideal %s MB (unshared: %s MB); "
                          "prefill computed %lld positions and mapped %lld (the prefix computed once, not %lld times), "
                          "%.1f of %.1f GFLOP, %.2f s vs %.2f s unshared.\n",
                     (long long)n, mb_text(double(s->kv_bytes_prefill)).c_str(), double(s->kv_bytes_prefill) / ideal,
                     mb_text(ideal).c_str(), mb_text(double(u->kv_bytes_prefill)).c_str(),
                     (long long)s->prefill_computed, (long long)s->prefill_skipped, (long long)n,
                     s->prefill_flops / 1e9, u->prefill_flops / 1e9, s->prefill_seconds, u->prefill_seconds);
    }
    const PromptFileFigures& pf = r.prompt_file;
    std::fprintf(out, "\nprompt cache file, %lld positions: %s MB; model fingerprint %.3f s (once per model), write "
                      "%.3f s\n",
                 (long long)pf.positions, mb_text(double(pf.file_bytes)).c_str(), pf.fingerprint_seconds,
                 pf.write_seconds);
    std::fprintf(out, "%-56s %s\n", "figure (min / median / max of runs, ms)", "");
    std::fprintf(out, "%-56s %s\n", ("compute the " + std::to_string(pf.positions) + "-token prefix").c_str(),
                 stats_text(pf.compute_prefix, "%.1f", 1e3).c_str());
    std::fprintf(out, "%-56s %s\n", "read the file (parse + checksum)", stats_text(pf.read, "%.1f", 1e3).c_str());
    std::fprintf(out, "%-56s %s\n", "restore its rows into an empty cache", stats_text(pf.restore, "%.1f", 1e3).c_str());
    std::fprintf(out, "%-56s %s\n", ("prefill a " + std::to_string(pf.n_prompt) + "-token prompt from scratch").c_str(),
                 stats_text(pf.full_prompt, "%.1f", 1e3).c_str());
    std::fprintf(out, "%-56s %s  (%.1fx faster; same first token: %s)\n",
                 "the same prompt with the file (read + restore + rest)", stats_text(pf.with_file, "%.1f", 1e3).c_str(),
                 pf.full_prompt.median / pf.with_file.median, pf.same_token ? "yes" : "NO");
}

void print_json(const SharingReport& r, FILE* out) {
    JsonOut runs = JsonOut::array();
    for (const SharingRun& run : r.runs)
        runs.push_back({{"sequences", run.n_seq},
                        {"layout", layout_name(run.layout)},
                        {"positions_after_prefill", run.positions_prefill},
                        {"kv_bytes_after_prefill", run.kv_bytes_prefill},
                        {"ideal_bytes_after_prefill", run.ideal_bytes_prefill},
                        {"ratio_after_prefill", double(run.kv_bytes_prefill) / double(run.ideal_bytes_prefill)},
                        {"blocks_after_prefill", run.blocks_prefill},
                        {"positions_at_end", run.positions_end},
                        {"kv_bytes_at_end", run.kv_bytes_end},
                        {"ideal_bytes_at_end", run.ideal_bytes_end},
                        {"ratio_at_end", double(run.kv_bytes_end) / double(run.ideal_bytes_end)},
                        {"blocks_at_end", run.blocks_end},
                        {"rss_kv_bytes", run.rss_kv_bytes},
                        {"prefill_positions_computed", run.prefill_computed},
                        {"prefill_positions_skipped", run.prefill_skipped},
                        {"prefill_seconds", run.prefill_seconds},
                        {"prefill_flops", run.prefill_flops},
                        {"decode_seconds", run.decode_seconds},
                        {"copies_on_write", run.copies_on_write}});
    const PromptFileFigures& pf = r.prompt_file;
    const JsonOut j = {{"model", r.model_dir},
                       {"threads", r.threads},
                       {"repeat", r.repeat},
                       {"prefix_tokens", r.prefix_tokens},
                       {"suffix_tokens", r.suffix_tokens},
                       {"new_tokens", r.new_tokens},
                       {"block_size", r.block_size},
                       {"kv_bytes_per_position", r.kv_bytes_per_position},
                       {"ring_up_to", r.ring_up_to},
                       {"tokens_agree", r.tokens_agree},
                       {"runs", runs},
                       {"prompt_file", {{"positions", pf.positions},
                                        {"file_bytes", pf.file_bytes},
                                        {"fingerprint_seconds", pf.fingerprint_seconds},
                                        {"write_seconds", pf.write_seconds},
                                        {"compute_prefix_seconds", pf.compute_prefix},
                                        {"read_seconds", pf.read},
                                        {"restore_seconds", pf.restore},
                                        {"prompt_tokens", pf.n_prompt},
                                        {"prefill_prompt_seconds", pf.full_prompt},
                                        {"prefill_prompt_with_file_seconds", pf.with_file},
                                        {"same_first_token", pf.same_token}}}};
    std::fprintf(out, "%s\n", json_text(j, 2).c_str());
}

void write_chart(const SharingReport& r, const std::string& path, const PlotOutput& out) {
    const std::array<uint8_t, 3> colors[] = {{33, 102, 172}, {214, 96, 77}, {120, 120, 120}};
    LineChart memory{"KV memory held", "sequences N", "MB", {}, false, true};
    LineChart time{"prefill wall time", "sequences N", "seconds", {}, false, true};
    // The ideal first, so the shared line (equal to it after the prefill) is drawn over it.
    LineSeries ideal{"ideal: prefix once + own positions", {60, 170, 90}, {}, {}};
    LineSeries shared_end{"paged, prefix shared, at the end", {140, 190, 230}, {}, {}};
    for (int64_t n : r.sequences) {
        const SharingRun& run = *r.find(n, Layout::Shared);
        ideal.xs.push_back(double(n));
        ideal.ys.push_back(double(run.ideal_bytes_prefill) / 1e6);
        shared_end.xs.push_back(double(n));
        shared_end.ys.push_back(double(run.kv_bytes_end) / 1e6);
    }
    memory.series.push_back(ideal);
    memory.series.push_back(shared_end);
    for (Layout l : kLayouts) {
        const std::string label = l == Layout::Shared ? "paged, prefix shared"
                                  : l == Layout::Paged ? "paged, not shared" : "contiguous ring";
        LineSeries m{label + (l == Layout::Shared ? ", after prefill" : ""), colors[int(l)], {}, {}};
        LineSeries s{label, colors[int(l)], {}, {}};
        for (int64_t n : r.sequences) {
            const SharingRun* run = r.find(n, l);
            if (!run) continue;
            m.xs.push_back(double(n));
            m.ys.push_back(double(run->kv_bytes_prefill) / 1e6);
            s.xs.push_back(double(n));
            s.ys.push_back(run->prefill_seconds);
        }
        memory.series.push_back(m);
        time.series.push_back(s);
    }
    write_line_charts(path, {memory, time}, out);
}

}  // namespace kvscope
