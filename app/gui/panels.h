#pragma once
// The panels. Each is one ImGui window drawn from the newest Snapshot of the session (immutable step
// records) and the shared view toggles; anything that changes the session goes through Controller::push.
//
//   draw_controls       (encoder-decoder: source + chips) prompt + token chips, step buttons, run/pause, options,
//                       cache switch, status
//   draw_export         export snapshot / session buttons and where the files went
//   draw_timeline       every token with its position, pointer, cache fill, window, evicted tokens
//   draw_kv_cache       K and V of one layer/head as heatmaps, written rows, write pointer, fill overview;
//                       encoder-decoder: the fixed cross-attention cache beside it
//   draw_attention      scores / weights with the mask, one head or all heads, hover, zoom, selection;
//                       encoder-decoder: self / cross / encoder attention
//   draw_mask           the causal (and window) mask of the step and the rule it follows
//   draw_next_token     top-k bars, the chosen token, entropy
//   draw_compare        cache on vs off for the same step, time and FLOPs charts over the generation
//   draw_heads          what each head does (previous-token, induction scores); a row jumps to its map
//   draw_model          the loaded model's config in words, KV cache bytes per token, the assets/ folder picker
//   draw_memory         paged caches: the block pool as a grid coloured by owner, block tables, sharing, COW
//   draw_rotary         rotary models: each dimension pair's frequency and angle, the selected key before and
//                       after rotation, the score of the selected query and key at every distance
//   draw_kv_quant       what int8 / int4 / fp8 K/V would change: per-cell K and V reconstruction error beside
//                       the step's attention score change, for the selected layer and head
//   draw_lab            the cache lab over the session's own tokens: per configuration bytes, loss, KL, top-1,
//                       and curves over the positions
//   draw_cache_edits    evict / restore / patch a position between steps; the next prediction before and after
//   PanelModule         one entry per panel: its title, draw function and figure; panel_modules() lists them in
//                       Panel order (panel_list.cpp), panel_module(p) finds one. A panel is one module: its file
//                       holds its draw function, its figure function and its caches (keyed by step record,
//                       record_cache.h)
//   layout_slots        where each panel goes for a window size, tabs where panels would not fit side by side
#include <imgui.h>

#include <string>
#include <vector>

#include "controller.h"
#include "heatmap.h"
#include "test_dumps.h"
#include "view.h"

namespace kvscope::gui {

struct PanelContext {
    Controller& ctl;        // only to push intents
    const Snapshot& snap;   // what every panel draws this frame
    const Progress& progress;
    ViewPrefs& prefs;
    MapCache& maps;
    ImVec2 display;  // window size in ImGui units, for the first-start layout
};

void draw_controls(PanelContext& c);
void draw_export(PanelContext& c);
void draw_timeline(PanelContext& c);
void draw_kv_cache(PanelContext& c);
void draw_attention(PanelContext& c);
void draw_mask(PanelContext& c);
void draw_next_token(PanelContext& c);
void draw_compare(PanelContext& c);
void draw_heads(PanelContext& c);
void draw_model(PanelContext& c);  // model_panel.cpp
void draw_memory(PanelContext& c);  // memory_panel.cpp
void draw_rotary(PanelContext& c);  // rotary_panel.cpp
void draw_logit_lens(PanelContext& c);  // logit_lens_panel.cpp
void draw_kv_quant(PanelContext& c);  // kv_quant_panel.cpp
void draw_lab(PanelContext& c);  // lab_panel.cpp
void draw_cache_edits(PanelContext& c);  // edits_panel.cpp
// The Memory panel's numbers as of the selected sequence's step `step` (-1 = newest) as JSON; false if unwritable.

enum class Panel { Controls, Heads, Export, Timeline, Model, Attention, KvCache, Mask, NextToken, Compare, Memory, Rotary, Lens, Quant, Lab,
                   Edits };

struct Figure;  // figures.h
// Each panel module's figure (the files "Save figure" writes); throws UsageError when there is nothing to draw.
Figure kv_cache_figure(const Snapshot& s, const ViewPrefs& v);  // kv_cache_panel.cpp
Figure mask_figure(const Snapshot& s, const ViewPrefs& v);      // mask_panel.cpp
Figure quant_figure(const Snapshot& s, const ViewPrefs& v);     // kv_quant_panel.cpp
Figure heads_figure(const Snapshot& s, const ViewPrefs& v);     // heads_panel.cpp
Figure compare_figure(const Snapshot& s, const ViewPrefs& v);   // compare.cpp
Figure lab_figure(const Snapshot& s, const ViewPrefs& v);       // lab_panel.cpp
Figure lens_figure(const Snapshot& s, const ViewPrefs& v);      // logit_lens_panel.cpp
Figure rotary_figure(const Snapshot& s, const ViewPrefs& v);    // rotary_panel.cpp
Figure memory_figure(const Snapshot& s, const ViewPrefs& v);    // memory_panel.cpp

struct PanelModule {
    Panel panel;
    const char* title;                                   // its window's title or its tab's name
    void (*draw)(PanelContext& c);
    const char* figure_name = nullptr;                   // "kv-cache", ...: the script's and the files' name
    Figure (*figure)(const Snapshot& s, const ViewPrefs& v) = nullptr;  // nullptr: nothing to save
};
const std::vector<PanelModule>& panel_modules();         // in Panel order
const PanelModule& panel_module(Panel p);
const char* panel_title(Panel p);                        // panel_module(p).title

// The layout: places on the screen, each holding one panel, or several as tabs of one window.
struct Slot {
    ImVec2 pos, size;
    std::vector<Panel> panels;  // drawn in this order; more than one = tabs
};
std::vector<Slot> layout_slots(ImVec2 display, bool paged);  // paged: the Memory panel has a place
// Each frame: the slots (laid out again when the window size changed), then per slot begin_slot, the
// slot's panels, end_slot. A panel draws between begin_panel (its window, or its tab) and end_panel;
// when begin_panel returns false there is nothing to draw and nothing to end.
const std::vector<Slot>& arrange_panels(ImVec2 display, bool paged);
void begin_slot(const Slot& slot);
void end_slot();
bool begin_panel(Panel p);
void show_tab(Panel p);  // bring a panel that is a tab to the front on the next frame (script `panel NAME`)
bool panel_named(const std::string& title, Panel& out);  // "Cache on vs off" -> Panel::Compare
void end_panel();

// The Controls panel's option boxes: reset to the applied options when the session was rebuilt; what
// differs from the applied options, in words ("window 0 → 6, seed 0 → 3"), empty when nothing is pending.
void sync_option_edits(ViewPrefs& prefs, const Snapshot& snap);
std::string pending_options(const ViewPrefs& prefs, const Snapshot& snap);

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
