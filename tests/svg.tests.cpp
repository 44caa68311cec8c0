// svg: figures for papers. SVG files are read back with Python's XML parser (tests/data/svg_summary.py,
// independent of the writer): well-formed, viewBox = the stated size, one rect per cell whose fill is the
// colour table's entry computed here from the value, labels present and their text exactly the input
// with XML's special characters intact and bad bytes replaced. Scaled PNGs are read with stb_image and
// compared pixel by pixel with the scale-1 image. Bad inputs throw UsageError naming what is wrong.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "io/output_path.h"
#include "png_file.h"
#include "report/colormap.h"
#include "report/plot.h"
#include "report/plot_layout.h"
#include "report/svg.h"
#include "scratch_dir.h"

namespace fs = std::filesystem;
using namespace kvscope;
using Catch::Matchers::Contains;
using kvtest::Png;
using kvtest::read_png;

namespace {

fs::path work_dir(const std::string& name) {
    fs::path dir = kvscope::test::scratch_root() / "svg" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

// svg_summary.py's JSON for FILE, or nullopt (with a warning) where /usr/bin/python3 is missing.
std::optional<nlohmann::json> summary(const fs::path& svg) {
    if (!fs::exists("/usr/bin/python3")) {
        WARN("no /usr/bin/python3: the SVG's XML is not checked");
        return std::nullopt;
    }
    const std::string cmd = "/usr/bin/python3 " KVSCOPE_TEST_DATA "/svg_summary.py '" + svg.string() + "'";
    FILE* pipe = popen(cmd.c_str(), "r");
    REQUIRE(pipe);
    std::string text;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, n);
    const int rc = pclose(pipe);
    INFO("svg_summary.py " << svg << " (not well-formed XML?)");
    REQUIRE(rc == 0);
    return nlohmann::json::parse(text);
}

std::string hex(Rgb c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c[0], c[1], c[2]);
    return buf;
}

// A causal map of R rows at query positions q0.., P columns at key positions 0..: row r sees keys <= q0 + r.
struct Map {
    int64_t rows, cols;
    std::vector<float> values;
    std::vector<uint8_t> visible;
    HeatmapPlot plot;
    Map(int64_t R, int64_t P, int64_t q0) : rows(R), cols(P), values(size_t(R * P)), visible(size_t(R * P)) {
        for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < P; ++j) {
                values[size_t(i * P + j)] = float((i * 7 + j * 3) % 11) / 10.0f;
                visible[size_t(i * P + j)] = j <= q0 + i;
            }
        plot.title = "weights";
        plot.value_label = "weight";
        plot.rows = R;
        plot.cols = P;
        plot.values = values.data();
        plot.visible = visible.data();
        for (int64_t i = 0; i < R; ++i) plot.row_positions.push_back(q0 + i);
        for (int64_t j = 0; j < P; ++j) plot.col_positions.push_back(j);
    }
};

}  // namespace

TEST_CASE("xml_escape keeps text exact and the file well-formed", "[svg]") {
    CHECK(xml_escape("a&b<c>\"d'e") == "a&amp;b&lt;c&gt;&quot;d&apos;e");
    CHECK(xml_escape("tab\tnl\ncr\r") == "tab\tnl\ncr\r");
    CHECK(xml_escape(std::string("nul\0x", 5)) == "nul\xEF\xBF\xBDx");        // C0 controls are not XML
    CHECK(xml_escape("bell\x07") == "bell\xEF\xBF\xBD");
    CHECK(xml_escape("caf\xC3\xA9 \xE2\x9C\x93") == "caf\xC3\xA9 \xE2\x9C\x93");  // UTF-8 passes through
    CHECK(xml_escape("bad\xFF") == "bad\xEF\xBF\xBD");                        // a byte that is never UTF-8
    CHECK(xml_escape("cut\xE2\x82") == "cut\xEF\xBF\xBD\xEF\xBF\xBD");        // truncated: one per byte
    CHECK(xml_escape("\xEF\xBF\xBE") == "\xEF\xBF\xBD");                      // U+FFFE is not an XML character
    CHECK(xml_escape("") == "");
}

