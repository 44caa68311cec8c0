// The worker's state and the intents it carries out (see workbench.h). Every Session and SessionGroup
// call of the app is in this file.
#include "logic/workbench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/errors.h"
#include "base/id_list.h"
#include "report/export.h"

namespace kvscope::gui {
namespace {

constexpr int64_t kMaxSequences = 16;  // a batch the Memory panel can still draw legibly

}  // namespace

std::string count_of(int64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many ? many : std::string(one) + "s");
}

std::string token_text(const Model& model, TokenId id) {
    if (!model.tokenizer()) return "<" + std::to_string(id) + ">";
    return display_bytes(model.tokenizer()->bytes_or_id(id));  // "<id N>": padding beyond the tokenizer
}

std::vector<TokenId> encode_prompt(const Model& m, const std::string& text) {
    if (m.tokenizer()) return m.tokenizer()->encode(text, false);
    std::vector<TokenId> ids;
    if (text.find_first_not_of(" \t\n") == std::string::npos) return ids;  // nothing typed yet: no error to show
    for (int64_t id : parse_id_list(text, "prompt ids"))
        ids.push_back(TokenId(id));
    return ids;
}

Workbench::Workbench(std::shared_ptr<const Model> model, SessionOptions options, WorkbenchHooks hooks)
    : hooks_(std::move(hooks)) {
    const bool ed = model->config().encoder_decoder;
    const std::string problem = rebuild(std::move(model), options, BatchOptions{});
    if (!problem.empty()) throw UsageError(problem);
    set_status(ed ? "encoder-decoder: the source is '" + source_text_ + "'; the prompt may stay empty. Press Prefill (or Space)"
                  : std::string("type a prompt, then press Prefill (or Space)"));
}

std::vector<const OptionSpec*> controls_options() {
    std::vector<const OptionSpec*> out;
    for (const char* name : {"prefill_chunk", "window", "sinks", "sink_positions", "evict", "kv_budget", "evict_sinks",
                             "evict_recent", "evict_obs", "evict_pool", "evict_pool_kind", "max_new_tokens", "kv_quant",
                             "kv_group", "kv_residual", "temperature", "top_k", "top_p", "seed"})
        out.push_back(option_named(name));
    return out;
}

namespace {

RunOptions run_options(const SessionOptions& o, const BatchOptions& b) {
    RunOptions r{o, GroupOptions{}};
    r.group.n_seq = b.n_seq;
    r.group.prompt_cache = b.prompt_cache;
    return r;
}

std::string script_words(const OptionSpec& o) { return std::string(o.script_key) + "="; }

}  // namespace

std::string script_options_help() {
    std::string keys;
    for (const OptionSpec& o : option_table()) {
        if (!*o.script_key) continue;
        keys += (keys.empty() ? "" : ", ") + std::string(o.script_key) + "=";
        if (o.kind == OptionKind::Choice) {
            const std::vector<std::string> names = choices_of(o);
            std::string list;
            for (size_t i = 0; i < names.size(); ++i) list += (i ? "|" : "") + names[i];
            keys += list + " (or 0.." + std::to_string(names.size() - 1) + ")";
        } else if (o.kind == OptionKind::Switch) {
            keys += "0|1";
        } else if (*o.metavar) {
            keys += o.metavar;
        }
    }
    return keys + "; restarts (block=0: the contiguous cache)";
}

const OptionSpec& script_option(const std::string& kv) {
    const size_t eq = kv.find('=');
    const OptionSpec* spec = eq == std::string::npos ? nullptr : option_by_script_key(kv.substr(0, eq));
    if (!spec) {
        std::string keys;
        for (const OptionSpec& o : option_table())
            if (*o.script_key) keys += (keys.empty() ? "" : ", ") + std::string(o.script_key);
        throw UsageError(eq == std::string::npos ? "expected key=value, got '" + kv + "'"
                                                 : "unknown option '" + kv.substr(0, eq) + "' (" + keys + ")");
    }
    RunOptions scratch;
    set_option(scratch, *spec, std::string_view(kv).substr(eq + 1), script_words);
    return *spec;
}

