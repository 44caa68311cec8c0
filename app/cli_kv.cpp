#include "cli_kv.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "cli_common.h"
#include "json.h"
#include "npy.h"

namespace kvscope {
namespace {

struct KvFigures {
    int64_t sequences = 0, positions = 0;
    int64_t block_size = 0, blocks_mapped = 0, blocks_distinct = 0, blocks_shared = 0;
    int64_t bytes = 0, bytes_unshared = 0;
    int64_t shared_positions = 0, cache_file_positions = 0, copies_on_write = 0;
};

KvFigures figures(const std::vector<Session*>& sessions, const BlockPool* pool) {
    KvFigures f;
    f.sequences = int64_t(sessions.size());
    std::multiset<int32_t> mapped;
    for (const Session* s : sessions) {
        f.positions += s->cache().next_position();
        for (size_t i = 0; i < s->trace().size(); ++i) {
            const StepRecord& r = s->trace()[i];
            if (r.cost.adopted_from == StepCost::Source::SharedPrefix) f.shared_positions += r.cost.n_adopted;
            if (r.cost.adopted_from == StepCost::Source::PromptCache) f.cache_file_positions += r.cost.n_adopted;
        }
        if (!pool) {
            f.bytes += s->cache().bytes_capacity();
            continue;
        }
        for (int32_t b : s->cache().block_table())
            if (b >= 0) mapped.insert(b);
    }
    f.bytes_unshared = f.bytes;
    if (!pool) return f;
    f.block_size = pool->block_size();
    f.blocks_mapped = int64_t(mapped.size());
    for (auto it = mapped.begin(); it != mapped.end(); it = mapped.upper_bound(*it)) {
        ++f.blocks_distinct;
        if (mapped.count(*it) > 1) ++f.blocks_shared;
    }
    f.bytes = f.blocks_distinct * pool->bytes_per_block();
    f.bytes_unshared = f.blocks_mapped * pool->bytes_per_block();
    f.copies_on_write = pool->stats().copies_on_write;
    return f;
}

std::string mb(int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MB", double(bytes) / 1e6);
    return buf;
}

}  // namespace

PromptCacheUse open_prompt_cache(const std::string& path, const Model& model) {
    PromptCacheUse use;
    use.path = path;
    use.fingerprint = model_fingerprint(model, model.weights().bf16);  // the cache stores rows as the weights do
    std::error_code ec;
    if (std::filesystem::exists(path, ec))
        use.loaded = std::make_shared<const PromptCache>(read_prompt_cache(path, *use.fingerprint));
    else
        ensure_writable(path);
    return use;
}

void save_prompt_cache(PromptCacheUse& use, const Model& model, const Session& session) {
    (void)model;
    use.written = true;  // decided once, after the prefill
    if (!session.trace().empty() && session.trace()[0].cost.adopted_from == StepCost::Source::PromptCache)
        use.loaded_positions = session.trace()[0].cost.n_adopted;
    if (use.loaded && use.loaded->tokens == session.prompt()) {
        use.written = false;  // it already holds exactly this prompt
        return;
    }
    write_prompt_cache(*use.path, *use.fingerprint, session.prompt(), session.cache());
    use.written_positions = int64_t(session.prompt().size());
}

std::string kv_report_json(const std::vector<Session*>& sessions, const BlockPool* pool, const PromptCacheUse& pc) {
    const KvFigures f = figures(sessions, pool);
    std::string cache_file = "null";
    if (pc.path)
        cache_file = json_object({{"path", json_escape(*pc.path)},
                             {"existed", pc.loaded ? "true" : "false"},
                             {"loaded_positions", std::to_string(f.cache_file_positions)},
                             {"written", pc.written ? "true" : "false"},
                             {"written_positions", std::to_string(pc.written_positions)}});
    return json_object({{"sequences", std::to_string(f.sequences)},
                   {"positions", std::to_string(f.positions)},
                   {"paged", pool ? "true" : "false"},
                   {"block_size", std::to_string(f.block_size)},
                   {"blocks_mapped", std::to_string(f.blocks_mapped)},
                   {"blocks_distinct", std::to_string(f.blocks_distinct)},
                   {"blocks_shared", std::to_string(f.blocks_shared)},
                   {"bytes", std::to_string(f.bytes)},
                   {"bytes_unshared", std::to_string(f.bytes_unshared)},
                   {"bytes_saved", std::to_string(f.bytes_unshared - f.bytes)},
                   {"prefill_positions_shared", std::to_string(f.shared_positions)},
                   {"copies_on_write", std::to_string(f.copies_on_write)},
                   {"prompt_cache", cache_file}});
}

void print_kv_report(const std::vector<Session*>& sessions, const BlockPool* pool, const PromptCacheUse& pc) {
    const KvFigures f = figures(sessions, pool);
    if (pool) {
        std::fprintf(stderr,
                     "kv: %lld sequences, %lld positions in blocks of %lld: %lld blocks (%s) hold what %lld unshared "
                     "blocks (%s) would; %lld shared, %s saved; %lld prefill positions taken from shared blocks; "
                     "%lld copies on write\n",
                     (long long)f.sequences, (long long)f.positions, (long long)f.block_size, (long long)f.blocks_distinct,
                     mb(f.bytes).c_str(), (long long)f.blocks_mapped, mb(f.bytes_unshared).c_str(),
                     (long long)f.blocks_shared, mb(f.bytes_unshared - f.bytes).c_str(), (long long)f.shared_positions,
                     (long long)f.copies_on_write);
    }
    if (pc.path) {
        std::fprintf(stderr, "prompt cache: %lld positions loaded from %s%s", (long long)f.cache_file_positions,
                     pc.path->c_str(), pc.loaded ? "" : " (it did not exist)");
        if (pc.written) std::fprintf(stderr, "; wrote it with %lld positions\n", (long long)pc.written_positions);
        else std::fprintf(stderr, "; it already holds this prompt, left as it was\n");
    }
}

}  // namespace kvscope
