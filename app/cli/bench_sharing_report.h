#pragma once
// What `kvscope bench --sharing` measured, and its printers: cli_bench_sharing.cpp computes a SharingReport;
// these only read it.
//
//   Layout, kLayouts, layout_name(l) shared / paged / ring: the three ways the same work runs
//   SharingRun                       one layout at one N: KV held vs ideal, RSS, prefill work and time
//   PromptFileFigures                the prompt cache file: size, write, read, restore, prefill with it
//   SharingReport                    the settings, every run and the file's figures
//   r.find(n, layout)                the run of that layout at N sequences, or nullptr
//   print_text(r, out)               the tables docs/benchmarks.md quotes
//   print_json(r, out)               one JSON object
//   write_chart(r, path, out)        PNG or SVG: KV memory held and prefill time vs N, per layout
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "report/plot.h"

namespace kvscope {

enum class Layout {
    Shared,  // paged cache, one pool, prefix sharing: later sequences map the prefix's blocks
    Paged,   // paged cache, one pool, no sharing: every sequence computes and stores its whole prompt
    Ring,    // the contiguous cache: every sequence preallocates prompt + new tokens
};
inline constexpr Layout kLayouts[] = {Layout::Shared, Layout::Paged, Layout::Ring};
const char* layout_name(Layout l);

// Figures of one layout at one N. Positions are summed over the sequences; "ideal" is the prefix once +
// every sequence's own positions, in bytes.
struct SharingRun {
    Layout layout = Layout::Shared;
    int64_t n_seq = 0;
    int64_t positions_prefill = 0, positions_end = 0;      // cache positions after the prefill / the decode
    int64_t kv_bytes_prefill = 0, kv_bytes_end = 0;        // KV storage held at those moments
    int64_t ideal_bytes_prefill = 0, ideal_bytes_end = 0;  // what an ideal shared cache holds then
    int64_t blocks_prefill = 0, blocks_end = 0;            // distinct pool blocks in use (paged layouts)
    int64_t rss_kv_bytes = 0;                              // resident bytes added beyond the workspaces
    int64_t prefill_computed = 0, prefill_skipped = 0;     // prompt positions run through the model / mapped
    int64_t copies_on_write = 0;
    double prefill_seconds = 0, prefill_flops = 0, decode_seconds = 0;
};

// The prompt cache file: computing the prefix, writing it, reading it back, restoring it into a cache,
// and a prompt of prefix + suffix prefilled from scratch vs with the file (Stats in seconds).
struct PromptFileFigures {
    int64_t positions = 0, file_bytes = 0;
    double fingerprint_seconds = 0, write_seconds = 0;
    Stats compute_prefix, read, restore, full_prompt, with_file;
    int64_t n_prompt = 0;
    bool same_token = false;  // the prompt's first new token is the same with and without the file
};

struct SharingReport {
    // settings
    std::string model_dir;
    int threads = 0;
    int64_t repeat = 0;                    // R: runs per prompt-file figure
    std::vector<int64_t> sequences;        // the N run, ascending
    int64_t prefix_tokens = 0, suffix_tokens = 0, new_tokens = 0;  // P, S, tokens generated per sequence
    int64_t block_size = 0;                // B
    int64_t kv_bytes_per_position = 0;
    int64_t ring_up_to = 0;                // the ring layout runs only up to this N
    // figures
    bool tokens_agree = true;              // every layout generated the same tokens at every N
    std::vector<SharingRun> runs;          // by N, then layout
    PromptFileFigures prompt_file;

    const SharingRun* find(int64_t n_seq, Layout layout) const;
};

void print_text(const SharingReport& r, FILE* out = stdout);
void print_json(const SharingReport& r, FILE* out = stdout);
void write_chart(const SharingReport& r, const std::string& path, const PlotOutput& out);

}  // namespace kvscope
