// The command queue (see commands.h). Every Session call of the app is in this file.
#include "commands.h"

#include <chrono>
#include <filesystem>

#include "../cli_args.h"
#include "errors.h"
#include "export.h"
#include "json.h"

namespace kvscope::gui {
namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

SessionOptions shadow_options(SessionOptions o) {
    o.record = false;  // the shadow only contributes logits, time and FLOPs
    return o;
}

}  // namespace

std::string token_text(const Model& model, TokenId id) {
    if (!model.tokenizer() || id < 0 || id >= model.tokenizer()->n_vocab()) return "<" + std::to_string(id) + ">";
    return display_bytes(model.tokenizer()->token_bytes(id));
}

Controller::Controller(std::shared_ptr<const Model> model, SessionOptions options) {
    options.record = true;
    rebuild(std::move(model), options);
    set_status("type a prompt, then press Prefill (or Space)");
}

void Controller::set_status(std::string s, bool error) {
    status_ = std::move(s);
    status_error_ = error;
}

std::vector<TokenId> Controller::encode_prompt(const std::string& text) const {
    const Model& m = model();
    if (m.tokenizer()) return m.tokenizer()->encode(text, false);
    std::vector<TokenId> ids;
    for (int64_t id : parse_id_list(text, "prompt ids"))
        ids.push_back(TokenId(id));
    return ids;
}

void Controller::rebuild(std::shared_ptr<const Model> model, SessionOptions options) {
    options.record = true;
    validate(options);
    auto fresh = std::make_unique<Session>(model, options);
    std::unique_ptr<Session> fresh_shadow;
    if (compare_) {
        SessionOptions so = shadow_options(options);
        so.use_cache = !options.use_cache;
        fresh_shadow = std::make_unique<Session>(model, so);
    }
    // Keep the prompt when it still fits the new model/options; otherwise start empty.
    if (!prompt_text_.empty()) {
        try {
            std::vector<TokenId> ids = model->tokenizer() ? model->tokenizer()->encode(prompt_text_, false)
                                                          : std::vector<TokenId>{};
            if (!model->tokenizer())
                for (int64_t id : parse_id_list(prompt_text_, "prompt ids")) ids.push_back(TokenId(id));
            fresh->set_prompt(ids);
            if (fresh_shadow) fresh_shadow->set_prompt(ids);
        } catch (const UsageError&) {
        }
    }
    session_ = std::move(fresh);
    shadow_ = std::move(fresh_shadow);
    shadow_diverged_ = false;
    run_left_ = 0;
    ++generation_;
}

void Controller::sync_shadow() {
    shadow_.reset();
    shadow_diverged_ = false;
    if (!compare_) return;
    SessionOptions so = shadow_options(session_->options());
    auto s = std::make_unique<Session>(session_->share_model(), so);
    if (!session_->prompt().empty()) {
        s->set_prompt(session_->prompt());
        const Trace& t = session_->trace();
        for (size_t i = 0; i < t.size(); ++i) {
            s->set_use_cache(!t[i].cache_on);
            s->step();
            if (s->trace().back().chosen != t[i].chosen) {
                shadow_diverged_ = true;
                return;
            }
        }
    }
    shadow_ = std::move(s);
}

bool Controller::step_once() {
    if (session_->next() == Session::Next::Done) return false;
    const StepRecord& r = session_->step();
    if (shadow_ && !shadow_diverged_) {
        shadow_->set_use_cache(!r.cache_on);
        const StepRecord& s = shadow_->step();
        if (s.chosen != r.chosen) shadow_diverged_ = true;  // sampling split on a near tie: stop comparing
    }
    return true;
}

