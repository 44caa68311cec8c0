#pragma once
// What the views draw: an immutable copy of the engine's state after a command or step, published by the
// worker (controller.h). Panels take `const Snapshot&` and never touch a Session. Getters are named like
// Session's, so a panel reads a snapshot as it would read a session.
//
//   Snapshot                 the selected sequence's trace and tokens, the batch, pool views, status
//   Snapshot::pool_at(step)  the block pool as of the selected sequence's step (paged caches)
//   Progress                 what the worker is doing now, for the "working..." indicator
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analysis/cache_lab.h"
#include "analysis/heads.h"
#include "logic/cache_comparison.h"
#include "logic/commands.h"
#include "run/session_group.h"

namespace kvscope::gui {

struct Snapshot {
    std::shared_ptr<const Model> model_ptr;
    Trace main_trace;                    // the selected sequence's immutable step records
    Trace shadow_trace;                  // the flipped-cache session's records (not recorded)
    bool has_shadow = false;             // a comparison runs (one sequence, switched on)
    bool shadow_diverged = false;        // the two ways sampled different tokens; comparison stopped
    bool compare = true;                 // the comparison is switched on
    std::vector<StepTiming> step_timings;  // (steps) compute time with the cache on and off, timed alike
    std::vector<TokenId> prompt_ids, generated_ids;
    SessionOptions session_options;      // sequence 0's (the batch's base seed)
    Session::Next next_phase = Session::Next::Done;
    std::vector<TokenId> source_ids;     // (S) the source the sessions hold; empty for decoder-only models
    std::string source_text;             // the source text applied (kDefaultSource for a fresh encoder-decoder)
    uint64_t generation = 0;             // bumps when the model or session is replaced
    std::string status;                  // one line for the status bar
    bool status_error = false;
    uint64_t n_errors = 0;               // failed commands so far (scripts compare before/after a line)
    std::string last_export;             // where the last export went; empty after a failed one
    struct Problem {
        uint64_t id = 0;                 // 0 = none; each failure gets a new id (a closed box stays closed)
        Place place = Place::Controls;   // the panel the failed intent came from
        std::string text;                // in the window's words (render_labels)
    };
    Problem problem;                     // the last failure, until an intent from the same place succeeds
    std::vector<HeadScore> heads;        // ExplainHeads' result for this model (empty: not measured)
    struct Sequence {
        Trace trace;
        std::vector<TokenId> prompt_ids, generated_ids;
        uint64_t seed = 0;
        Session::Next next = Session::Next::Done;
    };
    std::vector<Sequence> sequences;     // (N) the batch; main_trace etc. above are those of `selected`
    int64_t selected = 0;
    BatchOptions batch;
    std::vector<std::shared_ptr<const PoolView>> pool_views;  // paged: [0] before any step, then one per step
    std::vector<Turn> turns;             // the selected sequence's turns (Session::turns()), oldest first
    bool chat_available = false;         // the model folder has a chat template kvscope renders
    std::string chat_unavailable;        // why not, in one line
    struct ChatLine {
        int64_t turn = 0;                // numbered from 1 (Session::turns() index + 1)
        std::string role;                // "user" | "assistant"
        std::string text;                // as typed; a reply decoded, its stop token left out
        bool complete = true;            // a reply still being decoded: false
    };
    std::vector<ChatLine> chat;          // the conversation so far (empty: no chat started)
    std::shared_ptr<const LabReport> lab;  // MeasureLab's result (null: not measured for this model)
    std::vector<CacheEditRecord> pending_edits;  // the selected sequence's edits since its last step

    const Model& model() const { return *model_ptr; }
    const Trace& trace() const { return main_trace; }
    const Trace* shadow() const { return has_shadow && !shadow_diverged ? &shadow_trace : nullptr; }
    const std::vector<TokenId>& prompt() const { return prompt_ids; }
    const std::vector<TokenId>& generated() const { return generated_ids; }
    const SessionOptions& options() const { return session_options; }
    Session::Next next() const { return next_phase; }
    bool encoder_decoder() const { return model_ptr->config().encoder_decoder; }
    const PoolView* pool_at(int64_t step) const { return pool_view_at(pool_views, selected, step); }  // -1 = newest
};

struct Progress {
    bool busy = false;                   // a command, a run or queued intents
    std::string activity;                // "prefill step 0: 1000 tokens", "loading model ..."; empty when idle
    double elapsed_s = 0;                // since the current activity began
    bool running = false;                // a Run / Decode N is going
    int64_t run_done = 0, run_total = 0; // steps of the run; total -1 = to the end
    int64_t run_limit = 0;               // best guess of the run's length when total is -1
    size_t queued = 0;                   // intents waiting behind the current one
    std::string notice;                  // the last refused intent, shown next to the indicator
};

}  // namespace kvscope::gui
