#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/utf8.h"
#include "io/atomic_file.h"
#include "report/export.h"
#include "report/plot_layout.h"

namespace kvscope {
namespace {

// Texts sit where the PNG's segment font puts them: (x, y) is the top-left corner there, the
// baseline about 12 px lower here.
constexpr int baseline = 12;
const char* const ink = "#282828";

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

std::string hex(Rgb c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c[0], c[1], c[2]);
    return buf;
}

std::string base64(std::string_view bytes) {
    static const char* const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t v = 0;
        for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
        for (size_t k = 0; k < 4; ++k) out += k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
}

struct Svg {
    std::string s;

    Svg(int64_t width, int64_t height, const std::string& title) {
        s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
            num(double(width)) + "\" height=\"" + num(double(height)) + "\" viewBox=\"0 0 " + num(double(width)) +
            " " + num(double(height)) + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"" +
            num(plot_font_px) + "\">\n<title>" + xml_escape(title) + "</title>\n";
        rect(0, 0, double(width), double(height), "#ffffff");
    }
    void rect(double x, double y, double w, double h, const std::string& fill) {
        s += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
             "\" fill=\"" + fill + "\"/>\n";
    }
    void line(double x0, double y0, double x1, double y1, const std::string& stroke, double width = 1) {
        s += "<line x1=\"" + num(x0) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(x1) + "\" y2=\"" + num(y1) +
             "\" stroke=\"" + stroke + "\" stroke-width=\"" + num(width) + "\"/>\n";
    }
    // anchor: "start" (x is the left edge, as in the PNG), "middle" or "end"
    void text(double x, double y, const std::string& t, const char* anchor = "start", const std::string& fill = ink) {
        s += "<text x=\"" + num(x) + "\" y=\"" + num(y + baseline) + "\" fill=\"" + fill + "\"";
        if (std::string_view(anchor) != "start") (s += " text-anchor=\"").append(anchor) += '"';
        (s += '>').append(xml_escape(t)) += "</text>\n";
    }
    void write(const std::string& path) {
        s += "</svg>\n";
        write_file_atomic(path, s);
    }
};

// The hatch of masked_color(x, y) as a 6 x 6 tile: light where (x + y) mod 6 is in [3, 6).
std::string hatch_pattern(double x0, double y0) {
    static_assert(masked_stripe_px == 3, "the tile below draws 3 px stripes");
    return "<defs><pattern id=\"masked\" patternUnits=\"userSpaceOnUse\" x=\"" + num(x0) + "\" y=\"" + num(y0) +
           "\" width=\"6\" height=\"6\"><rect width=\"6\" height=\"6\" fill=\"" + hex(masked_dark) +
           "\"/><polygon points=\"3,0 6,0 0,6 0,3\" fill=\"" + hex(masked_light) +
           "\"/><polygon points=\"6,3 6,6 3,6\" fill=\"" + hex(masked_light) + "\"/></pattern></defs>\n";
}

// Cell j of n over `length` pixels starting at 0 covers the pixels p with p * n / length == j.
int64_t cell_edge(int64_t j, int64_t n, int64_t length) { return (j * length + n - 1) / n; }

void draw_chart(Svg& svg, int ox, int width, int height, const LineChart& chart) {
    const ChartLayout l = chart_layout(chart, ox, width, height);
    const char* const grid = "#e1e1e1";
    svg.s += "<g class=\"chart\">\n";
    svg.text(l.left, 10, chart.title);
    for (const PlotTick& t : l.x_ticks) {
        svg.line(t.at + 0.5, l.top, t.at + 0.5, l.top + l.ph, grid);
        svg.text(t.at, l.top + l.ph + 8, t.label, "middle");
    }
    for (const PlotTick& t : l.y_ticks) {
        svg.line(l.left, t.at + 0.5, l.left + l.pw, t.at + 0.5, grid);
        svg.text(l.left - 8, t.at - 6, t.label, "end");
    }
    svg.line(l.left, l.top + l.ph + 1, l.left + l.pw, l.top + l.ph + 1, ink, 2);
    svg.line(l.left - 1, l.top, l.left - 1, l.top + l.ph + 2, ink, 2);
    svg.text(l.left + l.pw / 2.0, height - 24, chart.x_label, "middle");
    svg.text(ox + 8, l.top - 20, l.y_label);

    int legend_y = l.top + 8;
    for (const LineSeries& s : chart.series) {
        const std::string colour = hex(s.rgb);
        svg.s += "<g class=\"series\"><title>" + xml_escape(s.label) + "</title>\n";
        // One polyline per run of shown points; a lone point of a run is drawn by its marker only.
        std::string points;
        size_t n_points = 0;
        auto flush = [&] {
            if (n_points >= 2)
                svg.s += "<polyline fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
            points.clear();
            n_points = 0;
        };
        for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i) {
            if (!l.shown(s.ys[i])) {
                flush();
                continue;
            }
            if (n_points) points += ' ';
            (points += num(l.px(s.xs[i]))).append(",").append(num(l.py(s.ys[i])));
            ++n_points;
        }
        flush();
        for (size_t i = 0; i < s.xs.size() && i < s.ys.size(); ++i)
            if ((chart.markers || s.xs.size() == 1) && l.shown(s.ys[i]))
                svg.rect(l.px(s.xs[i]) - 3.5, l.py(s.ys[i]) - 3.5, 7, 7, colour);
        svg.rect(l.left + 16, legend_y + 4, 24, 4, colour);
        svg.text(l.left + 48, legend_y, s.label);
        svg.s += "</g>\n";
        legend_y += 22;
    }
    svg.s += "</g>\n";
}

}  // namespace