TEST_CASE("a heatmap SVG has one rect per cell in the table's colour, axes and escaped labels", "[svg]") {
    const fs::path dir = work_dir("heatmap");
    Map m(3, 5, 2);
    m.plot.title = "layer <1> & \"head\" 'x' \x07 \xFF end";
    const fs::path path = dir / "weights.svg";
    const PlotArea a = write_heatmap_plot_svg(path.string(), m.plot);
    CHECK(a.scale == 1);
    // The same layout as the PNG: same image size and cell rectangle.
    const PlotArea png = write_heatmap_plot((dir / "weights.png").string(), m.plot, {});
    CHECK(png.image_width == a.image_width);
    CHECK(png.image_height == a.image_height);
    CHECK(png.x == a.x);
    CHECK(png.width == a.width);

    const auto s = summary(path);
    if (!s) return;
    CHECK((*s)["root"] == "svg");
    CHECK((*s)["viewBox"] == "0 0 " + std::to_string(a.image_width) + " " + std::to_string(a.image_height));
    CHECK((*s)["width"] == std::to_string(a.image_width));
    CHECK((*s)["height"] == std::to_string(a.image_height));
    const std::string want_title = "layer <1> & \"head\" 'x' \xEF\xBF\xBD \xEF\xBF\xBD end";
    CHECK((*s)["title"] == want_title);
    const auto& cells = (*s)["cells"];
    REQUIRE(cells.size() == 15);
    for (size_t c = 0; c < 15; ++c) {
        CAPTURE(c);
        const std::string want = m.visible[c] ? hex(viridis()[size_t(std::lround(m.values[c] * 255.0))]) : "url(#masked)";
        CHECK(cells[c] == want);
    }
    std::vector<std::string> texts = (*s)["texts"];
    auto has = [&](const std::string& t) { return std::find(texts.begin(), texts.end(), t) != texts.end(); };
    CHECK(has(want_title));
    CHECK(has("query position"));
    CHECK(has("key position"));
    CHECK(has("weight"));
    CHECK(has("masked"));
    CHECK(has("2"));  // first query position
    CHECK(has("4"));  // last query / key position
    CHECK(has("0"));  // first key position, and the colour bar's lo
    CHECK(has("1"));  // the colour bar's hi
    std::vector<std::string> ids = (*s)["ids"];
    CHECK(std::find(ids.begin(), ids.end(), "masked") != ids.end());
    CHECK(std::find(ids.begin(), ids.end(), "bar") != ids.end());
}

TEST_CASE("token labels on both axes: after the row position, under the column position, escaped and cut", "[svg]") {
    const fs::path dir = work_dir("labels");
    Map m(3, 5, 2);
    m.plot.row_labels = {" a<b", "x&\"y\"", "caf\xC3\xA9"};
    m.plot.col_labels = {"<|endoftext|>", " The", "\xFF", "'q'", "a_very_long_token_text"};
    const fs::path path = dir / "labels.svg";
    const PlotArea a = write_heatmap_plot_svg(path.string(), m.plot);
    const PlotArea plain = heatmap_layout(Map(3, 5, 2).plot).area;
    CHECK(a.x > plain.x);                        // the left margin grew for the row labels
    CHECK(a.image_height > plain.image_height);  // and a line for the column labels
    // The PNG of the same plot draws the same layout (non-ASCII as '?').
    const PlotArea png = write_heatmap_plot((dir / "labels.png").string(), m.plot, {});
    CHECK(png.x == a.x);
    CHECK(png.image_height == a.image_height);
    const auto s = summary(path);
    if (!s) return;
    std::vector<std::string> texts = (*s)["texts"];
    auto has = [&](const std::string& t) { return std::find(texts.begin(), texts.end(), t) != texts.end(); };
    CHECK(has("2  a<b"));
    CHECK(has("3 x&\"y\""));
    CHECK(has("4 caf\xC3\xA9"));
    // Ticks at columns 0, 2 and 4 (positions 0, 2, 4), 102 px apart: room for 7 characters of 12 px.
    CHECK(has("<|endof.."));
    CHECK(has("\xEF\xBF\xBD"));  // the byte 0xFF, not UTF-8
    CHECK(has("a_very_.."));
    CHECK_FALSE(has("'q'"));        // column 3 has no tick
}

