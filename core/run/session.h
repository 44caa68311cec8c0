#pragma once
// A generation you can step: prefill the prompt chunk by chunk, decode one token at a time, step back,
// reset. Owns the KV cache, the sampler and the trace of one sequence; every step appends one immutable
// StepRecord. The CLI and the window drive the engine through this class and SessionGroup
// (session_group.h), which owns one Session per sequence. Its parts have their own headers: the turns
// (turn_log.h), the pending cache edits (edit_log.h), the eviction hook (eviction_step.h); stepping
// several at once is session_batch.h.
//
//   Session(model, options, setup)  validate options; nothing runs yet. setup.pool: draw paged blocks
//                               from a pool other sessions share, as sequence setup.sequence of its events
//   set_prompt(ids)             validate (non-empty, ids in vocab, prompt + max_new_tokens <= n_positions);
//                               sizes the cache and workspace once, clears the trace
//   set_source(ids)             encoder-decoder models, before set_prompt: the encoder's input. The
//                               decoder input is then [decoder_start_token_id] + prompt (which may be
//                               empty); the first prefill step runs the encoder and fills the
//                               cross-attention cache, which stays fixed (an uncached step reruns it)
//   next()                      Prefill | Decode | Done
//   step(phase)                 run what next() says; with a phase, insist on it (UsageError otherwise).
//                               A step whose rows or logits hold a NaN or infinity (weights or config
//                               values that overflow float32) throws LoadError naming the step and the
//                               layer where it appeared; no token is sampled and the session is as before
//                               the step (without history, nothing is kept to go back to: it is reset)
//   append_turn(ids, N, role)   multi-turn chat in one cache: after a reply (next() is Decode or Done),
//                               the ids become new prompt positions after everything already there; only
//                               they (and the reply's last token, sampled but not yet fed) are prefilled,
//                               then up to N tokens are decoded (fewer when the model's context ends first:
//                               N is a cap, not a reservation; UsageError when the turn leaves no room
//                               for one). Nothing earlier is recomputed, the cache
//                               grows as needed (ring: more slots; own pool: more blocks; a shared pool
//                               must have them free, else UsageError; with a window each step checks).
//                               With the cache off, a turn's first step recomputes the whole conversation.
//                               On an empty session: set_prompt(ids) with N. parts().prompt then holds
//                               every position before the new reply, parts().generated only the new
//                               reply; parts().turns lists where each turn starts
//   append_turn(ids, N, role, keep)   keep >= 0: a chat turn after the template re-rendered earlier turns: the
//                               conversation's first `keep` positions stay (their cache rows reused, the
//                               rest of the cache cut away), then ids follow as in append_turn and are
//                               prefilled. The ring keeps its rows when every kept position still sits in
//                               its slot; a paged, int4 or evicting cache (or a wrapped ring) is emptied and
//                               the whole conversation prefilled again. Steps and turns before it can no
//                               longer be stepped back over (their rows are gone). keep >= the
//                               conversation's length: append_turn
//   step_back()                 undo the last step exactly (cache slots, position pointer, RNG, trace);
//                               right after append_turn, undo the append: the previous turn's prompt,
//                               reply and max new tokens come back (a grown cache stays grown)
//   reset()                     back to before the first step of the first turn: later turns are dropped,
//                               the first turn's prompt and max new tokens kept (what "start the
//                               conversation over" means; the turns' tokens are gone with them)
//   set_use_cache(on)           from the next step on: off = recompute every position from scratch
//   use_prompt_cache(pc)        the first prefill step loads the prompt's leading positions from a
//                               prompt cache file (prompt_cache.h) instead of computing them;
//                               parts().prompt_cache holds it (null: none)
//   apply_edit(edit)            between steps: evict / restore / patch one position (cache_edit.h) and
//                               measure the next prediction before and after; throws UsageError with one
//                               line and changes nothing when the edit is invalid. The edit joins the
//                               next step's record (StepRecord::edits); step_back undoes the newest edit
//                               first, exactly, and undoing a step brings its edits back as pending
//   model() / options() / cache() / trace()   what it runs, how, its KV cache, its steps (empty when !history)
//   parts()                     everything else it holds, read-only (SessionParts below): the tokens,
//                               the encoder output, the last logits, the turns, the pending edits
//                               (parts().edits.pending()), the eviction hook, the prompt cache
// Free functions, reading only what the class shows:
//   latest(s)                   the newest step's record, or null
//   stopped_by_token(s)         generation ended at one of options().stop_tokens (else at max new tokens)
//   pool_blocks_for(n, B)       blocks one sequence of n positions needs on its own
//   kv_rows_of_run(...)         (L, 2, K, D) K then V of one position after a fresh run of `tokens`: the
//                               rows a Patch edit writes
//
// Teacher forcing (options.forced_tokens): prompt = a text's first token, max_new_tokens = the rest, and
// each decode step feeds the text's next token, so the cache (window, sinks, quantization) behaves
// exactly as in generation while every step's logits predict the text (cache_lab.h measures with it).
//   parts().eviction.policy()   the eviction policy (options().eviction): after every step it may evict
//                               keys per (layer, K/V head); the record lists them, step_back restores them
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/cache_edit.h"
#include "cache/kv_cache.h"
#include "cache/kv_quant.h"
#include "forward/model.h"
#include "run/edit_log.h"
#include "run/eviction.h"
#include "run/eviction_step.h"
#include "run/prompt_cache.h"
#include "run/sampler.h"
#include "run/trace.h"
#include "run/turn_log.h"