void set_script_option(SessionOptions& o, BatchOptions& b, const std::string& kv) {
    const OptionSpec& spec = script_option(kv);
    RunOptions r = run_options(o, b);
    set_option(r, spec, std::string_view(kv).substr(kv.find('=') + 1));
    o = r.session;
    b.n_seq = r.group.n_seq;
    b.prompt_cache = r.group.prompt_cache;
}

std::string check_window_options(const SessionOptions& o, const BatchOptions& b, const std::vector<std::string>& given) {
    std::vector<const OptionSpec*> specs;
    for (const std::string& name : given)
        if (const OptionSpec* s = option_named(name)) specs.push_back(s);
    const std::vector<std::string> found = problems(run_options(o, b), specs);
    return found.empty() ? "" : render_labels(found.front());
}

void Workbench::fail(Place place, const std::string& what) {
    const std::string text = render_labels(what);
    set_status(text, true);
    problem_ = {++n_problems_, place, text};
    if (place == Place::Export) last_export_.clear();  // the panel must not show an older export as the result
}

void Workbench::settle(Place place) {
    if (problem_.id && problem_.place == place) problem_ = {};
}

void Workbench::set_status(std::string s, bool error) {
    status_ = std::move(s);
    status_error_ = error;
    if (error) ++n_errors_;
}

void Workbench::apply(const Command& c) {
    activity("");
    std::visit(*this, c);
}

std::shared_ptr<const Snapshot> Workbench::snapshot() const {
    auto s = std::make_shared<Snapshot>();
    const Session& session = sel();
    s->model_ptr = session.parts().model;
    s->main_trace = session.trace();
    s->has_shadow = comparison_.active();
    if (const Trace* t = comparison_.trace()) s->shadow_trace = *t;
    s->shadow_diverged = comparison_.diverged();
    s->step_timings = comparison_.timings();
    s->compare = compare_;
    s->prompt_ids = session.parts().prompt;
    s->generated_ids = session.parts().generated;
    s->session_options = session.options();
    s->session_options.sampling.seed = group_->options().sampling.seed;  // the batch's base seed
    s->next_phase = session.next();
    s->source_ids = session.parts().source;
    s->source_text = source_text_;
    s->generation = generation_;
    s->status = status_;
    s->status_error = status_error_;
    s->n_errors = n_errors_;
    s->last_export = last_export_;
    s->problem = problem_;
    s->heads = heads_;
    s->lab = lab_;
    for (const Session* q : group_->sessions())
        s->sequences.push_back({q->trace(), q->parts().prompt, q->parts().generated, q->options().sampling.seed, q->next()});
    s->selected = selected_;
    s->batch = batch_;
    s->pool_views = group_->pool_views();
    s->turns = session.parts().turns.list();
    s->pending_edits = session.parts().edits.pending();
    s->chat_available = chat_.has_value();
    s->chat_unavailable = chat_problem_;
    if (chat_ && !chat_sent_.empty() && session.model().tokenizer()) {
        // Each reply runs from its turn's appended tokens to the next turn's first position (or the end).
        std::vector<TokenId> all = session.parts().prompt;
        all.insert(all.end(), session.parts().generated.begin(), session.parts().generated.end());
        const std::vector<Turn>& turns = session.parts().turns.list();
        const std::vector<TokenId>& stops = chat_->stop_tokens();
        for (size_t k = 0; k < chat_sent_.size() && k < turns.size(); ++k) {
            s->chat.push_back({int64_t(k) + 1, "user", chat_sent_[k], true});
            const size_t from = size_t(turns[k].first_position + turns[k].n_appended());
            const size_t to = k + 1 < turns.size() ? size_t(turns[k + 1].first_position) : all.size();
            std::vector<TokenId> reply(all.begin() + int64_t(std::min(from, all.size())),
                                       all.begin() + int64_t(std::min(std::max(from, to), all.size())));
            if (!reply.empty() && std::find(stops.begin(), stops.end(), reply.back()) != stops.end()) reply.pop_back();
            const bool complete = k + 1 < turns.size() || session.next() == Session::Next::Done;
            if (chat_rolled_back_ && k + 1 < turns.size()) {  // a later turn may have rolled the cache back over it
                s->chat.push_back({int64_t(k) + 1, "assistant", chat_->reply(k), true});
                continue;
            }
            if (!reply.empty() || complete)
                s->chat.push_back({int64_t(k) + 1, "assistant", session.model().tokenizer()->decode(reply), complete});
        }
    }
    return s;
}

