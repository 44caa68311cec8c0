#include "logic/lesson.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "analysis/cache_lab.h"
#include "base/errors.h"
#include "io/json.h"
#include "io/read_file.h"
#include "logic/derived_views.h"
#include "logic/workbench.h"

namespace kvscope::gui {
namespace fs = std::filesystem;

namespace {

inline constexpr ReadLimit k_lesson_file{uint64_t(1) << 20, "a lesson file"};

// The vocabularies, each with the fields it reads: a field a lesson gives that its op or check does not
// read is refused (a typo must not pass silently).
struct Vocab {
    const char* name;
    std::vector<const char*> fields;
};
const Vocab kActions[] = {
    {"prompt", {"text"}}, {"prefill", {}}, {"decode", {"n"}}, {"step", {"n"}}, {"back", {"n"}}, {"reset", {}},
    {"cache", {"on"}}, {"compare", {"on"}}, {"options", {"set"}}, {"suffix", {"n", "text"}}, {"heads", {}},
    {"lab", {"text"}}, {"chat", {"text"}}, {"layer", {"n"}}, {"head", {"n"}}, {"heads-view", {"on"}},
    {"show-step", {"n"}},
};
const Vocab kChecks[] = {
    {"phase", {"phase"}},                          // the newest step's phase
    {"cache_rows", {"equals"}},                    // slots the cache holds after the newest step
    {"rows_computed", {"equals"}},                 // rows the newest step's forward pass ran
    {"visible_keys", {"equals", "layer"}},         // keys the newest step's last query sees
    {"flops_saved", {"min"}},                      // FLOPs without the cache / with it, newest decode step
    {"induction", {"layer", "head", "min"}},       // weight on the token after the last token's earlier occurrence
    {"copies", {}},                                // the newest prediction is that token (what induction copies)
    {"kv_bytes_per_token", {}},                    // the cache's bytes per position = 2 L K D 4
    {"rotary_score", {"layer", "head"}},           // the engine's score = the rotary view's score at that distance
    {"blocks_shared", {"min"}},                    // pool blocks mapped by several sequences
    {"lab_tradeoff", {"config"}},                  // a lab configuration keeps fewer bytes and costs KL > 0
};

const Vocab* find_vocab(const Vocab* begin, const Vocab* end, const std::string& name) {
    for (const Vocab* v = begin; v != end; ++v)
        if (name == v->name) return v;
    return nullptr;
}

std::string names(const Vocab* begin, const Vocab* end) {
    std::string out;
    for (const Vocab* v = begin; v != end; ++v) out += (out.empty() ? "" : ", ") + std::string(v->name);
    return out;
}

// Reading one file: every error names the field by its path ("steps[2].check[0].min").
struct Reader {
    const std::string& file;
    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw LoadError(file, field + ": " + what, "docs/gui.md \"Lessons\" lists the fields");
    }
    const Json& member(const Json& obj, const std::string& at, const char* key, Json::Kind kind) const {
        const Json* v = obj.find(key);
        if (!v) fail(at + key, "missing");
        if (v->kind() != kind) fail(at + key, std::string("expected ") + kind_word(kind) + ", got " + v->kind_name());
        return *v;
    }
    static const char* kind_word(Json::Kind k) {
        switch (k) {
            case Json::Kind::String: return "a string";
            case Json::Kind::Number: return "a number";
            case Json::Kind::Array: return "a list";
            case Json::Kind::Object: return "an object";
            case Json::Kind::Bool: return "true or false";
            default: return "null";
        }
    }
    std::string text(const Json& obj, const std::string& at, const char* key, bool required) const {
        if (!obj.find(key)) {
            if (required) fail(at + key, "missing");
            return "";
        }
        return member(obj, at, key, Json::Kind::String).as_string();
    }
    int64_t integer(const Json& obj, const std::string& at, const char* key, int64_t fallback) const {
        const Json* v = obj.find(key);
        if (!v) return fallback;
        if (!v->is_integer()) fail(at + key, "expected a whole number");
        return v->as_integer();
    }
    void only(const Json& obj, const std::string& at, const std::vector<const char*>& allowed) const {
        for (const auto& [k, v] : obj.as_object())
            if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) == allowed.end())
                fail(at + k, "not a field here");
    }
};

