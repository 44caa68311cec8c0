#include "kv.h"

#include <cstdio>

#include "common.h"


namespace kvscope {
namespace {

std::string mb(int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MB", double(bytes) / 1e6);
    return buf;
}

}  // namespace

JsonOut kv_report_json(const SessionGroup& group) {
    const GroupMemory f = group.memory();
    JsonOut cache_file;  // null without a prompt cache file
    if (const auto& pc = group.prompt_cache_file())
        cache_file = {{"path", pc->path},
                      {"read_only", pc->read_only},
                      {"existed", pc->existed},
                      {"loaded_positions", f.cache_file_positions},
                      {"written", pc->written},
                      {"written_positions", pc->written_positions},
                      {"left_because", pc->written ? JsonOut() : JsonOut(left_reason(pc->left))}};
    return {{"sequences", f.sequences},
            {"positions", f.positions},
            {"paged", f.paged},
            {"block_size", f.block_size},
            {"blocks_mapped", f.blocks_mapped},
            {"blocks_distinct", f.blocks_distinct},
            {"blocks_shared", f.blocks_shared},
            {"bytes", f.bytes},
            // stored now: a sliding layer only its window plus the chunk being written (per layer for sequence 0)
            {"bytes_held", f.bytes_held},
            {"layer_positions_held", f.layer_positions_held},
            // the paged cache and int4 keep a model's sliding layers whole: why (null when they store their window)
            {"sliding_layers_keep_every_position", f.sliding_kept_whole.empty() ? JsonOut() : JsonOut(f.sliding_kept_whole)},
            {"bytes_unshared", f.bytes_unshared},
            {"bytes_saved", f.bytes_unshared - f.bytes},
            {"prefill_positions_shared", f.shared_positions},
            {"copies_on_write", f.copies_on_write},
            {"format", f.kv_format},
            {"bytes_per_token", f.bytes_per_position},
            // int4: bytes = packed + the float32 residual of the newest positions (null for other formats)
            {"int4", f.kv_format == "int4" ? JsonOut{{"bytes_packed", f.bytes - f.bytes_residual},
                                                     {"bytes_residual", f.bytes_residual},
                                                     {"residual_slots", f.residual_slots}}
                                           : JsonOut()},
            {"prompt_cache", cache_file}};
}

void print_kv_report(const SessionGroup& group) {
    const GroupMemory f = group.memory();
    if (f.kv_format == "int4")  // KIVI keeps the newest positions in float32 beside the packed rows
        std::fprintf(stderr, "kv: int4 rows, %lld bytes per packed token, plus a float32 residual of %s per sequence "
                             "(%s of the %s held)\n",
                     (long long)f.bytes_per_position, count_of(f.residual_slots, "position", "positions").c_str(),
                     mb(f.bytes_residual).c_str(), mb(f.bytes).c_str());
    else if (f.kv_format != "f32" && f.kv_format != "bf16")
        std::fprintf(stderr, "kv: %s rows, %lld bytes per token\n", f.kv_format.c_str(), (long long)f.bytes_per_position);
    if (!f.layer_window.empty()) {  // the model's sliding layers store only their window
        std::string held;
        for (size_t il = 0; il < f.layer_positions_held.size(); ++il) {
            if (il) held += ' ';
            held += std::to_string(f.layer_positions_held[il]);
        }
        std::fprintf(stderr, "kv: sliding layers store only their window plus the chunk being written: %s held "
                             "(positions per layer: %s)\n", mb(f.bytes_held).c_str(), held.c_str());
    }
    if (!f.sliding_kept_whole.empty())
        std::fprintf(stderr, "kv: the sliding layers keep every position in this cache (only the mask slides): %s\n",
                     f.sliding_kept_whole.c_str());
    if (f.paged) {
        std::fprintf(stderr, "kv: %s, %s in blocks of %lld: %s (%s) hold what %s (%s) would; %lld shared, %s saved; "
                             "%s taken from shared blocks; %s on write\n",
                     count_of(f.sequences, "sequence", "sequences").c_str(), count_of(f.positions, "position", "positions").c_str(),
                     (long long)f.block_size, count_of(f.blocks_distinct, "block", "blocks").c_str(), mb(f.bytes).c_str(),
                     count_of(f.blocks_mapped, "unshared block", "unshared blocks").c_str(), mb(f.bytes_unshared).c_str(),
                     (long long)f.blocks_shared, mb(f.bytes_unshared - f.bytes).c_str(),
                     count_of(f.shared_positions, "prefill position", "prefill positions").c_str(),
                     count_of(f.copies_on_write, "copy", "copies").c_str());
    }
    if (const auto& pc = group.prompt_cache_file()) {
        std::fprintf(stderr, "prompt cache: %s loaded from %s%s", count_of(f.cache_file_positions, "position", "positions").c_str(),
                     pc->path.c_str(), pc->existed ? "" : " (it did not exist)");
        if (pc->written) std::fprintf(stderr, "; wrote it with %s\n", count_of(pc->written_positions, "position", "positions").c_str());
        else std::fprintf(stderr, "; left as it was: %s\n", left_reason(pc->left));
    }
}

}  // namespace kvscope