std::string Workbench::rebuild(std::shared_ptr<const Model> model, SessionOptions options, BatchOptions batch,
                               const std::vector<std::string>& given) {
    options.record = true;
    if (const std::string problem = check_window_options(options, batch, given); !problem.empty()) throw UsageError(problem);
    if (batch.n_seq < 1 || batch.n_seq > kMaxSequences)
        throw UsageError("sequences must be 1.." + std::to_string(kMaxSequences) + ", got " + std::to_string(batch.n_seq));
    if (batch.suffixes.size() > size_t(batch.n_seq)) batch.suffixes.resize(size_t(batch.n_seq));
    GroupOptions g;
    g.n_seq = batch.n_seq;
    g.prompt_cache = batch.prompt_cache;
    g.pool_views = true;
    // A model folder with a chat template: replies (to a chat or a plain prompt) end at its end of turn.
    std::optional<ChatConversation> chat;
    std::string chat_problem;
    if (model->config().encoder_decoder) {
        chat_problem = "a chat needs a decoder-only instruction-tuned model; this one is an encoder-decoder";
    } else {
        try {
            chat = ChatConversation::open(model);
        } catch (const std::exception& e) {  // UsageError, LoadError (an unknown template)
            chat_problem = render_labels(e.what());
        }
    }
    options.stop_tokens = chat ? chat->stop_tokens() : std::vector<TokenId>{};
    auto group = std::make_unique<SessionGroup>(model, options, g);  // throws for a refused combination
    group_ = std::move(group);
    chat_ = std::move(chat);
    chat_problem_ = render_labels(chat_problem);
    chat_sent_.clear();
    chat_rolled_back_ = false;
    batch_ = std::move(batch);
    selected_ = 0;
    ++generation_;
    if (model->config().encoder_decoder && source_text_.empty()) source_text_ = kDefaultSource;
    // Keep the prompt when it still fits the new model/options; otherwise start empty (the text stays in
    // the prompt box, and the status says why).
    std::string problem;
    if (has_input()) {
        try {
            set_prompts();
        } catch (const UsageError& e) {
            problem = "the prompt was not set: " + render_labels(e.what());
        } catch (const LoadError& e) {
            problem = render_labels(e.what());
        }
    }
    sync_comparison();
    return problem;
}

bool Workbench::has_input() const {
    return !prompt_text_.empty() || (group_->model().config().encoder_decoder && !source_text_.empty());
}

void Workbench::set_prompts() {
    const Model& model = group_->model();
    if (model.config().encoder_decoder && source_text_.empty())
        throw UsageError("an encoder-decoder model needs a source: type the encoder's input in the source box");
    const std::vector<TokenId> prompt = encode_prompt(model, prompt_text_);
    std::vector<std::vector<TokenId>> ids(size_t(group_->size()), prompt);
    for (size_t i = 0; i < ids.size() && i < batch_.suffixes.size(); ++i)
        if (!batch_.suffixes[i].empty()) {
            const std::vector<TokenId> tail = encode_prompt(model, batch_.suffixes[i]);
            ids[i].insert(ids[i].end(), tail.begin(), tail.end());
        }
    std::vector<TokenId> source;
    if (model.config().encoder_decoder) source = encode_prompt(model, source_text_);
    if (!batch_.prompt_cache.empty()) activity("checking prompt cache " + batch_.prompt_cache);
    try {
        group_->set_prompts(std::move(ids), std::move(source));
    } catch (const LoadError&) {
        sync_comparison();  // the prompts are set; only the prompt cache file was refused
        throw;
    }
    sync_comparison();
}