LessonAction read_action(const Reader& r, const Json& j, const std::string& at) {
    if (!j.is_object()) r.fail(at.substr(0, at.size() - 1), "expected an object like {\"op\": \"prefill\"}");
    LessonAction a;
    a.op = r.text(j, at, "op", true);
    const Vocab* v = find_vocab(std::begin(kActions), std::end(kActions), a.op);
    if (!v) r.fail(at + "op", "unknown op '" + a.op + "' (one of " + names(std::begin(kActions), std::end(kActions)) + ")");
    std::vector<const char*> allowed = v->fields;
    allowed.push_back("op");
    r.only(j, at, allowed);
    a.text = r.text(j, at, "text", a.op == "prompt" || a.op == "chat");
    a.n = r.integer(j, at, "n", a.op == "show-step" ? -1 : 1);
    const bool needs_n = a.op == "layer" || a.op == "head" || a.op == "suffix";
    if (needs_n && !j.find("n")) r.fail(at + "n", "missing");
    if (a.n < (a.op == "show-step" ? -1 : a.op == "layer" || a.op == "head" || a.op == "suffix" ? 0 : 1))
        r.fail(at + "n", "out of range (" + std::to_string(a.n) + ")");
    if (j.find("on")) a.on = r.member(j, at, "on", Json::Kind::Bool).as_bool();
    else if (a.op == "cache" || a.op == "compare" || a.op == "heads-view") r.fail(at + "on", "missing");
    if (a.op == "options") {
        const Json& set = r.member(j, at, "set", Json::Kind::Array);
        for (size_t i = 0; i < set.as_array().size(); ++i) {
            const std::string where = at + "set[" + std::to_string(i) + "]";
            if (!set.as_array()[i].is_string()) r.fail(where, "expected a \"key=value\" string");
            try {
                script_option(set.as_array()[i].as_string());  // the key and value as the option table says
            } catch (const UsageError& e) {
                r.fail(where, e.what());
            }
            a.set.push_back(set.as_array()[i].as_string());
        }
        if (a.set.empty()) r.fail(at + "set", "empty");
    }
    return a;
}

LessonCheck read_check(const Reader& r, const Json& j, const std::string& at) {
    if (!j.is_object()) r.fail(at.substr(0, at.size() - 1), "expected an object like {\"is\": \"phase\", ...}");
    LessonCheck c;
    c.is = r.text(j, at, "is", true);
    const Vocab* v = find_vocab(std::begin(kChecks), std::end(kChecks), c.is);
    if (!v) r.fail(at + "is", "unknown check '" + c.is + "' (one of " + names(std::begin(kChecks), std::end(kChecks)) + ")");
    std::vector<const char*> allowed = v->fields;
    allowed.push_back("is");
    r.only(j, at, allowed);
    c.phase = r.text(j, at, "phase", c.is == "phase");
    if (c.is == "phase" && c.phase != "prefill" && c.phase != "decode") r.fail(at + "phase", "expected prefill or decode");
    if (const Json* e = j.find("equals")) {
        if (e->is_integer()) c.equals = std::to_string(e->as_integer());
        else if (e->is_string()) c.equals = e->as_string();
        else r.fail(at + "equals", "expected a number or a reference name");
        const std::vector<std::string> refs = {"prompt", "new", "positions", "window+sinks"};
        if (!e->is_integer() && std::find(refs.begin(), refs.end(), c.equals) == refs.end())
            r.fail(at + "equals", "unknown reference '" + c.equals + "' (a number, prompt, new, positions or window+sinks)");
    } else if (c.is == "cache_rows" || c.is == "rows_computed" || c.is == "visible_keys") {
        r.fail(at + "equals", "missing");
    }
    c.layer = r.integer(j, at, "layer", -1);
    c.head = r.integer(j, at, "head", -1);
    if (c.layer < -1) r.fail(at + "layer", "out of range");
    if (c.head < -1) r.fail(at + "head", "out of range");
    if (const Json* m = j.find("min")) {
        if (!m->is_number()) r.fail(at + "min", "expected a number");
        c.min = m->as_number();
    } else if (c.is == "induction" || c.is == "flops_saved" || c.is == "blocks_shared") {
        r.fail(at + "min", "missing");
    }
    c.config = r.text(j, at, "config", c.is == "lab_tradeoff");
    return c;
}

}  // namespace

