// Rotary: what rotary position embedding does to the selected query and key of the shown head. Each
// dimension pair turns at its own frequency (rope_scaling bends the slow ones); the cache holds keys
// already turned by their position; and the score of the same two vectors depends only on their distance.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "analysis/rotary_view.h"
#include "figures.h"
#include "panels.h"

namespace kvscope::gui {
namespace {

// The view for (step, layer, head, query, key, sink shift), computed again only when one of them changes.
struct RotaryCache {
    int64_t key[6] = {-1, -1, -1, -1, -1, -1};
    RotaryView view;
    std::vector<float> log_freq, log_freq_unscaled, query_angle, key_before, key_after, by_distance;  // for ImGui plots
};

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
    const RotaryShown shown = rotary_shown(s, c.prefs, *r, step);
    const int64_t layer = shown.layer, head = shown.head, q_pos = shown.query_position, k_pos = shown.key_position;
    const int64_t turned_back = shown.turned_back;

    static RotaryCache cache;
    const int64_t now[6] = {int64_t(step), layer, head, q_pos, k_pos, turned_back};
    if (!std::equal(now, now + 6, cache.key) || cache.view.head_dim != r->rows.head_dim) {
        cache.view = rotary_view_of(cfg, shown);
        const RotaryView& v = cache.view;
        cache.log_freq.clear();
        cache.log_freq_unscaled.clear();
        cache.query_angle.clear();
        for (const RotaryPairView& p : v.pairs) {
            cache.log_freq.push_back(float(std::log10(p.inv_freq)));
            cache.log_freq_unscaled.push_back(float(std::log10(p.inv_freq_unscaled)));
            cache.query_angle.push_back(float(p.query_angle));
        }
        cache.key_before.assign(v.key_unrotated.begin(), v.key_unrotated.end());
        cache.key_after.assign(v.key_rotated.begin(), v.key_rotated.end());
        cache.by_distance.assign(v.score_by_distance.begin(), v.score_by_distance.end());
        std::copy(now, now + 6, cache.key);
    }
    const RotaryView& v = cache.view;
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
    two_lines("##freq", cache.log_freq, cache.log_freq_unscaled, chart);
    dump_item("rotary frequencies");
    wrapped_disabled("pair 0 turns once every %.1f positions, pair %zu once every %.0f", v.pairs.front().wavelength,
                     v.pairs.size() - 1, slow.wavelength);

    wrapped_disabled("angle of each pair at the query's position %lld (0 .. 2π)", (long long)q_pos);
    ImGui::PlotHistogram("##angle", cache.query_angle.data(), int(cache.query_angle.size()), 0, nullptr, 0.0f,
                         6.2831853f, chart);
    dump_item("rotary angles");

    float span = 1e-6f;
    for (float x : cache.key_before) span = std::max(span, std::abs(x));
    for (float x : cache.key_after) span = std::max(span, std::abs(x));
    wrapped_disabled("key of position %lld before rotation (what k_proj made) and as cached (turned by its position)",
                     (long long)k_pos);
    ImGui::PlotHistogram("##before", cache.key_before.data(), int(cache.key_before.size()), 0, "before", -span, span,
                         {w, chart.y * 0.7f});
    ImGui::PlotHistogram("##after", cache.key_after.data(), int(cache.key_after.size()), 0, "cached", -span, span,
                         {w, chart.y * 0.7f});
    dump_item("rotary key");

    wrapped_disabled("score of this query's and key's content at every distance 0 .. %zu (the marker: the one it was scored at)",
                     cache.by_distance.size() - 1);
    ImGui::PlotLines("##distance", cache.by_distance.data(), int(cache.by_distance.size()), 0, nullptr, FLT_MAX,
                     FLT_MAX, chart);
    dump_item("rotary score by distance");
    if (distance < int64_t(cache.by_distance.size())) {
        const ImVec2 p0 = ImGui::GetItemRectMin(), p1 = ImGui::GetItemRectMax();
        const float x = p0.x + (p1.x - p0.x) * float(distance) / float(std::max<size_t>(1, cache.by_distance.size() - 1));
        ImGui::GetWindowDrawList()->AddLine({x, p0.y}, {x, p1.y}, IM_COL32(90, 220, 255, 255), 2);
    }
    end_panel();
}

}  // namespace kvscope::gui