void Workbench::sync_comparison() {
    if (!compare_ || group_->size() > 1) {
        comparison_.clear();  // a batch has no comparison
        return;
    }
    comparison_.sync(group_->session(0), hooks_.activity);
}

void Workbench::sync_chat() {
    if (!chat_) return;
    const int64_t n = sel().parts().prompt.empty() ? 0 : int64_t(sel().parts().turns.size());
    if (chat_->n_turns() <= n) return;
    chat_->truncate(n);
    chat_sent_.resize(size_t(n));
}

std::string Workbench::describe(const StepRecord& r) const {
    // Positions and token ids are both small numbers: each is named where it appears.
    const int64_t n = int64_t(r.id.tokens.size());
    std::string msg = std::string(phase_name(r.id.phase)) + " step " + std::to_string(r.id.index) + ": " +
                      count_of(n, "token") + " at " +
                      (n == 1 ? "position " + std::to_string(r.id.first_position)
                              : "positions " + std::to_string(r.id.first_position) + ".." +
                                    std::to_string(r.id.first_position + n - 1));
    if (r.prediction.chosen)
        msg += "; next token '" + token_text(group_->model(), *r.prediction.chosen) + "' (token id " +
               std::to_string(*r.prediction.chosen) + ")";
    return msg;
}

bool Workbench::step() {
    const Session::Next next = group_->next();
    if (next == Session::Next::Done) return false;
    if (group_->size() > 1) {
        activity("batch step " + std::to_string(group_->n_steps()) + ": " + std::to_string(group_->size()) + " sequences");
        group_->step();
        return true;
    }
    const Session& session = group_->session(0);
    const int64_t n_prompt = int64_t(session.parts().prompt.size());
    const int64_t done = session.parts().n_prompt_done;
    const int64_t chunk = session.options().prefill_chunk;
    const int64_t n = next == Session::Next::Prefill ? (chunk > 0 ? std::min(chunk, n_prompt - done) : n_prompt - done) : 1;
    const bool cache = session.options().use_cache;
    const int64_t rows = cache ? n : done + int64_t(session.parts().generated.size()) + n;
    activity(std::string(next == Session::Next::Prefill ? "prefill" : "decode") + " step " +
             std::to_string(session.trace().size()) + ": " + count_of(n, "new token") + ", " +
             count_of(rows, "row") + " computed (cache " + (cache ? "ON)" : "OFF)"));
    group_->step();
    const StepRecord& r = session.trace().back();
    if (comparison_.active() && !comparison_.diverged()) {
        // Show the step now; the other way (often the slow cache-off one) follows.
        if (hooks_.publish) hooks_.publish();
        activity("the same step with the cache " + std::string(r.id.cache_on ? "OFF" : "ON") +
                 " (comparison), then both timed alike");
        comparison_.follow(r);
    }
    return true;
}

RunPlan Workbench::plan_run(int64_t n, bool decode_only) const {
    const Session::Next next = group_->next();
    const Session& s = sel();
    if (decode_only && next != Session::Next::Decode)
        throw UsageError(!group_->has_prompts() ? "no prompt is set"
                         : next == Session::Next::Prefill ? "prefill the prompt first"
                                                          : "generation is finished: step back or reset");
    if (next == Session::Next::Done)
        throw UsageError(group_->has_prompts() ? "generation is finished: step back or reset" : "no prompt is set");
    // Steps a run to the end would take: the rest of the prompt's chunks plus the tokens still to generate.
    const int64_t chunk = s.options().prefill_chunk;
    const int64_t left_prompt = int64_t(s.parts().prompt.size()) - s.parts().n_prompt_done;
    const int64_t prefill_steps = left_prompt <= 0 ? 0 : chunk > 0 ? (left_prompt + chunk - 1) / chunk : 1;
    const int64_t decode_steps = s.options().max_new_tokens - int64_t(s.parts().generated.size()) - (left_prompt > 0 ? 1 : 0) + 1;
    RunPlan p;
    p.steps = n < 0 ? -1 : n;
    p.limit = n < 0 ? std::max<int64_t>(1, prefill_steps + std::max<int64_t>(0, decode_steps - 1)) : n;
    p.decode_only = decode_only;
    return p;
}

