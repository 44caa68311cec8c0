#pragma once
// What each attention head does, measured on probe prompts from the corpus generator (core/text/corpus.h),
// or on prompts the caller gives, through the normal engine path (Session, whole-prompt prefill,
// recorded), with the exact weights attention_map() derives from the trace.
//
//   previous_token   mean attention weight from position t to position t-1, over every query t >= 1 of
//                    ordinary text (Corpus::text with the probe seed)
//   induction        on a random span of ordinary tokens s_0..s_{n-1} repeated once (2n tokens): mean
//                    weight from the second occurrence of s_i (position n+i) to the token after its first
//                    occurrence (position i+1), for i = 0..n-2
//   given prompts    (HeadProbeOptions::prompts) each is the text of the previous-token probe and, repeated
//                    once, the span of the induction probe; scores are averaged over them (no tokenizer needed)
//
//   head_scores(model, opts)   one HeadScore per (layer, head), layer-major; throws LoadError when the
//                              probes are generated and the model has no tokenizer (they are made of text
//                              and letter tokens), UsageError for a given prompt of under 2 tokens or one
//                              that, repeated, does not fit the model's positions
#include <cstdint>
#include <memory>
#include <vector>

#include "forward/model.h"

namespace kvscope {

struct HeadScore {
    int64_t layer = 0, head = 0;
    double previous_token = 0, induction = 0;
};

struct HeadProbeOptions {
    uint64_t seed = 7;           // probe seed (distinct from training seeds' streams by construction)
    int64_t n_prompts = 4;       // prompts of each kind, averaged
    int64_t text_tokens = 128;   // length of each text prompt (capped at n_positions - 1)
    int64_t span = 25;           // n of the repeated random span (capped so 2n < n_positions)
    std::vector<std::vector<TokenId>> prompts;  // non-empty: probe these (each >= 2 tokens, 2n < n_positions)
                                                // instead of generated prompts; seed, n_prompts, text_tokens
                                                // and span are then unused
};

std::vector<HeadScore> head_scores(std::shared_ptr<const Model> model, const HeadProbeOptions& opts = {});

}  // namespace kvscope