TEST_CASE("axis and hatch names replace the defaults in the SVG and the PNG layout", "[svg]") {
    const fs::path dir = work_dir("axis_names");
    Map m(3, 5, 2);
    m.plot.x_label = "head dimension & <d>";
    m.plot.y_label = "cache slot";
    m.plot.masked_label = "empty slot";
    const fs::path path = dir / "kv.svg";
    write_heatmap_plot_svg(path.string(), m.plot);
    const HeatmapLayout named = heatmap_layout(m.plot), plain = heatmap_layout(Map(3, 5, 2).plot);
    CHECK(named.x_label == "head dimension & <d>");
    CHECK(named.y_label == "cache slot");
    CHECK(plain.x_label == "key position");
    CHECK(plain.y_label == "query position");
    CHECK(named.area.x == plain.area.x);  // the names do not move the cells
    const auto s = summary(path);
    if (!s) return;
    std::vector<std::string> texts = (*s)["texts"];
    auto has = [&](const std::string& t) { return std::find(texts.begin(), texts.end(), t) != texts.end(); };
    CHECK(has("head dimension & <d>"));
    CHECK(has("cache slot"));
    CHECK(has("empty slot"));
    CHECK_FALSE(has("masked"));
    CHECK(named.area.image_width >= int64_t(named.bar_x) + named.bar_w + 6 + text_width("empty slot"));
    CHECK_FALSE(has("key position"));
    CHECK_FALSE(has("query position"));
}

TEST_CASE("a colour-bar title longer than the bar's labels widens the image; show_masked = false drops the hatch", "[svg][png]") {
    const fs::path dir = work_dir("bar_title");
    Map m(2, 3, 2);  // every cell visible
    m.plot.title = "t";
    m.plot.value_label = "probability of the token";
    const HeatmapLayout l = heatmap_layout(m.plot);
    // The title sits at the bar's left edge: all of it inside the image, with the layout's 8 px to spare.
    CHECK(l.area.image_width >= int64_t(l.bar_x) + text_width(m.plot.value_label) + 8);
    CHECK(l.hatch);
    m.plot.show_masked = false;
    const HeatmapLayout bare = heatmap_layout(m.plot);
    CHECK_FALSE(bare.hatch);
    CHECK(bare.area.x == l.area.x);  // the cells do not move
    const fs::path svg = dir / "bare.svg", png = dir / "bare.png";
    write_heatmap_plot_svg(svg.string(), m.plot);
    write_heatmap_plot(png.string(), m.plot, {PlotFormat::Png, 1});
    // No pixel of the hatch's two greys anywhere: the sample is gone and no cell is masked.
    const Png img = read_png(png.string());
    int64_t hatch_pixels = 0;
    for (int64_t i = 0; i + 2 < int64_t(img.rgb.size()); i += 3) {
        const Rgb c{img.rgb[size_t(i)], img.rgb[size_t(i + 1)], img.rgb[size_t(i + 2)]};
        hatch_pixels += c == masked_dark || c == masked_light;
    }
    CHECK(hatch_pixels == 0);
    const auto s = summary(svg);
    if (!s) return;
    std::vector<std::string> texts = (*s)["texts"];
    CHECK(std::find(texts.begin(), texts.end(), "masked") == texts.end());
    CHECK(std::find(texts.begin(), texts.end(), "probability of the token") != texts.end());
}