std::string Workbench::status_after_run(int64_t n_done) const {
    const StepRecord* last = sel().trace().empty() ? nullptr : &sel().trace().back();
    return "ran " + count_of(n_done, "step") +
           (last ? "; now at position " + std::to_string(last->cache.next_position) : std::string());
}

void Workbench::operator()(const SetPrompt& c) {
    prompt_text_ = c.text;
    set_prompts();
    if (chat_) {  // a typed prompt replaces the conversation
        chat_->truncate(0);
        chat_sent_.clear();
    }
    const Session& s = sel();
    const bool ed = s.model().config().encoder_decoder;
    set_status("prompt: " + count_of(int64_t(s.parts().prompt.size()) - (ed ? 1 : 0), "token") +
               (ed ? " after the decoder start token, source " + count_of(int64_t(s.parts().source.size()), "token")
                   : std::string()) +
               (group_->size() > 1 ? " (sequence " + std::to_string(selected_) + " of " +
                                         std::to_string(group_->size()) + ")" : std::string()) +
               "; press Prefill");
}

void Workbench::operator()(const SetSource& c) {
    if (!group_->model().config().encoder_decoder)
        throw UsageError(group_->model().dir() + " is decoder-only: it takes no source (load an encoder-decoder model)");
    source_text_ = c.text;
    set_prompts();
    set_status("source: " + count_of(int64_t(sel().parts().source.size()), "token") +
               " for the encoder; the first prefill step runs it and fills the cross-attention cache");
}

void Workbench::operator()(const Prefill&) {
    if (group_->next() != Session::Next::Prefill)
        throw UsageError(!group_->has_prompts() ? "no prompt is set" : "the prompt is already in the cache: decode instead");
    step();
    set_status(describe(sel().trace().back()));
}

void Workbench::operator()(const Step&) {
    if (!step())
        throw UsageError(group_->has_prompts() ? "generation is finished: step back or reset" : "no prompt is set");
    set_status(describe(sel().trace().back()));
}

void Workbench::operator()(const Back& c) {
    for (int64_t i = 0; i < c.n; ++i) {
        if (!group_->step_back()) throw UsageError("nothing to step back: no step has run");
        if (group_->size() == 1) comparison_.back(group_->session(0).trace().size(), group_->session(0).parts().turns.size());
    }
    const Trace* shadow = comparison_.trace();
    if (compare_ && group_->size() == 1 &&
        (comparison_.diverged() || (shadow && (shadow->size() != group_->session(0).trace().size() ||
                                               comparison_.n_turns() != group_->session(0).parts().turns.size()))))
        sync_comparison();
    sync_chat();
    set_status("stepped back to " + count_of(int64_t(sel().trace().size()), "step"));
}

void Workbench::operator()(const Reset&) {
    group_->reset();  // a prompt cache file written by the first run is loaded next time
    sync_comparison();
    sync_chat();
    set_status("reset: the cache is empty, same prompt");
}

void Workbench::operator()(const SetCache& c) {
    SessionOptions o = group_->options();
    o.use_cache = c.on;
    if (const std::string problem = check_window_options(o, batch_); !problem.empty()) throw UsageError(problem);
    group_->set_use_cache(c.on);
    set_status(c.on ? "cache ON: the next steps reuse cached K/V" : "cache OFF: the next steps recompute every position");
}

void Workbench::operator()(const SetCompare& c) {
    compare_ = c.on;
    sync_comparison();
    set_status(c.on ? "comparing every step with the cache switch flipped" : "comparison off");
}

void Workbench::operator()(const SetOptions& c) {
    SessionOptions o = c.options;
    o.use_cache = group_->options().use_cache;
    const std::string problem = rebuild(group_->share_model(), o, c.batch, c.given);
    if (!problem.empty()) throw UsageError("options applied, but " + problem);
    set_status(group_->size() > 1 ? "options applied: " + std::to_string(group_->size()) + " sequences restarted"
                                  : "options applied; the session restarted");
}

