#pragma once
// The Lesson panel (lesson_panel.cpp) and the items of the Learn menu: the open lesson's title, "step k of
// n", the explanation, what to look at, the state of the step's check against the engine's record
// (logic/lesson.h: waiting, passed, or what was expected and what the record shows), and the buttons Do it
// for me, Back, Next (enabled once the check passes) and Close. The step's panel is brought to the front
// and highlighted.
//
//   lesson_library()              the lessons of lessons_dir(), read once; LoadError for a bad file
//   draw_learn_menu(c)            one MenuItem per lesson (call inside ImGui::BeginMenu("Learn"))
//   open_lesson(snap, prefs, i)   open lesson i (0-based) at its first step; returns the intents to push:
//                                 LoadModel when the lesson needs another model folder, the default options, the cache on
//   lesson_step_intents(snap, prefs)   "Do it for me": the step's intents; its view settings applied to prefs
//   lesson_next(snap, prefs)      evaluate the step's check; passed: go on (the last step finishes the
//                                 lesson) and return ""; else the check's message
//   lesson_begin_frame(c)         before any panel draws: outline the step's panel, bring queued tabs to the front
//   draw_lesson(c)                the panel
#include <string>
#include <vector>

#include "logic/lesson.h"
#include "panels/panel.h"

namespace kvscope::gui {

const std::vector<Lesson>& lesson_library();
void draw_learn_menu(PanelContext& c);
std::vector<Command> open_lesson(const Snapshot& snap, ViewPrefs& prefs, int64_t index);
std::vector<Command> lesson_step_intents(const Snapshot& snap, ViewPrefs& prefs);
std::string lesson_next(const Snapshot& snap, ViewPrefs& prefs);
void lesson_begin_frame(PanelContext& c);
void draw_lesson(PanelContext& c);

}  // namespace kvscope::gui
