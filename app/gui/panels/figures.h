#pragma once
// "Save figure": the maps and charts the panels show, as paper figures (core/report/plot.h: PNG at a scale or SVG,
// with a title, axes with positions and token labels, and a colour bar), written into the Export panel's
// folder in its format. A figure is built from the same snapshot structs the panel reads (never from a
// Session), on the drawing thread: every figure here is cheap next to drawing the panel.
//
//   FigureMap                      one heatmap of a figure and the arrays it points into
//   Figure                         what a panel's figure holds: heatmaps (one file each) or line charts
//                                  (one file, side by side), and the base name of its files
//   fig::                          what the panels' figure functions share: the model's name, token labels,
//                                  the shown step, titles and file names, line series
//   has_figure(panel)              the panels with a map or a chart to save (PanelModule::figure, panel_list.h)
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
#include "logic/derived_views.h"
#include "panels/panel.h"
#include "report/plot.h"

namespace kvscope::gui {

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
