// Cache on vs off: the same step computed both ways (the controller's shadow session runs every step
// with the cache switch flipped). Shows max |delta logits|, rows computed vs reused, and time and FLOPs
// per step for both over the whole generation: flat with the cache, growing without it.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "panels.h"

namespace kvscope::gui {
namespace {

// Two series over the steps, drawn as lines in one box; y from 0 to the largest value.
void line_chart(const char* title, const std::vector<double>& on, const std::vector<double>& off, ImVec2 size,
                std::string (*fmt)(double), int64_t marked_step) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::Dummy(size);
    double mx = 0;
    for (double x : on) mx = std::max(mx, x);
    for (double x : off) mx = std::max(mx, x);
    if (mx <= 0) mx = 1;
    const float line = ImGui::GetTextLineHeight();
    const ImVec2 a = {p.x + 4, p.y + line + 2}, b = {p.x + size.x - 4, p.y + size.y - 4};
    dl->AddRectFilled(p, {p.x + size.x, p.y + size.y}, IM_COL32(28, 28, 34, 255), 3);
    dl->AddText({p.x + 4, p.y}, IM_COL32(200, 200, 210, 255), title);
    const std::string top = fmt(mx);
    dl->AddText({b.x - ImGui::CalcTextSize(top.c_str()).x, p.y}, IM_COL32(150, 150, 160, 255), top.c_str());
    const size_t n = std::max(on.size(), off.size());
    auto pt = [&](size_t i, double y) {
        const float fx = n > 1 ? float(i) / float(n - 1) : 0.5f;
        return ImVec2{a.x + fx * (b.x - a.x), b.y - float(y / mx) * (b.y - a.y)};
    };
    if (marked_step >= 0 && size_t(marked_step) < n) {
        const float x = pt(size_t(marked_step), 0).x;
        dl->AddLine({x, a.y}, {x, b.y}, IM_COL32(250, 200, 60, 120));
    }
    const struct { const std::vector<double>* v; ImU32 col; } series[] = {
        {&on, IM_COL32(70, 170, 240, 255)}, {&off, IM_COL32(240, 120, 70, 255)}};
    for (const auto& s : series) {
        for (size_t i = 1; i < s.v->size(); ++i) dl->AddLine(pt(i - 1, (*s.v)[i - 1]), pt(i, (*s.v)[i]), s.col, 2);
        for (size_t i = 0; i < s.v->size(); ++i) dl->AddCircleFilled(pt(i, (*s.v)[i]), 2.5f, s.col);
    }
}

std::string fmt_flops(double x) { return human_count(x) + "FLOP"; }
std::string fmt_ms(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f ms", x * 1e3);
    return b;
}

}  // namespace

void draw_compare(PanelContext& c) {
    if (!begin_panel(Panel::Compare)) return;
    const Snapshot& s = c.snap;
    const Trace* shadow = s.shadow();
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    if (!shadow) {
        ImGui::PushTextWrapPos(0);
        ImGui::TextDisabled(s.shadow_diverged ? "The two ways sampled different tokens (a near tie); comparison stopped. Reset to restart it."
                            : s.sequences.size() > 1 ? "No comparison in a batch: set sequences to 1 to compare each step with the cache switch flipped."
                                                     : "Comparison is off: tick \"Also compute each step the other way\" in Controls.");
        ImGui::PopTextWrapPos();
        end_panel();
        return;
    }
    if (!r || shadow->size() <= step) {
        if (r && c.progress.busy) {
            ImGui::Text("computing step %zu the other way... %.1f s", step, c.progress.elapsed_s);
            ImGui::TextDisabled("(%s)", c.progress.activity.c_str());
        } else {
            ImGui::TextDisabled("Run a step: it is computed with the cache on and off.");
        }
        end_panel();
        return;
    }
    const StepRecord& o = (*shadow)[step];
    const StepRecord& on = r->id.cache_on ? *r : o;
    const StepRecord& off = r->id.cache_on ? o : *r;
    double max_delta = 0;
    if (on.prediction.logits.size() == off.prediction.logits.size())
        for (size_t i = 0; i < on.prediction.logits.size(); ++i)
            max_delta = std::max(max_delta, double(std::fabs(on.prediction.logits[i] - off.prediction.logits[i])));

    if (ImGui::BeginTable("both", 3, ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp)) {
        ImGui::TableSetupColumn("");
        ImGui::TableSetupColumn("cache ON");
        ImGui::TableSetupColumn("cache OFF");
        ImGui::TableHeadersRow();
        auto row = [](const char* what, const std::string& a, const std::string& b) {
            ImGui::TableNextRow();
            ImGui::TableSetColumnIndex(0);
            ImGui::TextDisabled("%s", what);
            ImGui::TableSetColumnIndex(1);
            ImGui::TextColored({0.45f, 0.72f, 0.95f, 1}, "%s", a.c_str());
            ImGui::TableSetColumnIndex(2);
            ImGui::TextColored({0.95f, 0.55f, 0.35f, 1}, "%s", b.c_str());
        };
        row("time", fmt_ms(on.cost.seconds), fmt_ms(off.cost.seconds));
        row("FLOPs", human_count(on.cost.flops), human_count(off.cost.flops));
        row("K/V rows computed", std::to_string(on.cost.n_rows_computed), std::to_string(off.cost.n_rows_computed));
        row("K/V rows reused", std::to_string(on.cost.n_rows_reused), std::to_string(off.cost.n_rows_reused));
        ImGui::EndTable();
    }
    if (on.prediction.chosen)
        ImGui::Text("max |delta logits| = %.3g   same token: %s", max_delta,
                    on.prediction.chosen == off.prediction.chosen ? "yes" : "NO");
    else
        ImGui::TextDisabled("this prefill chunk predicts nothing: no logits to compare");

    std::vector<double> f_on, f_off, t_on, t_off;
    for (size_t i = 0; i < s.trace().size() && i < shadow->size(); ++i) {
        const StepRecord& a = s.trace()[i];
        const StepRecord& b = (*shadow)[i];
        const StepRecord& x_on = a.id.cache_on ? a : b;
        const StepRecord& x_off = a.id.cache_on ? b : a;
        f_on.push_back(x_on.cost.flops);
        f_off.push_back(x_off.cost.flops);
        t_on.push_back(x_on.cost.seconds);
        t_off.push_back(x_off.cost.seconds);
    }
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float ch = std::max(60.0f, avail.y - ImGui::GetTextLineHeight() - 8);
    const float cw = (avail.x - 8) / 2;
    line_chart("FLOPs per step", f_on, f_off, {cw, ch}, fmt_flops, int64_t(step));
    ImGui::SameLine();
    line_chart("time per step", t_on, t_off, {cw, ch}, fmt_ms, int64_t(step));
    ImGui::TextColored({0.45f, 0.72f, 0.95f, 1}, "- cache ON");
    ImGui::SameLine();
    ImGui::TextColored({0.95f, 0.55f, 0.35f, 1}, "- cache OFF");
    ImGui::SameLine();
    ImGui::TextDisabled("(x = step; yellow = viewed step)");
    end_panel();
}

}  // namespace kvscope::gui
