#pragma once
// The frame the panels' small charts are drawn in: round value ticks with their labels down the left, index
// ticks with theirs along the bottom, a light grid, and an optional title line above the plot, never over
// the data. The tick values are nice_ticks (core/report/plot_layout.h), the rule of the saved figures' axes,
// so a chart in the window and its figure tick alike.
//
//   ChartAxis { lo, hi, label, whole, round_top }   a data range; label(v) is a tick's text (default
//                                          tick_text); whole: ticks at whole numbers only (steps, pairs,
//                                          distances); round_top: a value axis ends on a round tick
//   Chart c(id, size, x, y, title, legend) reserves `size` as one ImGui item (c.hovered() says whether the
//                                          mouse is over it), draws frame, grid, ticks, title and legend:
//                                          coloured swatches and names right of the title, or on a line of
//                                          their own under it when they do not fit there; never over the plot
//                                          (dumped as "<name> legend <label>" boxes)
//   c.at(x, y), c.x_px(x), c.y_px(y)       data -> screen; y is clamped into the plot rectangle
//   c.line(label, ys, colour)              ys[i] at x = i, joined
//   c.bars(label, ys, colour, base, slot, n_slots)   a bar from `base` to ys[i] at x = i; n_slots series
//                                          side by side share each index's cell, this one in `slot`
//   c.vline(x, colour)                     a vertical marker across the plot
//   c.note(label, ys)                      a series the caller drew itself, for dump()
//   c.dump(name)                           for the scripted tests (test_dumps.h): the plot rectangle as
//                                          widget "<name> plot", texts "<name> x ticks" / "<name> y ticks"
//                                          = "value|label|pixel; ..." and "<name> series" = one line per
//                                          series (line(), bars(), note()): "label: value@pixel_y ..."
#include <string>
#include <utility>
#include <vector>

#include <imgui.h>

namespace kvscope::gui {

struct LegendItem {
    std::string label;
    ImU32 colour;
};

struct ChartAxis {
    double lo = 0, hi = 1;
    std::string (*label)(double) = nullptr;  // nullptr: tick_text
    bool whole = false;
    bool round_top = false;                  // the value axis ends on the round tick at or above hi
};

class Chart {
public:
    Chart(const char* id, ImVec2 size, ChartAxis x, ChartAxis y, const char* title = nullptr,
          const std::vector<LegendItem>& legend = {});
    float x_px(double x) const;
    float y_px(double y) const;
    ImVec2 at(double x, double y) const { return {x_px(x), y_px(y)}; }
    ImVec2 plot_min() const { return p0_; }
    ImVec2 plot_max() const { return p1_; }
    ImDrawList* draw_list() const { return dl_; }
    bool hovered() const { return hovered_; }
    void line(const char* label, const std::vector<float>& ys, ImU32 colour, float thickness = 2);
    void bars(const char* label, const std::vector<float>& ys, ImU32 colour, float base = 0, int slot = 0,
              int n_slots = 1);

    void vline(double x, ImU32 colour, float thickness = 2);
    void note(const std::string& label, const std::vector<double>& ys);
    void dump(const std::string& name) const;

private:
    struct Tick {
        double value;
        std::string label;
        float px;
    };
    ChartAxis x_, y_;
    ImVec2 p0_, p1_;  // the plot rectangle (screen)
    ImDrawList* dl_ = nullptr;
    bool hovered_ = false;
    std::vector<Tick> x_ticks_, y_ticks_;
    std::vector<std::string> series_;  // what line(), bars() and note() drew, for dump()
    std::vector<std::pair<std::string, ImVec4>> legend_;  // label -> its box (x0, y0, x1, y1), for dump()
};

}  // namespace kvscope::gui
