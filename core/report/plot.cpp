#include "report/plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/errors.h"
#include "report/export.h"
#include "report/plot_layout.h"
#include "report/svg.h"

namespace kvscope {
namespace {

struct Canvas {
    int w, h;
    std::vector<uint8_t> rgb;  // (h, w, 3)
    Canvas(int w_, int h_) : w(w_), h(h_), rgb(size_t(w_) * size_t(h_) * 3, 255) {}

    void pixel(int x, int y, std::array<uint8_t, 3> c) {
        if (x < 0 || y < 0 || x >= w || y >= h) return;
        std::memcpy(&rgb[(size_t(y) * size_t(w) + size_t(x)) * 3], c.data(), 3);
    }
    void rect(int x0, int y0, int x1, int y1, std::array<uint8_t, 3> c) {
        for (int y = std::max(0, y0); y < std::min(h, y1); ++y)
            for (int x = std::max(0, x0); x < std::min(w, x1); ++x) pixel(x, y, c);
    }
    // A line `thickness` pixels wide, stepped along its longer axis.
    void line(double x0, double y0, double x1, double y1, std::array<uint8_t, 3> c, int thickness = 2) {
        const int steps = int(std::max(std::abs(x1 - x0), std::abs(y1 - y0))) + 1;
        for (int i = 0; i <= steps; ++i) {
            const double t = double(i) / steps;
            const int x = int(std::lround(x0 + (x1 - x0) * t)), y = int(std::lround(y0 + (y1 - y0) * t));
            rect(x - thickness / 2, y - thickness / 2, x - thickness / 2 + thickness, y - thickness / 2 + thickness, c);
        }
    }
    void text(int x, int y, const std::string& s, std::array<uint8_t, 3> c) {
        for (const auto& r : text_rects(s, x, y)) rect(r[0], r[1], r[2], r[3], c);
    }
};

// One chart in the panel of the canvas whose top-left corner is (ox, 0) and size (width, height).
void draw_chart(Canvas& c, int ox, int width, int height, const LineChart& chart) {
    const ChartLayout l = chart_layout(chart, ox, width, height);
    const std::array<uint8_t, 3> ink{40, 40, 40}, grid{225, 225, 225};
    c.text(l.left, 10, chart.title, ink);
    for (const PlotTick& t : l.x_ticks) {
        const int x = int(t.at);
        c.rect(x, l.top, x + 1, l.top + l.ph, grid);
        c.text(x - text_width(t.label) / 2, l.top + l.ph + 8, t.label, ink);
    }
    for (const PlotTick& t : l.y_ticks) {
        const int y = int(t.at);
        c.rect(l.left, y, l.left + l.pw, y + 1, grid);
        c.text(l.left - 8 - text_width(t.label), y - 6, t.label, ink);
    }
    c.rect(l.left, l.top + l.ph, l.left + l.pw, l.top + l.ph + 2, ink);
    c.rect(l.left - 2, l.top, l.left, l.top + l.ph + 2, ink);
    c.text(l.left + l.pw / 2 - text_width(chart.x_label) / 2, height - 24, chart.x_label, ink);
    c.text(ox + 8, l.top - 20, l.y_label, ink);

    int legend_y = l.top + 8;
    for (const LineSeries& s : chart.series) {
        for (size_t i = 1; i < s.xs.size() && i < s.ys.size(); ++i)
            if (l.shown(s.ys[i - 1]) && l.shown(s.ys[i]))
                c.line(l.px(s.xs[i - 1]), l.py(s.ys[i - 1]), l.px(s.xs[i]), l.py(s.ys[i]), s.rgb);
        for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i)
            if ((chart.markers || s.xs.size() == 1) && l.shown(s.ys[i])) {
                const int x = int(l.px(s.xs[i])), y = int(l.py(s.ys[i]));
                c.rect(x - 3, y - 3, x + 4, y + 4, s.rgb);
            }
        c.rect(l.left + 16, legend_y + 4, l.left + 40, legend_y + 8, s.rgb);
        c.text(l.left + 48, legend_y, s.label, ink);
        legend_y += 22;
    }
}

// Nearest-neighbour upscale: every layout pixel becomes a scale x scale block.
void write_png(const std::string& path, const Canvas& c, int64_t scale = 1) {
    if (scale == 1) return write_png_rgb(path, c.w, c.h, c.rgb.data());
    const int64_t w = c.w * scale, h = c.h * scale;
    std::vector<uint8_t> big(size_t(w * h * 3));
    for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
            std::memcpy(&big[size_t((y * w + x) * 3)], &c.rgb[size_t(((y / scale) * c.w + x / scale) * 3)], 3);
    write_png_rgb(path, w, h, big.data());
}

// The largest scale <= wanted that keeps the longer side within plot_max_side_px (at least 1).
int64_t png_scale(int64_t width, int64_t height, int wanted) {
    int64_t s = wanted;
    while (s > 1 && std::max(width, height) * s > plot_max_side_px) --s;
    return s;
}

PlotArea heatmap_png(const std::string& path, const HeatmapPlot& p, int scale) {
    check_heatmap_plot(path, p);
    const HeatmapLayout l = heatmap_layout(p);
    PlotArea a = l.area;
    Canvas c(int(a.image_width), int(a.image_height));
    const std::array<uint8_t, 3> ink{40, 40, 40};
    const ColorTable& table = p.table ? *p.table : viridis();

    // pass 1: the cells
    const std::vector<uint8_t> cells = heatmap_cells_rgb(p, a);
    for (int64_t y = 0; y < a.height; ++y)
        std::memcpy(&c.rgb[size_t(((a.y + y) * c.w + a.x) * 3)], &cells[size_t(y * a.width * 3)], size_t(a.width * 3));
    // pass 1b: a text centred in each cell, in ink that stands out from the cell's colour
    if (int64_t(p.cell_texts.size()) == p.rows * p.cols)
        for (int64_t i = 0; i < p.rows; ++i)
            for (int64_t j = 0; j < p.cols; ++j) {
                const std::string t = cell_text(p, i * p.cols + j);
                const int cx = int(a.x + (2 * j + 1) * a.width / (2 * p.cols)), cy = int(a.y + (2 * i + 1) * a.height / (2 * p.rows));
                c.text(cx - text_width(t) / 2, cy - 6, t, cell_text_color(p, i * p.cols + j));
            }
    // pass 2: title, axes, ticks at cell centres labelled with positions
    c.text(l.title_x, l.title_y, p.title, ink);
    c.text(l.y_label_x, l.y_label_y, l.y_label, ink);
    c.rect(int(a.x) - 2, int(a.y), int(a.x), int(a.y + a.height) + 2, ink);
    c.rect(int(a.x) - 2, int(a.y + a.height), int(a.x + a.width), int(a.y + a.height) + 2, ink);
    for (const PlotTick& t : l.row_ticks) {
        const int y = int(t.at);
        c.rect(int(a.x) - 7, y, int(a.x) - 2, y + 1, ink);
        c.text(int(a.x) - 10 - text_width(t.label), y - 6, t.label, ink);
    }
    for (const PlotTick& t : l.col_ticks) {
        const int x = int(t.at);
        c.rect(x, int(a.y + a.height) + 2, x + 1, int(a.y + a.height) + 7, ink);
        c.text(x - text_width(t.label) / 2, int(a.y + a.height) + 10, t.label, ink);
        c.text(x - text_width(t.sub) / 2, int(a.y + a.height) + 28, t.sub, ink);
    }
    c.text(l.x_label_x, l.x_label_y, l.x_label, ink);
    // pass 3: the colour bar, hi at the top, and a sample of the masked hatch (unless none can be)
    c.text(l.bar_x, l.y_label_y, p.value_label, ink);
    for (int y = 0; y < l.bar_h; ++y) {
        const float t = p.hi - (p.hi - p.lo) * float(y) / float(std::max(1, l.bar_h - 1));
        c.rect(l.bar_x, l.bar_y + y, l.bar_x + l.bar_w, l.bar_y + y + 1, color_for(t, p.lo, p.hi, table));
    }
    c.text(l.bar_x + l.bar_w + 6, l.bar_y - 2, l.hi_text, ink);
    c.text(l.bar_x + l.bar_w + 6, l.bar_y + l.bar_h - 12, l.lo_text, ink);
    if (l.hatch) {
        for (int y = 0; y < l.hatch_h; ++y)
            for (int x = 0; x < l.bar_w; ++x) c.pixel(l.bar_x + x, l.hatch_y + y, masked_color(x, y));
        c.text(l.bar_x + l.bar_w + 6, l.hatch_y + 2, l.masked_text, ink);
    }

    a.scale = png_scale(a.image_width, a.image_height, scale);
    write_png(path, c, a.scale);
    for (int64_t* v : {&a.image_width, &a.image_height, &a.x, &a.y, &a.width, &a.height}) *v *= a.scale;
    return a;
}

Canvas charts_canvas(const std::vector<LineChart>& charts, int panel_width, int height) {
    Canvas c(panel_width * std::max<int>(1, int(charts.size())), height);
    for (size_t i = 0; i < charts.size(); ++i) draw_chart(c, int(i) * panel_width, panel_width, height, charts[i]);
    return c;
}

}  // namespace

