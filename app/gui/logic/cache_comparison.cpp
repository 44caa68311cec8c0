#include "logic/cache_comparison.h"

#include <algorithm>

namespace kvscope::gui {
namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Each side's compute time, run again until its runs add up to the budget. The sides alternate, so a
// burst of load elsewhere on the machine lands on both rather than on one.
StepTiming time_both(Session& on, Session& off) {
    std::vector<double> t_on{on.trace().back().cost.compute_seconds};
    std::vector<double> t_off{off.trace().back().cost.compute_seconds};
    auto wants_more = [](const std::vector<double>& t) {
        double sum = 0;
        for (double x : t) sum += x;
        return int(t.size()) < kMaxTimingRuns && sum < kTimingBudget;
    };
    auto again = [](Session& s, std::vector<double>& t) {
        s.step_back();  // undoes the step exactly, RNG included: the rerun is the same step, bit for bit
        t.push_back(s.step().cost.compute_seconds);
    };
    while (wants_more(t_on) || wants_more(t_off)) {
        if (wants_more(t_on)) again(on, t_on);
        if (wants_more(t_off)) again(off, t_off);
    }
    return {median(t_on), median(t_off), int(t_on.size()), int(t_off.size())};
}

}  // namespace

void CacheComparison::sync(const Session& main, const std::function<void(std::string)>& activity) {
    clear();
    // An eviction policy evicts from the cache: there is no cache-off run of the same computation to compare.
    if (main.options().eviction.active()) return;
    SessionOptions o = main.options();
    o.record = false;  // twin and shadow only contribute logits, time and FLOPs
    o.history = true;  // steps are rerun for timing
    if (!main.parts().turns.empty()) o.max_new_tokens = main.parts().turns[0].max_new_tokens;  // append_turn changed main's
    auto twin = std::make_unique<Session>(main.parts().model, o);
    auto shadow = std::make_unique<Session>(main.parts().model, o);
    twin->use_prompt_cache(main.parts().prompt_cache);  // main's work exactly, a loaded prompt prefix included
    shadow_ = std::move(shadow);
    twin_ = std::move(twin);
    if (main.parts().prompt.empty()) return;
    // A chat replays turn by turn: the first turn's tokens as the prompt, later ones appended where main
    // appended them (before the first step of their turn), a turn that rolled the cache back rolling back
    // to the same position.
    const std::vector<Turn>& turns = main.parts().turns.list();
    for (Session* s : {twin_.get(), shadow_.get()}) {
        if (main.model().config().encoder_decoder) {
            // The session's prompt begins with the decoder start token, which set_prompt adds again.
            s->set_source(main.parts().source);
            s->set_prompt(std::vector<TokenId>(main.parts().prompt.begin() + 1, main.parts().prompt.end()));
        } else {
            s->set_prompt(turns[0].ids);
        }
    }
    auto replay_turn = [&](size_t k) {
        append_turn(turns[k].ids, turns[k].max_new_tokens, turns[k].role, turns[k].first_position);
    };
    const Trace& t = main.trace();
    if (t.size() > 0 && activity) activity("replaying " + std::to_string(t.size()) + " step(s) both ways for the comparison");
    size_t turn = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        for (; int64_t(turn) < t[i].id.turn && turn + 1 < turns.size(); ++turn) replay_turn(turn + 1);
        if (!run_both(t[i].id.cache_on, t[i])) return;
    }
    for (; turn + 1 < turns.size(); ++turn) replay_turn(turn + 1);  // appended, not stepped yet
}

void CacheComparison::append_turn(const std::vector<TokenId>& ids, int64_t max_new_tokens, const std::string& role, int64_t keep) {
    if (!shadow_ || diverged_) return;
    if (twin_->parts().turns.size() != shadow_->parts().turns.size() || twin_->trace().size() != shadow_->trace().size()) return;
    twin_->append_turn(ids, max_new_tokens, role, keep);
    shadow_->append_turn(ids, max_new_tokens, role, keep);
}

