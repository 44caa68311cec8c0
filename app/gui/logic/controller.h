#pragma once
// The command queue and its worker thread. Buttons, keys, dropped folders and script lines push intents
// (commands.h); one worker thread applies them one by one to the Workbench (workbench.h), so a long step
// (a 1000-token prefill, a cache-off step late in a run, loading a model) never stalls the window. After
// every command or step the worker publishes an immutable Snapshot (snapshot.h); panels draw the newest.
//
//   Controller(model, options)     a Workbench on `model`; no prompt yet; starts the worker
//   push(cmd)                      queue an intent; returns at once (false + notice when refused). A
//                                  SetPrompt / SetSource also becomes the text the boxes show (inputs())
//   inputs()                       the prompt and source text as last pushed: the one copy of that text
//   snapshot()                     the newest published state (hold the pointer for a whole frame)
//   progress()                     what the worker is doing now, for the "working..." indicator
//   busy()                         the worker has a command, a run or queued intents
//   wait_idle()                    block until not busy (scripts, tests)
//   execute(cmd)                   push + wait_idle; false when the command failed (see snapshot status)
//   set_wake(fn)                   called from the worker after each publish (wakes the event loop)
//
// Threads: push, inputs, snapshot, progress, busy, wait_idle, execute and set_wake are for any thread
// but the worker (in the app, the drawing thread). Everything the two threads share is in `Shared`,
// guarded by one mutex; the Workbench belongs to the worker alone.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "logic/commands.h"
#include "logic/snapshot.h"
#include "logic/workbench.h"

namespace kvscope::gui {

// The text of the prompt and source boxes.
struct Inputs {
    std::string prompt;
    std::string source;                  // encoder-decoder models: the encoder's input
};

class Controller {
public:
    Controller(std::shared_ptr<const Model> model, SessionOptions options);
    ~Controller();                       // lets the step in progress finish, then joins the worker
    Controller(const Controller&) = delete;
    Controller& operator=(const Controller&) = delete;

    bool push(Command c);
    Inputs inputs() const;
    std::shared_ptr<const Snapshot> snapshot() const;
    Progress progress() const;
    bool busy() const;
    void wait_idle();
    bool execute(Command c);
    void set_wake(std::function<void()> wake);

private:
    struct RunState {
        int64_t left = 0;                // steps still to run; < 0 = to the end; 0 = no run
        int64_t done = 0, total = 0, limit = 0;
        bool decode_only = false;
    };
    struct Shared {                      // guarded by m_
        std::deque<Command> queue;
        std::shared_ptr<const Snapshot> snapshot;
        Inputs inputs;
        RunState run;
        bool stop = false;
        bool working = false;            // the worker is inside a command or a run step
        std::string activity, notice;
        double activity_start = 0;
        std::function<void()> wake;
    };

    void worker_loop();                  // the worker thread
    void apply(const Command& c);        // worker: one intent (runs are planned here)
    void run_step();                     // worker: one step of the current run
    void publish();                      // worker: a new Snapshot from the Workbench
    void set_activity(std::string what);
    bool idle_locked() const { return !shared_.working && shared_.queue.empty() && shared_.run.left == 0; }

    mutable std::mutex m_;
    std::condition_variable cv_;         // worker: new intent or stop; waiters: idle
    Shared shared_;
    std::unique_ptr<Workbench> bench_;   // the worker's (and the constructor's, before it starts)
    std::thread worker_;                 // last: starts after every member above exists
};

}  // namespace kvscope::gui
