#pragma once
// Line charts (benchmark curves, training loss) and labelled heatmaps as PNG or SVG files — no plotting
// library needed. Where things go is plot_layout.h; this file rasterises PNGs, svg.h writes SVGs.
//
//   LineSeries { label, rgb, xs, ys }
//   LineChart { title, x_label, y_label, series, log_y, markers }
//       axes with ticks and labels, one line per series, a legend; log_y plots log10(y) (y > 0);
//       markers: a dot per point
//   HeatmapPlot { title, value_label, rows, cols, values, visible, lo, hi, table, row_positions, col_positions,
//                 row_labels, col_labels, x_label, y_label, masked_label, show_masked }   (labels: token text
//                 beside the ticked positions, shortened to fit; x_label / y_label name the axes, by default key
//                 and query position; masked_label says what a hatched cell is, by default "masked", and
//                 show_masked = false leaves the hatch sample out where no cell can be hidden; cell_texts: a
//                 grid with a text in every cell, e.g. the logit lens's tokens)
//       an attention map with a title, the query position of each row down the left, the key position of
//       each column along the bottom (ticks at cell centres), a colour bar with its range and title (the
//       image is wide enough for the title) and the masked hatch. Cells are >= 8 px wide (heatmap_cell_px) and rows at least heatmap_plot_min_height_px / rows
//       tall, so a one-row decode map is a readable band, not a strip.
//   PlotFormat, PlotOutput { format, scale }   png | svg; scale 1..8 multiplies a PNG's pixels (nearest
//                                  neighbour, so each cell stays one flat colour); SVG ignores it
//   plot_format_of(path)           Svg when the name ends in .svg (any case), else Png
//   parse_plot_format(flag, text)  "png" | "svg", else UsageError naming the flag
//   check_plot_scale(flag, n)      n in 1..8, else UsageError naming the flag; returns n
//   plot_output_kind(format)       the OutputKind (output_path.h) an existing file must be to be replaced
//   plot_extension(format)         ".png" | ".svg"
//   write_heatmap_plot(path, plot, out) -> PlotArea     PNG or SVG; where the cells are, in the written
//                                  file's pixels (SVG: user units of its viewBox); a PNG's scale is capped
//                                  so its longer side stays <= plot_max_side_px (PlotArea::scale says which)
//   write_line_charts(path, charts, out, panel_width, height)   the charts side by side, PNG or SVG
// Files are written atomically; a plot without cells, a bad scale or an unwritable path throws UsageError
// (LoadError from the writer) naming the path.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "io/output_path.h"
#include "report/colormap.h"

namespace kvscope {

struct LineSeries {
    std::string label;
    std::array<uint8_t, 3> rgb{0, 0, 0};
    std::vector<double> xs, ys;
};

struct LineChart {
    std::string title, x_label, y_label;
    std::vector<LineSeries> series;
    bool log_y = false;
    bool markers = false;        // a square on every point (for a few sparse x values)
};

inline constexpr int64_t heatmap_plot_min_height_px = 96;

struct HeatmapPlot {
    std::string title;                    // first line, e.g. "layer 1 head 0: weights"
    std::string value_label;              // over the colour bar, e.g. "weight"
    int64_t rows = 0, cols = 0;
    const float* values = nullptr;        // (rows, cols) row-major
    const uint8_t* visible = nullptr;     // (rows, cols), 1 = draw the value, 0 = hatch; null = all visible
    float lo = 0, hi = 1;
    const ColorTable* table = nullptr;    // null = viridis
    std::vector<int64_t> row_positions;   // (rows) the query position of each row
    std::vector<int64_t> col_positions;   // (cols) the key position of each column
    std::vector<std::string> row_labels;  // (rows) or empty: each row's token text, after its position
    std::vector<std::string> col_labels;  // (cols) or empty: each column's token text, under its position
    std::string x_label, y_label;         // the axes' names; empty = "key position" / "query position"
    std::string masked_label;             // beside the hatch sample; empty = "masked" (e.g. "empty slot")
    bool show_masked = true;              // false: no hatch sample (no cell of this plot can be hidden)
    std::vector<std::string> cell_texts;  // (rows, cols) or empty: a short text centred in each cell (a logit
                                          // lens's tokens); the cells grow to fit them
};

// The cells' rectangle in the image: cell (i, j) covers x in [x + j * width / cols, x + (j + 1) * width / cols)
// and y likewise with height / rows.
struct PlotArea {
    int64_t image_width = 0, image_height = 0;
    int64_t x = 0, y = 0, width = 0, height = 0;
    int64_t scale = 1;  // PNG pixels per layout pixel (1 for SVG)
};

enum class PlotFormat { Png, Svg };
struct PlotOutput {
    PlotFormat format = PlotFormat::Png;
    int scale = 1;  // PNG only, 1..8
};
inline constexpr int plot_max_scale = 8;
inline constexpr int64_t plot_max_side_px = 8192;

PlotFormat plot_format_of(const std::string& path);
PlotFormat parse_plot_format(const std::string& flag, const std::string& text);
int check_plot_scale(const std::string& flag, int64_t n);
OutputKind plot_output_kind(PlotFormat format);
const char* plot_extension(PlotFormat format);  // ".png" | ".svg"
PlotArea write_heatmap_plot(const std::string& path, const HeatmapPlot& plot, const PlotOutput& out);
void write_line_charts(const std::string& path, const std::vector<LineChart>& charts, const PlotOutput& out,
                       int panel_width = 700, int height = 520);

}  // namespace kvscope