TEST_CASE("nice_ticks: the step is the first of 2, 5 or 10 times a power of ten above span / target", "[svg]") {
    CHECK(nice_ticks(0, 10) == std::vector<double>{0, 5, 10});    // 10 / 5 = 2: the next step up is 5
    CHECK(nice_ticks(0, 10, 2) == std::vector<double>{0, 10});    // 10 / 2 = 5: the next step up is 10
    CHECK(nice_ticks(0, 9, 5) == std::vector<double>{0, 2, 4, 6, 8});  // 9 / 5 = 1.8: step 2
    CHECK(nice_ticks(-2, 2, 4) == std::vector<double>{-2, 0, 2});
    const std::vector<double> big = nice_ticks(0, 18.57e6, 4);  // the FLOPs axis of a decode chart
    CHECK(big == std::vector<double>{0, 5e6, 10e6, 15e6});
}

TEST_CASE("a grid with a text in every cell: cells grow to fit, ink contrasts with the cell", "[svg][png]") {
    const fs::path dir = work_dir("cell_texts");
    Map m(2, 3, 5);  // all visible (row 0 sees keys <= 5)
    m.values = {0.0f, 1.0f, 0.5f, 1.0f, 0.0f, 0.02f};
    m.plot.values = m.values.data();
    m.plot.cell_texts = {"the", " cat", "a<b", "wwwwwwwwwwwwwwww", "", "x"};
    const HeatmapLayout l = heatmap_layout(m.plot), plain = heatmap_layout(Map(2, 3, 5).plot);
    CHECK(l.area.width > plain.area.width);
    CHECK(l.area.width / 3 >= text_width(shorten("wwwwwwwwwwwwwwww", plot_label_chars)) + 12);  // the widest fits
    CHECK(l.area.height / 2 >= 28);
    CHECK(cell_text(m.plot, 3) == "wwwwwwwwwwww..");
    CHECK(cell_text(Map(2, 3, 5).plot, 0).empty());
    CHECK(cell_text_color(m.plot, 0) == Rgb{255, 255, 255});  // viridis' dark end: white text
    CHECK(cell_text_color(m.plot, 1) == Rgb{40, 40, 40});     // its yellow end: dark ink
    const fs::path path = dir / "lens.svg";
    const PlotArea a = write_heatmap_plot_svg(path.string(), m.plot);
    const PlotArea png = write_heatmap_plot((dir / "lens.png").string(), m.plot, {});
    CHECK(png.width == a.width);
    CHECK(png.image_width == a.image_width);
    // The PNG draws the dark ink inside the yellow cell (1, 0)... of row 0: pixels of (40, 40, 40) there.
    const Png img = read_png((dir / "lens.png").string());
    int64_t ink = 0;
    for (int64_t y = a.y; y < a.y + a.height / 2; ++y)
        for (int64_t x = a.x + a.width / 3; x < a.x + 2 * a.width / 3; ++x) {
            const uint8_t* px = &img.rgb[size_t((y * img.width + x) * 3)];
            ink += px[0] == 40 && px[1] == 40 && px[2] == 40;
        }
    CHECK(ink > 10);
    const auto s = summary(path);
    if (!s) return;
    std::vector<std::string> texts = (*s)["texts"];
    auto has = [&](const std::string& t) { return std::find(texts.begin(), texts.end(), t) != texts.end(); };
    CHECK(has("the"));
    CHECK(has(" cat"));
    CHECK(has("a<b"));
    CHECK(has("wwwwwwwwwwww.."));
    std::vector<std::string> ids = (*s)["ids"];
    CHECK(std::find(ids.begin(), ids.end(), "cell_texts") != ids.end());
}

