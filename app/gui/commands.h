#pragma once
// The command queue: the only code in the app that calls Session. Buttons, keys, dropped folders and
// script lines all become a Command; the queue applies them between frames, so what a panel draws is
// always a finished step. Long runs (Run N, Run to end) advance in time slices: a few milliseconds of
// stepping per frame, so the window keeps redrawing and Pause works.
//
// A second "shadow" session mirrors every step with the cache switch flipped (and recording off), so
// the cache on vs off panel can show the same step computed both ways.
//
//   Controller(model, options)     a session on `model`; no prompt yet
//   push(cmd)                      queue an intent (applied in update())
//   execute(cmd)                   apply now (scripts); errors land in status()
//   update(budget_s)               apply queued intents, then run-slice for at most budget_s
//   session() / shadow()           read-only views for the panels (shadow() may be null)
//   status() / status_is_error()   one line for the status bar ("prefilled 4 tokens", errors)
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "session.h"

namespace kvscope::gui {

struct Command {
    enum class Kind {
        SetPrompt,      // text: prompt text (or "1,2,3" ids when the model has no tokenizer); resets
        Prefill,        // one prefill chunk
        Decode,         // n decode steps (run in slices)
        Step,           // whatever comes next, once
        Run,            // n steps of whatever comes next (slices); n < 0 = to the end
        Pause,          // stop a run
        Back,           // undo the last step
        Reset,          // back to before the first step
        Cache,          // on: cache switch for the following steps
        Compare,        // on: keep the shadow session (cache flipped) in step
        SetOptions,     // options: rebuild the session with the same prompt
        LoadModel,      // text: model folder; on failure the current model stays
        ExportStep,     // text: folder; step, layer, head (layer < 0 = all heads of all layers)
        ExportSession,  // text: folder; layer, head as above
    };
    Kind kind = Kind::Step;
    std::string text;
    int64_t n = 1;
    bool on = true;
    SessionOptions options;
    int64_t step = -1, layer = -1, head = -1;
};

class Controller {
public:
    Controller(std::shared_ptr<const Model> model, SessionOptions options);

    void push(Command c) { queue_.push_back(std::move(c)); }
    bool execute(const Command& c);   // false when the command failed (see status())
    void update(double budget_s);

    const Session& session() const { return *session_; }
    const Session* shadow() const { return shadow_ ? shadow_.get() : nullptr; }
    const Model& model() const { return session_->model(); }
    const std::string& prompt_text() const { return prompt_text_; }
    bool has_prompt() const { return !session_->prompt().empty(); }
    bool compare() const { return compare_; }
    bool shadow_diverged() const { return shadow_diverged_; }

    bool running() const { return run_left_ != 0; }
    int64_t run_done() const { return run_done_; }
    int64_t run_total() const { return run_total_; }  // -1 = to the end

    const std::string& status() const { return status_; }
    bool status_is_error() const { return status_error_; }
    const std::string& last_export() const { return last_export_; }
    uint64_t generation() const { return generation_; }  // bumps when the model or session is replaced

    // Token ids for prompt text, as SetPrompt would make them; throws UsageError.
    std::vector<TokenId> encode_prompt(const std::string& text) const;

private:
    void apply(const Command& c);
    bool step_once();                 // one step of whatever comes next, mirrored on the shadow
    void rebuild(std::shared_ptr<const Model> model, SessionOptions options);
    void sync_shadow();               // replay the main session's steps on a fresh shadow
    void set_status(std::string s, bool error = false);

    std::unique_ptr<Session> session_;
    std::unique_ptr<Session> shadow_;
    bool compare_ = true;
    bool shadow_diverged_ = false;
    std::string prompt_text_;
    std::deque<Command> queue_;
    int64_t run_left_ = 0, run_done_ = 0, run_total_ = 0;
    bool run_decode_only_ = false;
    std::string status_;
    bool status_error_ = false;
    std::string last_export_;
    uint64_t generation_ = 0;
};

std::string token_text(const Model& model, TokenId id);  // display form of one token ("<id>" without tokenizer)

}  // namespace kvscope::gui
