// Cache on vs off: the same step computed both ways (the controller's shadow session runs every step
// with the cache switch flipped). Shows max |delta logits|, rows computed vs reused, and time and FLOPs
// per step for both over the whole generation: flat with the cache, growing without it. Times are the
// comparison's (logic/cache_comparison.h): model arithmetic only, both sides timed alike, median of reruns.
#include "panels/compare_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "panels/figures.h"

namespace kvscope::gui {
namespace {

// Two series over the steps, drawn as lines in one box; y from 0 to the largest value that is not flagged
// in `outlier_on` / `outlier_off` (a time point the machine was busy elsewhere for). Points above the top
// are clipped to it and drawn as hollow triangles; hovering one says its value.
void line_chart(const char* title, const std::vector<double>& on, const std::vector<double>& off, ImVec2 size,
                std::string (*fmt)(double), int64_t marked_step, const std::vector<bool>& outlier_on = {},
                const std::vector<bool>& outlier_off = {}) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::Dummy(size);
    const bool hovered = ImGui::IsItemHovered();
    auto flagged = [](const std::vector<bool>& f, size_t i) { return i < f.size() && f[i]; };
    double mx = 0;
    for (size_t i = 0; i < on.size(); ++i)
        if (!flagged(outlier_on, i)) mx = std::max(mx, on[i]);
    for (size_t i = 0; i < off.size(); ++i)
        if (!flagged(outlier_off, i)) mx = std::max(mx, off[i]);
    if (mx <= 0) mx = 1;
    // The axis top goes right of the title when both fit on one line, else on a line of its own below it.
    const std::string top = fmt(mx);
    const float line = ImGui::GetTextLineHeight();
    const float top_w = ImGui::CalcTextSize(top.c_str()).x;
    const bool one_line = ImGui::CalcTextSize(title).x + top_w + 16 <= size.x;
    const ImVec2 a = {p.x + 4, p.y + (one_line ? 1 : 2) * line + 2}, b = {p.x + size.x - 4, p.y + size.y - 4};
    dl->AddRectFilled(p, {p.x + size.x, p.y + size.y}, IM_COL32(28, 28, 34, 255), 3);
    dl->AddText({p.x + 4, p.y}, IM_COL32(200, 200, 210, 255), title);
    dl->AddText({b.x - top_w, one_line ? p.y : p.y + line}, IM_COL32(150, 150, 160, 255), top.c_str());
    const size_t n = std::max(on.size(), off.size());
    auto pt = [&](size_t i, double y) {
        const float fx = n > 1 ? float(i) / float(n - 1) : 0.5f;
        return ImVec2{a.x + fx * (b.x - a.x), b.y - float(std::min(y, mx) / mx) * (b.y - a.y)};
    };
    if (marked_step >= 0 && size_t(marked_step) < n) {
        const float x = pt(size_t(marked_step), 0).x;
        dl->AddLine({x, a.y}, {x, b.y}, IM_COL32(250, 200, 60, 120));
    }
    const struct { const std::vector<double>* v; ImU32 col; const char* name; } series[] = {
        {&on, IM_COL32(70, 170, 240, 255), "cache ON"}, {&off, IM_COL32(240, 120, 70, 255), "cache OFF"}};
    std::string clipped;
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    for (const auto& s : series) {
        for (size_t i = 1; i < s.v->size(); ++i) dl->AddLine(pt(i - 1, (*s.v)[i - 1]), pt(i, (*s.v)[i]), s.col, 2);
        for (size_t i = 0; i < s.v->size(); ++i) {
            const ImVec2 q = pt(i, (*s.v)[i]);
            if ((*s.v)[i] <= mx) {
                dl->AddCircleFilled(q, 2.5f, s.col);
                continue;
            }
            dl->AddTriangle({q.x - 5, q.y + 7}, {q.x + 5, q.y + 7}, {q.x, q.y - 1}, s.col, 1.5f);
            if (hovered && std::fabs(mouse.x - q.x) < 6)
                clipped += "step " + std::to_string(i) + ", " + s.name + ": " + fmt((*s.v)[i]) + " (off the scale)\n";
        }
    }
    if (!clipped.empty()) ImGui::SetTooltip("%s", clipped.c_str());
}

std::string fmt_flops(double x) { return human_count(x, "FLOP"); }
std::string runs_text(int n) { return n == 1 ? "1 run" : "median of " + std::to_string(n) + " runs"; }
std::string fmt_ms(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f ms", x * 1e3);
    return b;
}

// A chat: each turn's prefill both ways. With the cache, a turn computes only its new tokens and reuses
// the conversation before it; without, it re-prefills the whole conversation.
void turn_table(const Snapshot& s, const Trace& shadow) {
    const std::vector<TurnCost> turns = turn_costs(s.trace(), shadow, s.step_timings);
    std::string dump;
    for (const TurnCost& t : turns)
        dump += (dump.empty() ? "" : "; ") + std::string("turn=") + std::to_string(t.turn + 1) + " reused_on=" +
                std::to_string(t.reused_on) + " computed_on=" + std::to_string(t.computed_on) + " reused_off=" +
                std::to_string(t.reused_off) + " computed_off=" + std::to_string(t.computed_off) + " steps=" +
                std::to_string(t.n_steps);
    dump_text("cache turns", dump);
    ImGui::PushTextWrapPos(0);
    ImGui::TextUnformatted("Each chat turn: cache ON computes only the new message, cache OFF re-prefills the whole "
                           "conversation");
    ImGui::PopTextWrapPos();
    ImGui::SameLine();
    help_marker("Rows = K/V rows of the turn's prefill steps. Cache ON: a turn computes only its new tokens and reads "
                "the earlier conversation from the cache (reused). Cache OFF: every turn re-prefills the whole "
                "conversation so far. Time = the turn's prefill and reply steps, timed as above.");
    const ImGuiTableFlags flags = ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_ScrollY;
    const float h = ImGui::GetTextLineHeightWithSpacing() * float(std::min<size_t>(turns.size(), 4) + 1) + 4;
    if (ImGui::BeginTable("turns", 5, flags, {0, h})) {
        ImGui::TableSetupScrollFreeze(0, 1);
        ImGui::TableSetupColumn("turn");
        ImGui::TableSetupColumn("ON rows new/reused");
        ImGui::TableSetupColumn("OFF rows");
        ImGui::TableSetupColumn("ON time");
        ImGui::TableSetupColumn("OFF time");
        ImGui::TableHeadersRow();
        for (const TurnCost& t : turns) {
            ImGui::TableNextRow();
            ImGui::TableSetColumnIndex(0);
            ImGui::Text("%lld", (long long)t.turn + 1);  // numbered from 1, as the timeline's marks
            ImGui::TableSetColumnIndex(1);
            ImGui::TextColored({0.45f, 0.72f, 0.95f, 1}, "%lld / %lld", (long long)t.computed_on, (long long)t.reused_on);
            ImGui::TableSetColumnIndex(2);
            ImGui::TextColored({0.95f, 0.55f, 0.35f, 1}, "%lld", (long long)t.computed_off);
            ImGui::TableSetColumnIndex(3);
            ImGui::TextColored({0.45f, 0.72f, 0.95f, 1}, "%s", fmt_ms(t.seconds_on).c_str());
            ImGui::TableSetColumnIndex(4);
            ImGui::TextColored({0.95f, 0.55f, 0.35f, 1}, "%s", fmt_ms(t.seconds_off).c_str());
        }
        ImGui::EndTable();
    }
    dump_item("cache turns table");
    ImGui::TextDisabled("This step:");
}

}  // namespace