void Controller::apply(const Command& c) {
    using K = Command::Kind;
    Session& s = *session_;
    auto describe = [&](const StepRecord& r) {
        std::string msg = std::string(phase_name(r.phase)) + " step " + std::to_string(r.index) + ": " +
                          std::to_string(r.tokens.size()) + " token(s) at position " + std::to_string(r.first_position);
        if (r.chosen) msg += ", next token " + std::to_string(*r.chosen) + " '" + token_text(model(), *r.chosen) + "'";
        return msg;
    };
    switch (c.kind) {
    case K::SetPrompt: {
        run_left_ = 0;
        prompt_text_ = c.text;
        std::vector<TokenId> ids = encode_prompt(c.text);
        s.set_prompt(ids);
        if (shadow_) shadow_->set_prompt(ids);
        shadow_diverged_ = false;
        if (!shadow_ && compare_) sync_shadow();
        set_status("prompt: " + std::to_string(ids.size()) + " tokens; press Prefill");
        return;
    }
    case K::Prefill:
        if (s.next() != Session::Next::Prefill)
            throw UsageError(s.prompt().empty() ? "no prompt is set" : "the prompt is already in the cache: decode instead");
        step_once();
        set_status(describe(s.trace().back()));
        return;
    case K::Step:
        if (s.next() == Session::Next::Done)
            throw UsageError(s.prompt().empty() ? "no prompt is set" : "generation is finished: step back or reset");
        step_once();
        set_status(describe(s.trace().back()));
        return;
    case K::Decode:
    case K::Run:
        if (c.kind == K::Decode && s.next() != Session::Next::Decode)
            throw UsageError(s.prompt().empty() ? "no prompt is set"
                             : s.next() == Session::Next::Prefill ? "prefill the prompt first"
                                                                   : "generation is finished: step back or reset");
        if (c.kind == K::Run && s.next() == Session::Next::Done)
            throw UsageError(s.prompt().empty() ? "no prompt is set" : "generation is finished: step back or reset");
        run_left_ = c.n < 0 ? -1 : c.n;
        run_total_ = c.n < 0 ? -1 : c.n;
        run_done_ = 0;
        run_decode_only_ = c.kind == K::Decode;
        if (run_left_ == 0) set_status("nothing to run");
        return;
    case K::Pause:
        if (run_left_) set_status("paused after " + std::to_string(run_done_) + " step(s)");
        run_left_ = 0;
        return;
    case K::Back:
        run_left_ = 0;
        if (!s.step_back()) throw UsageError("nothing to step back: no step has run");
        if (shadow_ && !shadow_diverged_) shadow_->step_back();
        if (shadow_diverged_) sync_shadow();
        set_status("stepped back to " + std::to_string(s.trace().size()) + " step(s)");
        return;
    case K::Reset:
        run_left_ = 0;
        s.reset();
        sync_shadow();
        set_status("reset: the cache is empty, same prompt");
        return;
    case K::Cache:
        s.set_use_cache(c.on);
        set_status(c.on ? "cache ON: the next steps reuse cached K/V" : "cache OFF: the next steps recompute every position");
        return;
    case K::Compare:
        compare_ = c.on;
        sync_shadow();
        set_status(c.on ? "comparing every step with the cache switch flipped" : "comparison off");
        return;
    case K::SetOptions: {
        SessionOptions o = c.options;
        o.use_cache = s.options().use_cache;
        rebuild(s.share_model(), o);
        set_status("options applied; the session restarted");
        return;
    }
    case K::LoadModel: {
        std::shared_ptr<const Model> m = Model::load(c.text);  // throws: the current model stays
        rebuild(m, s.options());
        if (session_->prompt().empty() && !prompt_text_.empty()) prompt_text_.clear();
        set_status("loaded " + c.text);
        return;
    }
    case K::ExportStep:
    case K::ExportSession: {
        if (s.trace().empty()) throw UsageError("nothing to export yet: run a step first");
        std::error_code ec;
        std::filesystem::create_directories(c.text, ec);
        if (ec || !std::filesystem::is_directory(c.text)) throw UsageError("cannot create folder " + c.text);
        ExportScope scope;
        if (c.layer >= 0) scope.layer = c.layer;
        if (c.head >= 0) scope.head = c.head;
        if (c.kind == K::ExportStep) {
            size_t step = c.step < 0 ? s.trace().size() - 1 : size_t(c.step);
            if (step >= s.trace().size()) throw UsageError("no step " + std::to_string(step) + " to export");
            last_export_ = export_step(s.trace(), step, model().tokenizer(), c.text, scope);
            set_status("exported step " + std::to_string(step) + " to " + last_export_);
        } else {
            export_trace(s.trace(), model().tokenizer(), c.text, scope);
            last_export_ = c.text;
            set_status("exported " + std::to_string(s.trace().size()) + " steps to " + c.text);
        }
        return;
    }
    }
}

bool Controller::execute(const Command& c) {
    try {
        apply(c);
        // Scripts run to completion at once.
        while (run_left_ != 0) update(1e9);
    } catch (const UsageError& e) {
        run_left_ = 0;
        set_status(e.what(), true);
    } catch (const LoadError& e) {
        set_status(e.what(), true);
    } catch (const JsonError& e) {
        set_status(e.what(), true);
    } catch (const std::exception& e) {
        run_left_ = 0;
        set_status(e.what(), true);
    }
    return !status_error_;
}

void Controller::update(double budget_s) {
    while (!queue_.empty()) {
        Command c = std::move(queue_.front());
        queue_.pop_front();
        try {
            apply(c);
        } catch (const UsageError& e) {
            run_left_ = 0;
            set_status(e.what(), true);
        } catch (const LoadError& e) {
            set_status(e.what(), true);
        } catch (const JsonError& e) {
            set_status(e.what(), true);
        } catch (const std::exception& e) {
            run_left_ = 0;
            set_status(e.what(), true);
        }
    }
    if (run_left_ == 0) return;
    // Time slice: at least one step, then more while the budget lasts.
    const double t0 = now_s();
    try {
        do {
            const Session::Next next = session_->next();
            if (next == Session::Next::Done || (run_decode_only_ && next != Session::Next::Decode)) {
                run_left_ = 0;
                break;
            }
            step_once();
            ++run_done_;
            if (run_left_ > 0) --run_left_;
        } while (run_left_ != 0 && now_s() - t0 < budget_s);
    } catch (const std::exception& e) {
        run_left_ = 0;
        set_status(e.what(), true);
        return;
    }
    if (run_left_ == 0) {
        const StepRecord* last = session_->trace().empty() ? nullptr : &session_->trace().back();
        set_status("ran " + std::to_string(run_done_) + " step(s)" +
                   (last ? "; now at position " + std::to_string(last->next_position) : std::string()));
    } else {
        set_status("running: " + std::to_string(run_done_) +
                   (run_total_ > 0 ? " / " + std::to_string(run_total_) : std::string()) + " steps");
    }
}

}  // namespace kvscope::gui
