#pragma once
// What every panel shares. A panel is one module, panels/NAME_panel.{h,cpp}: its draw function, its figure
// function (figures.h) and its caches (keyed by step record, logic/record_cache.h); panel_list.cpp registers
// it. Each is one ImGui window drawn from the newest Snapshot of the session (immutable step records) and
// the shared view toggles; anything that changes the session goes through Controller::push.
//
//   PanelContext        what a panel's draw function gets: the controller (only to push intents), the snapshot,
//                       the worker's progress, the view toggles, the map/texture cache
//   Panel               one value per panel, in panel_modules() order (panel_list.h)
//   layout_slots        where each panel of a workspace goes for a window size, tabs where panels would not
//                       fit side by side; workspace_holding: where a panel is shown
//   begin_panel / end_panel   a panel's window or tab (layout.cpp); show_tab, panel_named for the script,
//                       highlight_panel for lessons
//   short_token, human_bytes, human_count, help_marker, wrapped_text, text_after, problem_box, stepper:
//                       shared bits of panel drawing (layout.cpp)
#include <imgui.h>

#include <string>
#include <vector>

#include "logic/controller.h"
#include "widgets/heatmap.h"
#include "widgets/test_dumps.h"
#include "widgets/view.h"

namespace kvscope::gui {

struct PanelContext {
    Controller& ctl;        // only to push intents
    const Snapshot& snap;   // what every panel draws this frame
    const Progress& progress;
    ViewPrefs& prefs;
    MapCache& maps;
    ImVec2 display;  // window size in ImGui units
};

enum class Panel { Controls, Heads, Export, Timeline, Model, Attention, KvCache, Mask, NextToken, Compare, Memory, Rotary, Lens, Quant, Lab,
                   Edits, Lesson };

struct Figure;  // figures.h: what a panel's "Save figure" writes

// The layout: places on the screen, each holding one panel, or several as tabs of one window.
struct Slot {
    ImVec2 pos, size;
    std::vector<Panel> panels;  // drawn in this order; more than one = tabs
};
// The places of workspace w's panels in a window of size `display` whose top `bar` pixels the menu bar takes;
// lesson: a lesson is open, and its panel has a place in every workspace.
std::vector<Slot> layout_slots(ImVec2 display, float bar, Workspace w, bool lesson);
// w itself when it shows panel p, else the first workspace that does (script `panel NAME`).
Workspace workspace_holding(Panel p, Workspace w);
// The workspace that gives panel p the most room (a lesson's step shows its panel there).
Workspace workspace_for(Panel p);
// Each frame: the slots (laid out again when the window size or the workspace changed), then per slot
// begin_slot, the slot's panels, end_slot, and end_layout_frame. A panel draws between begin_panel (its
// window, or its tab) and end_panel; when begin_panel returns false there is nothing to draw and nothing to end.
const std::vector<Slot>& arrange_panels(ImVec2 display, float bar, Workspace w, bool lesson);
void begin_slot(const Slot& slot);
void end_slot();
bool begin_panel(Panel p);
void end_panel();
void end_layout_frame();
void show_tab(Panel p);  // bring a panel that is a tab to the front on the next frame (script `panel NAME`)
void highlight_panel(Panel p);  // outline p's window (or tab) this frame: what a lesson's step is about
bool panel_named(const std::string& title, Panel& out);  // "Cache on vs off" -> Panel::Compare

// Shared bits of panel drawing.
std::string short_token(const Model& model, TokenId id, size_t max_chars = 12);
std::string human_bytes(double bytes);
std::string human_count(double n, const char* unit = "");  // 1.2k, 3.4M; with a unit "5.6 GFLOP"
// The step that ran the encoder whose output `enc` is: the first step of the trace that read it; -1 if none.
int64_t encoder_step(const Trace& trace, const EncoderOutput* enc);
void help_marker(const char* text);
// Wrapped text that breaks only at spaces and newlines (ImGui also breaks after '.' and ',', which splits
// "0.19" or "10..11" across lines). The block is one item (for dump_item); returns the text drawn.
std::string wrapped_text(ImVec4 color, const char* fmt, ...) IM_FMTARGS(2);
std::string wrapped_disabled(const char* fmt, ...) IM_FMTARGS(1);
// Text after the previous item on the same line when it fits there, else from the next line (wrapped).
void text_after(ImVec4 color, const std::string& text);

// The last failure, in the panel whose intent failed, until the user closes it (or the same panel succeeds).
void problem_box(PanelContext& c, Place place);
// "label [<] 3 [>] (0..11)": arrow buttons and a drag box that never hides the number; true when changed.
bool stepper(const char* label, int64_t& v, int64_t lo, int64_t hi);


}  // namespace kvscope::gui