void draw_compare(PanelContext& c) {
    if (!begin_panel(Panel::Compare)) return;
    figure_button(c, Panel::Compare);
    const Snapshot& s = c.snap;
    const Trace* shadow = s.shadow();
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    if (!shadow) {
        const EvictionSpec& ev = s.options().eviction;
        std::string why;
        if (ev.active() && s.compare)  // CacheComparison::sync makes no other run under a policy
            why = std::string("No comparison under ") + eviction_policy_name(ev.kind) + ": a step without the cache keeps "
                  "nothing to evict, so the other way would not be the same computation.";
        ImGui::PushTextWrapPos(0);
        ImGui::TextDisabled("%s", !why.empty()           ? why.c_str()
                                  : s.shadow_diverged     ? "The two ways sampled different tokens (a near tie); comparison stopped. Reset to restart it."
                                  : s.sequences.size() > 1 ? "No comparison in a batch: set sequences to 1 to compare each step with the cache switch flipped."
                                                          : "Comparison is off: tick \"Also compute each step the other way\" in Controls.");
        ImGui::PopTextWrapPos();
        if (!why.empty()) dump_text("compare note", why);
        end_panel();
        return;
    }
    if (!r || shadow->size() <= step || s.step_timings.size() <= step) {
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
    const StepTiming& timing = s.step_timings[step];
    double max_delta = 0;
    if (on.prediction.logits.size() == off.prediction.logits.size())
        for (size_t i = 0; i < on.prediction.logits.size(); ++i)
            max_delta = std::max(max_delta, double(std::fabs(on.prediction.logits[i] - off.prediction.logits[i])));

    if (!s.chat.empty() || s.turns.size() > 1) turn_table(s, *shadow);  // a chat: the turns first
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
        row("compute time", fmt_ms(timing.on), fmt_ms(timing.off));
        row("FLOPs", human_count(on.cost.flops, "FLOP"), human_count(off.cost.flops, "FLOP"));
        row("K/V rows computed", std::to_string(on.cost.n_rows_computed), std::to_string(off.cost.n_rows_computed));
        row("K/V rows reused", std::to_string(on.cost.n_rows_reused), std::to_string(off.cost.n_rows_reused));
        ImGui::EndTable();
    }
    if (on.prediction.chosen)
        ImGui::Text("max |delta logits| = %.3g   same token: %s", max_delta,
                    on.prediction.chosen == off.prediction.chosen ? "yes" : "NO");
    else
        ImGui::TextDisabled("this prefill chunk predicts nothing: no logits to compare");
    char how[640];
    std::snprintf(how, sizeof how,
                  "Both sides are timed the same way: each runs in a copy of the session that records nothing, and "
                  "the time is the model arithmetic alone (the forward pass; recording, sampling, snapshots and "
                  "the views' maps are left out of both). A step shorter than %.0f ms is run again (step back, step: "
                  "the same arithmetic bit for bit), ON and OFF in turn, and the median is shown.\n\n"
                  "The step you ran (cache %s) also recorded q/k/v for the views: it took %s in all.",
                  kTimingBudget * 1e3, r->id.cache_on ? "ON" : "OFF", fmt_ms(r->cost.seconds).c_str());
    ImGui::TextDisabled("compute time = the forward pass alone");
    help_marker(how);
    ImGui::PushTextWrapPos(0);  // a narrow panel wraps between words rather than cutting the line
    ImGui::TextDisabled("ON: %s, OFF: %s", runs_text(timing.n_on).c_str(), runs_text(timing.n_off).c_str());
    ImGui::PopTextWrapPos();

    const CostSeries series = cost_series(s.trace(), *shadow, s.step_timings);
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float ch = std::max(90.0f, avail.y - ImGui::GetTextLineHeight() - 8);
    const float cw = (avail.x - 8) / 2;
    line_chart("FLOPs per step", series.flops_on, series.flops_off, {cw, ch}, fmt_flops, int64_t(step));
    ImGui::SameLine();
    line_chart("compute time per step", series.seconds_on, series.seconds_off, {cw, ch}, fmt_ms, int64_t(step),
               time_outliers(series.seconds_on, series.flops_on), time_outliers(series.seconds_off, series.flops_off));
    ImGui::TextColored({0.45f, 0.72f, 0.95f, 1}, "- cache ON");
    ImGui::SameLine();
    ImGui::TextColored({0.95f, 0.55f, 0.35f, 1}, "- cache OFF");
    ImGui::SameLine();
    ImGui::TextDisabled("(x = step; yellow = viewed step; triangle = off the scale)");
    end_panel();
}

Figure compare_figure(const Snapshot& s, const ViewPrefs&) {
    using namespace fig;
    const Trace* shadow = s.shadow();
    if (!shadow) nothing(s.has_shadow ? "the two ways sampled different tokens" : "the comparison is off");
    const CostSeries c = cost_series(s.trace(), *shadow, s.step_timings);
    if (c.flops_on.empty()) nothing("no step has run both ways");
    Figure f;
    f.name = "compare_steps" + std::to_string(c.flops_on.size());
    LineChart flops{model_name(s) + ": FLOPs per step, cache on vs off", "step", "GFLOP", {}};
    flops.series = {series("cache on", 0, c.flops_on, 1e-9), series("cache off", 1, c.flops_off, 1e-9)};
    LineChart time{model_name(s) + ": compute time per step (median of runs)", "step", "ms", {}};
    time.series = {series("cache on", 0, c.seconds_on, 1e3), series("cache off", 1, c.seconds_off, 1e3)};
    flops.markers = time.markers = c.flops_on.size() <= 32;
    f.charts = {flops, time};
    return f;
}

}  // namespace kvscope::gui
