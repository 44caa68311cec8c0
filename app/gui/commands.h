#pragma once
// The command queue: the only code in the app that calls Session. Buttons, keys, dropped folders and
// script lines all become a Command; a worker thread owned by the Controller applies them one by one,
// so a long step (a 1000-token prefill, a cache-off step late in a run, loading a model) never stalls
// the window. After every step the worker publishes an immutable Snapshot (the trace's shared records
// plus the few session facts the views need); the panels draw the newest snapshot and never touch the
// Session.
//
// A second "shadow" session mirrors every step with the cache switch flipped (and recording off), so
// the cache on vs off panel can show the same step computed both ways. The worker publishes the main
// step before it computes the shadow step, so the new step appears without waiting for the other way.
//
// Encoder-decoder models: the source text (SetSource) is the encoder's input and the prompt follows the
// decoder start token (it may be empty). A model loaded without a source gets kDefaultSource, so
// stepping works at once; decoder-only models ignore the source.
//
// A batch (BatchOptions::n_seq > 1): N sessions over one BlockPool, stepped together by
// Session::step_batch; the panels show the selected one (Snapshot::trace() is its trace), the Memory
// panel all of them (Snapshot::memory, one MemoryState per batch step). No shadow session then.
//
//   Controller(model, options)     a session on `model`; no prompt yet; starts the worker
//   push(cmd)                      queue an intent; returns at once (false + notice when refused)
//   snapshot()                     the newest published state (hold the pointer for a whole frame)
//   progress()                     what the worker is doing now, for the "working..." indicator
//   busy()                         the worker has a command, a run or queued intents
//   wait_idle()                    block until not busy (scripts, tests)
//   execute(cmd)                   push + wait_idle; false when the command failed (see snapshot status)
//   set_wake(fn)                   called from the worker after each publish (wakes the event loop)
//   prompt_edits()                 SetPrompt intents pushed so far (see Snapshot::prompt_edits)
//   source_edits()                 SetSource intents pushed so far (see Snapshot::source_edits)
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "heads.h"
#include "session.h"

namespace kvscope {
struct PromptCacheUse;  // ../cli_kv.h
}