namespace kvscope {

struct SessionOptions {
    int64_t prefill_chunk = 0;   // tokens per prefill step; 0 = the whole prompt in one step
    int64_t window = 0;          // sliding window W; 0 = off (all positions stay visible)
    int64_t sinks = 0;           // attention sinks S: with a window, the first S positions stay visible too
    int64_t block_size = 0;      // B > 0: a paged KV cache of B-position blocks (block_pool.h); 0 = ring
    bool share_prefix = false;   // paged: map prompt positions another sequence of the pool already holds
    bool use_cache = true;
    bool record = true;          // keep q/k/v rows so attention views can be derived
    bool history = true;         // keep every StepRecord in the trace and allow step_back. Off: only the
                                 // latest record is kept (reused in place), and a cached decode step
                                 // allocates nothing — what benchmarks and long generations want
    int64_t max_new_tokens = 16; // N
    int64_t n_top = 10;          // top tokens kept per step for display
    SamplerOptions sampling;
    SinkPositions sink_positions = SinkPositions::Text;  // Cache: StreamingLLM's numbering (rotary models)
    std::vector<TokenId> stop_tokens;    // decoding ends once one is sampled (a chat's end of turn); empty = none
    KvQuantSpec kv_quant;                // quantized K/V rows (kv_quant.h); ring cache only
    std::vector<TokenId> forced_tokens;  // teacher forcing: the k-th token of a reply is forced_tokens[k]
                                         // instead of the sampler's choice (Prediction::forced says so;
                                         // logits, top and entropy stay the model's); past its end, sampling
    EvictionSpec eviction;               // eviction policy under a budget (eviction.h); ring cache, cache on
};
void validate(const SessionOptions& options);  // throws UsageError

class Model;
std::vector<float> kv_rows_of_run(std::shared_ptr<const Model> model, SessionOptions options,
                                  std::vector<TokenId> tokens, int64_t position);

// What a session holds besides its cache and trace, read-only to callers (Session::parts()).
struct SessionParts {
    std::shared_ptr<const Model> model;
    std::vector<TokenId> prompt;        // every position before the newest reply (a chat: all turns so far)
    std::vector<TokenId> generated;     // the newest reply
    int64_t n_prompt_done = 0;          // prompt tokens already in the cache
    std::vector<TokenId> source;        // encoder input (encoder-decoder models)
    std::shared_ptr<const EncoderOutput> encoder;  // its output and the cross-attention cache; null until it ran
    std::vector<float> logits;          // (V) of the newest prediction
    TurnLog turns;                      // one Turn (trace.h) per set_prompt / append_turn, oldest first
    EditLog edits;                      // the edits applied since the last step, oldest first
    EvictionStep eviction;              // options().eviction: eviction.policy() after every step
    std::shared_ptr<const PromptCache> prompt_cache;  // null: none
    StepRecord latest;                  // !history: the newest step's record, refilled in place
};

struct SessionSetup {                   // how a session shares with others, fixed at construction
    std::shared_ptr<BlockPool> pool;    // paged blocks drawn from a pool other sessions share; null: its own
    int32_t sequence = -1;              // this session's number in that pool's events
};

class Session {
public:
    enum class Next { Prefill, Decode, Done };

    Session(std::shared_ptr<const Model> model, SessionOptions options, SessionSetup setup = {});

