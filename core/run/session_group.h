#pragma once
// N sessions run as one: the batch of sequences that share a paged block pool, with prefix sharing and
// the prompt cache file policy, stepped, stepped back and reset together. `kvscope generate`, the window
// and `bench --sharing` all run their sequences through this type; none of them builds a pool or a batch
// of sessions by hand.
//
//   SessionGroup(model, options, group)  N sessions; sequence i samples with seed + i. Nothing runs yet
//   set_prompts(prompts, source)  one prompt per sequence (encoder-decoder models: the shared source).
//                                 Builds fresh sessions, a fresh pool for a paged cache (sized for every
//                                 sequence at full length plus a copy-on-write block each, in the KV dtype
//                                 of the weights) and the batch workspace. Throws UsageError and changes
//                                 nothing when a prompt does not fit. Then opens the prompt cache file:
//                                 a refused one throws LoadError, and the group runs without it
//   next()                        Prefill if any sequence prefills, else Decode if any decodes, else Done
//   step()                        one step of every sequence not done (step_batch for N > 1);
//                                 after the prefill, (re)writes the prompt cache file
//   append_turn(ids, N, role, keep)   one sequence only: Session::append_turn (a chat's next turn; keep >= 0
//                                 rolls the cache back to `keep` positions first); UsageError for a batch
//   step_back()                   undo the last group step exactly (or the turn appended or the cache
//                                 edit applied after it); false when none has run
//   apply_edit(edit)              one sequence only: Session::apply_edit (cache_edit.h); UsageError for a batch
//   reset()                       every sequence back to before its first step; the prompt cache file is
//                                 read again (the first run may have written it)
//   set_use_cache(on)             from the next step on, for every sequence
//   session(i) / size()           read-only access to sequence i
//   pool()                        the shared pool, null for contiguous caches
//   pool_views()                  with GroupOptions::pool_views: [0] before any step, then one per step,
//                                 each with the pool's events of that step (allocated, shared, copied on
//                                 write, returned); pool_view_at(seq, step) finds the one after a step
//   prompt_cache_file()           what happened to the file, if one is used
//   memory()                      KV memory figures now: blocks mapped vs held, bytes, what sharing saved
//
// Threads: one thread at a time calls a group (in the window, the controller's worker).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "run/prompt_cache.h"
#include "run/session.h"

namespace kvscope {

struct GroupOptions {
    int64_t n_seq = 1;                   // N >= 1
    std::string prompt_cache;            // N = 1: a prompt cache file loaded by the first prefill when it
                                         // matches, (re)written after the prefill; empty = none
    bool prompt_cache_read_only = false; // load the file, never write it
    bool pool_views = false;             // paged: keep a PoolView after every step (the Memory panel's)
};

// The prompt cache file of a group, and what the run did with it. After the prefill the file is written
// unless it already holds the whole prompt (the same tokens, or this prompt followed by more: a file is
// never replaced by one that holds a shorter part of the same prefix) or it is read-only.
struct PromptCacheFileState {
    enum class Left { No, HoldsPrompt, HoldsLonger, ReadOnly, WindowOnly };  // why the file was not written
    std::string path;
    bool read_only = false;
    bool existed = false;                // the file was there (and valid) when last opened
    int64_t loaded_positions = 0;        // prompt positions the prefill took from it
    bool decided = false;                // the prefill is over: the file was written or left alone
    bool written = false;                // (re)written after the prefill
    Left left = Left::No;                // not written: why
    int64_t written_positions = 0;
};
const char* left_reason(PromptCacheFileState::Left l);  // "it holds this prompt", ...

// KV memory of a group at one moment. Paged: a block several sequences map counts once in `bytes`, once
// per mapping in `bytes_unshared`. Contiguous: every sequence's preallocated buffers.
struct GroupMemory {
    int64_t sequences = 0;
    int64_t positions = 0;               // summed over the sequences
    bool paged = false;
    int64_t block_size = 0;              // B
    int64_t blocks_mapped = 0;           // block table entries
    int64_t blocks_distinct = 0;         // blocks some table maps
    int64_t blocks_shared = 0;           // blocks more than one table maps
    int64_t bytes = 0, bytes_unshared = 0;
    // what the caches store now (KvCacheView::bytes_used summed): a sliding layer only its window plus the
    // chunk being written; below `bytes` while the preallocated slots are not all filled
    int64_t bytes_held = 0;
    std::vector<int64_t> layer_window;   // (L) the model's own window per layer when sliding layers store only it
    std::vector<int64_t> layer_positions_held;  // (L) positions each layer of sequence 0 stores now
    std::string sliding_kept_whole;      // why the model's sliding layers keep every position (paged, int4); "" = not so
    int64_t shared_positions = 0;        // prefill positions mapped from other sequences' blocks
    int64_t cache_file_positions = 0;    // prefill positions loaded from the prompt cache file
    int64_t copies_on_write = 0;
    int64_t bytes_per_position = 0;      // K and V of one position, all layers and K/V heads, as stored
    std::string kv_format;               // "f32" | "bf16" | "int8" | "fp8" | "int4" (kv_quant.h)
    // int4 (KIVI): of `bytes`, the float32 residual ring's (the newest positions, not yet packed), and its
    // slots per sequence; 0 for the other formats. Packed bytes = bytes - bytes_residual.
    int64_t bytes_residual = 0;
    int64_t residual_slots = 0;
};

class SessionGroup {
public:
    SessionGroup(std::shared_ptr<const Model> model, SessionOptions options, GroupOptions group = {});