namespace kvscope::gui {

// Several sequences stepped together. Sequence i's prompt is the prompt's tokens followed by the tokens of
// suffixes[i] (tokenized on its own, so the shared part stays token-identical), and it samples with
// seed + i, so identical prompts can diverge.
struct BatchOptions {
    int64_t n_seq = 1;                   // N >= 1
    std::vector<std::string> suffixes;   // (at most N) text after the prompt for sequence i; missing = none
    std::string prompt_cache;            // N = 1: prompt cache file (prompt_cache.h) loaded by the first prefill
                                         // when it matches, (re)written after the prefill; empty = none
    bool operator==(const BatchOptions&) const = default;
};

// The block pool after one batch step, as the Memory panel draws it (paged caches only).
struct MemoryState {
    enum Change : uint8_t { Allocated = 1, Shared = 2, Copied = 4, Freed = 8 };  // what this step did to a block
    struct Block {
        int32_t refs = 0;                // pool reference count: block tables + undo checkpoints (step back)
        uint8_t change = 0;              // Change bits
        int32_t copied_from = -1;        // Copied: the shared block it was copied from
        int64_t logical = -1;            // logical block index in the tables that map it (positions logical*B..)
        uint64_t chain = 0;              // hash of every token before the block (equal for a copy and its source)
        std::vector<int32_t> seqs;       // sequences whose table maps it, ascending
        std::vector<TokenId> tokens;     // tokens whose K/V it holds, slot order
    };
    int64_t batch_step = -1;             // -1: before the first step
    int64_t block_size = 0;              // B
    int64_t bytes_per_block = 0;
    std::vector<Block> blocks;           // (n_blocks)
    std::vector<std::vector<int32_t>> tables;  // (N) logical block -> pool block, -1 = evicted
    std::vector<size_t> n_steps;         // (N) each sequence's trace length after this batch step
    std::vector<int64_t> adopted;        // (N) prompt positions the sequence mapped from others' blocks so far
    int64_t n_free = 0;                  // blocks on the free list
    int64_t copies_on_write = 0, positions_adopted = 0;  // pool totals so far
    int64_t n_mapped() const;            // distinct blocks some table maps
    int64_t n_unshared() const;          // blocks the sequences would take each on their own (table entries)
};

struct Command {
    enum class Kind {
        SetPrompt,      // text: prompt text (or "1,2,3" ids when the model has no tokenizer); resets
        SetSource,      // text: the encoder's input (encoder-decoder models), tokenized like a prompt; resets
        Prefill,        // one prefill chunk
        Decode,         // n decode steps
        Step,           // whatever comes next, once
        Run,            // n steps of whatever comes next; n < 0 = to the end
        Pause,          // stop a run after the step in progress
        Back,           // undo the last n steps
        Reset,          // back to before the first step
        Cache,          // on: cache switch for the following steps
        Compare,        // on: keep the shadow session (cache flipped) in step
        SetOptions,     // options: rebuild the session with the same prompt
        LoadModel,      // text: model folder; on failure the current model stays
        ExportStep,     // text: folder; step, layer, head (layer < 0 = all heads of all layers)
        ExportSession,  // text: folder; layer, head as above
        ExplainHeads,   // measure every head's previous-token and induction scores (core/heads.h)
        Select,         // n: the sequence of the batch the panels show
    };
    Kind kind = Kind::Step;
    std::string text;
    int64_t n = 1;
    bool on = true;
    SessionOptions options;
    BatchOptions batch;                  // SetOptions: the batch to build
    int64_t step = -1, layer = -1, head = -1;
};

// What the views draw: a consistent, immutable copy of the session state after a command or step.
// Getters are named like Session's, so a panel reads a snapshot as it would read a session.
struct Snapshot {
    std::shared_ptr<const Model> model_ptr;
    Trace main_trace;                    // shares the session's immutable step records
    Trace shadow_trace;                  // the flipped-cache session's records (not recorded)
    bool has_shadow = false;
    bool shadow_diverged = false;        // the two ways sampled different tokens; comparison stopped
    bool compare = true;
    std::vector<TokenId> prompt_ids, generated_ids;
    SessionOptions session_options;
    Session::Next next_phase = Session::Next::Done;
    std::string prompt_text;
    uint64_t prompt_edits = 0;           // SetPrompt intents applied (equal to Controller::prompt_edits() = none pending)
    std::string source_text;             // encoder-decoder models: the source as typed
    std::vector<TokenId> source_ids;     // (S) the source the session holds; empty for decoder-only models
    uint64_t source_edits = 0;           // SetSource intents applied
    uint64_t generation = 0;             // bumps when the model or session is replaced
    std::string status;                  // one line for the status bar
    bool status_error = false;
    uint64_t n_errors = 0;               // failed commands so far (scripts compare before/after a line)
    std::string last_export;
    std::vector<HeadScore> heads;        // ExplainHeads' result for this model (empty: not measured)
    // The batch: every sequence's records and tokens; main_trace etc. above are those of `selected`.
    struct Sequence {
        Trace trace;
        std::vector<TokenId> prompt_ids, generated_ids;
        uint64_t seed = 0;
        Session::Next next = Session::Next::Done;
    };
    std::vector<Sequence> sequences;     // (N)
    int64_t selected = 0;
    BatchOptions batch;
    std::vector<std::shared_ptr<const MemoryState>> memory;  // paged: [0] before any step, then one per batch step

    const Model& model() const { return *model_ptr; }
    const Trace& trace() const { return main_trace; }
    const Trace* shadow() const { return has_shadow && !shadow_diverged ? &shadow_trace : nullptr; }
    const std::vector<TokenId>& prompt() const { return prompt_ids; }
    const std::vector<TokenId>& generated() const { return generated_ids; }
    const SessionOptions& options() const { return session_options; }
    Session::Next next() const { return next_phase; }
    bool has_prompt() const { return !prompt_ids.empty(); }
    bool encoder_decoder() const { return model_ptr->config().encoder_decoder; }
    // The pool as of the selected sequence's step `step` (-1 = newest); null when the cache is not paged.
    const MemoryState* memory_at(int64_t step) const;
};

// What the worker is doing, for the progress indicator.
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

class Controller {
public:
    Controller(std::shared_ptr<const Model> model, SessionOptions options);
    ~Controller();                       // lets the step in progress finish, then joins the worker
    Controller(const Controller&) = delete;
    Controller& operator=(const Controller&) = delete;

