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
//   Controller(model, options)     a session on `model`; no prompt yet; starts the worker
//   push(cmd)                      queue an intent; returns at once (false + notice when refused)
//   snapshot()                     the newest published state (hold the pointer for a whole frame)
//   progress()                     what the worker is doing now, for the "working..." indicator
//   busy()                         the worker has a command, a run or queued intents
//   wait_idle()                    block until not busy (scripts, tests)
//   execute(cmd)                   push + wait_idle; false when the command failed (see snapshot status)
//   set_wake(fn)                   called from the worker after each publish (wakes the event loop)
//   prompt_edits()                 SetPrompt intents pushed so far (see Snapshot::prompt_edits)
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

namespace kvscope::gui {

struct Command {
    enum class Kind {
        SetPrompt,      // text: prompt text (or "1,2,3" ids when the model has no tokenizer); resets
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
    };
    Kind kind = Kind::Step;
    std::string text;
    int64_t n = 1;
    bool on = true;
    SessionOptions options;
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
    uint64_t generation = 0;             // bumps when the model or session is replaced
    std::string status;                  // one line for the status bar
    bool status_error = false;
    uint64_t n_errors = 0;               // failed commands so far (scripts compare before/after a line)
    std::string last_export;
    std::vector<HeadScore> heads;        // ExplainHeads' result for this model (empty: not measured)

    const Model& model() const { return *model_ptr; }
    const Trace& trace() const { return main_trace; }
    const Trace* shadow() const { return has_shadow && !shadow_diverged ? &shadow_trace : nullptr; }
    const std::vector<TokenId>& prompt() const { return prompt_ids; }
    const std::vector<TokenId>& generated() const { return generated_ids; }
    const SessionOptions& options() const { return session_options; }
    Session::Next next() const { return next_phase; }
    bool has_prompt() const { return !prompt_ids.empty(); }
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

private:
    // Worker side: everything below the mutex line is touched only by the worker thread (and by the
    // constructor before it starts).
    void worker_loop();
    void apply(const Command& c);
    bool step_once();                    // one step of whatever comes next, mirrored on the shadow
    void run_step();                     // one step of the current run
    void rebuild(std::shared_ptr<const Model> model, SessionOptions options);
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
    uint64_t prompt_edits_pushed_ = 0;
    std::function<void()> wake_;

    std::unique_ptr<Session> session_;
    std::unique_ptr<Session> shadow_;
    bool compare_ = true;
    bool shadow_diverged_ = false;
    bool run_decode_only_ = false;
    std::string prompt_text_;
    uint64_t prompt_edits_applied_ = 0;
    std::string status_;
    bool status_error_ = false;
    uint64_t n_errors_ = 0;
    std::string last_export_;
    std::vector<HeadScore> heads_;       // for the current model; cleared when it is replaced
    uint64_t generation_ = 0;
    std::thread worker_;                 // last: starts after every member above exists
};

std::string token_text(const Model& model, TokenId id);  // display form of one token ("<id>" without tokenizer)
// Token ids for prompt text, as SetPrompt makes them; throws UsageError. Pure: safe on the UI thread.
std::vector<TokenId> encode_prompt(const Model& model, const std::string& text);

}  // namespace kvscope::gui
