#pragma once
// What `generate` says about KV memory: the prompt cache file it used, and the pool figures of a paged
// batch (blocks each sequence maps, blocks that exist, what sharing saved, prefill positions skipped).
//
//   open_prompt_cache(path, model)     the file when it exists (checked; LoadError if not usable)
//   save_prompt_cache(use, model, s)   after the prefill: (re)write the file unless it holds this prompt
//   kv_report_json / print_kv_report   the figures, as a JSON object / a few lines on stderr
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "block_pool.h"
#include "prompt_cache.h"
#include "session.h"

namespace kvscope {

struct PromptCacheUse {
    std::optional<std::string> path;
    std::optional<ModelFingerprint> fingerprint;
    std::shared_ptr<const PromptCache> loaded;  // null: FILE did not exist
    int64_t loaded_positions = 0;
    bool written = false;
    int64_t written_positions = 0;
};

PromptCacheUse open_prompt_cache(const std::string& path, const Model& model);
void save_prompt_cache(PromptCacheUse& use, const Model& model, const Session& session);

std::string kv_report_json(const std::vector<Session*>& sessions, const BlockPool* pool, const PromptCacheUse& pc);
void print_kv_report(const std::vector<Session*>& sessions, const BlockPool* pool, const PromptCacheUse& pc);

}  // namespace kvscope
