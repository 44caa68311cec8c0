#pragma once
// The plots of plot.h as SVG files for papers: the same layout (plot_layout.h) as the PNGs, drawn with
// vector shapes and real text, so a figure scales to any size and its labels stay searchable.
//
//   xml_escape(text)                  text safe inside an XML element or attribute: & < > " ' escaped,
//                                     invalid UTF-8 bytes and characters XML 1.0 forbids (C0 controls
//                                     other than tab/LF/CR, U+FFFE, U+FFFF) become U+FFFD
//   write_heatmap_plot_svg(path, plot) -> PlotArea
//       the PNG heatmap's layout (plot.h) in user units of the same size (viewBox = 0 0 W H). Maps of
//       up to svg_max_rect_cells cells are one <rect> per cell (group id "cells", masked cells filled with
//       the hatch pattern "masked"); bigger maps embed the PNG's cell pixels as one base64 <image> (id
//       "cells") so the file stays small, with axes, labels and the colour bar still vector
//   write_line_charts_svg(path, charts, panel_width, height)
//       the charts of write_line_charts (plot.h) side by side: one <polyline> per unbroken run of a series
//
// Both are written by write_file_atomic (atomic_file.h); a plot without cells throws UsageError naming path.
#include <string>
#include <string_view>
#include <vector>

#include "report/plot.h"

namespace kvscope {

inline constexpr int64_t svg_max_rect_cells = 65536;

std::string xml_escape(std::string_view text);
PlotArea write_heatmap_plot_svg(const std::string& path, const HeatmapPlot& plot);
void write_line_charts_svg(const std::string& path, const std::vector<LineChart>& charts, int panel_width = 700,
                           int height = 520);

}  // namespace kvscope
