// Rotary: what rotary position embedding does to the selected query and key of the shown head. Each
// dimension pair turns at its own frequency (rope_scaling bends the slow ones); the cache holds keys
// already turned by their position; and the score of the same two vectors depends only on their distance.
#include "panels/rotary_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "analysis/rotary_view.h"
#include "logic/derived_views.h"
#include "panels/figures.h"

namespace kvscope::gui {
namespace {

RotaryCache rotary_cache;  // logic/derived_views.h: by (step record, layer, head, query, key, sink shift)

// Two series over the same x as lines in one frame: scaled (yellow) and unscaled (grey) frequencies.
void two_lines(const char* id, const std::vector<float>& a, const std::vector<float>& b, ImVec2 size) {
    ImGui::InvisibleButton(id, size);
    const ImVec2 p0 = ImGui::GetItemRectMin(), p1 = ImGui::GetItemRectMax();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRectFilled(p0, p1, ImGui::GetColorU32(ImGuiCol_FrameBg));
    float lo = std::min(*std::min_element(a.begin(), a.end()), *std::min_element(b.begin(), b.end()));
    float hi = std::max(*std::max_element(a.begin(), a.end()), *std::max_element(b.begin(), b.end()));
    if (hi <= lo) hi = lo + 1;
    auto at = [&](size_t i, float v) {
        const float x = a.size() > 1 ? float(i) / float(a.size() - 1) : 0.5f;
        return ImVec2(p0.x + 4 + x * (p1.x - p0.x - 8), p1.y - 4 - (v - lo) / (hi - lo) * (p1.y - p0.y - 8));
    };
    for (size_t i = 1; i < b.size(); ++i) dl->AddLine(at(i - 1, b[i - 1]), at(i, b[i]), IM_COL32(150, 150, 150, 255), 2);
    for (size_t i = 1; i < a.size(); ++i) dl->AddLine(at(i - 1, a[i - 1]), at(i, a[i]), IM_COL32(240, 200, 40, 255), 2);
}

}  // namespace

void draw_rotary(PanelContext& c) {
    if (!begin_panel(Panel::Rotary)) return;
    const Snapshot& s = c.snap;
    const ModelConfig& cfg = s.model().config();
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    if (cfg.family != Family::Llama) {
        wrapped_disabled("This model adds a learned position vector to each input: its keys are not rotated. "
                         "Load a Llama-family model (assets/llama-gqa) to see rotary positions.");
        end_panel();
        return;
    }
    if (!r || !r->recorded()) {
        ImGui::TextDisabled("No step yet.");
        end_panel();
        return;
    }
    const RotaryShown shown = rotary_shown(s.trace(), step, c.prefs.layer, c.prefs.head, c.prefs.sel_query, c.prefs.sel_key);
    const int64_t layer = shown.layer, head = shown.head, q_pos = shown.query_position, k_pos = shown.key_position;
    const int64_t turned_back = shown.turned_back;
    const RotaryPlots& plots = rotary_cache.get(cfg, s.trace().share(step), shown);
    const RotaryView& v = plots.view;
    figure_button(c, Panel::Rotary);
    if (!c.prefs.rotary_json.empty()) {
        if (!write_rotary_json(c.prefs.rotary_json, step, layer, head, v))
            std::fprintf(stderr, "error: cannot write %s\n", c.prefs.rotary_json.c_str());
        c.prefs.rotary_json.clear();
    }

    const int64_t distance = v.scored_distance;
    dump_text("rotary header", wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text],
                                            "layer %lld, head %lld (reads K/V head %lld): query at position %lld, key "
                                            "at %lld, distance %lld",
                                            (long long)layer, (long long)head, (long long)cfg.kv_head_of(head),
                                            (long long)q_pos, (long long)k_pos, (long long)(q_pos - k_pos)));
    if (turned_back > 0)
        dump_text("rotary sink", wrapped_text(ImVec4{1, 0.8f, 0.3f, 1},
                                              "sinks at cache positions: this sink was scored at distance %lld, as "
                                              "if it sat just before the window (the query turned back by %lld)",
                                              (long long)distance, (long long)turned_back));
    dump_text("rotary score", wrapped_disabled("score q·k·scale = %.4f, as the model computed it from the cached rows",
                                               v.score));
    help_marker("Select a cell in the attention map to choose the query (row) and key (column).");
    const float w = ImGui::GetContentRegionAvail().x, font = ImGui::GetFontSize();
    const ImVec2 chart = {w, std::max(font * 3.5f, 40.0f)};

    const RotaryPairView& slow = v.pairs.back();
    const bool scaled = slow.inv_freq != slow.inv_freq_unscaled;
    wrapped_disabled(scaled ? "frequency of each dimension pair (log10 radians per position): yellow with "
                              "rope_scaling, grey without; the slow pairs are stretched"
                            : "frequency of each dimension pair (log10 radians per position), fast to slow");
    two_lines("##freq", plots.log_freq, plots.log_freq_unscaled, chart);
    dump_item("rotary frequencies");
    wrapped_disabled("pair 0 turns once every %.1f positions, pair %zu once every %.0f", v.pairs.front().wavelength,
                     v.pairs.size() - 1, slow.wavelength);

    wrapped_disabled("angle of each pair at the query's position %lld (0 .. 2π)", (long long)q_pos);
    ImGui::PlotHistogram("##angle", plots.query_angle.data(), int(plots.query_angle.size()), 0, nullptr, 0.0f,
                         6.2831853f, chart);
    dump_item("rotary angles");

    float span = 1e-6f;
    for (float x : plots.key_before) span = std::max(span, std::abs(x));
    for (float x : plots.key_after) span = std::max(span, std::abs(x));
    wrapped_disabled("key of position %lld before rotation (what k_proj made) and as cached (turned by its position)",
                     (long long)k_pos);
    ImGui::PlotHistogram("##before", plots.key_before.data(), int(plots.key_before.size()), 0, "before", -span, span,
                         {w, chart.y * 0.7f});
    ImGui::PlotHistogram("##after", plots.key_after.data(), int(plots.key_after.size()), 0, "cached", -span, span,
                         {w, chart.y * 0.7f});
    dump_item("rotary key");

    wrapped_disabled("score of this query's and key's content at every distance 0 .. %zu (the marker: the one it was scored at)",
                     plots.by_distance.size() - 1);
    ImGui::PlotLines("##distance", plots.by_distance.data(), int(plots.by_distance.size()), 0, nullptr, FLT_MAX,
                     FLT_MAX, chart);
    dump_item("rotary score by distance");
    if (distance < int64_t(plots.by_distance.size())) {
        const ImVec2 p0 = ImGui::GetItemRectMin(), p1 = ImGui::GetItemRectMax();
        const float x = p0.x + (p1.x - p0.x) * float(distance) / float(std::max<size_t>(1, plots.by_distance.size() - 1));
        ImGui::GetWindowDrawList()->AddLine({x, p0.y}, {x, p1.y}, IM_COL32(90, 220, 255, 255), 2);
    }
    end_panel();
}

