#include "widgets/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/plot_layout.h"
#include "widgets/test_dumps.h"

namespace kvscope::gui {
namespace {

std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", v);
    return b;
}

// About `target` round values in [lo, hi]; on a whole axis only whole numbers (every one when the round
// step would be finer than 1).
std::vector<double> axis_ticks(const ChartAxis& a, int target) {
    std::vector<double> out;
    for (double v : nice_ticks(a.lo, a.hi, target))
        if (!a.whole || std::fabs(v - std::round(v)) < 1e-9) out.push_back(a.whole ? std::round(v) : v);
    if (out.empty()) out.push_back(a.whole ? std::ceil(a.lo) : a.lo);
    return out;
}

std::string label_of(const ChartAxis& a, double v) {
    if (std::fabs(v) < 1e-9 * (a.hi - a.lo)) v = 0;  // a tick summed to -1e-17 reads "0", not "-0"
    return a.label ? a.label(v) : tick_text(v);
}

}  // namespace

Chart::Chart(const char* id, ImVec2 size, ChartAxis x, ChartAxis y, const char* title,
             const std::vector<LegendItem>& legend)
    : x_(x), y_(y) {
    for (ChartAxis* a : {&x_, &y_})
        if (!(a->hi > a->lo)) a->hi = a->lo + 1;
    size = {std::max(size.x, 40.0f), std::max(size.y, 30.0f)};
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton(id, size);
    hovered_ = ImGui::IsItemHovered();
    dl_ = ImGui::GetWindowDrawList();
    const float line = ImGui::GetTextLineHeight(), pad = 4, swatch = line * 0.6f;

    // pass 0: the title line, and the legend right of the title or on the next line when it does not fit
    const float title_w = title ? ImGui::CalcTextSize(title).x : 0;
    float legend_w = 0;
    for (const LegendItem& it : legend) legend_w += swatch + 4 + ImGui::CalcTextSize(it.label.c_str()).x + 10;
    const bool legend_below = !legend.empty() && title && title_w + 10 + legend_w > size.x - 2 * pad;
    const int head_lines = (title || !legend.empty() ? 1 : 0) + (legend_below ? 1 : 0);
    // The plot starts half a line below the text above it, so the top tick's label clears it.
    const float top = p.y + pad + float(head_lines) * (line + 1) + line / 2;
    const float bottom = p.y + size.y - pad - line - 2;

    // pass 1: the value ticks, as many as have a line and a fifth each (at most 7, and at least two even in a
    // short plot); with round_top the axis ends on the tick at or above hi. Their widest label sets the left
    // margin.
    std::vector<double> ys;
    for (int target = 8; target >= 1; --target) {
        ys = axis_ticks(y_, target);
        if (float(ys.size()) * line * 1.2f <= bottom - top + line || target == 1) break;
    }
    for (int target = 2; ys.size() < 2 && target <= 8; ++target) ys = axis_ticks(y_, target);
    if (y_.round_top && ys.size() >= 2 && ys.back() < y_.hi) {
        ys.push_back(ys.back() + (ys[ys.size() - 1] - ys[ys.size() - 2]));
        y_.hi = ys.back();
    }
    float left_w = 0;
    for (double v : ys) left_w = std::max(left_w, ImGui::CalcTextSize(label_of(y_, v).c_str()).x);
    p0_ = {p.x + pad + left_w + 6, top};
    p1_ = {p.x + size.x - pad - 4, std::max(top + 4, bottom)};
    for (double v : ys) y_ticks_.push_back({v, label_of(y_, v), y_px(v)});

    // pass 2: the index ticks, fewer until their labels fit side by side with a gap
    std::vector<double> xs;
    for (int target = 8; target >= 1; --target) {
        xs = axis_ticks(x_, target);
        float widest = 0;
        for (double v : xs) widest = std::max(widest, ImGui::CalcTextSize(label_of(x_, v).c_str()).x);
        if (float(xs.size()) * (widest + 12) <= p1_.x - p0_.x || target == 1) break;
    }
    for (double v : xs) x_ticks_.push_back({v, label_of(x_, v), x_px(v)});

    // pass 3: frame, grid, labels, axes, title, legend
    const ImU32 grid = IM_COL32(255, 255, 255, 28), ink = ImGui::GetColorU32(ImGuiCol_TextDisabled);
    dl_->AddRectFilled(p, {p.x + size.x, p.y + size.y}, ImGui::GetColorU32(ImGuiCol_FrameBg), 3);
    for (const Tick& t : y_ticks_) {
        dl_->AddLine({p0_.x, t.px}, {p1_.x, t.px}, grid);
        const ImVec2 w = ImGui::CalcTextSize(t.label.c_str());
        dl_->AddText({p0_.x - 4 - w.x, std::max(p.y, std::min(t.px - line / 2, p1_.y - line / 2))}, ink, t.label.c_str());
    }
    for (const Tick& t : x_ticks_) {
        dl_->AddLine({t.px, p0_.y}, {t.px, p1_.y}, grid);
        const float w = ImGui::CalcTextSize(t.label.c_str()).x;
        dl_->AddText({std::max(p.x, std::min(t.px - w / 2, p.x + size.x - w)), p1_.y + 2}, ink, t.label.c_str());
    }
    dl_->AddLine({p0_.x, p0_.y}, {p0_.x, p1_.y}, ink);
    dl_->AddLine({p0_.x, p1_.y}, {p1_.x, p1_.y}, ink);
    if (title) dl_->AddText({p.x + pad, p.y + pad}, ImGui::GetColorU32(ImGuiCol_Text), title);
    float lx = legend_below || !title ? p.x + pad : std::max(p.x + pad + title_w + 10, p.x + size.x - pad - legend_w);
    const float ly = p.y + pad + (legend_below ? line + 1 : 0);
    for (const LegendItem& it : legend) {
        const float tw = ImGui::CalcTextSize(it.label.c_str()).x;
        dl_->AddRectFilled({lx, ly + (line - swatch) / 2}, {lx + swatch, ly + (line + swatch) / 2}, it.colour);
        dl_->AddText({lx + swatch + 4, ly}, ImGui::GetColorU32(ImGuiCol_Text), it.label.c_str());
        legend_.push_back({it.label, ImVec4{lx, ly, lx + swatch + 4 + tw, ly + line}});
        lx += swatch + 4 + tw + 10;
    }
}

