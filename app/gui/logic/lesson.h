#pragma once
// Guided lessons: short walks through one idea each that drive the real engine and check its record
// before the learner goes on. A lesson is data, one JSON file in assets/lessons/ (docs/window.md "Lessons"
// lists every field); its actions are a fixed vocabulary that maps onto the intents of commands.h and the
// view settings, and its checks a fixed vocabulary of predicates over the Snapshot (lesson_checks.h). A
// new lesson is a new file, never code.
//
//   Lesson, LessonStep, LessonAction   a lesson as read
//   parse_lesson(text, path)        one lesson; LoadError naming the path and the field on anything wrong
//   load_lessons(dir)               every *.json of dir in name order; LoadError for the first bad one
//   lessons_dir()                   $KVSCOPE_LESSONS, else assets/lessons
//   lesson_model_dir(lesson)        the model folder the lesson needs as a path ("" = any model)
//   lesson_intents(action, snap)    the intents an action pushes (view actions push none)
//   LessonView, lesson_view(actions)  the view settings the actions ask for (layer, head, step...)
//   check_step(step, snap)          check_all of the step's checks (lesson_checks.h)
//   LessonRun                       which lesson is open, its step, the last check (held by ViewPrefs)
//   lesson_json(run, lesson)        the state as JSON (script `lesson-json FILE`)
//
// Threads: pure functions of their arguments; the window calls them on its own thread.
#include <cstdint>
#include <string>
#include <vector>

#include "io/json_write.h"
#include "logic/commands.h"
#include "logic/lesson_checks.h"
#include "logic/snapshot.h"

namespace kvscope::gui {

// One thing "Do it for me" does. `op` is one of:
//   intents  prompt TEXT | prefill | decode N | step N | back N | reset | cache on|off | compare on|off |
//            options SET (["window=4", ...], the script's option keys) | suffix INDEX TEXT | heads | lab SPECS | chat TEXT
//   view     layer N | head N | heads-view one|all | show-step N (-1 = newest)
struct LessonAction {
    std::string op;
    std::string text;               // prompt, suffix, chat, lab (';'-separated specs, "" = the default list)
    int64_t n = 1;                  // decode, step, back, layer, head, show-step, suffix (the index)
    bool on = true;                 // cache, compare, heads-view (true = all heads)
    std::vector<std::string> set;   // options: "key=value" each
};

struct LessonStep {
    std::string text;               // the explanation
    std::string try_it;             // "try": what the learner does (the button or key), in words
    std::string look;               // what to look at
    std::string panel;              // the panel it concerns (a panel title, e.g. "KV cache"); "" = none
    std::vector<LessonAction> actions;  // "do"
    std::vector<LessonCheck> checks;    // "check": all must pass before Next
};

struct Lesson {
    std::string file;               // the file's name (without its folder)
    std::string title;
    std::string model;              // "assets/default" or a path; "" = whatever model is open
    std::string summary;            // one line for the Learn menu
    std::vector<LessonStep> steps;
};

Lesson parse_lesson(const std::string& text, const std::string& file);
std::vector<Lesson> load_lessons(const std::string& dir);
std::string lessons_dir();
std::string lesson_model_dir(const Lesson& lesson);

std::vector<Command> lesson_intents(const LessonAction& a, const Snapshot& snap);

struct LessonView {
    int64_t layer = -1, head = -1;  // -1 = leave as is
    int all_heads = -1;             // -1 leave, 0 one head, 1 all heads
    bool set_step = false;
    int64_t step = -1;              // when set_step: the step shown (-1 = newest)
};
LessonView lesson_view(const std::vector<LessonAction>& actions);

CheckResult check_step(const LessonStep& step, const Snapshot& snap);

struct LessonRun {
    int64_t lesson = -1;            // index into the loaded lessons; -1 = none open
    int64_t step = 0;
    bool finished = false;          // Next on the last step
    CheckResult result;             // of the current step, as last evaluated
    bool open() const { return lesson >= 0; }
};

JsonOut lesson_json(const LessonRun& run, const Lesson& lesson);

}  // namespace kvscope::gui