    void set_source(std::vector<TokenId> source);
    void set_prompt(std::vector<TokenId> prompt);
    void append_turn(std::vector<TokenId> tokens, int64_t max_new_tokens, std::string role = "", int64_t keep = -1);
    void use_prompt_cache(std::shared_ptr<const PromptCache> pc) { parts_.prompt_cache = std::move(pc); }
    void set_use_cache(bool on) { options_.use_cache = on; }
    Next next() const;
    const StepRecord& step(std::optional<Phase> phase = std::nullopt);
    bool step_back();            // false when there is nothing to undo
    void reset();
    const CacheEditRecord& apply_edit(CacheEdit edit);

    const Model& model() const { return *parts_.model; }
    const SessionOptions& options() const { return options_; }
    const KvCache& cache() const { return cache_; }
    const Trace& trace() const { return trace_; }                  // empty when !history
    const SessionParts& parts() const { return parts_; }

private:
    void rollback_turn(int64_t keep, std::vector<TokenId> tokens, int64_t max_new_tokens, std::string role);
    friend void step_batch(std::span<Session* const> sessions, Workspace& ws);
    friend Workspace make_batch_workspace(std::span<Session* const> sessions);
    struct Undo {
        KvCacheCheckpoint cache;
        uint64_t rng_state = 0;
        size_t n_generated = 0;
        int64_t n_prompt_done = 0;
        std::vector<float> logits;
        std::shared_ptr<const EncoderOutput> encoder;
        EvictionStep::Saved eviction;          // the policy's state before the step, what the step evicted
        EditLog edits;                         // the edits pending before the step, with how to undo them
    };
    struct Pending {             // a step between prepare() and finish()
        Phase phase = Phase::Prefill;
        std::span<const TokenId> tokens;  // into parts_.prompt or .generated: adopted then computed tokens
        int64_t n_adopted = 0;            // leading tokens whose K/V were mapped or loaded, not computed
        StepCost::Source adopted_from = StepCost::Source::None;
        std::optional<KvCacheCheckpoint> before_adoption;  // to take the adoption back if the step fails
        bool predicts = false;   // the chunk ends the prompt or is a decode: sample a token
        std::optional<TokenId> sampled;  // the draw, when made before finish() (step_batch: rows side by side)
        bool ran_encoder = false;
        bool forward_ran = false;  // the cache has advanced over the chunk
        double started = 0;
        double compute_seconds = 0;  // time in forward() and the encoder so far
        Chunk chunk;
        ChunkProbe probe;
        std::vector<EvictionEvent> evictions;  // decided after the forward pass
    };
    void prepare(Pending& p, Phase phase);
    const StepRecord& finish(Pending& p, double flops, int64_t first_computed, int64_t n_computed,
                             int64_t n_reused);
    const StepRecord& run_step(Phase phase);
    const StepRecord& run_uncached(Pending& p);
    void adopt_shared_prefix(Pending& p);
    void adopt_prompt_cache(Pending& p);
    void abandon(Pending& p);    // a step failed: undo what prepare() (and the forward pass) did
    // Throws LoadError when forward() found a NaN or infinity in `layer` (Chunk::non_finite_layer; -1: none)
    void refuse_non_finite(const Pending& p, int64_t layer, int64_t first_position) const;
    void record_adopted_rows(RecordedRows& rows, int64_t first, int64_t n) const;
    std::vector<TokenId> all_tokens() const;  // prompt then generated, in position order
    int64_t chunk_capacity(int64_t n_total, int64_t chunk) const;  // ring slots a window and chunk need
    void fit_turn(int64_t n_total, int64_t chunk);  // grow cache, pool and workspace for a new turn

    SessionOptions options_;
    SessionParts parts_;
    KvCache cache_;
    SessionSetup setup_;
    void run_encoder(Pending& p);
    Workspace workspace_;
    Sampler sampler_;
    Trace trace_;
    std::vector<Undo> undo_;
    void evict_after(Pending& p);  // after the forward pass: the policy observes, decides, the cache evicts
    // The window and sinks the cache applies: options().window / sinks, or window+sinks's (eviction.h)
    int64_t window_ = 0, sinks_ = 0;
    void next_step_logits(std::vector<float>& out);  // (V) the next step's logits, the cache left as it was
};

// Readings of a session's state that need no access of their own.
const StepRecord* latest(const Session& s);  // the newest step's record, or null (trace().back() with history)
bool stopped_by_token(const Session& s);     // generation ended at one of options().stop_tokens
int64_t pool_blocks_for(int64_t n_positions, int64_t block_size);  // blocks one sequence of n needs on its own

}  // namespace kvscope
