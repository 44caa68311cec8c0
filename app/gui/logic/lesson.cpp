#include "logic/lesson.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "analysis/cache_lab.h"
#include "base/errors.h"
#include "io/json.h"
#include "io/read_file.h"
#include "logic/workbench.h"

namespace kvscope::gui {
namespace fs = std::filesystem;

namespace {

inline constexpr ReadLimit k_lesson_file{uint64_t(1) << 20, "a lesson file"};

// The actions, each with the fields it reads (the checks' are in lesson_checks.cpp): a field a lesson gives
// that its op or check does not read is refused (a typo must not pass silently).
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
        throw LoadError(file, field + ": " + what, "docs/window.md \"Lessons\" lists the fields");
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
    const std::vector<const char*>* fields = lesson_check_fields(c.is);
    if (!fields) r.fail(at + "is", "unknown check '" + c.is + "' (one of " + lesson_check_names() + ")");
    std::vector<const char*> allowed = *fields;
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
    l.file = fs::path(file).filename().string();
    l.title = r.text(root, "", "title", true);
    l.model = r.text(root, "", "model", false);
    l.summary = r.text(root, "", "summary", false);
    const Json& steps = r.member(root, "", "steps", Json::Kind::Array);
    if (steps.as_array().empty()) r.fail("steps", "empty");
    for (size_t i = 0; i < steps.as_array().size(); ++i) {
        const Json& s = steps.as_array()[i];
        const std::string at = "steps[" + std::to_string(i) + "].";
        if (!s.is_object()) r.fail(at.substr(0, at.size() - 1), "expected an object");
        r.only(s, at, {"text", "try", "look", "panel", "do", "check"});
        LessonStep st;
        st.text = r.text(s, at, "text", true);
        st.look = r.text(s, at, "look", false);
        st.try_it = r.text(s, at, "try", false);
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
        out.push_back(parse_lesson(read_file_bounded(f, k_lesson_file), f));
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

CheckResult check_step(const LessonStep& step, const Snapshot& snap) { return check_all(step.checks, snap); }

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
