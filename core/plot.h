#pragma once
// Small line charts as PNG files (benchmark curves, training loss) — no plotting library needed.
//
//   LineSeries { label, rgb, xs, ys }
//   write_line_chart_png(path, title, x_label, y_label, series, log_y, width, height)
//       axes with ticks and labels, one polyline per series, a legend; log_y plots log10(y) (y > 0).
//       Written atomically; throws UsageError naming the path when it cannot be written.
//   LineChart { title, x_label, y_label, series, log_y, markers }
//   write_line_charts_png(path, charts, panel_width, height)
//       several charts side by side in one PNG, each panel drawn as above; markers: a dot per point
#include <array>
#include <cstdint>
#include <string>
#include <vector>

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

void write_line_chart_png(const std::string& path, const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<LineSeries>& series, bool log_y = false,
                          int width = 900, int height = 520);
void write_line_charts_png(const std::string& path, const std::vector<LineChart>& charts, int panel_width = 700,
                           int height = 520);

}  // namespace kvscope
