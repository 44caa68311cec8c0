#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "errors.h"
#include "export.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_easy_font.h>
#pragma GCC diagnostic pop

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
    // stb_easy_font's segment font, scaled up: each glyph quad becomes a filled rectangle.
    void text(int x, int y, const std::string& s, std::array<uint8_t, 3> c, int scale = 2) {
        static char quads[60000];
        std::string copy = s;
        const int n = stb_easy_font_print(0, 0, copy.data(), nullptr, quads, sizeof quads);
        for (int q = 0; q < n; ++q) {
            const float* v = reinterpret_cast<const float*>(quads + q * 64);  // 4 vertices of 16 bytes
            rect(x + int(v[0] * scale), y + int(v[1] * scale), x + int(v[8] * scale), y + int(v[9] * scale), c);
        }
    }
    static int text_width(const std::string& s, int scale = 2) {
        std::string copy = s;
        return stb_easy_font_width(copy.data()) * scale;
    }
};

std::string tick_text(double v) {
    char buf[32];
    const double a = std::abs(v);
    if (a != 0 && (a >= 1e5 || a < 1e-2)) std::snprintf(buf, sizeof buf, "%.0e", v);
    else if (a >= 100 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
    else std::snprintf(buf, sizeof buf, "%.2g", v);
    return buf;
}

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
    const double span = hi - lo > 0 ? hi - lo : 1;
    const double raw = span / 5, mag = std::pow(10, std::floor(std::log10(raw)));
    const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
    std::vector<double> out;
    for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) out.push_back(v);
    return out;
}

// One chart in the panel of the canvas whose top-left corner is (ox, 0) and size (width, height).
void draw_chart(Canvas& c, int ox, int width, int height, const LineChart& chart) {
    const bool log_y = chart.log_y;
    const int left = ox + 90, right = 20, top = 66, bottom = 60;
    const int pw = width - 90 - right, ph = height - top - bottom;
    auto ty = [&](double y) { return log_y ? std::log10(std::max(y, 1e-300)) : y; };

    double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
    for (const LineSeries& s : chart.series)
        for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i) {
            if (!std::isfinite(s.ys[i]) || (log_y && s.ys[i] <= 0)) continue;
            x_lo = std::min(x_lo, s.xs[i]);
            x_hi = std::max(x_hi, s.xs[i]);
            y_lo = std::min(y_lo, ty(s.ys[i]));
            y_hi = std::max(y_hi, ty(s.ys[i]));
        }
    if (x_lo > x_hi) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
    if (!log_y) y_lo = std::min(y_lo, 0.0);
    if (x_hi == x_lo) x_hi = x_lo + 1;
    if (y_hi == y_lo) y_hi = y_lo + 1;
    y_hi += (y_hi - y_lo) * 0.05;
    auto px = [&](double x) { return left + (x - x_lo) / (x_hi - x_lo) * pw; };
    auto py = [&](double y) { return top + ph - (ty(y) - y_lo) / (y_hi - y_lo) * ph; };

    const std::array<uint8_t, 3> ink{40, 40, 40}, grid{225, 225, 225};
    c.text(left, 10, chart.title, ink, 2);
    for (double v : ticks(x_lo, x_hi)) {
        const int x = int(px(v));
        c.rect(x, top, x + 1, top + ph, grid);
        c.text(x - Canvas::text_width(tick_text(v)) / 2, top + ph + 8, tick_text(v), ink);
    }
    // On a log axis, ticks at 1, 2 and 5 times powers of ten (whole decades when there are many).
    std::vector<double> y_ticks = ticks(y_lo, y_hi);
    if (log_y) {
        y_ticks.clear();
        const bool many = y_hi - y_lo > 3;
        for (double decade = std::floor(y_lo); decade <= y_hi; ++decade)
            for (double m : many ? std::vector<double>{1} : std::vector<double>{1, 2, 5})
                if (const double v = decade + std::log10(m); v >= y_lo && v <= y_hi) y_ticks.push_back(v);
    }
    for (double v : y_ticks) {
        const int y = int(top + ph - (v - y_lo) / (y_hi - y_lo) * ph);
        c.rect(left, y, left + pw, y + 1, grid);
        const std::string label = log_y ? tick_text(std::pow(10, v)) : tick_text(v);
        c.text(left - 8 - Canvas::text_width(label), y - 6, label, ink);
    }
    c.rect(left, top + ph, left + pw, top + ph + 2, ink);
    c.rect(left - 2, top, left, top + ph + 2, ink);
    c.text(left + pw / 2 - Canvas::text_width(chart.x_label) / 2, height - 24, chart.x_label, ink);
    c.text(ox + 8, top - 20, chart.y_label + (log_y ? " (log scale)" : ""), ink);

    int legend_y = top + 8;
    for (const LineSeries& s : chart.series) {
        auto shown = [&](size_t i) { return std::isfinite(s.ys[i]) && (!log_y || s.ys[i] > 0); };
        for (size_t i = 1; i < s.xs.size() && i < s.ys.size(); ++i)
            if (shown(i - 1) && shown(i)) c.line(px(s.xs[i - 1]), py(s.ys[i - 1]), px(s.xs[i]), py(s.ys[i]), s.rgb);
        for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i)
            if ((chart.markers || s.xs.size() == 1) && shown(i))
                c.rect(int(px(s.xs[i])) - 3, int(py(s.ys[i])) - 3, int(px(s.xs[i])) + 4, int(py(s.ys[i])) + 4, s.rgb);
        c.rect(left + 16, legend_y + 4, left + 40, legend_y + 8, s.rgb);
        c.text(left + 48, legend_y, s.label, ink);
        legend_y += 22;
    }
}

