#include "cli_kv.h"

#include <cstdio>


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
            {"bytes_unshared", f.bytes_unshared},
            {"bytes_saved", f.bytes_unshared - f.bytes},
            {"prefill_positions_shared", f.shared_positions},
            {"copies_on_write", f.copies_on_write},
            {"prompt_cache", cache_file}};
}

void print_kv_report(const SessionGroup& group) {
    const GroupMemory f = group.memory();
    if (f.paged) {
        std::fprintf(stderr,
                     "kv: %lld sequences, %lld positions in blocks of %lld: %lld blocks (%s) hold what %lld unshared "
                     "blocks (%s) would; %lld shared, %s saved; %lld prefill positions taken from shared blocks; "
                     "%lld copies on write\n",
                     (long long)f.sequences, (long long)f.positions, (long long)f.block_size, (long long)f.blocks_distinct,
                     mb(f.bytes).c_str(), (long long)f.blocks_mapped, mb(f.bytes_unshared).c_str(),
                     (long long)f.blocks_shared, mb(f.bytes_unshared - f.bytes).c_str(), (long long)f.shared_positions,
                     (long long)f.copies_on_write);
    }
    if (const auto& pc = group.prompt_cache_file()) {
        std::fprintf(stderr, "prompt cache: %lld positions loaded from %s%s", (long long)f.cache_file_positions,
                     pc->path.c_str(), pc->existed ? "" : " (it did not exist)");
        if (pc->written) std::fprintf(stderr, "; wrote it with %lld positions\n", (long long)pc->written_positions);
        else std::fprintf(stderr, "; left as it was: %s\n", left_reason(pc->left));
    }
}

}  // namespace kvscope