Figure rotary_figure(const Snapshot& s, const ViewPrefs& v) {
    using namespace fig;
    const ModelConfig& cfg = s.model().config();
    if (cfg.family != Family::Llama) nothing("this model's keys are not rotated (learned positions)");
    const Shown w = shown_step(s, v);
    const RotaryShown shown = rotary_shown(s.trace(), w.step, v.layer, v.head, v.sel_query, v.sel_key);
    const RotaryView rv = rotary_view_of(cfg, shown);
    // Four charts side by side: short titles, the model named in the first.
    const std::string at = "step " + std::to_string(w.step) + ", L" + std::to_string(shown.layer) + " H" +
                           std::to_string(shown.head);
    std::vector<double> freq, freq_unscaled, angle;
    for (const RotaryPairView& p : rv.pairs) {
        freq.push_back(p.inv_freq), freq_unscaled.push_back(p.inv_freq_unscaled), angle.push_back(p.query_angle);
    }
    LineChart frequencies{model_name(s) + ", " + at + ": frequency per pair", "pair", "radians per position", {}, true};
    if (freq != freq_unscaled) frequencies.series.push_back(series("without rope_scaling", 1, freq_unscaled));
    frequencies.series.push_back(series("as the model turns", 0, freq));
    LineChart angles{at + ": angles at query position " + std::to_string(shown.query_position), "pair",
                     "radians (0 .. 2 pi)", {}};
    angles.series.push_back(series("query at " + std::to_string(shown.query_position), 0, angle));
    LineChart key{at + ": key at position " + std::to_string(shown.key_position), "dimension", "value", {}};
    key.series = {series("before rotation", 1, rv.key_unrotated), series("as cached", 0, rv.key_rotated)};
    LineChart by_distance{at + ": score q.k by distance", "distance", "score", {}};
    by_distance.series.push_back(series("q . k . scale", 0, rv.score_by_distance));
    if (rv.scored_distance < int64_t(rv.score_by_distance.size())) {  // where the model scored them
        const auto [lo, hi] = std::minmax_element(rv.score_by_distance.begin(), rv.score_by_distance.end());
        by_distance.series.push_back({"scored at distance " + std::to_string(rv.scored_distance), kSeries[1],
                                      {double(rv.scored_distance), double(rv.scored_distance)}, {*lo, *hi}});
    }
    frequencies.markers = angles.markers = rv.pairs.size() <= 32;
    Figure f;
    f.name = "rotary_step" + std::to_string(w.step) + "_l" + std::to_string(shown.layer) + "_h" + std::to_string(shown.head) +
             "_q" + std::to_string(shown.query_position) + "_k" + std::to_string(shown.key_position);
    f.charts = {frequencies, angles, key, by_distance};
    return f;
}

}  // namespace kvscope::gui