std::string xml_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        char32_t cp = 0;
        const size_t n = decode_utf8(text, i, cp);
        if (n == 0) {  // not UTF-8: one replacement character per bad byte
            append_utf8(out, 0xFFFD);
            ++i;
            continue;
        }
        i += n;
        switch (cp) {
            case '&': out += "&amp;"; continue;
            case '<': out += "&lt;"; continue;
            case '>': out += "&gt;"; continue;
            case '"': out += "&quot;"; continue;
            case '\'': out += "&apos;"; continue;
            default: break;
        }
        const bool forbidden = (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0xFFFE || cp == 0xFFFF;
        append_utf8(out, forbidden ? char32_t(0xFFFD) : cp);
    }
    return out;
}

PlotArea write_heatmap_plot_svg(const std::string& path, const HeatmapPlot& p) {
    check_heatmap_plot(path, p);
    const HeatmapLayout l = heatmap_layout(p);
    const PlotArea& a = l.area;
    const ColorTable& table = p.table ? *p.table : viridis();
    Svg svg(a.image_width, a.image_height, p.title);
    svg.s += hatch_pattern(double(a.x), double(a.y));

    // pass 1: the cells, one rect each, or the PNG's pixels when there are too many for a vector file
    if (p.rows * p.cols <= svg_max_rect_cells) {
        svg.s += "<g id=\"cells\" shape-rendering=\"crispEdges\">\n";
        for (int64_t i = 0; i < p.rows; ++i) {
            const int64_t y0 = cell_edge(i, p.rows, a.height), y1 = cell_edge(i + 1, p.rows, a.height);
            for (int64_t j = 0; j < p.cols; ++j) {
                const int64_t x0 = cell_edge(j, p.cols, a.width), x1 = cell_edge(j + 1, p.cols, a.width);
                const int64_t cell = i * p.cols + j;
                svg.rect(double(a.x + x0), double(a.y + y0), double(x1 - x0), double(y1 - y0),
                         p.visible && !p.visible[cell] ? "url(#masked)" : hex(color_for(p.values[cell], p.lo, p.hi, table)));
            }
        }
        svg.s += "</g>\n";
    } else {
        const std::vector<uint8_t> cells = heatmap_cells_rgb(p, a);
        svg.s += "<image id=\"cells\" x=\"" + num(double(a.x)) + "\" y=\"" + num(double(a.y)) + "\" width=\"" +
                 num(double(a.width)) + "\" height=\"" + num(double(a.height)) +
                 "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" href=\"data:image/png;base64," +
                 base64(encode_png_rgb(a.width, a.height, cells.data())) + "\"/>\n";
    }
    // pass 1b: a text centred in each cell (the PNG's places), in ink that stands out from the cell
    if (int64_t(p.cell_texts.size()) == p.rows * p.cols) {
        svg.s += "<g id=\"cell_texts\">\n";
        for (int64_t i = 0; i < p.rows; ++i)
            for (int64_t j = 0; j < p.cols; ++j)
                svg.text(double(a.x + (2 * j + 1) * a.width / (2 * p.cols)), double(a.y + (2 * i + 1) * a.height / (2 * p.rows)) - 6,
                         cell_text(p, i * p.cols + j), "middle", hex(cell_text_color(p, i * p.cols + j)));
        svg.s += "</g>\n";
    }
    // pass 2: title, axes, ticks at cell centres labelled with positions
    svg.s += "<g id=\"axes\">\n";
    svg.text(l.title_x, l.title_y, p.title);
    svg.text(l.y_label_x, l.y_label_y, l.y_label);
    svg.line(double(a.x) - 1, double(a.y), double(a.x) - 1, double(a.y + a.height) + 2, ink, 2);
    svg.line(double(a.x) - 2, double(a.y + a.height) + 1, double(a.x + a.width), double(a.y + a.height) + 1, ink, 2);
    for (const PlotTick& t : l.row_ticks) {
        svg.line(double(a.x) - 7, t.at + 0.5, double(a.x) - 2, t.at + 0.5, ink);
        svg.text(double(a.x) - 10, t.at - 6, t.label, "end");
    }
    for (const PlotTick& t : l.col_ticks) {
        svg.line(t.at + 0.5, double(a.y + a.height) + 2, t.at + 0.5, double(a.y + a.height) + 7, ink);
        svg.text(t.at + 0.5, double(a.y + a.height) + 10, t.label, "middle");
        if (!t.sub.empty()) svg.text(t.at + 0.5, double(a.y + a.height) + 28, t.sub, "middle");
    }
    svg.text(l.x_label_x, l.x_label_y, l.x_label);
    svg.s += "</g>\n";
    // pass 3: the colour bar (every table entry as a gradient stop, hi at the top) and the hatch sample
    svg.s += "<g id=\"colorbar\">\n<defs><linearGradient id=\"bar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
    for (size_t k = 0; k < table.size(); ++k)
        svg.s += "<stop offset=\"" + num(double(k) / 255.0) + "\" stop-color=\"" + hex(table[k]) + "\"/>";
    svg.s += "</linearGradient></defs>\n";
    svg.text(l.bar_x, l.y_label_y, p.value_label);
    svg.rect(l.bar_x, l.bar_y, l.bar_w, l.bar_h, "url(#bar)");
    svg.text(l.bar_x + l.bar_w + 6, l.bar_y - 2, l.hi_text);
    svg.text(l.bar_x + l.bar_w + 6, l.bar_y + l.bar_h - 12, l.lo_text);
    if (l.hatch) {
        svg.rect(l.bar_x, l.hatch_y, l.bar_w, l.hatch_h, "url(#masked)");
        svg.text(l.bar_x + l.bar_w + 6, l.hatch_y + 2, l.masked_text);
    }
    svg.s += "</g>\n";
    svg.write(path);
    return a;
}

void write_line_charts_svg(const std::string& path, const std::vector<LineChart>& charts, int panel_width,
                           int height) {
    const int width = panel_width * std::max<int>(1, int(charts.size()));
    Svg svg(width, height, charts.empty() ? std::string() : charts.front().title);
    for (size_t i = 0; i < charts.size(); ++i) draw_chart(svg, int(i) * panel_width, panel_width, height, charts[i]);
    svg.write(path);
}

}  // namespace kvscope
