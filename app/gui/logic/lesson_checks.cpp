#include "logic/lesson_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "analysis/cache_lab.h"
#include "logic/derived_views.h"
#include "logic/workbench.h"

namespace kvscope::gui {
namespace {

using State = CheckResult::State;

CheckResult waiting(std::string why) { return {State::Waiting, std::move(why), {}}; }

std::string num(double x) {
    char b[32];
    if (x == std::floor(x) && std::abs(x) < 1e15) std::snprintf(b, sizeof b, "%.0f", x);
    else std::snprintf(b, sizeof b, "%.3g", x);
    return b;
}

std::string quoted(const Snapshot& s, TokenId id) { return "'" + token_text(s.model(), id) + "'"; }

// Position -> token of every position the shown sequence's steps fed, up to step `last`.
std::vector<TokenId> tokens_by_position(const Trace& trace, size_t last) {
    std::vector<TokenId> out;
    for (size_t i = 0; i <= last; ++i) {
        const StepId& id = trace[i].id;
        if (out.size() < size_t(id.first_position) + id.tokens.size())
            out.resize(size_t(id.first_position) + id.tokens.size(), -1);
        std::copy(id.tokens.begin(), id.tokens.end(), out.begin() + id.first_position);
    }
    return out;
}

// The reference a check's `equals` names, computed from what the learner asked for rather than from the
// cache's own counters.
bool reference(const std::string& name, const Snapshot& s, const StepRecord& r, int64_t& out, std::string& said) {
    if (name == "prompt") out = int64_t(s.prompt().size()), said = "the prompt's tokens";
    else if (name == "new") out = int64_t(r.id.tokens.size()), said = "the step's new tokens";
    else if (name == "positions") out = r.last_position() + 1, said = "every position so far";
    else if (name == "window+sinks") {
        // Keys 0..q a query at q may see: the last W positions, and the first S beside them.
        const int64_t q = r.last_position(), W = s.options().window, S = s.options().sinks;
        out = 0;
        for (int64_t k = 0; k <= q; ++k) out += W == 0 || k > q - W || k < S;
        said = "window " + num(double(W)) + " + sinks " + num(double(S));
    } else {
        out = std::stoll(name);
        said = name;
    }
    return true;
}

CheckResult compare_count(const char* what, int64_t actual, const LessonCheck& c, const Snapshot& s,
                          const StepRecord& r) {
    int64_t expected = 0;
    std::string said;
    reference(c.equals, s, r, expected, said);
    CheckResult out;
    out.values = {{"", double(actual), double(expected)}};
    if (actual == expected) {
        out.state = State::Passed;
        out.message = std::string(what) + " = " + num(double(actual)) + " (" + said + ")";
    } else {
        out.state = State::Failed;
        out.message = std::string("expected ") + what + " = " + num(double(expected)) + " (" + said +
                      "); the record shows " + num(double(actual)) + " after step " + num(double(r.id.index));
    }
    return out;
}

// Row R-1 of (step, layer, head): the last query's visibility and weights over key positions first_key...
struct LastRow {
    std::vector<uint8_t> visible;
    std::vector<float> weights, scores;
    int64_t first_key = 0;
};
LastRow last_row(const Trace& trace, size_t step, int64_t layer, int64_t head) {
    const AttentionRows rows(trace, step, layer, head);
    LastRow out;
    out.first_key = rows.first_key();
    out.visible.resize(size_t(rows.n_key()));
    out.weights.resize(size_t(rows.n_key()));
    out.scores.resize(size_t(rows.n_key()));
    rows.row(rows.n_query() - 1, out.scores.data(), out.visible.data(), out.weights.data(), nullptr);
    return out;
}

// The position after the latest earlier occurrence of the token at q (what an induction head attends to
// from q); -1 when the token does not occur earlier (or only just before q).
int64_t copy_source(const std::vector<TokenId>& tok, int64_t q) {
    for (int64_t j = q - 1; j >= 0; --j)
        if (tok[size_t(j)] == tok[size_t(q)]) return j + 1 < q ? j + 1 : -1;
    return -1;
}

CheckResult induction(const LessonCheck& c, const Snapshot& s, const StepRecord& r, size_t step) {
    const ModelConfig& cfg = s.model().config();
    if (c.layer >= cfg.n_layer || c.head >= cfg.n_head)
        return {State::Failed, "expected layer " + num(double(c.layer)) + " head " + num(double(c.head)) +
                                   "; this model has " + num(double(cfg.n_layer)) + " layers of " + num(double(cfg.n_head)) + " heads",
                {}};
    const int64_t q = r.last_position();
    const std::vector<TokenId> tok = tokens_by_position(s.trace(), step);
    const int64_t key = copy_source(tok, q);
    if (key < 0)
        return {State::Failed,
                "expected the last token " + quoted(s, tok[size_t(q)]) + " to occur earlier in the text; it does not",
                {}};
    const std::string key_text = quoted(s, tok[size_t(key)]);
    double best = -1, at = -1;
    int64_t best_l = 0, best_h = 0;
    for (int64_t il = 0; il < cfg.n_layer; ++il)
        for (int64_t h = 0; h < cfg.n_head; ++h) {
            const LastRow row = last_row(s.trace(), step, il, h);
            const int64_t col = key - row.first_key;
            const double w = col >= 0 && col < int64_t(row.weights.size()) ? row.weights[size_t(col)] : 0.0;
            if (w > best) best = w, best_l = il, best_h = h;
            if (il == c.layer && h == c.head) at = w;
        }
    const bool named = c.layer >= 0 && c.head >= 0;
    const double w = named ? at : best;
    const int64_t wl = named ? c.layer : best_l, wh = named ? c.head : best_h;
    CheckResult out;
    out.values = {{"weight", w, c.min}, {"strongest", best, c.min}, {"key_position", double(key), double(key)}};
    const std::string where = "layer " + num(double(wl)) + " head " + num(double(wh));
    const std::string strongest = "the strongest is " + num(best) + " in layer " + num(double(best_l)) + " head " +
                                  num(double(best_h));
    if (w >= c.min) {
        out.state = State::Passed;
        out.message = where + " puts " + num(w) + " of the attention of the last " + quoted(s, tok[size_t(q)]) +
                      " on the earlier " + key_text + " (position " + num(double(key)) + ")";
    } else {
        out.state = State::Failed;
        out.message = "expected an induction head" + (named ? " (" + where + ")" : std::string()) + " with weight >= " +
                      num(c.min) + " on the earlier " + key_text + " (position " + num(double(key)) + "); " +
                      (named ? where + " has " + num(w) + ", " : std::string()) + strongest;
    }
    return out;
}


// ---- The predicates. Each gets the newest step of the shown sequence when its table entry needs one
// (nullptr otherwise) and that step's index.

CheckResult phase(const LessonCheck& c, const Snapshot&, const StepRecord& r, size_t) {
    const bool ok = std::string(phase_name(r.id.phase)) == c.phase;
    return {ok ? State::Passed : State::Waiting,
            ok ? "the newest step is a " + c.phase : "expected the newest step to be a " + c.phase + "; it is a " +
                                                         phase_name(r.id.phase),
            {}};
}

CheckResult cache_rows(const LessonCheck& c, const Snapshot& s, const StepRecord& r, size_t) {
    return compare_count("cache rows", r.cache.used, c, s, r);
}

CheckResult rows_computed(const LessonCheck& c, const Snapshot& s, const StepRecord& r, size_t) {
    return compare_count("rows computed", r.cost.n_rows_computed, c, s, r);
}

CheckResult visible_keys(const LessonCheck& c, const Snapshot& s, const StepRecord& r, size_t step) {
    const int64_t layer = std::max<int64_t>(0, c.layer);
    if (layer >= s.model().config().n_layer) return {State::Failed, "layer " + num(double(layer)) + " does not exist", {}};
    const LastRow row = last_row(s.trace(), step, layer, 0);
    int64_t seen = 0;
    for (uint8_t v : row.visible) seen += v;
    return compare_count("keys the last query sees", seen, c, s, r);
}

CheckResult flops_saved(const LessonCheck& c, const Snapshot& s, const StepRecord& r, size_t step) {
    if (r.id.phase != Phase::Decode) return waiting("decode a step: a prefill does the same work either way");
    const Trace* shadow = s.shadow();
    if (!shadow || shadow->size() <= step) return waiting("the cache on vs off comparison is needed (compare on)");
    const StepRecord& other = (*shadow)[step];
    const StepRecord& on = r.id.cache_on ? r : other;
    const StepRecord& off = r.id.cache_on ? other : r;
    const double ratio = off.cost.flops / std::max(1.0, on.cost.flops);
    CheckResult out;
    out.values = {{"flops_on", on.cost.flops, 0},
                  {"flops_off", off.cost.flops, 0},
                  {"rows_on", double(on.cost.n_rows_computed), double(on.id.tokens.size())},
                  {"rows_off", double(off.cost.n_rows_computed), double(off.last_position() + 1)},
                  {"ratio", ratio, c.min}};
    auto rows = [&](int64_t n) { return num(double(n)) + (n == 1 ? " row" : " rows"); };
    const std::string shown = "with the cache the step computed " + rows(on.cost.n_rows_computed) + " and " +
                              num(on.cost.flops) + " FLOPs, without it " + rows(off.cost.n_rows_computed) + " and " +
                              num(off.cost.flops) + " FLOPs (" + num(ratio) + "x)";
    out.state = ratio >= c.min ? State::Passed : State::Failed;
    out.message = out.passed() ? shown : "expected at least " + num(c.min) + "x fewer FLOPs with the cache; " + shown;
    return out;
}

CheckResult copies(const LessonCheck&, const Snapshot& s, const StepRecord& r, size_t step) {
    const std::vector<TokenId> tok = tokens_by_position(s.trace(), step);
    const int64_t q = r.last_position(), key = copy_source(tok, q);
    if (key < 0) return {State::Failed, "expected the last token " + quoted(s, tok[size_t(q)]) + " to occur earlier", {}};
    if (!r.prediction.chosen) return waiting("the step made no prediction yet (prefill the whole prompt)");
    const TokenId chosen = *r.prediction.chosen;
    CheckResult out;
    out.values = {{"token", double(chosen), double(tok[size_t(key)])}};
    out.state = chosen == tok[size_t(key)] ? State::Passed : State::Failed;
    out.message = out.passed() ? "the model predicts " + quoted(s, chosen) + ", the token after the earlier " +
                                     quoted(s, tok[size_t(q)])
                               : "expected the prediction " + quoted(s, tok[size_t(key)]) + " (the token after the earlier " +
                                     quoted(s, tok[size_t(q)]) + "); the model predicts " + quoted(s, chosen);
    return out;
}

CheckResult kv_bytes_per_token(const LessonCheck&, const Snapshot& s, const StepRecord& r, size_t) {
    const ModelConfig& cfg = s.model().config();
    if (s.options().kv_quant.format != KvQuant::None) return waiting("the lesson needs float32 K/V rows (K/V format none)");
    const double expected = 2.0 * double(cfg.n_layer * cfg.kv_heads() * cfg.head_dim()) * 4;
    const double every_head = 2.0 * double(cfg.n_layer * cfg.n_head * cfg.head_dim()) * 4;
    CheckResult out;
    out.values = {{"bytes_per_token", double(r.cache.bytes_per_position), expected}, {"every_head", every_head, every_head}};
    const std::string shown = num(double(r.cache.bytes_per_position)) + " bytes a token = 2 (K, V) x " +
                              num(double(cfg.n_layer)) + " layers x " + num(double(cfg.kv_heads())) + " K/V heads x " +
                              num(double(cfg.head_dim())) + " dims x 4 bytes; one K/V head per query head would take " +
                              num(every_head);
    out.state = double(r.cache.bytes_per_position) == expected ? State::Passed : State::Failed;
    out.message = out.passed() ? shown : "expected " + num(expected) + " bytes a token; the record shows " +
                                             num(double(r.cache.bytes_per_position));
    return out;
}

CheckResult rotary_score(const LessonCheck& c, const Snapshot& s, const StepRecord&, size_t step) {
    const ModelConfig& cfg = s.model().config();
    if (cfg.family != Family::Llama) return {State::Failed, "expected a model with rotary positions; this one has none", {}};
    const int64_t layer = std::max<int64_t>(0, c.layer), head = std::max<int64_t>(0, c.head);
    if (layer >= cfg.n_layer || head >= cfg.n_head)
        return {State::Failed, "layer " + num(double(layer)) + " head " + num(double(head)) + " does not exist", {}};
    const RotaryShown shown = rotary_shown(s.trace(), step, layer, head, -1, -1);
    const RotaryView view = rotary_view_of(cfg, shown);
    const LastRow row = last_row(s.trace(), step, layer, head);
    const double engine = row.scores[size_t(shown.key_position - row.first_key)];
    const int64_t d = shown.query_position - shown.turned_back - shown.key_position;
    const double by_distance = view.score_by_distance[size_t(d)];
    CheckResult out;
    out.values = {{"score", engine, by_distance}, {"distance", double(d), double(d)}};
    const bool ok = std::abs(engine - by_distance) <= 1e-4 * std::max(1.0, std::abs(by_distance));
    const std::string text = "query " + num(double(shown.query_position)) + " x key " + num(double(shown.key_position)) +
                             ": the engine scored " + num(engine) + ", the unrotated pair turned by distance " +
                             num(double(d)) + " scores " + num(by_distance);
    out.state = ok ? State::Passed : State::Failed;
    out.message = ok ? text : "expected equal scores; " + text;
    return out;
}

CheckResult blocks_shared(const LessonCheck& c, const Snapshot& s, const StepRecord*, size_t) {
    const PoolView* pool = s.pool_at(-1);
    if (!pool || s.sequences.size() < 2)
        return waiting("a paged cache with several sequences is needed (Session options: block size, sequences)");
    int64_t shared = 0;
    for (const PoolView::Block& b : pool->blocks) shared += b.seqs.size() >= 2;
    // Independent of the pool: the full blocks of the prompt prefix every sequence starts with.
    size_t common = s.sequences[0].prompt_ids.size();
    for (const Snapshot::Sequence& q : s.sequences) {
        size_t k = 0;
        while (k < std::min(common, q.prompt_ids.size()) && q.prompt_ids[k] == s.sequences[0].prompt_ids[k]) ++k;
        common = k;
    }
    const int64_t full = int64_t(common) / std::max<int64_t>(1, pool->block_size);
    CheckResult out;
    out.values = {{"blocks_shared", double(shared), double(full)}, {"min", c.min, c.min}};
    const std::string shown = num(double(shared)) + " blocks are mapped by several sequences; the " +
                              num(double(common)) + " prompt tokens they share fill " + num(double(full)) +
                              " blocks of " + num(double(pool->block_size));
    out.state = shared >= int64_t(c.min) && shared >= full ? State::Passed : State::Failed;
    out.message = out.passed() ? shown : "expected at least " + num(std::max(c.min, double(full))) + " shared blocks; " + shown;
    return out;
}

CheckResult lab_tradeoff(const LessonCheck& c, const Snapshot& s, const StepRecord*, size_t) {
    if (!s.lab) return waiting("measure the cache lab (Cache lab: Measure)");
    const LabReport& lab = *s.lab;
    const LabRun* run = nullptr;
    for (const LabRun& x : lab.runs)
        if (x.config.name == c.config || x.config.spec == c.config) run = &x;
    if (!run) return {State::Failed, "expected a lab configuration '" + c.config + "'; the lab measured none", {}};
    const LabTotals& ref = lab.runs[lab.reference].totals;
    const LabTotals& t = run->totals;
    CheckResult out;
    out.values = {{"bytes", double(t.bytes_total), double(ref.bytes_total)}, {"kl_mean", t.kl_mean, 0}};
    const std::string shown = c.config + " keeps " + num(double(t.bytes_total)) + " bytes against " +
                              num(double(ref.bytes_total)) + " for " + lab.runs[lab.reference].config.name +
                              " and costs KL " + num(t.kl_mean) + " nats a token";
    out.state = t.bytes_total < ref.bytes_total && t.kl_mean > 0 ? State::Passed : State::Failed;
    out.message = out.passed() ? shown : "expected fewer bytes and a KL above 0; " + shown;
    return out;
}

// Each predicate once: its name, the fields a lesson may give it, what it needs of the record, its code.
enum class Needs { Nothing, Step, RecordedStep };
struct CheckDef {
    const char* is;
    std::vector<const char*> fields;
    Needs needs;
    CheckResult (*on_step)(const LessonCheck&, const Snapshot&, const StepRecord&, size_t) = nullptr;
    CheckResult (*on_snapshot)(const LessonCheck&, const Snapshot&, const StepRecord*, size_t) = nullptr;
};
const CheckDef kChecks[] = {
    {"phase", {"phase"}, Needs::Step, phase},
    {"cache_rows", {"equals"}, Needs::Step, cache_rows},
    {"rows_computed", {"equals"}, Needs::Step, rows_computed},
    {"visible_keys", {"equals", "layer"}, Needs::RecordedStep, visible_keys},
    {"flops_saved", {"min"}, Needs::Step, flops_saved},
    {"induction", {"layer", "head", "min"}, Needs::RecordedStep, induction},
    {"copies", {}, Needs::Step, copies},
    {"kv_bytes_per_token", {}, Needs::Step, kv_bytes_per_token},
    {"rotary_score", {"layer", "head"}, Needs::RecordedStep, rotary_score},
    {"blocks_shared", {"min"}, Needs::Nothing, nullptr, blocks_shared},
    {"lab_tradeoff", {"config"}, Needs::Nothing, nullptr, lab_tradeoff},
};

const CheckDef* find_check(const std::string& is) {
    for (const CheckDef& d : kChecks)
        if (is == d.is) return &d;
    return nullptr;
}

CheckResult check_one(const LessonCheck& c, const Snapshot& s) {
    const CheckDef* d = find_check(c.is);
    if (!d) return {State::Failed, "unknown check " + c.is, {}};
    const Trace& trace = s.trace();
    const size_t step = trace.empty() ? 0 : trace.size() - 1;
    if (d->needs == Needs::Nothing) return d->on_snapshot(c, s, trace.empty() ? nullptr : &trace[step], step);
    if (trace.empty()) return waiting("no step yet: do this step's action (or Do it for me)");
    if (d->needs == Needs::RecordedStep && !trace[step].recorded()) return waiting("the newest step was not recorded");
    return d->on_step(c, s, trace[step], step);
}

}  // namespace

const std::vector<const char*>* lesson_check_fields(const std::string& is) {
    const CheckDef* d = find_check(is);
    return d ? &d->fields : nullptr;
}

std::string lesson_check_names() {
    std::string out;
    for (const CheckDef& d : kChecks) out += (out.empty() ? "" : ", ") + std::string(d.is);
    return out;
}

const char* check_state_name(CheckResult::State s) {
    switch (s) {
        case CheckResult::State::Waiting: return "waiting";
        case CheckResult::State::Passed: return "passed";
        case CheckResult::State::Failed: return "failed";
    }
    return "?";
}

CheckResult check_all(const std::vector<LessonCheck>& checks, const Snapshot& snap) {
    CheckResult all{State::Passed, "", {}};
    for (const LessonCheck& c : checks) {
        CheckResult one;
        try {
            one = check_one(c, snap);
        } catch (const std::exception& e) {  // a step the views cannot read (UsageError from attention_map)
            one = {State::Failed, e.what(), {}};
        }
        for (CheckValue& v : one.values) v.name = v.name.empty() ? c.is : c.is + "." + v.name;
        all.values.insert(all.values.end(), one.values.begin(), one.values.end());
        if (!one.passed() && all.passed()) all.state = one.state, all.message = one.message;
        else if (one.passed() && all.passed()) all.message += (all.message.empty() ? "" : "; ") + one.message;
    }
    if (checks.empty()) all.message = "nothing to check: read, then Next";
    return all;
}

}  // namespace kvscope::gui
