#pragma once
// The panels. Each is one ImGui window drawn from the session's step records (read-only) and the shared
// view toggles; anything that changes the session goes through Controller::push.
//
//   draw_controls       prompt + token chips, step buttons, run/pause, options, cache switch, status
//   draw_export         export snapshot / session buttons and where the files went
//   draw_timeline       every token with its position, pointer, cache fill, window, evicted tokens
//   draw_kv_cache       K and V of one layer/head as heatmaps, written rows, write pointer, fill overview
//   draw_attention      scores / weights with the mask, one head or all heads, hover, zoom, selection
//   draw_mask           the causal (and window) mask of the step and the rule it follows
//   draw_next_token     top-k bars, the chosen token, entropy
//   draw_compare        cache on vs off for the same step, time and FLOPs charts over the generation
//   default_layout      first-start window rectangles computed from the window size
#include <imgui.h>

#include "commands.h"
#include "heatmap.h"
#include "view.h"

namespace kvscope::gui {

struct PanelContext {
    Controller& ctl;
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

enum class Panel { Controls, Export, Timeline, Attention, KvCache, Mask, NextToken, Compare };
void place_panel(Panel p, ImVec2 display);  // SetNextWindowPos/Size with ImGuiCond_FirstUseEver

// Shared bits of panel drawing.
std::string short_token(const Model& model, TokenId id, size_t max_chars = 12);
std::string human_bytes(double bytes);
std::string human_count(double n);  // 1.2k, 3.4M, 5.6G
void help_marker(const char* text);

}  // namespace kvscope::gui