void Workbench::operator()(const LoadModel& c) {
    activity("loading model " + c.dir);
    // The weight format and placement the app was started with (--dtype, --map-weights) stay; a failed load
    // throws and the model stays.
    const Weights& now = group_->model().weights();
    std::shared_ptr<const Model> m = Model::load(c.dir, now.bf16 ? WeightFormat::BF16 : WeightFormat::F32,
                                                 now.mapped ? WeightPlacement::Mapped : WeightPlacement::HugePages);
    const std::string problem = rebuild(m, group_->options(), batch_);  // the base seed and the cache switch stay
    heads_.clear();
    lab_.reset();
    if (!problem.empty()) throw UsageError("loaded " + c.dir + ", but " + problem);
    set_status("loaded " + c.dir +
               (m->config().encoder_decoder ? ": an encoder-decoder; source '" + source_text_ +
                                                  "' (edit it above the prompt), press Prefill"
                                            : std::string()));
}

// The shown sequence's trace, checked for export (core's export makes the folder under the output rule).
ExportScope Workbench::prepare_export(const std::string& dir, int64_t layer, int64_t head,
                                      const PlotOutput& plots) const {
    if (sel().trace().empty()) throw UsageError("nothing to export yet: run a step first");
    check_plot_scale("export scale", plots.scale);
    activity("exporting to " + dir);
    ExportScope scope;
    if (layer >= 0) scope.layer = layer;
    if (head >= 0) scope.head = head;
    scope.plots = plots;
    return scope;
}

void Workbench::operator()(const ExportStep& c) {
    ExportScope scope = prepare_export(c.dir, c.layer, c.head, c.plots);
    const Session& s = sel();
    scope.logit_lens = &s.model();
    const size_t step = c.step < 0 ? s.trace().size() - 1 : size_t(c.step);
    if (step >= s.trace().size()) throw UsageError("no step " + std::to_string(step) + " to export");
    last_export_ = export_step(s.trace(), step, s.model().tokenizer(), c.dir, scope);
    set_status("exported step " + std::to_string(step) + " to " + last_export_);
}

void Workbench::operator()(const ExportSession& c) {
    ExportScope scope = prepare_export(c.dir, c.layer, c.head, c.plots);
    const Session& s = sel();
    scope.logit_lens = &s.model();
    const int64_t stale = export_trace(s.trace(), s.model().tokenizer(), c.dir, scope);
    last_export_ = c.dir;
    set_status("exported " + count_of(int64_t(s.trace().size()), "step") + " to " + c.dir +
               (stale ? "; removed " + count_of(stale, "step folder") + " of an earlier, longer export" : ""));
}

void Workbench::operator()(const ExplainHeads&) {
    if (group_->model().config().encoder_decoder)
        throw UsageError("head scores run decoder-only probe prompts: not measured for encoder-decoder models");
    activity("measuring every head on probe prompts");
    heads_ = head_scores(group_->share_model());
    set_status("measured " + std::to_string(heads_.size()) + " heads: previous-token and induction scores");
}

void Workbench::operator()(const MeasureLab& c) {
    const Session& s = sel();
    std::vector<TokenId> tokens = s.parts().prompt;
    tokens.insert(tokens.end(), s.parts().generated.begin(), s.parts().generated.end());
    std::vector<LabConfig> configs;
    for (const std::string& spec : c.specs.empty() ? lab_default_specs(s.model().config()) : c.specs)
        configs.push_back(parse_lab_config(spec));
    activity("the cache lab: " + count_of(int64_t(configs.size()), "configuration") + " over " +
             count_of(int64_t(tokens.size()), "token"));
    lab_ = std::make_shared<const LabReport>(run_cache_lab(group_->share_model(), tokens, std::move(configs)));
    set_status("cache lab: " + count_of(int64_t(lab_->runs.size()), "configuration") + ", " +
               count_of(int64_t(tokens.size()), "token") + " (sequence " + std::to_string(selected_) + ")");
}

void Workbench::operator()(const Select& c) {
    if (c.sequence < 0 || c.sequence >= group_->size())
        throw UsageError("no sequence " + std::to_string(c.sequence) + ": the batch has " + std::to_string(group_->size()));
    selected_ = c.sequence;
    set_status("showing sequence " + std::to_string(c.sequence) + " of " + std::to_string(group_->size()));
}