bool CacheComparison::run_both(bool main_cache_on, const StepRecord& main_step) {
    twin_->set_use_cache(main_cache_on);
    shadow_->set_use_cache(!main_cache_on);
    const StepRecord& a = twin_->step();
    const StepRecord& b = shadow_->step();
    if (a.prediction.chosen != main_step.prediction.chosen || b.prediction.chosen != main_step.prediction.chosen) {
        diverged_ = true;  // sampling split on a near tie: stop comparing
        return false;
    }
    const StepTiming t = main_cache_on ? time_both(*twin_, *shadow_) : time_both(*shadow_, *twin_);
    timings_.push_back(t);
    return true;
}

void CacheComparison::follow(const StepRecord& main_step) {
    if (!shadow_ || diverged_) return;
    // A comparison cut short by an error lags main; workbench.cpp syncs it again on the next Back.
    if (shadow_->trace().size() != size_t(main_step.id.index) || twin_->trace().size() != size_t(main_step.id.index)) return;
    if (shadow_->parts().turns.size() != size_t(main_step.id.turn) + 1 || twin_->parts().turns.size() != shadow_->parts().turns.size()) return;
    run_both(main_step.id.cache_on, main_step);
}

void CacheComparison::back(size_t n_steps, size_t n_turns) {
    if (!shadow_ || diverged_) return;
    // The shadow may lag when a step's comparison was cut short by an error. A turn appended after the
    // last step is the newest change, so step_back takes it back first.
    for (Session* s : {shadow_.get(), twin_.get()})
        while ((s->trace().size() > n_steps || s->parts().turns.size() > n_turns) && s->step_back()) {}
    if (timings_.size() > n_steps) timings_.resize(n_steps);
}

CostSeries cost_series(const Trace& main, const Trace& shadow, const std::vector<StepTiming>& timings) {
    CostSeries c;
    for (size_t i = 0; i < main.size() && i < shadow.size() && i < timings.size(); ++i) {
        const StepRecord& a = main[i];
        const StepRecord& b = shadow[i];
        c.flops_on.push_back((a.id.cache_on ? a : b).cost.flops);
        c.flops_off.push_back((a.id.cache_on ? b : a).cost.flops);
        c.seconds_on.push_back(timings[i].on);
        c.seconds_off.push_back(timings[i].off);
        c.runs_on.push_back(timings[i].n_on);
        c.runs_off.push_back(timings[i].n_off);
    }
    return c;
}

std::vector<TurnCost> turn_costs(const Trace& main, const Trace& shadow, const std::vector<StepTiming>& timings) {
    std::vector<TurnCost> out;
    for (size_t i = 0; i < main.size() && i < shadow.size() && i < timings.size(); ++i) {
        const StepRecord& a = main[i];
        const StepRecord& on = a.id.cache_on ? a : shadow[i];
        const StepRecord& off = a.id.cache_on ? shadow[i] : a;
        if (out.empty() || out.back().turn != a.id.turn) {
            out.push_back({});
            out.back().turn = a.id.turn;
            out.back().reused_on = on.cost.n_rows_reused;
            out.back().reused_off = off.cost.n_rows_reused;
        }
        TurnCost& t = out.back();
        if (a.id.phase == Phase::Prefill) {
            t.computed_on += on.cost.n_rows_computed;
            t.computed_off += off.cost.n_rows_computed;
        }
        t.seconds_on += timings[i].on;
        t.seconds_off += timings[i].off;
        ++t.n_steps;
    }
    return out;
}

std::vector<bool> time_outliers(const std::vector<double>& seconds, const std::vector<double>& flops) {
    std::vector<bool> out(seconds.size(), false);
    std::vector<double> rate;
    for (size_t i = 0; i < seconds.size() && i < flops.size(); ++i)
        if (flops[i] > 0) rate.push_back(seconds[i] / flops[i]);
    if (rate.size() < 3) return out;  // too few points to say what is usual
    const double usual = median(rate);
    for (size_t i = 0; i < seconds.size() && i < flops.size(); ++i)
        out[i] = flops[i] > 0 && seconds[i] / flops[i] > 3 * usual;
    return out;
}

}  // namespace kvscope::gui