Lesson parse_lesson(const std::string& text, const std::string& file) {
    const Reader r{file};
    Json root;
    try {
        root = Json::parse(text);
    } catch (const JsonError& e) {
        throw LoadError(file, std::string("not JSON: ") + e.what() +
                                  (e.offset != std::string::npos ? " at byte " + std::to_string(e.offset) : ""));
    }
    if (!root.is_object()) r.fail("(top)", "expected an object with title and steps");
    r.only(root, "", {"title", "model", "summary", "steps"});
    Lesson l;
    l.file = file;
    l.title = r.text(root, "", "title", true);
    l.model = r.text(root, "", "model", false);
    l.summary = r.text(root, "", "summary", false);
    const Json& steps = r.member(root, "", "steps", Json::Kind::Array);
    if (steps.as_array().empty()) r.fail("steps", "empty");
    for (size_t i = 0; i < steps.as_array().size(); ++i) {
        const Json& s = steps.as_array()[i];
        const std::string at = "steps[" + std::to_string(i) + "].";
        if (!s.is_object()) r.fail(at.substr(0, at.size() - 1), "expected an object");
        r.only(s, at, {"text", "look", "panel", "do", "check"});
        LessonStep st;
        st.text = r.text(s, at, "text", true);
        st.look = r.text(s, at, "look", false);
        st.panel = r.text(s, at, "panel", false);
        if (s.find("do"))
            for (size_t k = 0; k < r.member(s, at, "do", Json::Kind::Array).as_array().size(); ++k)
                st.actions.push_back(
                    read_action(r, s.find("do")->as_array()[k], at + "do[" + std::to_string(k) + "]."));
        if (s.find("check"))
            for (size_t k = 0; k < r.member(s, at, "check", Json::Kind::Array).as_array().size(); ++k)
                st.checks.push_back(
                    read_check(r, s.find("check")->as_array()[k], at + "check[" + std::to_string(k) + "]."));
        l.steps.push_back(std::move(st));
    }
    return l;
}

std::vector<Lesson> load_lessons(const std::string& dir) {
    std::vector<std::string> files;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".json") files.push_back(e.path().string());
    if (ec) throw LoadError(dir, "cannot list the lessons folder: " + ec.message());
    std::sort(files.begin(), files.end());
    std::vector<Lesson> out;
    for (const std::string& f : files)
        out.push_back(parse_lesson(read_file_bounded(f, k_lesson_file), fs::path(f).filename().string()));
    if (out.empty()) throw LoadError(dir, "no lesson files (*.json)");
    return out;
}

std::string lessons_dir() {
    if (const char* env = std::getenv("KVSCOPE_LESSONS"); env && *env) return env;
    return std::string(KVSCOPE_ASSETS_DIR) + "/lessons";
}

std::string lesson_model_dir(const Lesson& lesson) {
    if (lesson.model.rfind("assets/", 0) == 0) return std::string(KVSCOPE_ASSETS_DIR) + lesson.model.substr(6);
    return lesson.model;
}

std::vector<Command> lesson_intents(const LessonAction& a, const Snapshot& snap) {
    const std::string& op = a.op;
    if (op == "prompt") return {SetPrompt{a.text}};
    if (op == "prefill") return {Prefill{}};
    if (op == "decode") return {Decode{a.n}};
    if (op == "step") return std::vector<Command>(size_t(a.n), Step{});
    if (op == "back") return {Back{a.n}};
    if (op == "reset") return {Reset{}};
    if (op == "cache") return {SetCache{a.on}};
    if (op == "compare") return {SetCompare{a.on}};
    if (op == "heads") return {ExplainHeads{}};
    if (op == "chat") return {SendChat{a.text}};
    if (op == "lab") return {MeasureLab{split_lab_specs(a.text)}};
    if (op == "options") {
        SetOptions c{snap.options(), snap.batch, {}};
        for (const std::string& kv : a.set) {
            set_script_option(c.options, c.batch, kv);
            c.given.push_back(script_option(kv).name);
        }
        return {c};
    }
    if (op == "suffix") {  // as the script's `suffix I TEXT`
        SetOptions c{snap.options(), snap.batch, {}};
        if (c.batch.suffixes.size() <= size_t(a.n)) c.batch.suffixes.resize(size_t(a.n) + 1);
        c.batch.suffixes[size_t(a.n)] = a.text;
        c.batch.n_seq = std::max(c.batch.n_seq, a.n + 1);
        return {c};
    }
    return {};  // view actions
}

LessonView lesson_view(const std::vector<LessonAction>& actions) {
    LessonView v;
    for (const LessonAction& a : actions) {
        if (a.op == "layer") v.layer = a.n;
        if (a.op == "head") v.head = a.n;
        if (a.op == "heads-view") v.all_heads = a.on ? 1 : 0;
        if (a.op == "show-step") v.set_step = true, v.step = a.n;
    }
    return v;
}

const char* check_state_name(CheckResult::State s) {
    switch (s) {
        case CheckResult::State::Waiting: return "waiting";
        case CheckResult::State::Passed: return "passed";
        case CheckResult::State::Failed: return "failed";
    }
    return "?";
}

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

