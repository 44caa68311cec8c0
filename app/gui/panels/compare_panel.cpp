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
#include "report/plot_layout.h"
#include "widgets/chart.h"

namespace kvscope::gui {
namespace {

// What the time chart can compare. A step whose two sides did the same work (a prefill from an empty cache:
// the same rows, the same FLOPs, nothing reused) ran the same arithmetic twice, so its two medians differ
// only by measurement noise, which only ever adds time: it is plotted as one point, the faster of the two,
// marked as the same work.
struct TimeSeries {
    std::vector<double> on, off;  // seconds as plotted
    std::vector<bool> same_work;
};

bool same_work(const StepRecord& on, const StepRecord& off) {
    return on.cost.flops == off.cost.flops && on.cost.n_rows_computed == off.cost.n_rows_computed &&
           on.cost.n_rows_reused == 0 && off.cost.n_rows_reused == 0;
}

TimeSeries comparable_times(const Trace& main, const Trace& shadow, const CostSeries& c) {
    TimeSeries t{c.seconds_on, c.seconds_off, std::vector<bool>(c.seconds_on.size(), false)};
    for (size_t i = 0; i < t.on.size(); ++i) {
        const StepRecord& a = main[i];
        if (!same_work(a.id.cache_on ? a : shadow[i], a.id.cache_on ? shadow[i] : a)) continue;
        t.same_work[i] = true;
        t.on[i] = t.off[i] = std::min(c.seconds_on[i], c.seconds_off[i]);
    }
    return t;
}

// A tick label without a unit (the chart's title names it): 2.5M, 40k, 0.25.
std::string short_count(double v) {
    const struct { double scale; const char* prefix; } steps[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    for (const auto& s : steps)
        if (std::fabs(v) >= s.scale) return tick_text(v / s.scale) + s.prefix;
    return tick_text(v);
}
std::string short_ms(double seconds) { return tick_text(seconds * 1e3); }

constexpr ImU32 kOn = IM_COL32(70, 170, 240, 255), kOff = IM_COL32(240, 120, 70, 255), kSame = IM_COL32(225, 225, 225, 255);

// Two series over the steps as lines in one chart with ticks (widgets/chart.h); y from 0 to the largest
// value that is not flagged in `outlier_on` / `outlier_off` (a time point the machine was busy elsewhere
// for). Points above the top are clipped to it and drawn as hollow triangles; hovering one says its value.
// Steps flagged in `same` (one value for both) are drawn as one white point.
void line_chart(const char* name, const char* title, const std::vector<double>& on, const std::vector<double>& off,
                ImVec2 size, std::string (*tick)(double), std::string (*fmt)(double), int64_t marked_step,
                const std::vector<bool>& outlier_on = {}, const std::vector<bool>& outlier_off = {},
                const std::vector<bool>& same = {}) {
    auto flagged = [](const std::vector<bool>& f, size_t i) { return i < f.size() && f[i]; };
    double mx = 0;
    for (size_t i = 0; i < on.size(); ++i)
        if (!flagged(outlier_on, i)) mx = std::max(mx, on[i]);
    for (size_t i = 0; i < off.size(); ++i)
        if (!flagged(outlier_off, i)) mx = std::max(mx, off[i]);
    if (mx <= 0) mx = 1;
    const size_t n = std::max(on.size(), off.size());
    Chart chart(name, size, {0, double(std::max<size_t>(n, 2) - 1), nullptr, true}, {0, mx, tick, false, true}, title);
    ImDrawList* dl = chart.draw_list();
    if (marked_step >= 0 && size_t(marked_step) < n) chart.vline(double(marked_step), IM_COL32(250, 200, 60, 120), 1);
    const struct { const std::vector<double>* v; const std::vector<bool>* outlier; ImU32 col; const char* name; } series[] = {
        {&on, &outlier_on, kOn, "cache ON"}, {&off, &outlier_off, kOff, "cache OFF"}};
    std::string clipped;
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    for (const auto& s : series) {
        const std::vector<double>& v = *s.v;
        for (size_t i = 1; i < v.size(); ++i)
            dl->AddLine(chart.at(double(i - 1), std::min(v[i - 1], mx)), chart.at(double(i), std::min(v[i], mx)), s.col, 2);
        for (size_t i = 0; i < v.size(); ++i) {
            const ImVec2 q = chart.at(double(i), std::min(v[i], mx));
            if (v[i] <= mx) {
                dl->AddCircleFilled(q, flagged(same, i) ? 3.5f : 2.5f, flagged(same, i) ? kSame : s.col);
                continue;
            }
            dl->AddTriangle({q.x - 5, q.y + 7}, {q.x + 5, q.y + 7}, {q.x, q.y - 1}, s.col, 1.5f);
            if (chart.hovered() && std::fabs(mouse.x - q.x) < 6)
                clipped += "step " + std::to_string(i) + ", " + s.name + ": " + fmt(v[i]) + " (off the scale)\n";
        }
        chart.note(s.name, v);
    }
    chart.dump(name);
    if (!clipped.empty()) ImGui::SetTooltip("%s", clipped.c_str());
}

std::string fmt_flops(double x) { return human_count(x, "FLOP"); }
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

// A line on this step when its numbers need a reason, said from the numbers themselves, and its details
// (shown on hover): both ways did the same work (a prefill from an empty cache), or the FLOPs differ far more
// than the times (the cached step is bound by reading the weights, which every step does once whatever the
// cache does). Empty when neither holds.
struct StepNote {
    std::string line, details;
};

StepNote step_note(const StepRecord& on, const StepRecord& off, const StepTiming& t, const Model& model) {
    char line[256], details[640];
    if (same_work(on, off)) {
        std::snprintf(line, sizeof line, "Same work both ways (%lld rows, empty cache): the times differ by noise",
                      (long long)on.cost.n_rows_computed);
        std::snprintf(details, sizeof details,
                      "With nothing cached yet, the step computes the same %lld K/V rows with the cache on and off: "
                      "the same arithmetic, bit for bit. Its two times (%s and %s, medians of %d and %d runs) measure "
                      "the same work, so they differ only by measurement noise, which only ever adds time: the time "
                      "chart plots one white point for both, the faster.",
                      (long long)on.cost.n_rows_computed, fmt_ms(t.on).c_str(), fmt_ms(t.off).c_str(), t.n_on, t.n_off);
        return {line, details};
    }
    if (on.cost.flops <= 0 || t.on <= 0 || t.off <= 0) return {};
    const double flops_ratio = off.cost.flops / on.cost.flops, time_ratio = t.off / t.on;
    if (flops_ratio < 2 || time_ratio * 2 > flops_ratio) return {};  // the time follows the FLOPs within 2x
    const std::string weights = human_bytes(double(model.weights().matrix_bytes));
    std::snprintf(line, sizeof line, "%.1fx the FLOPs, %.1fx the time: a step reads all weights (%s), cache or not",
                  flops_ratio, time_ratio, weights.c_str());
    std::snprintf(details, sizeof details,
                  "A step reads every weight matrix (%s as stored) once, whatever the cache does. With the cache "
                  "it multiplies them by %lld row%s: %s/s, bound by reading the weights, not by arithmetic. "
                  "Without, by %lld rows: %s/s. So %.1fx fewer FLOPs save much less time: %.1fx.",
                  weights.c_str(), (long long)on.cost.n_rows_computed, on.cost.n_rows_computed == 1 ? "" : "s",
                  human_count(on.cost.flops / t.on, "FLOP").c_str(), (long long)off.cost.n_rows_computed,
                  human_count(off.cost.flops / t.off, "FLOP").c_str(), flops_ratio, time_ratio);
    return {line, details};
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
    char how[640];
    std::snprintf(how, sizeof how,
                  "Compute time = the forward pass alone. Both sides are timed the same way: each runs in a copy of "
                  "the session that records nothing, and the time is the model arithmetic alone (recording, sampling, "
                  "snapshots and the views' maps are left out of both). A step shorter than %.0f ms is run again "
                  "(step back, step: the same arithmetic bit for bit), ON and OFF in turn, and the median is shown.\n\n"
                  "The step you ran (cache %s) also recorded q/k/v for the views: it took %s in all.",
                  kTimingBudget * 1e3, r->id.cache_on ? "ON" : "OFF", fmt_ms(r->cost.seconds).c_str());
    if (ImGui::BeginTable("both", 3, ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp)) {
        ImGui::TableSetupColumn("");
        ImGui::TableSetupColumn("cache ON");
        ImGui::TableSetupColumn("cache OFF");
        ImGui::TableHeadersRow();
        auto row = [](const char* what, const std::string& a, const std::string& b, const char* help = nullptr) {
            ImGui::TableNextRow();
            ImGui::TableSetColumnIndex(0);
            ImGui::TextDisabled("%s", what);
            if (help) help_marker(help);
            ImGui::TableSetColumnIndex(1);
            ImGui::TextColored({0.45f, 0.72f, 0.95f, 1}, "%s", a.c_str());
            ImGui::TableSetColumnIndex(2);
            ImGui::TextColored({0.95f, 0.55f, 0.35f, 1}, "%s", b.c_str());
        };
        auto timed = [](double seconds, int runs) {
            return fmt_ms(seconds) + (runs == 1 ? ", 1 run" : ", median of " + std::to_string(runs));
        };
        row("compute time", timed(timing.on, timing.n_on), timed(timing.off, timing.n_off), how);
        row("FLOPs", human_count(on.cost.flops, "FLOP"), human_count(off.cost.flops, "FLOP"));
        row("K/V rows computed / reused", std::to_string(on.cost.n_rows_computed) + " / " + std::to_string(on.cost.n_rows_reused),
            std::to_string(off.cost.n_rows_computed) + " / " + std::to_string(off.cost.n_rows_reused));
        ImGui::EndTable();
    }
    if (on.prediction.chosen)
        ImGui::Text("max |delta logits| = %.3g   same token: %s", max_delta,
                    on.prediction.chosen == off.prediction.chosen ? "yes" : "NO");
    else
        ImGui::TextDisabled("this prefill chunk predicts nothing: no logits to compare");
    const StepNote note = step_note(on, off, timing, s.model());
    if (!note.line.empty()) {  // one line; hover it for the numbers behind it
        dump_text("compare step note", wrapped_text(ImVec4{0.95f, 0.85f, 0.55f, 1}, "%s (?)", note.line.c_str()));
        if (ImGui::IsItemHovered()) {
            ImGui::BeginTooltip();
            ImGui::PushTextWrapPos(ImGui::GetFontSize() * 35.0f);
            ImGui::TextUnformatted(note.details.c_str());
            ImGui::PopTextWrapPos();
            ImGui::EndTooltip();
        }
        dump_text("compare step details", note.details);
    }

    const CostSeries series = cost_series(s.trace(), *shadow, s.step_timings);
    const TimeSeries times = comparable_times(s.trace(), *shadow, series);
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float ch = std::max(110.0f, avail.y - 2 * ImGui::GetTextLineHeightWithSpacing() - 4);
    const float cw = (avail.x - 8) / 2;
    line_chart("compare flops", "FLOPs per step", series.flops_on, series.flops_off, {cw, ch}, short_count, fmt_flops,
               int64_t(step));
    ImGui::SameLine();
    line_chart("compare time", "compute time per step (ms)", times.on, times.off, {cw, ch}, short_ms, fmt_ms,
               int64_t(step), time_outliers(times.on, series.flops_on), time_outliers(times.off, series.flops_off),
               times.same_work);
    ImGui::TextColored({0.45f, 0.72f, 0.95f, 1}, "- cache ON");
    ImGui::SameLine();
    ImGui::TextColored({0.95f, 0.55f, 0.35f, 1}, "- cache OFF");
    const bool any_same = std::find(times.same_work.begin(), times.same_work.end(), true) != times.same_work.end();
    const std::string legend = std::string("x = step, yellow line = the viewed step, triangle = off the scale "
                                           "(hover it for its value)") +
                               (any_same ? ", white point = the same work both ways: one time, the faster of the two" : "");
    help_marker(legend.c_str());
    dump_text("compare legend", legend);
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
    const TimeSeries t = comparable_times(s.trace(), *shadow, c);
    time.series = {series("cache on", 0, t.on, 1e3), series("cache off", 1, t.off, 1e3)};
    LineSeries same{"same work both ways: the faster", {40, 40, 40}, {}, {}};
    for (size_t i = 0; i < t.same_work.size(); ++i)
        if (t.same_work[i]) same.xs.push_back(double(i)), same.ys.push_back(t.on[i] * 1e3);
    if (!same.xs.empty()) time.series.push_back(same);
    flops.markers = time.markers = c.flops_on.size() <= 32;
    f.charts = {flops, time};
    return f;
}

}  // namespace kvscope::gui