void Workbench::operator()(const EditCache& c) {
    CacheEdit e;
    e.kind = c.kind;
    e.position = c.position;
    e.layer = c.layer;
    e.kv_head = c.head;
    if (c.kind == CacheEditKind::Patch) {
        if (c.patch_text.empty()) throw UsageError("type the other prompt whose K/V a patch writes");
        activity("running the patch source: " + c.patch_text);
        e.rows = kv_rows_of_run(sel().parts().model, sel().options(), encode_prompt(sel().model(), c.patch_text), c.position);
        e.source = c.patch_text;
    }
    const CacheEditRecord& r = group_->apply_edit(std::move(e));
    const EditComparison& x = r.effect;
    char kl[32];
    std::snprintf(kl, sizeof kl, "%.4g", x.kl);
    set_status(std::string(cache_edit_kind_name(c.kind)) + " position " + std::to_string(c.position) + ": next token KL " +
               kl + ", top-1 '" + token_text(sel().model(), x.top1_before) + "' -> '" +
               token_text(sel().model(), x.top1_after) + "' (step back undoes it)");
}

void Workbench::operator()(const SendChat& c) {
    if (!chat_) throw UsageError("no chat for this model: " + chat_problem_);
    if (c.text.find_first_not_of(" \t\r\n") == std::string::npos) throw UsageError("type a message first");
    if (group_->size() > 1) throw UsageError("a chat runs one sequence: set sequences to 1 and apply");
    const ChatMessage message{"user", c.text};
    const Session& s = sel();
    const int64_t max_new = group_->options().max_new_tokens;
    if (chat_->n_turns() == 0 || s.parts().prompt.empty()) {
        // The first message is the prompt: the whole rendering up to the generation prompt.
        std::vector<TokenId> ids = chat_->next_turn(message, {}, {}).ids;
        const int64_t n = int64_t(ids.size());
        try {
            group_->set_prompts({std::move(ids)});  // refused before anything changes
        } catch (const UsageError& e) {
            throw UsageError(std::string("the message was not sent: ") + e.what());
        }
        sync_comparison();
        chat_->truncate(0);
        chat_sent_.assign(1, c.text);
        chat_rolled_back_ = false;
        chat_->add(message, {});
        set_status("chat turn 0: " + count_of(n, "token") + " of the rendered conversation; the reply follows");
        return;
    }
    if (s.next() == Session::Next::Prefill)
        throw UsageError("the last message is not in the cache yet: run it to its reply first");
    std::vector<TokenId> conversation = s.parts().prompt;
    conversation.insert(conversation.end(), s.parts().generated.begin(), s.parts().generated.end());
    const std::vector<TokenId> reply = s.parts().generated;
    ChatTurn turn = chat_->next_turn(message, conversation, reply);
    const int64_t n = int64_t(turn.ids.size());
    const int64_t first = int64_t(conversation.size());
    const std::vector<TokenId> copy = turn.ids;
    try {
        group_->append_turn(std::move(turn.ids), max_new, "user", turn.keep);  // refused before anything changes
    } catch (const UsageError& e) {
        throw UsageError(std::string("the message was not sent: ") + e.what());
    }
    comparison_.append_turn(copy, max_new, "user", turn.keep);
    chat_->add(message, reply);
    chat_sent_.push_back(c.text);
    chat_rolled_back_ |= turn.rolled_back;
    if (turn.rolled_back)
        set_status("chat turn " + std::to_string(chat_->n_turns() - 1) + ": the template re-rendered earlier turns: cache rolled "
                   "back from " + std::to_string(first) + " to " + std::to_string(turn.keep) + " positions (the common token "
                   "prefix), " + count_of(n, "token") + " prefilled after them; earlier steps can no longer be stepped back");
    else
        set_status("chat turn " + std::to_string(chat_->n_turns() - 1) + ": " + count_of(n, "token") + " appended at position " +
                   std::to_string(first) + "; earlier positions stay in the cache");
}

}  // namespace kvscope::gui
