// Lesson: the open lesson's step, its check against the engine's record, and the buttons that drive it.
// The lessons are data (assets/lessons/*.json, read by logic/lesson.h); this file only draws them and
// turns the buttons into the same intents the other panels send.
#include "panels/lesson_panel.h"

#include <filesystem>
#include <optional>

#include <imgui.h>

#include "base/errors.h"

namespace kvscope::gui {

namespace {

struct Library {
    std::vector<Lesson> lessons;
    std::optional<LoadError> error;   // the first bad file: the menu shows it in one line
    bool loaded = false;
};
Library& library() {
    static Library lib;
    if (!lib.loaded) {
        lib.loaded = true;
        try {
            lib.lessons = load_lessons(lessons_dir());
        } catch (const LoadError& e) {
            lib.error = e;
        }
    }
    return lib;
}

const Lesson* open_one(const ViewPrefs& v) {
    const std::vector<Lesson>& all = library().lessons;
    return v.lesson.open() && size_t(v.lesson.lesson) < all.size() ? &all[size_t(v.lesson.lesson)] : nullptr;
}

bool same_folder(const std::string& a, const std::string& b) {
    std::error_code ea, eb;
    const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
    return !ea && !eb ? ca == cb : a == b;
}

// Tabs to bring to the front, one a frame (show_tab holds one): the Lesson tab, then the step's panel.
std::vector<Panel> tabs_to_show;

// The step's panel to the front (a tab), when the step opens.
void enter_step(const Lesson& l, ViewPrefs& v) {
    const LessonStep& st = l.steps[size_t(v.lesson.step)];
    Panel p;
    if (!st.panel.empty() && panel_named(st.panel, p)) {
        v.workspace = workspace_for(p);  // the workspace that gives it the most room
        tabs_to_show.push_back(p);
    }
    v.lesson.result = {};
}

// What the check last saw: the check is evaluated again only when one of these changes.
struct CheckKey {
    const void* snap = nullptr;
    uint64_t generation = 0;
    size_t steps = 0, shadow_steps = 0, pool_views = 0;
    const void* newest = nullptr;
    const void* lab = nullptr;
    int64_t lesson = -1, step = -1;
    bool operator==(const CheckKey&) const = default;
};

void refresh_check(const Snapshot& s, ViewPrefs& v, const Lesson& l) {
    static CheckKey last;
    const CheckKey key{&s, s.generation, s.trace().size(), s.shadow_trace.size(), s.pool_views.size(),
                       s.trace().empty() ? nullptr : s.trace().share(s.trace().size() - 1).get(), s.lab.get(),
                       v.lesson.lesson, v.lesson.step};
    if (key == last && !v.lesson.result.message.empty()) return;
    last = key;
    v.lesson.result = check_step(l.steps[size_t(v.lesson.step)], s);
}

}  // namespace

const std::vector<Lesson>& lesson_library() {
    const Library& lib = library();
    if (lib.error) throw *lib.error;
    return lib.lessons;
}

std::vector<Command> open_lesson(const Snapshot& snap, ViewPrefs& prefs, int64_t index) {
    const std::vector<Lesson>& all = lesson_library();
    if (index < 0 || size_t(index) >= all.size())
        throw UsageError("no lesson " + std::to_string(index + 1) + " (1.." + std::to_string(all.size()) + ")");
    prefs.lesson = LessonRun{};
    prefs.lesson.lesson = index;
    const Lesson& l = all[size_t(index)];
    tabs_to_show = {Panel::Lesson};
    enter_step(l, prefs);
    prefs.view_step = -1;
    std::vector<Command> out;
    const std::string dir = lesson_model_dir(l);
    if (!dir.empty() && !same_folder(dir, snap.model().dir())) out.push_back(LoadModel{dir});
    // Every lesson starts from the default options: the window, cache switch or batch another lesson (or
    // the learner) set must not change what this one shows.
    out.push_back(SetOptions{SessionOptions{}, BatchOptions{}, {}});
    out.push_back(SetCache{true});  // the switch is not one of the options
    return out;
}

std::vector<Command> lesson_step_intents(const Snapshot& snap, ViewPrefs& prefs) {
    const Lesson* l = open_one(prefs);
    if (!l || prefs.lesson.finished) return {};
    const LessonStep& st = l->steps[size_t(prefs.lesson.step)];
    std::vector<Command> out;
    for (const LessonAction& a : st.actions) {
        for (Command& c : lesson_intents(a, snap)) out.push_back(std::move(c));
        if (a.op == "lab") prefs.lab_specs = a.text;  // the Cache lab tab's box shows what was measured
    }
    const LessonView lv = lesson_view(st.actions);
    if (lv.layer >= 0) prefs.layer = lv.layer;
    if (lv.head >= 0) prefs.head = lv.head;
    if (lv.all_heads >= 0) prefs.all_heads = lv.all_heads == 1;
    if (lv.set_step) prefs.view_step = lv.step;
    prefs.lesson.result = {};
    return out;
}

std::string lesson_next(const Snapshot& snap, ViewPrefs& prefs) {
    const Lesson* l = open_one(prefs);
    if (!l) return "no lesson is open";
    if (prefs.lesson.finished) return "the lesson is finished";
    prefs.lesson.result = check_step(l->steps[size_t(prefs.lesson.step)], snap);
    if (!prefs.lesson.result.passed()) return prefs.lesson.result.message;
    if (size_t(prefs.lesson.step) + 1 < l->steps.size()) {
        ++prefs.lesson.step;
        enter_step(*l, prefs);
    } else {
        prefs.lesson.finished = true;
    }
    return "";
}

void draw_learn_menu(PanelContext& c) {
    const Library& lib = library();
    if (lib.error) {
        ImGui::TextColored({1, 0.45f, 0.4f, 1}, "%s", lib.error->what());
        return;
    }
    for (size_t i = 0; i < lib.lessons.size(); ++i) {
        const std::string label = std::to_string(i + 1) + ". " + lib.lessons[i].title;
        if (ImGui::MenuItem(label.c_str(), nullptr, c.prefs.lesson.lesson == int64_t(i)))
            for (const Command& cmd : open_lesson(c.snap, c.prefs, int64_t(i))) c.ctl.push(cmd);
        dump_item(("learn " + std::to_string(i + 1)).c_str());
        if (!lib.lessons[i].summary.empty() && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", lib.lessons[i].summary.c_str());
    }
}

void lesson_begin_frame(PanelContext& c) {
    const ViewPrefs& v = c.prefs;
    const Lesson* l = open_one(v);
    Panel lit;
    if (l && !v.lesson.finished && panel_named(l->steps[size_t(v.lesson.step)].panel, lit)) highlight_panel(lit);
    if (!tabs_to_show.empty()) {
        show_tab(tabs_to_show.front());
        tabs_to_show.erase(tabs_to_show.begin());
    }
}

void draw_lesson(PanelContext& c) {
    ViewPrefs& v = c.prefs;
    const Lesson* l = open_one(v);
    if (!begin_panel(Panel::Lesson)) return;
    if (!l) {
        wrapped_disabled("No lesson open: pick one in the Learn menu (or kvscope gui --lesson N).");
        dump_text("lesson title", "");
        end_panel();
        return;
    }
    const LessonStep& st = l->steps[size_t(v.lesson.step)];
    if (!c.progress.busy) refresh_check(c.snap, v, *l);
    const CheckResult& r = v.lesson.result;
    const bool passed = r.state == CheckResult::State::Passed, failed = r.state == CheckResult::State::Failed;
    std::string state = v.lesson.finished ? "Lesson done."
                        : c.progress.busy ? "the engine is working..."
                                          : std::string(passed ? "Check passed: " : failed ? "Not yet: " : "Waiting: ") + r.message;
    // The check and the buttons stay at the bottom; the explanation above them scrolls when the place is small.
    const ImGuiStyle& style = ImGui::GetStyle();
    const float width = ImGui::GetContentRegionAvail().x;
    const float footer = ImGui::CalcTextSize(state.c_str(), nullptr, false, width).y + ImGui::GetTextLineHeight() +
                         ImGui::GetFrameHeight() + style.ItemSpacing.y * 3;
    ImGui::BeginChild("lesson body", {0, -footer}, false);
    const std::string of = "step " + std::to_string(v.lesson.step + 1) + " of " + std::to_string(l->steps.size());
    ImGui::TextUnformatted(l->title.c_str());
    text_after({0.6f, 0.6f, 0.6f, 1}, of);
    dump_item("lesson title");
    dump_text("lesson title", l->title + ", " + of);
    wrapped_text({0.92f, 0.92f, 0.92f, 1}, "%s", st.text.c_str());
    dump_item("lesson text");
    if (!st.try_it.empty()) {
        wrapped_text({1.0f, 0.84f, 0.45f, 1}, "Try: %s", st.try_it.c_str());
        dump_item("lesson try");
    }
    if (!st.look.empty()) {
        wrapped_text({0.55f, 0.8f, 1, 1}, "Look at: %s", st.look.c_str());
        dump_item("lesson look");
    }
    ImGui::EndChild();
    ImGui::Separator();
    const ImVec4 color = v.lesson.finished || passed ? ImVec4{0.45f, 0.85f, 0.45f, 1}
                         : failed                    ? ImVec4{1, 0.45f, 0.4f, 1}
                                                     : ImVec4{0.85f, 0.75f, 0.4f, 1};
    wrapped_text(color, "%s", state.c_str());
    dump_item("lesson check");
    dump_text("lesson check", state);
    ImGui::BeginDisabled(st.actions.empty() || v.lesson.finished || c.progress.busy);
    if (ImGui::Button("Do it for me"))
        for (const Command& cmd : lesson_step_intents(c.snap, v)) c.ctl.push(cmd);
    dump_item("lesson do");
    ImGui::EndDisabled();
    ImGui::SameLine();
    ImGui::BeginDisabled(v.lesson.step == 0);
    if (ImGui::Button("Back")) {
        --v.lesson.step;
        v.lesson.finished = false;
        enter_step(*l, v);
    }
    ImGui::EndDisabled();
    ImGui::SameLine();
    ImGui::BeginDisabled(!passed || v.lesson.finished || c.progress.busy);
    if (ImGui::Button(size_t(v.lesson.step) + 1 == l->steps.size() ? "Finish" : "Next")) lesson_next(c.snap, v);
    dump_item("lesson next");
    ImGui::EndDisabled();
    ImGui::SameLine();
    if (ImGui::Button("Close")) v.lesson = LessonRun{};
    dump_item("lesson close");
    end_panel();
}

}  // namespace kvscope::gui