PlotFormat plot_format_of(const std::string& path) {
    std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
    for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return ext == ".svg" ? PlotFormat::Svg : PlotFormat::Png;
}

PlotFormat parse_plot_format(const std::string& flag, const std::string& text) {
    if (text == "png") return PlotFormat::Png;
    if (text == "svg") return PlotFormat::Svg;
    throw UsageError(flag + " must be png or svg, got '" + text + "'");
}

int check_plot_scale(const std::string& flag, int64_t n) {
    if (n < 1 || n > plot_max_scale)
        throw UsageError(flag + " must be a whole number from 1 to " + std::to_string(plot_max_scale) + ", got " +
                         std::to_string(n));
    return int(n);
}

OutputKind plot_output_kind(PlotFormat format) { return format == PlotFormat::Svg ? OutputKind::Svg : OutputKind::Png; }

const char* plot_extension(PlotFormat format) { return format == PlotFormat::Svg ? ".svg" : ".png"; }

PlotArea write_heatmap_plot(const std::string& path, const HeatmapPlot& plot, const PlotOutput& out) {
    check_plot_scale("plot scale", out.scale);
    if (out.format == PlotFormat::Svg) return write_heatmap_plot_svg(path, plot);
    return heatmap_png(path, plot, out.scale);
}

void write_line_charts(const std::string& path, const std::vector<LineChart>& charts, const PlotOutput& out,
                       int panel_width, int height) {
    check_plot_scale("plot scale", out.scale);
    if (out.format == PlotFormat::Svg) return write_line_charts_svg(path, charts, panel_width, height);
    const Canvas c = charts_canvas(charts, panel_width, height);
    write_png(path, c, png_scale(c.w, c.h, out.scale));
}

}  // namespace kvscope