TEST_CASE("a heatmap of more than svg_max_rect_cells cells embeds its pixels, axes stay vector", "[svg]") {
    const fs::path dir = work_dir("big");
    Map m(300, 300, 0);
    REQUIRE(m.rows * m.cols > svg_max_rect_cells);
    const fs::path path = dir / "big.svg";
    const PlotArea a = write_heatmap_plot_svg(path.string(), m.plot);
    CHECK(fs::file_size(path) < 4u << 20);
    const auto s = summary(path);
    if (!s) return;
    CHECK((*s)["cells"].empty());
    const auto& img = (*s)["cells_image"];
    REQUIRE(img.is_object());
    CHECK(img["png_width"] == a.width);
    CHECK(img["png_height"] == a.height);
    CHECK(img["x"] == double(a.x));
    CHECK(img["width"] == double(a.width));
    std::vector<std::string> texts = (*s)["texts"];
    CHECK(std::find(texts.begin(), texts.end(), "key position") != texts.end());
    CHECK(std::find(texts.begin(), texts.end(), "299") != texts.end());
}

TEST_CASE("a PNG at scale 2 is the scale-1 image with every pixel doubled", "[svg][png]") {
    const fs::path dir = work_dir("scale");
    Map m(4, 6, 2);
    m.plot.table = &diverging();
    m.plot.lo = -1;
    m.plot.hi = 1;
    const PlotArea a1 = write_heatmap_plot((dir / "s1.png").string(), m.plot, {PlotFormat::Png, 1});
    const PlotArea a2 = write_heatmap_plot((dir / "s2.png").string(), m.plot, {PlotFormat::Png, 2});
    const Png p1 = read_png(dir / "s1.png"), p2 = read_png(dir / "s2.png");
    CHECK(p1.width == a1.image_width);
    CHECK(p2.width == 2 * p1.width);
    CHECK(p2.height == 2 * p1.height);
    CHECK(a2.scale == 2);
    CHECK(a2.image_width == p2.width);
    CHECK(a2.x == 2 * a1.x);
    CHECK(a2.width == 2 * a1.width);
    int64_t mismatches = 0;
    for (int y = 0; y < p2.height; ++y)
        for (int x = 0; x < p2.width; ++x) mismatches += p2.at(x, y) != p1.at(x / 2, y / 2);
    CHECK(mismatches == 0);
    // Each visible cell's centre is the diverging table's entry for its value on [-1, 1].
    for (int64_t i = 0; i < m.rows; ++i)
        for (int64_t j = 0; j < m.cols; ++j) {
            const size_t c = size_t(i * m.cols + j);
            if (!m.visible[c]) continue;
            const int x = int(a2.x + (2 * j + 1) * a2.width / (2 * m.cols)), y = int(a2.y + (2 * i + 1) * a2.height / (2 * m.rows));
            const double t = (double(m.values[c]) + 1) / 2;
            CAPTURE(i, j);
            CHECK(p2.at(x, y) == diverging()[size_t(std::lround(t * 255))]);
        }
}

TEST_CASE("a scaled PNG stays within plot_max_side_px, and says which scale it used", "[svg][png]") {
    const fs::path dir = work_dir("cap");
    Map m(1, 2000, 1999);
    const PlotArea a1 = write_heatmap_plot((dir / "s1.png").string(), m.plot, {PlotFormat::Png, 1});
    const PlotArea a8 = write_heatmap_plot((dir / "s8.png").string(), m.plot, {PlotFormat::Png, 8});
    const int64_t want = plot_max_side_px / std::max(a1.image_width, a1.image_height);
    REQUIRE(want >= 1);
    REQUIRE(want < 8);
    CHECK(a8.scale == want);
    const Png p8 = read_png(dir / "s8.png");
    CHECK(p8.width == a1.image_width * want);
    CHECK(p8.width <= plot_max_side_px);
}