float Chart::x_px(double x) const {
    return p0_.x + float((x - x_.lo) / (x_.hi - x_.lo)) * (p1_.x - p0_.x);
}

float Chart::y_px(double y) const {
    const double t = std::clamp((y - y_.lo) / (y_.hi - y_.lo), 0.0, 1.0);
    return p1_.y - float(t) * (p1_.y - p0_.y);
}

void Chart::line(const char* label, const std::vector<float>& ys, ImU32 colour, float thickness) {
    for (size_t i = 1; i < ys.size(); ++i) dl_->AddLine(at(double(i - 1), ys[i - 1]), at(double(i), ys[i]), colour, thickness);
    note(label, std::vector<double>(ys.begin(), ys.end()));
}

void Chart::bars(const char* label, const std::vector<float>& ys, ImU32 colour, float base, int slot, int n_slots) {
    // Each index owns a cell a step wide around it, less a pixel of gap when there is room for one; n_slots
    // series share it side by side.
    const float cell = ys.size() > 1 ? (x_px(1) - x_px(0)) : (p1_.x - p0_.x) / 2;
    const float inner = std::max(1.0f, cell - (cell > 3 ? 2 : 0)), w = inner / float(std::max(1, n_slots));
    for (size_t i = 0; i < ys.size(); ++i) {
        const float x = x_px(double(i)) - inner / 2 + w * float(slot), y0 = y_px(base), y1 = y_px(ys[i]);
        dl_->AddRectFilled({x, std::min(y0, y1)}, {x + std::max(1.0f, w), std::max(y0, y1)}, colour);
    }
    note(label, std::vector<double>(ys.begin(), ys.end()));
}

void Chart::vline(double x, ImU32 colour, float thickness) {
    dl_->AddLine({x_px(x), p0_.y}, {x_px(x), p1_.y}, colour, thickness);
}

void Chart::note(const std::string& label, const std::vector<double>& ys) {
    std::string s = label + ":";
    for (double v : ys) s.append(" ").append(num(v)).append("@").append(num(y_px(v)));
    series_.push_back(std::move(s));
}

void Chart::dump(const std::string& name) const {
    dump_box((name + " plot").c_str(), p0_.x, p0_.y, p1_.x, p1_.y);
    auto ticks = [](const std::vector<Tick>& ts) {
        std::string s;
        for (const Tick& t : ts) s += (s.empty() ? "" : "; ") + num(t.value) + "|" + t.label + "|" + num(t.px);
        return s;
    };
    dump_text((name + " x ticks").c_str(), ticks(x_ticks_));
    dump_text((name + " y ticks").c_str(), ticks(y_ticks_));
    std::string s;
    for (const std::string& line : series_) s += (s.empty() ? "" : "\n") + line;
    dump_text((name + " series").c_str(), s);
    for (const auto& [label, r] : legend_) dump_box((name + " legend " + label).c_str(), r.x, r.y, r.z, r.w);
}

}  // namespace kvscope::gui