CheckResult check_induction(const LessonCheck& c, const Snapshot& s, const StepRecord& r, size_t step) {
    const ModelConfig& cfg = s.model().config();
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

CheckResult check_one(const LessonCheck& c, const Snapshot& s) {
    const Trace& trace = s.trace();
    if (c.is == "lab_tradeoff") {
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
    if (c.is == "blocks_shared") {
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
    if (trace.empty()) return waiting("no step yet: do this step's action (or Do it for me)");
    const size_t step = trace.size() - 1;
    const StepRecord& r = trace[step];
    if (c.is == "phase") {
        const bool ok = std::string(phase_name(r.id.phase)) == c.phase;
        return {ok ? State::Passed : State::Waiting,
                ok ? "the newest step is a " + c.phase : "expected the newest step to be a " + c.phase + "; it is a " +
                                                             phase_name(r.id.phase),
                {}};
    }
    if (c.is == "cache_rows") return compare_count("cache rows", r.cache.used, c, s, r);
    if (c.is == "rows_computed") return compare_count("rows computed", r.cost.n_rows_computed, c, s, r);
    if (c.is == "kv_bytes_per_token") {
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
    if (c.is == "copies") {
        const std::vector<TokenId> tok = tokens_by_position(trace, step);
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
    if (!r.recorded()) return waiting("the newest step was not recorded");
    if (c.is == "visible_keys") {
        const int64_t layer = std::max<int64_t>(0, c.layer);
        if (layer >= s.model().config().n_layer) return {State::Failed, "layer " + num(double(layer)) + " does not exist", {}};
        const LastRow row = last_row(trace, step, layer, 0);
        int64_t seen = 0;
        for (uint8_t v : row.visible) seen += v;
        return compare_count("keys the last query sees", seen, c, s, r);
    }
    if (c.is == "induction") {
        const ModelConfig& cfg = s.model().config();
        if (c.layer >= cfg.n_layer || c.head >= cfg.n_head)
            return {State::Failed, "expected layer " + num(double(c.layer)) + " head " + num(double(c.head)) +
                                       "; this model has " + num(double(cfg.n_layer)) + " layers of " + num(double(cfg.n_head)) + " heads",
                    {}};
        return check_induction(c, s, r, step);
    }
    if (c.is == "rotary_score") {
        const ModelConfig& cfg = s.model().config();
        if (cfg.family != Family::Llama) return {State::Failed, "expected a model with rotary positions; this one has none", {}};
        const int64_t layer = std::max<int64_t>(0, c.layer), head = std::max<int64_t>(0, c.head);
        const RotaryShown shown = rotary_shown(trace, step, layer, head, -1, -1);
        const RotaryView view = rotary_view_of(cfg, shown);
        const LastRow row = last_row(trace, step, layer, head);
        const int64_t col = shown.key_position - row.first_key;
        const double engine = row.scores[size_t(col)];
        const int64_t d = shown.query_position - shown.turned_back - shown.key_position;
        const double by_distance = view.score_by_distance[size_t(d)];
        CheckResult out;
        out.values = {{"score", engine, by_distance}, {"distance", double(d), double(d)}};
        const bool ok = std::abs(engine - by_distance) <= 1e-4 * std::max(1.0, std::abs(by_distance));
        const std::string shown_text = "query " + num(double(shown.query_position)) + " x key " +
                                       num(double(shown.key_position)) + ": the engine scored " + num(engine) +
                                       ", the unrotated pair turned by distance " + num(double(d)) + " scores " + num(by_distance);
        out.state = ok ? State::Passed : State::Failed;
        out.message = ok ? shown_text : "expected equal scores; " + shown_text;
        return out;
    }
    if (c.is == "flops_saved") {
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
        const std::string shown = "with the cache the step computed " + num(double(on.cost.n_rows_computed)) + " row(s) and " +
                                  num(on.cost.flops) + " FLOPs, without it " + num(double(off.cost.n_rows_computed)) +
                                  " rows and " + num(off.cost.flops) + " FLOPs (" + num(ratio) + "x)";
        out.state = ratio >= c.min ? State::Passed : State::Failed;
        out.message = out.passed() ? shown : "expected at least " + num(c.min) + "x fewer FLOPs with the cache; " + shown;
        return out;
    }
    return {State::Failed, "unknown check " + c.is, {}};
}

}  // namespace

CheckResult check_step(const LessonStep& step, const Snapshot& snap) {
    CheckResult all{State::Passed, "", {}};
    for (const LessonCheck& c : step.checks) {
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
    if (step.checks.empty()) all.message = "nothing to check: read, then Next";
    return all;
}

JsonOut lesson_json(const LessonRun& run, const Lesson& lesson) {
    JsonOut values = JsonOut::array();
    for (const CheckValue& v : run.result.values)
        values.push_back({{"name", v.name}, {"actual", v.actual}, {"expected", v.expected}});
    return {{"lesson", run.lesson + 1},
            {"file", lesson.file},
            {"title", lesson.title},
            {"step", run.step + 1},
            {"n_steps", lesson.steps.size()},
            {"finished", run.finished},
            {"state", check_state_name(run.result.state)},
            {"message", run.result.message},
            {"values", values}};
}

}  // namespace kvscope::gui
