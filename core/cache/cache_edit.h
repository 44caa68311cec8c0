#pragma once
// Cache interventions by hand: between two steps, evict a position's keys, put them back, or overwrite
// its K/V with another run's (cache patching), and see what the edit does to the next prediction.
//
// An edit targets one position and every layer (layer -1) or one, every K/V head (kv_head -1) or one.
// Session::apply_edit validates it (the position alive in the cache, layer and head in range, something
// to change), applies it and measures its effect; step_back undoes it exactly. Evict and Restore set and
// clear the cache's evicted flags (kv_cache.h): an evicted key gets attention weight exactly 0. Patch
// writes the source rows over the position's K and V and leaves its flags as they were.
//
// The effect: the logits the next step would produce (the next token to enter the cache, fed at
// next_position) with the edited cache, beside the same step's logits with the cache as the last step
// left it (no edit since). Both come from the forward pass itself, run under a cache checkpoint that is
// then restored, so the "after" logits are exactly the next step's.
//
//   CacheEditKind, cache_edit_kind_name(k)    Evict | Restore | Patch, "evict" | "restore" | "patch"
//   CacheEdit                                 what to change
//   compare_distributions(before, after, n)   KL, top-1 before and after, the n tokens that moved most
//   EditComparison, TokenShift                its result, plain values
//   CacheEditRecord                           an applied edit as step records and exports list it
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace kvscope {

enum class CacheEditKind { Evict, Restore, Patch };
const char* cache_edit_kind_name(CacheEditKind k);  // "evict" | "restore" | "patch"

struct CacheEdit {
    CacheEditKind kind = CacheEditKind::Evict;
    int64_t position = 0;                // absolute position, alive in the cache
    int64_t layer = -1;                  // -1 = every layer
    int64_t kv_head = -1;                // -1 = every K/V head
    std::vector<float> rows;             // Patch: (L, 2, K, D) K then V of the source position, every layer
    std::string source;                  // Patch: where the rows came from (shown and exported)
};

struct TokenShift {
    TokenId token = 0;
    double p_before = 0, p_after = 0;    // softmax of the logits, in double
};

// Two distributions over the vocabulary, as softmax(logits) in double.
struct EditComparison {
    int64_t position = -1;               // where the probed next token sits; -1 = nothing compared
    TokenId token = 0;                   // the token fed there
    double kl = 0;                       // KL(before || after) = Σ p_before (log p_before - log p_after), nats
    TokenId top1_before = 0, top1_after = 0;  // argmax (the lower id on ties)
    double p_top1_before = 0, p_top1_after = 0;
    std::vector<TokenShift> movers;      // (n) largest |p_after - p_before|, descending (lower id on ties)
};

// before and after: (V) logits. Throws UsageError when the sizes differ or are 0.
EditComparison compare_distributions(std::span<const float> before, std::span<const float> after, size_t n_movers);

struct CacheEditRecord {
    CacheEdit edit;
    int64_t n_changed = 0;               // (layer, K/V head) entries the edit changed
    EditComparison effect;               // the next prediction before and after, with every edit since
                                         // the last step (the unedited logits are the step's own)
};

}  // namespace kvscope
