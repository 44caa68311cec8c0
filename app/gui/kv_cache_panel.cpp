// KV cache: K and V of the chosen layer and head after the viewed step, one row per cache slot
// (labelled with the position and token it holds), columns = head_dim. Rows written this step are
// outlined, the write pointer is marked, rows outside the window are dimmed, attention sinks marked;
// above, the fill of every layer and the bytes used.
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "panels.h"

namespace kvscope::gui {

void draw_kv_cache(PanelContext& c) {
    place_panel(Panel::KvCache, c.display);
    if (!ImGui::Begin("KV cache")) {
        ImGui::End();
        return;
    }
    dump_window("KV cache");
    const Snapshot& s = c.snap;
    const Model& model = c.snap.model();
    ViewPrefs& v = c.prefs;
    size_t step = 0;
    const StepRecord* r = viewed_step(s, v, &step);
    if (!r) {
        ImGui::TextDisabled("The cache is empty: run a prefill step.");
        ImGui::End();
        return;
    }
    std::vector<TokenId> tokens = s.prompt();
    tokens.insert(tokens.end(), s.generated().begin(), s.generated().end());
    const int64_t S = r->cache_capacity, D = r->head_dim;
    const KeyRange visible = r->visible_keys(r->next_position);  // what the next query sees (sinks + window)
    auto dimmed = [&](int64_t p) { return p >= 0 && !visible.contains(p); };
    auto sink = [&](int64_t p) { return p >= 0 && p < visible.n_sink; };
    const int64_t written_lo = r->first_computed_position, written_hi = r->first_computed_position + r->n_rows_computed - 1;

    ImGui::Text("layer %lld, head %lld: %lld slots x head_dim %lld", (long long)v.layer, (long long)v.head, (long long)S,
                (long long)D);
    ImGui::TextDisabled("written this step: %lld row(s), read from the cache: %lld", (long long)r->n_rows_computed,
                        (long long)r->n_rows_reused);

    // Fill overview and bytes first, so they stay visible however tall the maps get.
    const float bar_w = std::min(ImGui::GetContentRegionAvail().x * 0.5f, 260.0f);
    char text[96];
    std::snprintf(text, sizeof text, "%s / %s", human_bytes(double(r->cache_bytes_used)).c_str(),
                  human_bytes(double(r->cache_bytes_capacity)).c_str());
    ImGui::ProgressBar(float(r->cache_bytes_used) / float(std::max<int64_t>(1, r->cache_bytes_capacity)), {bar_w, 0}, text);
    ImGui::SameLine();
    ImGui::PushTextWrapPos(0);
    ImGui::TextDisabled("bytes used / capacity (all layers, K+V)");
    ImGui::PopTextWrapPos();
    {
        // Every layer's fill: the same slots are used in each layer.
        ImDrawList* dl = ImGui::GetWindowDrawList();
        const ImVec2 p = ImGui::GetCursorScreenPos();
        const float lw = std::max(24.0f, (ImGui::GetContentRegionAvail().x - 4) / float(r->n_layer)) - 4;
        const float h = 10;
        for (int64_t il = 0; il < r->n_layer; ++il) {
            const float x = p.x + float(il) * (lw + 4);
            const float f = float(r->cache_used) / float(std::max<int64_t>(1, S));
            dl->AddRectFilled({x, p.y}, {x + lw, p.y + h}, IM_COL32(50, 50, 58, 255), 2);
            dl->AddRectFilled({x, p.y}, {x + lw * f, p.y + h}, il == v.layer ? IM_COL32(250, 200, 60, 255) : IM_COL32(70, 150, 220, 255), 2);
            if (ImGui::IsMouseHoveringRect({x, p.y}, {x + lw, p.y + h}))
                ImGui::SetTooltip("layer %lld: %lld / %lld slots", (long long)il, (long long)r->cache_used, (long long)S);
        }
        ImGui::Dummy({1, h + 2});
    }

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float label_w = ImGui::CalcTextSize("0000 wwwwwwww").x;
    const float gap = 12;
    const float map_w = std::max(40.0f, (avail.x - label_w - gap - 20) / 2);
    const float title_h = ImGui::GetTextLineHeight() + 2;
    const float map_h = std::max(40.0f, avail.y - title_h - 2 * ImGui::GetTextLineHeightWithSpacing() - 8);  // the legend may wrap
    const float row_h = std::min(map_h / float(S), 22.0f);
    const ImVec2 size = {map_w, row_h * float(S)};
    const ImVec2 top = ImGui::GetCursorScreenPos();
    ImDrawList* dl = ImGui::GetWindowDrawList();

    float k_abs = 0, v_abs = 0;
    const unsigned ktex = c.maps.kv_texture(s.trace(), step, v.layer, v.head, false, &k_abs);
    const unsigned vtex = c.maps.kv_texture(s.trace(), step, v.layer, v.head, true, &v_abs);
    HeatmapResult hk, hv;
    for (int which = 0; which < 2; ++which) {
        const float x = top.x + label_w + float(which) * (map_w + gap);
        const float mx = std::max(which ? v_abs : k_abs, 1e-6f);
        HeatmapStyle st;
        st.colormap = Colormap::Diverging;
        st.lo = -mx;
        st.hi = mx;
        ImGui::SetCursorScreenPos({x, top.y});
        ImGui::Text("%s  (+-%.2f)", which ? "V" : "K", double(mx));
        ImGui::SetCursorScreenPos({x, top.y + title_h});
        (which ? hv : hk) = heatmap(which ? "V" : "K", which ? vtex : ktex, S, D, size, st);
    }
    const bool labels = row_h >= ImGui::GetTextLineHeight() - 2;
    for (int64_t slot = 0; slot < S; ++slot) {
        const int64_t p = r->slot_positions[size_t(slot)];
        const float y0 = hk.cell_min(slot, 0).y, y1 = hk.cell_max(slot, 0).y;
        if (p >= 0 && labels) {
            char label[64];
            std::snprintf(label, sizeof label, "%lld %s", (long long)p,
                          p < int64_t(tokens.size()) ? short_token(model, tokens[size_t(p)], 8).c_str() : "");
            dl->AddText({top.x, (y0 + y1) / 2 - ImGui::GetTextLineHeight() / 2},
                        dimmed(p) ? IM_COL32(120, 120, 120, 255) : sink(p) ? IM_COL32(235, 130, 210, 255) : IM_COL32(200, 200, 210, 255),
                        label);
        }
        for (const HeatmapResult* h : {&hk, &hv}) {
            if (dimmed(p))  // outside the window: kept in the slot but no longer attended
                dl->AddRectFilled({h->p0.x, y0}, {h->p1.x, y1}, IM_COL32(0, 0, 0, 150));
            if (sink(p))  // an attention sink: a bar in the gutter left of the map
                dl->AddRectFilled({h->p0.x - 7, y0}, {h->p0.x - 3, y1}, IM_COL32(220, 100, 190, 255));
            if (p >= written_lo && p <= written_hi) {
                // Tall rows get an outline; thin ones a mark in the gutter beside the map (merged visually).
                if (y1 - y0 >= 6) dl->AddRect({h->p0.x - 2, y0}, {h->p1.x + 2, y1}, IM_COL32(250, 200, 60, 255), 0, 0, 2);
                else dl->AddRectFilled({h->p1.x + 2, y0}, {h->p1.x + 6, y1}, IM_COL32(250, 200, 60, 255));
            }
            if (p >= 0 && p == v.sel_key)
                dl->AddRect({h->p0.x - 3, y0 - 1}, {h->p1.x + 3, y1 + 1}, IM_COL32(90, 220, 255, 255), 0, 0, 2);
        }
        if (slot == r->write_slot) {
            // Write pointer: an arrow left of K pointing at the next slot.
            const float yy = (y0 + y1) / 2, x = hk.p0.x - 4;
            dl->AddTriangleFilled({x, yy}, {x - 9, yy - 6}, {x - 9, yy + 6}, IM_COL32(250, 120, 60, 255));
            dl->AddLine({hv.p1.x + 2, yy}, {hv.p1.x + 14, yy}, IM_COL32(250, 120, 60, 255), 2);
        }
    }
    for (const HeatmapResult* h : {&hk, &hv})
        if (h->hover_row >= 0) {
            const int64_t p = r->slot_positions[size_t(h->hover_row)];
            const float* row = p < 0 ? nullptr
                               : h == &hv ? s.trace().value_row(step, v.layer, v.head, p)
                                          : s.trace().key_row(step, v.layer, v.head, p);
            ImGui::BeginTooltip();
            ImGui::Text("slot %lld%s", (long long)h->hover_row, h->hover_row == r->write_slot ? " (write pointer)" : "");
            if (p < 0) ImGui::TextDisabled("empty");
            else {
                ImGui::Text("position %lld '%s'", (long long)p,
                            p < int64_t(tokens.size()) ? token_text(model, tokens[size_t(p)]).c_str() : "?");
                if (row) ImGui::Text("%s[%lld] = %.5f", h == &hv ? "v" : "k", (long long)h->hover_col, double(row[h->hover_col]));
                if (p >= written_lo && p <= written_hi) ImGui::TextColored({1, 0.8f, 0.3f, 1}, "written this step");
                if (dimmed(p)) ImGui::TextDisabled("outside the window: no longer attended");
                if (sink(p)) ImGui::TextColored({0.9f, 0.5f, 0.8f, 1}, "attention sink: kept visible beside the window");
            }
            ImGui::EndTooltip();
            if (h->clicked && p >= 0) v.sel_key = p;
        }
    ImGui::SetCursorScreenPos({top.x, top.y + title_h + size.y + 4});
    ImGui::PushTextWrapPos(0);
    ImGui::TextDisabled("yellow = written this step, arrow = write pointer, dark = outside the window%s",
                        visible.n_sink > 0 ? ", magenta bar = attention sink (stays visible)" : "");
    ImGui::PopTextWrapPos();
    ImGui::End();
}

}  // namespace kvscope::gui
