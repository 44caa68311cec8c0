#pragma once
// The "cache on vs off" comparison: a shadow session that runs every step of a one-sequence session
// again with the cache switch flipped (recording off), so the window can show the same step computed
// both ways — logits, time and FLOPs. Sampling can split the two on a near tie; from then on the
// comparison stops (diverged) until it is synced again.
//
// Timing: both sides are timed the same way. The main session records q/k/v, keeps pool views and
// feeds the snapshots, so its own step time is not comparable with the shadow's. A second record-free
// session (the twin) runs each step the main session's way, the shadow runs it the other way, and each
// side's time is the model arithmetic alone (StepCost::compute_seconds). A step shorter than
// kTimingBudget is run again — step back, step (bit-exact) — the two sides interleaved, until its runs
// add up to the budget or kMaxTimingRuns; the time shown is the median of the runs.
//
//   sync(main, activity)     fresh twin and shadow that replay main's steps; activity(label) names the
//                            replay for the progress indicator
//   follow(step)             run the step main just ran, both ways, and time it
//   append_turn(ids, N, role, keep)   main appended a chat turn (keep >= 0: after rolling the cache back to
//                            keep positions, Session::append_turn): both do (cache off: the turn's first
//                            step then recomputes the whole conversation)
//   back(n_steps, n_turns)   after main stepped back to n_steps and n_turns: undo the extra steps and turns
//   n_turns()                turns the shadow holds
//   clear()                  no shadow (a batch, or the comparison switched off)
//   trace() / diverged()     the shadow's records; whether it stopped
//   timings()                (steps) the median compute time of each step with the cache on and off
//
//   cost_series(main, shadow, timings)    what the panel plots: FLOPs and time per step, on and off
//   time_outliers(seconds, flops)         points of a time series far slower than their work predicts
//   turn_costs(main, shadow, timings)     per chat turn: rows reused and computed by its prefill, and its
//                                         time (prefill + reply), cache on and off
//
// Threads: the worker's only (workbench.h); cost_series and time_outliers are pure.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "run/session.h"

namespace kvscope::gui {

inline constexpr double kTimingBudget = 0.1;  // seconds of runs per side before a step's time is taken
inline constexpr int kMaxTimingRuns = 9;

struct StepTiming {
    double on = 0, off = 0;      // seconds: median of the runs' model arithmetic (compute_seconds)
    int n_on = 0, n_off = 0;     // runs each median is of
};

class CacheComparison {
public:
    void sync(const Session& main, const std::function<void(std::string)>& activity);
    void follow(const StepRecord& main_step);
    void append_turn(const std::vector<TokenId>& ids, int64_t max_new_tokens, const std::string& role, int64_t keep = -1);
    void back(size_t n_steps, size_t n_turns);
    size_t n_turns() const { return shadow_ ? shadow_->parts().turns.size() : 0; }
    void clear() { shadow_.reset(), twin_.reset(), timings_.clear(), diverged_ = false; }
    bool active() const { return shadow_ != nullptr; }
    bool diverged() const { return diverged_; }
    const Trace* trace() const { return shadow_ ? &shadow_->trace() : nullptr; }
    const std::vector<StepTiming>& timings() const { return timings_; }

private:
    bool run_both(bool main_cache_on, const StepRecord& main_step);  // false: a side sampled another token

    std::unique_ptr<Session> twin_;      // main's way, not recorded: the timing of main's side
    std::unique_ptr<Session> shadow_;    // the other way, not recorded
    std::vector<StepTiming> timings_;    // (steps)
    bool diverged_ = false;
};

struct CostSeries {                      // index = step; empty past the steps both ways ran and timed
    std::vector<double> flops_on, flops_off;
    std::vector<double> seconds_on, seconds_off;  // StepTiming's medians
    std::vector<int> runs_on, runs_off;
};
CostSeries cost_series(const Trace& main, const Trace& shadow, const std::vector<StepTiming>& timings);

// A point is an outlier when its time per FLOP is over 3x the median time per FLOP of the series (a
// step the machine was busy elsewhere for); the chart's axis ignores outliers and marks them clipped.
std::vector<bool> time_outliers(const std::vector<double>& seconds, const std::vector<double>& flops);

struct TurnCost {                        // one turn (StepId::turn), summed over the steps both ways ran
    int64_t turn = 0;
    int64_t reused_on = 0, reused_off = 0;      // K/V rows its first prefill step read from the cache
    int64_t computed_on = 0, computed_off = 0;  // K/V rows its prefill steps computed
    double seconds_on = 0, seconds_off = 0;     // StepTiming's medians, prefill and reply steps
    int64_t n_steps = 0;
};
std::vector<TurnCost> turn_costs(const Trace& main, const Trace& shadow, const std::vector<StepTiming>& timings);

}  // namespace kvscope::gui
