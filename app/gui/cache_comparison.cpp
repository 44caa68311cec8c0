#include "cache_comparison.h"

namespace kvscope::gui {

void CacheComparison::sync(const Session& main, const std::function<void(std::string)>& activity) {
    clear();
    SessionOptions o = main.options();
    o.record = false;  // the shadow only contributes logits, time and FLOPs
    auto s = std::make_unique<Session>(main.share_model(), o);
    if (!main.prompt().empty()) {
        if (main.model().config().encoder_decoder) {
            // The session's prompt begins with the decoder start token, which set_prompt adds again.
            s->set_source(main.source());
            s->set_prompt(std::vector<TokenId>(main.prompt().begin() + 1, main.prompt().end()));
        } else {
            s->set_prompt(main.prompt());
        }
        const Trace& t = main.trace();
        if (t.size() > 0) activity("replaying " + std::to_string(t.size()) + " step(s) the other way");
        for (size_t i = 0; i < t.size(); ++i) {
            s->set_use_cache(!t[i].id.cache_on);
            s->step();
            if (s->trace().back().prediction.chosen != t[i].prediction.chosen) {
                diverged_ = true;
                return;
            }
        }
    }
    shadow_ = std::move(s);
}

void CacheComparison::follow(const StepRecord& main_step) {
    if (!shadow_ || diverged_) return;
    shadow_->set_use_cache(!main_step.id.cache_on);
    const StepRecord& s = shadow_->step();
    if (s.prediction.chosen != main_step.prediction.chosen) diverged_ = true;  // sampling split on a near tie: stop comparing
}

void CacheComparison::back(size_t n_steps) {
    if (!shadow_ || diverged_) return;
    // The shadow may lag when a step's comparison was cut short by an error.
    while (shadow_->trace().size() > n_steps) shadow_->step_back();
}

}  // namespace kvscope::gui