TEST_CASE("line charts as SVG: a polyline per unbroken run, log axis, escaped legend", "[svg]") {
    const fs::path dir = work_dir("chart");
    LineSeries a{"cache <on> & fast", {33, 102, 172}, {1, 2, 3, 4, 5}, {1, 2, NAN, 4, 5}};
    LineSeries b{"off", {214, 96, 77}, {1, 2, 3, 4, 5}, {10, 0, 30, 40, 50}};  // 0 is not drawn on a log axis
    LineChart chart{"time", "position", "ms", {a, b}, true, false};
    const fs::path path = dir / "chart.svg";
    write_line_charts(path.string(), {chart, chart}, {PlotFormat::Svg, 1}, 600, 400);
    const auto s = summary(path);
    if (s) {
        CHECK((*s)["viewBox"] == "0 0 1200 400");
        const auto& lines = (*s)["polylines"];
        REQUIRE(lines.size() == 6);  // per panel: a's two runs of 2, b's run of 3 (x = 3..5)
        CHECK(lines[0]["stroke"] == "#2166ac");
        CHECK(lines[0]["n_points"] == 2);
        CHECK(lines[1]["n_points"] == 2);
        CHECK(lines[2]["stroke"] == "#d6604d");
        CHECK(lines[2]["n_points"] == 3);
        std::vector<std::string> texts = (*s)["texts"];
        CHECK(std::find(texts.begin(), texts.end(), "cache <on> & fast") != texts.end());
        CHECK(std::find(texts.begin(), texts.end(), "ms (log scale)") != texts.end());
    }
    // The PNG of the same charts doubles with scale 2.
    write_line_charts((dir / "c1.png").string(), {chart}, {PlotFormat::Png, 1}, 600, 400);
    write_line_charts((dir / "c2.png").string(), {chart}, {PlotFormat::Png, 2}, 600, 400);
    const Png p1 = read_png(dir / "c1.png"), p2 = read_png(dir / "c2.png");
    CHECK(p1.width == 600);
    CHECK(p2.width == 1200);
    CHECK(p2.height == 800);
}

TEST_CASE("bad plot options and outputs are refused with one clear line", "[svg]") {
    const fs::path dir = work_dir("bad");
    Map m(2, 2, 1);
    CHECK(plot_format_of("a.SVG") == PlotFormat::Svg);
    CHECK(plot_format_of("fig.svg.png") == PlotFormat::Png);
    CHECK(plot_format_of("svg") == PlotFormat::Png);
    CHECK(parse_plot_format("--format", "svg") == PlotFormat::Svg);
    CHECK_THROWS_WITH(parse_plot_format("--format", "bmp"), Contains("--format") && Contains("png or svg"));
    CHECK_THROWS_WITH(check_plot_scale("--scale", 0), Contains("--scale") && Contains("1 to 8"));
    CHECK_THROWS_AS(check_plot_scale("--scale", 9), UsageError);
    CHECK_THROWS_AS(write_heatmap_plot((dir / "x.png").string(), m.plot, {PlotFormat::Png, 0}), UsageError);
    CHECK_FALSE(fs::exists(dir / "x.png"));
    HeatmapPlot empty;
    CHECK_THROWS_WITH(write_heatmap_plot_svg((dir / "e.svg").string(), empty), Contains("e.svg"));
    CHECK_FALSE(fs::exists(dir / "e.svg"));

    // Output rule 2: an SVG kvscope wrote may be replaced, any other file is kept.
    write_heatmap_plot_svg((dir / "ok.svg").string(), m.plot);
    CHECK_NOTHROW(check_output_file("--chart", (dir / "ok.svg").string(), OutputKind::Svg));
    std::ofstream(dir / "notes.svg") << "my notes, not a picture\n";
    CHECK_THROWS_WITH(check_output_file("--chart", (dir / "notes.svg").string(), OutputKind::Svg),
                      Contains("--chart") && Contains("not an SVG image"));
    std::ofstream(dir / "other.xml") << "<?xml version=\"1.0\"?>\n<config/>\n";
    CHECK_THROWS_AS(check_output_file("--chart", (dir / "other.xml").string(), OutputKind::Svg), UsageError);
    CHECK(plot_output_kind(PlotFormat::Svg) == OutputKind::Svg);
}