    void set_prompts(std::vector<std::vector<TokenId>> prompts, std::vector<TokenId> source = {});
    Session::Next next() const;
    void step();
    void append_turn(std::vector<TokenId> ids, int64_t max_new_tokens, std::string role, int64_t keep = -1);
    const CacheEditRecord& apply_edit(CacheEdit edit);
    bool step_back();
    void reset();
    void set_use_cache(bool on);

    int64_t size() const { return int64_t(sessions_.size()); }
    const Session& session(int64_t i) const { return *sessions_[size_t(i)]; }
    std::vector<const Session*> sessions() const;
    const Model& model() const { return *model_; }
    std::shared_ptr<const Model> share_model() const { return model_; }
    const SessionOptions& options() const { return options_; }   // sequence 0's seed; i uses seed + i
    const GroupOptions& group_options() const { return group_; }
    bool has_prompts() const { return !sessions_[0]->parts().prompt.empty(); }
    int64_t n_steps() const { return int64_t(adopted_.size()); }  // group steps run and not undone

    const BlockPool* pool() const { return pool_.get(); }
    const std::vector<std::shared_ptr<const PoolView>>& pool_views() const { return views_; }
    const std::optional<PromptCacheFileState>& prompt_cache_file() const { return file_; }
    GroupMemory memory() const;

private:
    struct Adopted { int64_t shared = 0, file = 0; };  // positions a sequence mapped or loaded in one step
    std::vector<std::unique_ptr<Session>> make_sessions(const std::shared_ptr<BlockPool>& pool = nullptr) const;
    void open_prompt_cache_file();
    void decide_prompt_cache_file();
    void record_view();

    std::shared_ptr<const Model> model_;
    SessionOptions options_;
    GroupOptions group_;
    std::vector<std::unique_ptr<Session>> sessions_;  // (N)
    std::shared_ptr<BlockPool> pool_;                 // paged caches: the pool of every sequence
    Workspace batch_ws_;                              // N > 1: sized by the prompts
    std::vector<std::shared_ptr<const PoolView>> views_;
    std::vector<std::vector<Adopted>> adopted_;       // (steps, N)
    std::optional<PromptCacheFileState> file_;
    std::optional<ModelFingerprint> fingerprint_;     // of the model, for the file; computed once
    std::shared_ptr<const PromptCache> loaded_;       // the file's contents when it existed
};

// The pool view after the selected sequence's step `step` (-1 = newest); null without views.
const PoolView* pool_view_at(const std::vector<std::shared_ptr<const PoolView>>& views, int64_t seq, int64_t step);

}  // namespace kvscope
