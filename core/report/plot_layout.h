#pragma once
// Where everything in a plot goes, computed once for both renderers: plot.cpp rasterises a layout into
// a PNG, svg.cpp writes the same layout as vector shapes, so the two files of one plot agree in size,
// cell rectangle, ticks and labels. Coordinates are pixels of the scale-1 image (SVG user units).
//
//   text_width(s)                  width of s in the PNG's segment font (stb_easy_font at 2x); the SVG's
//                                  labels are laid out with the same widths
//   shorten(text, n)               text cut to n characters (code points) with ".." marking the cut
//   text_rects(s, x, y)            the glyphs of s in that font, top-left corner at (x, y), as filled
//                                  rectangles {x0, y0, x1, y1} for the PNG rasteriser
//   nice_ticks(lo, hi, target)     round values in [lo, hi], a step apart: the first of 2, 5 or 10 times a
//                                  power of ten above (hi - lo) / target, so at most about target + 1 of them;
//                                  the ticks of the figures' charts and of the window's charts
//   tick_text(v)                   a short label for an axis value ("0.5", "120", "1e-03")
//   PlotTick                       one tick: its pixel along the axis and its label
//   check_heatmap_plot(path, plot)  UsageError naming path unless the plot has rows and columns
//   HeatmapLayout heatmap_layout(plot)   image and cell rectangle (PlotArea), position ticks at cell
//                                  centres, colour bar, hatch sample and the places of the texts
//   heatmap_cells_rgb(plot, area)  (area.height, area.width, 3) the cell pixels, masked cells hatched
//   cell_text(plot, cell)          the text drawn in a cell (cut to plot_label_chars), "" without cell_texts
//   cell_text_color(plot, cell)    dark ink on light cells, white on dark ones
//   ChartLayout chart_layout(chart, ox, width, height)   one line chart in the panel at (ox, 0): data
//                                  ranges, px()/py() data -> pixel, ticks, and shown(y) (finite, > 0 on log)
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "report/plot.h"

namespace kvscope {

int text_width(const std::string& s);
std::vector<std::array<int, 4>> text_rects(const std::string& s, int x, int y);
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
std::string tick_text(double v);
std::string shorten(const std::string& text, size_t n);

struct PlotTick {
    double at = 0;       // pixel x (bottom axis) or y (left axis)
    std::string label{};  // the position; on the left axis followed by the row's token text
    std::string sub{};    // bottom axis: the column's token text, a line under the label (may be empty)
};

inline constexpr int plot_label_chars = 12;  // token text on an axis is cut to this many characters

inline constexpr int plot_font_px = 14;  // height of one text line of the 2x segment font

struct HeatmapLayout {
    PlotArea area;
    std::string x_label = "key position", y_label = "query position";
    int title_x = 8, title_y = 8;         // top-left corner of each text
    int y_label_x = 8, y_label_y = 0;
    int x_label_x = 0, x_label_y = 0;
    std::vector<PlotTick> row_ticks;      // y of each tick at a row centre, label = query position
    std::vector<PlotTick> col_ticks;      // x of each tick at a column centre, label = key position
    int bar_x = 0, bar_y = 0, bar_w = 18, bar_h = 0;  // the colour bar, hi at the top
    int hatch_y = 0, hatch_h = 16;        // the masked-hatch sample under the bar
    bool hatch = true;                    // draw it (HeatmapPlot::show_masked)
    std::string hi_text, lo_text;         // the bar's range labels
    std::string masked_text = "masked";   // beside the hatch sample
};

void check_heatmap_plot(const std::string& path, const HeatmapPlot& plot);
HeatmapLayout heatmap_layout(const HeatmapPlot& plot);
std::vector<uint8_t> heatmap_cells_rgb(const HeatmapPlot& plot, const PlotArea& area);
std::string cell_text(const HeatmapPlot& plot, int64_t cell);
Rgb cell_text_color(const HeatmapPlot& plot, int64_t cell);

struct ChartLayout {
    int left = 0, top = 0, pw = 0, ph = 0;  // the plotting rectangle
    int ox = 0, width = 0, height = 0;      // the panel
    bool log_y = false;
    double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;  // y_lo/y_hi in log10 units on a log axis
    std::vector<PlotTick> x_ticks, y_ticks;
    std::string y_label;                    // with " (log scale)" on a log axis

    double px(double x) const { return left + (x - x_lo) / (x_hi - x_lo) * pw; }
    double py(double y) const;              // y is a data value (not yet log10)
    bool shown(double y) const;             // finite, and > 0 on a log axis
};

ChartLayout chart_layout(const LineChart& chart, int ox, int width, int height);

}  // namespace kvscope
