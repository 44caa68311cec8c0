#pragma once
// The "cache on vs off" comparison: a shadow session that runs every step of a one-sequence session
// again with the cache switch flipped (recording off), so the window can show the same step computed
// both ways — logits, time and FLOPs. Sampling can split the two on a near tie; from then on the
// comparison stops (diverged) until it is synced again.
//
//   sync(main, activity)     a fresh shadow that replays main's steps the other way; activity(label)
//                            names the replay for the progress indicator
//   follow(step)             run the step main just ran, the other way
//   back(n_steps)            after main stepped back to n_steps: undo the shadow's extra steps
//   clear()                  no shadow (a batch, or the comparison switched off)
//   trace() / diverged()     its records; whether it stopped
//
// Threads: the worker's only (workbench.h).
#include <functional>
#include <memory>
#include <string>

#include "session.h"

namespace kvscope::gui {

class CacheComparison {
public:
    void sync(const Session& main, const std::function<void(std::string)>& activity);
    void follow(const StepRecord& main_step);
    void back(size_t n_steps);
    void clear() { shadow_.reset(), diverged_ = false; }
    bool active() const { return shadow_ != nullptr; }
    bool diverged() const { return diverged_; }
    const Trace* trace() const { return shadow_ ? &shadow_->trace() : nullptr; }

private:
    std::unique_ptr<Session> shadow_;
    bool diverged_ = false;
};

}  // namespace kvscope::gui
