#pragma once
// What the worker thread owns and does: the session group (core/run/session_group.h) with the batch options
// it was built from, the cache on/off comparison, the sequence the panels show, head scores, the status
// line. apply() carries out one intent; snapshot() copies the state the views draw. Every call that
// changes a Session or SessionGroup is in this file's .cpp, but for the cache comparison's timed
// reruns (cache_comparison.cpp, on sessions it owns); the panels see only snapshots.
//
//   Workbench(model, options, hooks)   a group on `model`, no prompt yet
//   apply(cmd)                          carry out one intent (std::visit); throws UsageError / LoadError
//                                       with a one-line reason, and the state stays usable
//   step()                              one step of whatever comes next (a run's step), mirrored by the
//                                       comparison; false when the group is done
//   plan_run(n, decode_only)            check a Run / Decode and say how many steps it may take
//   fail(place, what)                   a command from `place` failed: the status line and that panel say why
//   settle(place)                       a command from `place` succeeded: its earlier error is over
//   snapshot()                          what the views draw, as of now
//
// Chat (SendChat): when the model folder has a chat template, the first message sets the prompt to its
// rendering and each later one appends a turn to the same cache (the comparison's sessions append it
// too, so cache off re-prefills the whole conversation); the controller then runs to the reply's end.
//
// Threads: one thread only (the controller's worker, or a test). Hooks are called from it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "logic/cache_comparison.h"
#include "logic/commands.h"
#include "logic/snapshot.h"
#include "report/export.h"
#include "run/chat_conversation.h"
#include "run/options.h"
#include "run/session_group.h"

namespace kvscope::gui {

struct WorkbenchHooks {
    std::function<void(std::string)> activity;  // what is being done now (the progress indicator's label)
    std::function<void()> publish;              // show the state now, mid-command (a step before its comparison)
};

// How long a Run or Decode may take, as the worker plans it.
struct RunPlan {
    int64_t steps = 0;                   // < 0: to the end
    int64_t limit = 0;                   // best guess of the steps "to the end" takes
    bool decode_only = false;            // Decode N: stop at anything but a decode step
};

// The window's session options, read from the option table (core/run/options.h):
//   controls_options()           the options the Controls' "Session options" section shows, in its order
//   script_options_help()        the `options k=v ...` line of `gui --help`: every script key of the table
//   script_option(kv)            the table option of one `key=value`; UsageError naming the key when the
//                                key is unknown or the value is not one the option takes
//   set_script_option(o, b, kv)  store one `key=value` into the window's options (checked as above)
//   check_window_options(o, b, given)  every combination (core's problems), in the window's labels; "" = fine
std::vector<const OptionSpec*> controls_options();
std::string script_options_help();
const OptionSpec& script_option(const std::string& kv);
void set_script_option(SessionOptions& o, BatchOptions& b, const std::string& kv);
std::string check_window_options(const SessionOptions& o, const BatchOptions& b, const std::vector<std::string>& given = {});

class Workbench {
public:
    Workbench(std::shared_ptr<const Model> model, SessionOptions options, WorkbenchHooks hooks);

    void apply(const Command& c);
    bool step();
    RunPlan plan_run(int64_t n, bool decode_only) const;
    Session::Next next() const { return group_->next(); }
    void fail(Place place, const std::string& what);
    void settle(Place place);
    void set_status(std::string s, bool error = false);
    std::string status_after_run(int64_t n_done) const;
    std::shared_ptr<const Snapshot> snapshot() const;

    // Intents, one each (apply() dispatches to them).
    void operator()(const SetPrompt& c);
    void operator()(const SetSource& c);
    void operator()(const Prefill&);
    void operator()(const Step&);
    void operator()(const Decode&) {}    // runs: the controller plans them (plan_run) and calls step()
    void operator()(const Run&) {}
    void operator()(const Pause&) {}
    void operator()(const Back& c);
    void operator()(const Reset&);
    void operator()(const SetCache& c);
    void operator()(const SetCompare& c);
    void operator()(const SetOptions& c);
    void operator()(const LoadModel& c);
    void operator()(const ExportStep& c);
    void operator()(const ExportSession& c);
    void operator()(const ExplainHeads&);
    void operator()(const Select& c);
    void operator()(const SendChat& c);
    void operator()(const MeasureLab& c);
    void operator()(const EditCache& c);

private:
    const Session& sel() const { return group_->session(selected_); }
    // A new group (throws when refused, the old one stays); returns why the prompt could not be set, or "".
    std::string rebuild(std::shared_ptr<const Model> model, SessionOptions options, BatchOptions batch,
                        const std::vector<std::string>& given = {});
    void set_prompts();                  // encode source, prompt + suffixes into the group; sync the comparison
    bool has_input() const;
    void sync_comparison();
    void sync_chat();                    // after Back / Reset: forget the messages whose turns are gone
    std::string describe(const StepRecord& r) const;
    ExportScope prepare_export(const std::string& dir, int64_t layer, int64_t head, const PlotOutput& plots) const;
    void activity(std::string what) const { if (hooks_.activity) hooks_.activity(std::move(what)); }

    WorkbenchHooks hooks_;
    std::unique_ptr<SessionGroup> group_;
    BatchOptions batch_;                 // what the group was built from
    int64_t selected_ = 0;
    CacheComparison comparison_;
    bool compare_ = true;
    std::string prompt_text_;            // the text of the last SetPrompt / SetSource applied
    std::string source_text_;
    std::string status_;
    bool status_error_ = false;
    uint64_t n_errors_ = 0;
    std::string last_export_;
    Snapshot::Problem problem_;
    uint64_t n_problems_ = 0;
    std::vector<HeadScore> heads_;       // for the current model; cleared when it is replaced
    std::shared_ptr<const LabReport> lab_;  // the last MeasureLab's, for the current model
    uint64_t generation_ = 0;
    std::optional<ChatConversation> chat_;  // the model folder has a chat template kvscope renders
    std::string chat_problem_;           // why not, in one line
    std::vector<std::string> chat_sent_; // (chat_->n_turns()) the user messages as typed
    bool chat_rolled_back_ = false;      // a turn rolled the cache back: earlier replies are shown as sent, not from the cache
};

// The source a freshly loaded encoder-decoder model starts with (a short sentence its tokenizer knows).
inline constexpr const char* kDefaultSource = "the cat sat on the mat";

// "1 query", "3 queries": the count and the noun in the number it needs (`many` defaults to one + "s").
std::string count_of(int64_t n, const char* one, const char* many = nullptr);
std::string token_text(const Model& model, TokenId id);  // display form of one token ("<id>" without tokenizer, "<id N>" beyond it)
// Token ids for prompt text, as SetPrompt makes them; throws UsageError. Pure: safe on the UI thread.
std::vector<TokenId> encode_prompt(const Model& model, const std::string& text);

}  // namespace kvscope::gui
