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
#include "widgets/chart.h"

namespace kvscope::gui {
namespace {

RotaryCache rotary_cache;  // logic/derived_views.h: by (step record, layer, head, query, key, sink shift)

constexpr ImU32 kYellow = IM_COL32(240, 200, 40, 255), kGrey = IM_COL32(150, 150, 150, 255),
                kMarker = IM_COL32(90, 220, 255, 255);

// The distances the score chart shows: every distance this context holds (0 .. the query's position) and as
// many again beyond it, at least 0 .. 32, within the table rotary_view computed (up to 4095). The marker
// then sits inside the range, not on its border.
int64_t last_shown_distance(const RotaryView& v) {
    const int64_t table_end = int64_t(v.score_by_distance.size()) - 1;
    return std::min(table_end, std::max<int64_t>({32, 2 * v.query_position, 2 * v.scored_distance}));
}

std::string log10_label(double v) {  // a tick of a log10 axis as the value it stands for
    char b[32];
    if (std::fabs(v - std::round(v)) < 1e-9) std::snprintf(b, sizeof b, "1e%d", int(std::round(v)));
    else std::snprintf(b, sizeof b, "%.2g", std::pow(10.0, v));
    return b;
}

float lowest(const std::vector<float>& a) { return *std::min_element(a.begin(), a.end()); }
float highest(const std::vector<float>& a) { return *std::max_element(a.begin(), a.end()); }

void hover_text(const Chart& chart, const std::string& text) {
    if (!chart.hovered()) return;
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30.0f);
    ImGui::TextUnformatted(text.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
}

// The four charts, two by two when each gets 170 px of width, else in one column; as tall as the panel
// allows (at least a few lines each; below that the panel scrolls), so all four show at once.
void draw_charts(const RotaryPlots& plots) {
    const RotaryView& v = plots.view;
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const ImVec2 gap = ImGui::GetStyle().ItemSpacing;
    const int per_row = avail.x >= 2 * 170 + gap.x ? 2 : 1;
    const float cw = (avail.x - gap.x * float(per_row - 1)) / float(per_row);
    const float ch = std::max(ImGui::GetFontSize() * 5.5f, (avail.y - gap.y * float(4 / per_row - 1)) / float(4 / per_row) - 1);
    int drawn = 0;
    auto place = [&] {  // the next chart beside the last one, or below it
        if (drawn++ % per_row) ImGui::SameLine();
    };

    const RotaryPairView& slow = v.pairs.back();
    const bool scaled = slow.inv_freq != slow.inv_freq_unscaled;
    const int64_t q_pos = v.query_position, k_pos = v.key_position, distance = v.scored_distance;
    const int64_t n_pairs = int64_t(v.pairs.size()), D = int64_t(v.key_rotated.size());
    place();
    {
        Chart chart("##freq", {cw, ch}, {0, double(std::max<int64_t>(n_pairs - 1, 1)), nullptr, true},
                    {std::min(lowest(plots.log_freq), lowest(plots.log_freq_unscaled)),
                     std::max(highest(plots.log_freq), highest(plots.log_freq_unscaled)), log10_label},
                    "frequency by pair",
                    scaled ? std::vector<LegendItem>{{"rope_scaling", kYellow}, {"without", kGrey}} : std::vector<LegendItem>{});
        if (scaled) chart.line("unscaled", plots.log_freq_unscaled, kGrey);
        chart.line("frequency", plots.log_freq, kYellow);
        dump_item("rotary frequencies");
        chart.dump("rotary frequencies");
        char text[320];
        std::snprintf(text, sizeof text,
                      "Radians per position of each dimension pair (log scale), fast to slow%s. Pair 0 turns once "
                      "every %.1f positions, pair %lld once every %.0f.",
                      scaled ? "; yellow with rope_scaling, grey without: the slow pairs are stretched" : "",
                      v.pairs.front().wavelength, (long long)(n_pairs - 1), slow.wavelength);
        hover_text(chart, text);
    }
    place();
    {
        char title[64];
        std::snprintf(title, sizeof title, "angle at position %lld", (long long)q_pos);
        Chart chart("##angle", {cw, ch}, {-0.5, double(n_pairs) - 0.5, nullptr, true}, {0, 6.2831853}, title);
        chart.bars("angle", plots.query_angle, kYellow);
        dump_item("rotary angles");
        chart.dump("rotary angles");
        hover_text(chart, "The angle (radians, 0 .. 2 pi) each dimension pair of the query has turned by at its "
                          "position: position x the pair's frequency, modulo a full turn.");
    }
    place();
    {
        float span = 1e-6f;
        for (float x : plots.key_before) span = std::max(span, std::abs(x));
        for (float x : plots.key_after) span = std::max(span, std::abs(x));
        char title[64];
        std::snprintf(title, sizeof title, "key at position %lld", (long long)k_pos);
        Chart chart("##key", {cw, ch}, {-0.5, double(D) - 0.5, nullptr, true}, {-span, span}, title,
                    {{"before", kGrey}, {"cached", kYellow}});
        chart.bars("before", plots.key_before, kGrey, 0, 0, 2);
        chart.bars("cached", plots.key_after, kYellow, 0, 1, 2);
        dump_item("rotary key");
        chart.dump("rotary key");
        hover_text(chart, "Each dimension of the key: before rotation (grey, what k_proj made) and as the cache holds "
                          "it (yellow, each pair turned by the key's position).");
    }
    place();
    {
        const int64_t last = last_shown_distance(v);
        const std::vector<float> shown(plots.by_distance.begin(), plots.by_distance.begin() + last + 1);
        char title[64];
        std::snprintf(title, sizeof title, "score by distance 0..%lld", (long long)last);
        Chart chart("##distance", {cw, ch}, {0, double(last), nullptr, true}, {lowest(shown), highest(shown)}, title,
                    {{"scored at " + std::to_string(distance), kMarker}});
        if (distance <= last) chart.vline(double(distance), kMarker);
        chart.line("score", shown, kYellow);
        dump_item("rotary score by distance");
        chart.dump("rotary score by distance");
        char text[400];
        std::snprintf(text, sizeof text,
                      "The score of this query's and this key's content at every distance 0 .. %lld (the context's "
                      "distances, 0 .. %lld, and as many beyond; rotary-json writes all %zu), the marker at the "
                      "distance the model scored them at: a rotary score depends on how far apart two tokens are, not "
                      "on where they sit.",
                      (long long)last, (long long)q_pos, plots.by_distance.size());
        hover_text(chart, text);
        dump_text("rotary distances", "0.." + std::to_string(last));
    }
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
    dump_text("rotary score", wrapped_disabled("score q·k·scale = %.4f, as the model computed it", v.score));
    help_marker("The score is the model's own, from the cached (rotated) rows. Select a cell in the attention map "
                "to choose the query (row) and key (column). Hover a chart for what it shows.");

    draw_charts(plots);
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
    const int64_t last = last_shown_distance(rv);  // the distances the tab shows
    const std::vector<double> scores(rv.score_by_distance.begin(), rv.score_by_distance.begin() + last + 1);
    LineChart by_distance{at + ": score q.k by distance 0.." + std::to_string(last), "distance", "score", {}};
    by_distance.series.push_back(series("q . k . scale", 0, scores));
    if (rv.scored_distance <= last) {  // where the model scored them
        const auto [lo, hi] = std::minmax_element(scores.begin(), scores.end());
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
