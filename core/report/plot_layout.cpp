#include "report/plot_layout.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>

#include "base/errors.h"
#include "base/utf8.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb_easy_font.h>
#pragma GCC diagnostic pop

namespace kvscope {
namespace {

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

// stb_easy_font's segment font at 2x: each glyph quad becomes a filled rectangle.
constexpr int font_scale = 2;

// The font has printable ASCII only, and indexes its tables with the byte: anything else (UTF-8,
// control bytes) is drawn as '?' rather than read from outside the tables.
std::string font_text(const std::string& s) {
    std::string out = s;
    for (char& c : out)
        if (c != '\n' && (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126)) c = '?';
    return out;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
    const double span = hi - lo > 0 ? hi - lo : 1;
    const double raw = span / std::max(1, target), mag = std::pow(10, std::floor(std::log10(raw)));
    const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
    std::vector<double> out;
    for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) out.push_back(v);
    return out;
}

int text_width(const std::string& s) {
    std::string copy = font_text(s);
    return stb_easy_font_width(copy.data()) * font_scale;
}

std::vector<std::array<int, 4>> text_rects(const std::string& s, int x, int y) {
    static thread_local char quads[60000];
    std::string copy = font_text(s);
    const int n = stb_easy_font_print(0, 0, copy.data(), nullptr, quads, sizeof quads);
    std::vector<std::array<int, 4>> out;
    out.reserve(size_t(n));
    for (int q = 0; q < n; ++q) {
        const float* v = reinterpret_cast<const float*>(quads + q * 64);  // 4 vertices of 16 bytes
        out.push_back({x + int(v[0] * font_scale), y + int(v[1] * font_scale), x + int(v[8] * font_scale),
                       y + int(v[9] * font_scale)});
    }
    return out;
}

std::string shorten(const std::string& text, size_t n) {
    size_t i = 0, count = 0;
    while (i < text.size() && count < n) {
        char32_t cp = 0;
        const size_t len = decode_utf8(text, i, cp);
        i += len ? len : 1;  // a bad byte counts as one character (the writers show it as U+FFFD or '?')
        ++count;
    }
    return i < text.size() ? text.substr(0, i) + ".." : text;
}

std::string tick_text(double v) {
    char buf[32];
    const double a = std::abs(v);
    if (a != 0 && (a >= 1e5 || a < 1e-2)) std::snprintf(buf, sizeof buf, "%.0e", v);
    else if (a >= 100 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
    else std::snprintf(buf, sizeof buf, "%.2g", v);
    return buf;
}

void check_heatmap_plot(const std::string& path, const HeatmapPlot& p) {
    if (p.rows <= 0 || p.cols <= 0)
        throw UsageError("cannot write " + path + ": a heatmap needs at least one row and one column");
}

HeatmapLayout heatmap_layout(const HeatmapPlot& p) {
    assert(p.rows > 0 && p.cols > 0 && "heatmap_layout needs a checked plot (check_heatmap_plot)");
    HeatmapLayout l;
    if (!p.x_label.empty()) l.x_label = p.x_label;
    if (!p.y_label.empty()) l.y_label = p.y_label;
    if (!p.masked_label.empty()) l.masked_text = p.masked_label;
    int64_t cw = heatmap_cell_px(p.rows, p.cols);
    int64_t ch = std::max(cw, (heatmap_plot_min_height_px + p.rows - 1) / p.rows);
    if (int64_t(p.cell_texts.size()) == p.rows * p.cols) {  // every cell wide and tall enough for its text
        int widest = 0;
        for (int64_t cell = 0; cell < p.rows * p.cols; ++cell) widest = std::max(widest, text_width(cell_text(p, cell)));
        cw = std::max<int64_t>(cw, widest + 12);
        ch = std::max<int64_t>(ch, 28);
    }
    if (p.rows * ch > heatmap_max_side_px) ch = cw;
    PlotArea& a = l.area;
    a.width = std::min(p.cols * cw, heatmap_max_side_px);
    a.height = std::min(p.rows * ch, heatmap_max_side_px);
    const bool row_labels = int64_t(p.row_labels.size()) == p.rows, col_labels = int64_t(p.col_labels.size()) == p.cols;
    auto row_text = [&](int64_t i) {
        std::string text = std::to_string(p.row_positions[size_t(i)]);
        if (row_labels) (text += ' ').append(shorten(p.row_labels[size_t(i)], plot_label_chars));
        return text;
    };
    // The left margin fits the widest row label (positions alone fit in 80 px).
    int left = 80;
    if (row_labels && int64_t(p.row_positions.size()) == p.rows)
        for (int64_t i = 0; i < p.rows; ++i) left = std::max(left, text_width(row_text(i)) + 24);
    const int top = 56, bottom = col_labels ? 78 : 60, bar_gap = 24;
    l.hatch = p.show_masked;
    // Right of the bar: the hatch's label (6 px after the bar) and the bar's title (over the bar) fit.
    const int bar_labels = std::max({80, l.hatch ? 6 + text_width(l.masked_text) : 0, text_width(p.value_label) - l.bar_w + 8});
    a.x = left;
    a.y = top;
    const int64_t min_w = std::max<int64_t>({text_width(p.title) + 16, text_width(l.x_label) + left + 16, 360});
    a.image_width = std::max<int64_t>(left + a.width + bar_gap + l.bar_w + bar_labels, min_w);
    a.image_height = top + std::max<int64_t>(a.height, 120) + bottom;

    l.y_label_y = top - 22;
    l.x_label_x = int(a.x);
    l.x_label_y = int(a.y + a.height) + (col_labels ? 50 : 32);
    if (int64_t(p.row_positions.size()) == p.rows)
        for (int64_t i : cell_ticks(p.row_positions, a.height, 18))
            l.row_ticks.push_back({double(a.y + (2 * i + 1) * a.height / (2 * p.rows)), row_text(i), ""});
    if (int64_t(p.col_positions.size()) == p.cols) {
        const std::vector<int64_t> cols = cell_ticks(p.col_positions, a.width, 56);
        // A column's token text is cut to the room between two ticks (at least 3 characters).
        const size_t room = cols.size() > 1 ? size_t(std::max<int64_t>(3, (cols[1] - cols[0]) * a.width / p.cols / 12 - 1))
                                            : size_t(plot_label_chars);
        for (int64_t j : cols)
            l.col_ticks.push_back({double(a.x + (2 * j + 1) * a.width / (2 * p.cols)),
                                   std::to_string(p.col_positions[size_t(j)]),
                                   col_labels ? shorten(p.col_labels[size_t(j)], std::min<size_t>(room, plot_label_chars)) : ""});
    }
    l.bar_x = int(a.x + a.width) + bar_gap;
    l.bar_y = int(a.y);
    l.bar_h = int(std::max<int64_t>(a.height, 120)) - 40;
    l.hatch_y = l.bar_y + l.bar_h + 12;
    l.hi_text = tick_text(p.hi);
    l.lo_text = tick_text(p.lo);
    return l;
}

std::vector<uint8_t> heatmap_cells_rgb(const HeatmapPlot& p, const PlotArea& a) {
    const ColorTable& table = p.table ? *p.table : viridis();
    std::vector<uint8_t> rgb(size_t(a.width * a.height * 3));
    for (int64_t y = 0; y < a.height; ++y) {
        const int64_t i = y * p.rows / a.height;
        for (int64_t x = 0; x < a.width; ++x) {
            const int64_t j = x * p.cols / a.width, cell = i * p.cols + j;
            const Rgb c = p.visible && !p.visible[cell] ? masked_color(x, y) : color_for(p.values[cell], p.lo, p.hi, table);
            std::copy(c.begin(), c.end(), rgb.begin() + (y * a.width + x) * 3);
        }
    }
    return rgb;
}

std::string cell_text(const HeatmapPlot& p, int64_t cell) {
    if (int64_t(p.cell_texts.size()) != p.rows * p.cols) return "";
    return shorten(p.cell_texts[size_t(cell)], plot_label_chars);
}

Rgb cell_text_color(const HeatmapPlot& p, int64_t cell) {
    if (p.visible && !p.visible[cell]) return {255, 255, 255};
    const Rgb c = color_for(p.values[cell], p.lo, p.hi, p.table ? *p.table : viridis());
    const double luma = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
    return luma < 110 ? Rgb{255, 255, 255} : Rgb{40, 40, 40};
}

double ChartLayout::py(double y) const {
    const double t = log_y ? std::log10(std::max(y, 1e-300)) : y;
    return top + ph - (t - y_lo) / (y_hi - y_lo) * ph;
}

bool ChartLayout::shown(double y) const { return std::isfinite(y) && (!log_y || y > 0); }

ChartLayout chart_layout(const LineChart& chart, int ox, int width, int height) {
    ChartLayout l;
    l.log_y = chart.log_y;
    l.ox = ox, l.width = width, l.height = height;
    const int right = 20, bottom = 60;
    l.left = ox + 90, l.top = 66;
    l.pw = width - 90 - right, l.ph = height - l.top - bottom;
    auto ty = [&](double y) { return l.log_y ? std::log10(std::max(y, 1e-300)) : y; };

    double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
    for (const LineSeries& s : chart.series)
        for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i) {
            if (!l.shown(s.ys[i])) continue;
            x_lo = std::min(x_lo, s.xs[i]);
            x_hi = std::max(x_hi, s.xs[i]);
            y_lo = std::min(y_lo, ty(s.ys[i]));
            y_hi = std::max(y_hi, ty(s.ys[i]));
        }
    if (x_lo > x_hi) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
    if (!l.log_y) y_lo = std::min(y_lo, 0.0);
    if (x_hi == x_lo) x_hi = x_lo + 1;
    if (y_hi == y_lo) y_hi = y_lo + 1;
    y_hi += (y_hi - y_lo) * 0.05;
    l.x_lo = x_lo, l.x_hi = x_hi, l.y_lo = y_lo, l.y_hi = y_hi;

    for (double v : nice_ticks(x_lo, x_hi)) l.x_ticks.push_back({l.px(v), tick_text(v)});
    // On a log axis, ticks at 1, 2 and 5 times powers of ten (whole decades when there are many).
    std::vector<double> y_ticks = nice_ticks(y_lo, y_hi);
    if (l.log_y) {
        y_ticks.clear();
        const bool many = y_hi - y_lo > 3;
        for (double decade = std::floor(y_lo); decade <= y_hi; ++decade)
            for (double m : many ? std::vector<double>{1} : std::vector<double>{1, 2, 5})
                if (const double v = decade + std::log10(m); v >= y_lo && v <= y_hi) y_ticks.push_back(v);
    }
    for (double v : y_ticks)
        l.y_ticks.push_back({double(int(l.top + l.ph - (v - y_lo) / (y_hi - y_lo) * l.ph)),
                             l.log_y ? tick_text(std::pow(10, v)) : tick_text(v)});
    l.y_label = chart.y_label + (l.log_y ? " (log scale)" : "");
    return l;
}

}  // namespace kvscope
