#pragma once
// "Save figure": the maps and charts the panels show, as paper figures (core/report/plot.h: PNG at a scale or SVG,
// with a title, axes with positions and token labels, and a colour bar), written into the Export panel's
// folder in its format. A figure is built from the same snapshot structs the panel reads (never from a
// Session), on the drawing thread: every figure here is cheap next to drawing the panel.
//
//   kv_slots(trace, step, layer, head, values)   (S, D) K or V of the cache slots after `step`, empty slots
//                                  hidden: what the KV cache panel's textures hold and its figure shows
//                                  (kv_cache_panel.cpp)
//   score_change_cells(e, change, seen)  the K/V quantization panel's score-change map: (T, P) values with
//                                  0 and seen = 0 where the query does not see the key (kv_quant_panel.cpp)
//   kQuantMaxQueries               the quantization panel's score map covers the step's last queries only
//   lab_curves(lab)                the Cache lab panel's curves: per configuration the loss it adds over the
//                                  reference (summed over the positions) and its KL per position (lab_panel.cpp)
//   FigureMap                      one heatmap of a figure and the arrays it points into
//   Figure                         what a panel's figure holds: heatmaps (one file each) or line charts
//                                  (one file, side by side), and the base name of its files
//   fig::                          what the panels' figure functions share: the model's name, token labels,
//                                  the shown step, titles and file names, line series
//   has_figure(panel)              the panels with a map or a chart to save (PanelModule::figure, panels.h)
//   figure_panel_name(panel)       "kv-cache", "mask", ... : the script's and the files' name for it
//   figure_panel_named(name, out)  the inverse of figure_panel_name
//   build_figure(panel, snap, prefs) -> Figure    throws UsageError when there is nothing to draw yet
//   save_figure(panel, snap, prefs, name) -> paths   the figure's files in <export dir>/figures/, named
//                                  name (default Figure::name) + "_" + part for figures of several maps;
//                                  every output rule (core/io/output_path.h) is checked for every file before
//                                  anything is written, so a refusal changes nothing; throws UsageError
//   figure_button(c, panel)        the panel's "Save figure" button and its one-line result, the first line
//                                  of every panel that has a figure
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/kv_quant_error.h"
#include "derived_views.h"
#include "panels.h"
#include "report/plot.h"

namespace kvscope::gui {

struct KvSlots {
    int64_t n_slot = 0, head_dim = 0;     // S, D
    std::vector<float> values;            // (S, D) 0 in empty slots
    std::vector<uint8_t> visible;         // (S, D) 1 where the slot holds a position
    float absmax = 0;                     // max |value|
};
KvSlots kv_slots(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values);

inline constexpr int64_t kQuantMaxQueries = 256;
void score_change_cells(const KvQuantError& e, std::vector<float>& change, std::vector<uint8_t>& seen);

struct LabCurves {
    std::vector<std::vector<double>> added, kl;  // (configurations, N positions)
    std::vector<std::string> names;              // (configurations)
};
LabCurves lab_curves(const LabReport& lab);

struct FigureMap {
    std::string part;                     // "K", "V", ... : the file name's suffix; empty for a figure of one map
    HeatmapPlot plot;                     // values / visible point into the vectors below once placed
    std::vector<float> values;
    std::vector<uint8_t> visible;
};

struct Figure {
    std::string name;                     // base file name, e.g. "kv_cache_step2_l1_h0"
    std::vector<FigureMap> maps;
    std::vector<LineChart> charts;        // written as one file when maps is empty
};

// What the panels' figure functions share (figures.cpp).
namespace fig {
// Colour-blind-safe series colours (Okabe & Ito): blue, vermillion, bluish green, orange, reddish purple, sky blue.
inline constexpr Rgb kSeries[] = {{0, 114, 178}, {213, 94, 0}, {0, 158, 115}, {230, 159, 0}, {204, 121, 167}, {86, 180, 233}};
[[noreturn]] void nothing(const std::string& why);  // throws UsageError "nothing to draw yet: why"
std::string model_name(const Snapshot& s);           // the model folder's name
std::vector<TokenId> tokens_of(const Snapshot& s);   // prompt then generated tokens
std::string token_label(const Model& model, const std::vector<TokenId>& tokens, int64_t p);  // "" off the end
std::vector<int64_t> iota(int64_t n, int64_t first = 0);
void signed_range(HeatmapPlot& p, float absmax);     // the diverging table, symmetric around 0
// The step the panel shows and its layer and head, clamped as the panels clamp them; throws (nothing) when
// there is no recorded step.
struct Shown {
    const StepRecord* r = nullptr;
    size_t step = 0;
    int64_t layer = 0, head = 0;
};
Shown shown_step(const Snapshot& s, const ViewPrefs& v);
std::string where(const Snapshot& s, const Shown& w, bool head = true);          // "model, step 2, layer 1, head 0"
std::string base_name(const char* what, const Shown& w, bool head = true);       // "what_step2_l1_h0"
LineSeries series(const std::string& label, size_t colour, const std::vector<double>& ys, double unit = 1);
}  // namespace fig

bool has_figure(Panel p);
const char* figure_panel_name(Panel p);
bool figure_panel_named(const std::string& name, Panel& out);
Figure build_figure(Panel p, const Snapshot& snap, const ViewPrefs& prefs);
std::vector<std::string> save_figure(Panel p, const Snapshot& snap, const ViewPrefs& prefs, const std::string& name = "");
void figure_button(PanelContext& c, Panel p);

}  // namespace kvscope::gui