    bool push(Command c);
    std::shared_ptr<const Snapshot> snapshot() const;
    Progress progress() const;
    bool busy() const;
    void wait_idle();
    bool execute(const Command& c);
    void set_wake(std::function<void()> wake);
    uint64_t prompt_edits() const;
    uint64_t source_edits() const;

private:
    // Worker side: everything below the mutex line is touched only by the worker thread (and by the
    // constructor before it starts).
    void worker_loop();
    void apply(const Command& c);
    bool step_once();                    // one step of whatever comes next, mirrored on the shadow
    void run_step();                     // one step of the current run
    void rebuild(std::shared_ptr<const Model> model, SessionOptions options, BatchOptions batch);
    void sync_shadow();                  // replay the main session's steps on a fresh shadow
    void set_status(std::string s, bool error = false);
    void set_activity(std::string what); // under the mutex: the indicator's label and start time
    void publish();                      // copy the session state into a new Snapshot
    std::vector<TokenId> encode(const Model& model, const std::string& text) const;

    mutable std::mutex m_;
    std::condition_variable cv_;         // worker: new intent or stop; waiters: idle
    std::deque<Command> queue_;
    std::shared_ptr<const Snapshot> snap_;
    bool stop_ = false;
    bool working_ = false;               // the worker is inside apply() or a run step
    std::string activity_, notice_;
    double activity_start_ = 0;
    int64_t run_left_ = 0, run_done_ = 0, run_total_ = 0, run_limit_ = 0;
    uint64_t prompt_edits_pushed_ = 0, source_edits_pushed_ = 0;
    std::function<void()> wake_;

    Session& sel() { return *sessions_[size_t(selected_)]; }
    std::vector<Session*> all_sessions() const;
    Session::Next batch_next() const;    // Prefill if any sequence prefills, else Decode if any decodes
    void set_prompts();                  // encode source, prompt + suffixes into every sequence (after a rebuild)
    bool has_input() const;              // a prompt, or (encoder-decoder) a source: set_prompts can run
    void set_input(Session& s, std::vector<TokenId> prompt);  // set_source (encoder-decoder) + set_prompt
    void record_memory();                // append the pool's state after a batch step to memory_
    void attach_prompt_cache();          // open batch_.prompt_cache (if any) for sequence 0
    void save_prompt_cache_after_prefill();
    MemoryState memory_state() const;

    std::vector<std::unique_ptr<Session>> sessions_;  // (N) the batch; N = 1 without one
    int64_t selected_ = 0;
    BatchOptions batch_;
    std::shared_ptr<BlockPool> pool_;    // paged caches: the one pool of every sequence
    std::unique_ptr<Workspace> batch_ws_;  // for step_batch, sized by the prompts
    std::vector<std::shared_ptr<const MemoryState>> memory_;
    std::shared_ptr<PromptCacheUse> prompt_cache_;  // batch_.prompt_cache opened for the current prompt
    std::unique_ptr<Session> shadow_;
    bool compare_ = true;
    bool shadow_diverged_ = false;
    bool run_decode_only_ = false;
    std::string prompt_text_;
    uint64_t prompt_edits_applied_ = 0;
    std::string source_text_;            // encoder-decoder models: the encoder's input as typed
    uint64_t source_edits_applied_ = 0;
    std::string status_;
    bool status_error_ = false;
    uint64_t n_errors_ = 0;
    std::string last_export_;
    std::vector<HeadScore> heads_;       // for the current model; cleared when it is replaced
    uint64_t generation_ = 0;
    std::thread worker_;                 // last: starts after every member above exists
};

// The source a freshly loaded encoder-decoder model starts with (a short sentence its tokenizer knows).
inline constexpr const char* kDefaultSource = "the cat sat on the mat";

std::string token_text(const Model& model, TokenId id);  // display form of one token ("<id>" without tokenizer)
// Token ids for prompt text, as SetPrompt makes them; throws UsageError. Pure: safe on the UI thread.
std::vector<TokenId> encode_prompt(const Model& model, const std::string& text);

}  // namespace kvscope::gui