void write_png(const std::string& path, const Canvas& c) { write_png_rgb(path, c.w, c.h, c.rgb.data()); }

// Tick indices along an axis of n cells drawn over `length` pixels: a round step of positions so that
// labels `label_px` apart fit, always including the first and last cell when they do.
std::vector<int64_t> cell_ticks(const std::vector<int64_t>& positions, int64_t length, int64_t label_px) {
    const int64_t n = int64_t(positions.size());
    std::vector<int64_t> out;
    if (n == 0) return out;
    const int64_t max_ticks = std::max<int64_t>(1, length / label_px);
    int64_t step = 1;
    for (int64_t m : {1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000})
        if ((step = m) * max_ticks >= n) break;
    for (int64_t i = 0; i < n; ++i)
        if (positions[size_t(i)] % step == 0) out.push_back(i);
    if (out.empty() || out.front() * length / n >= label_px) out.insert(out.begin(), 0);
    if ((n - 1 - out.back()) * length / n >= label_px) out.push_back(n - 1);
    return out;
}

}  // namespace

PlotArea write_heatmap_plot_png(const std::string& path, const HeatmapPlot& p) {
    if (p.rows <= 0 || p.cols <= 0)
        throw UsageError("cannot write " + path + ": a heatmap needs at least one row and one column");
    const ColorTable& table = p.table ? *p.table : viridis();
    const int64_t cw = heatmap_cell_px(p.rows, p.cols);
    int64_t ch = std::max(cw, (heatmap_plot_min_height_px + p.rows - 1) / p.rows);
    if (p.rows * ch > heatmap_max_side_px) ch = cw;
    PlotArea a;
    a.width = std::min(p.cols * cw, heatmap_max_side_px);
    a.height = std::min(p.rows * ch, heatmap_max_side_px);
    const std::string y_label = "query position", x_label = "key position";
    const int left = 80, top = 56, bottom = 60, bar_gap = 24, bar_w = 18, bar_labels = 80;
    a.x = left;
    a.y = top;
    const int64_t min_w = std::max<int64_t>({Canvas::text_width(p.title) + 16, Canvas::text_width(x_label) + left + 16, 360});
    a.image_width = std::max<int64_t>(left + a.width + bar_gap + bar_w + bar_labels, min_w);
    a.image_height = top + std::max<int64_t>(a.height, 120) + bottom;
    Canvas c(int(a.image_width), int(a.image_height));
    const std::array<uint8_t, 3> ink{40, 40, 40};

    // pass 1: the cells
    for (int64_t y = 0; y < a.height; ++y) {
        const int64_t i = y * p.rows / a.height;
        for (int64_t x = 0; x < a.width; ++x) {
            const int64_t j = x * p.cols / a.width, cell = i * p.cols + j;
            c.pixel(int(a.x + x), int(a.y + y),
                    p.visible && !p.visible[cell] ? masked_color(x, y) : color_for(p.values[cell], p.lo, p.hi, table));
        }
    }
    // pass 2: title, axes, ticks at cell centres labelled with positions
    c.text(8, 8, p.title, ink);
    c.text(8, top - 22, y_label, ink);
    c.rect(int(a.x) - 2, int(a.y), int(a.x), int(a.y + a.height) + 2, ink);
    c.rect(int(a.x) - 2, int(a.y + a.height), int(a.x + a.width), int(a.y + a.height) + 2, ink);
    if (int64_t(p.row_positions.size()) == p.rows)
        for (int64_t i : cell_ticks(p.row_positions, a.height, 18)) {
            const int y = int(a.y + (2 * i + 1) * a.height / (2 * p.rows));
            const std::string label = std::to_string(p.row_positions[size_t(i)]);
            c.rect(int(a.x) - 7, y, int(a.x) - 2, y + 1, ink);
            c.text(int(a.x) - 10 - Canvas::text_width(label), y - 6, label, ink);
        }
    if (int64_t(p.col_positions.size()) == p.cols)
        for (int64_t j : cell_ticks(p.col_positions, a.width, 56)) {
            const int x = int(a.x + (2 * j + 1) * a.width / (2 * p.cols));
            const std::string label = std::to_string(p.col_positions[size_t(j)]);
            c.rect(x, int(a.y + a.height) + 2, x + 1, int(a.y + a.height) + 7, ink);
            c.text(x - Canvas::text_width(label) / 2, int(a.y + a.height) + 10, label, ink);
        }
    c.text(int(a.x), int(a.y + a.height) + 32, x_label, ink);
    // pass 3: the colour bar, hi at the top, and a sample of the masked hatch
    const int bx = int(a.x + a.width) + bar_gap, bh = int(std::max<int64_t>(a.height, 120)) - 40;
    c.text(bx, top - 22, p.value_label, ink);
    for (int y = 0; y < bh; ++y) {
        const float t = p.hi - (p.hi - p.lo) * float(y) / float(std::max(1, bh - 1));
        c.rect(bx, int(a.y) + y, bx + bar_w, int(a.y) + y + 1, color_for(t, p.lo, p.hi, table));
    }
    c.text(bx + bar_w + 6, int(a.y) - 2, tick_text(p.hi), ink);
    c.text(bx + bar_w + 6, int(a.y) + bh - 12, tick_text(p.lo), ink);
    const int hy = int(a.y) + bh + 12;
    for (int y = 0; y < 16; ++y)
        for (int x = 0; x < bar_w; ++x) c.pixel(bx + x, hy + y, masked_color(x, y));
    c.text(bx + bar_w + 6, hy + 2, "masked", ink);
    write_png(path, c);
    return a;
}

void write_line_chart_png(const std::string& path, const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<LineSeries>& series, bool log_y,
                          int width, int height) {
    Canvas c(width, height);
    draw_chart(c, 0, width, height, LineChart{title, x_label, y_label, series, log_y, false});
    write_png(path, c);
}

void write_line_charts_png(const std::string& path, const std::vector<LineChart>& charts, int panel_width,
                           int height) {
    Canvas c(panel_width * std::max<int>(1, int(charts.size())), height);
    for (size_t i = 0; i < charts.size(); ++i) draw_chart(c, int(i) * panel_width, panel_width, height, charts[i]);
    write_png(path, c);
}

}  // namespace kvscope
