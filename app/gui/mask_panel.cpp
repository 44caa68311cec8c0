// Mask: which keys each query of the step may see, drawn at the step's shape (new x cached), with the
// offset, the window band, the attention sinks' columns and the rule written out.
#include <imgui.h>

#include <algorithm>
#include <cmath>

#include "figures.h"
#include "panels.h"

namespace kvscope::gui {

void draw_mask(PanelContext& c) {
    if (!begin_panel(Panel::Mask)) return;
    figure_button(c, Panel::Mask);
    const Snapshot& s = c.snap;
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    if (!r || !r->recorded()) {
        ImGui::TextDisabled("No step yet.");
        end_panel();
        return;
    }
    // The decoder's self-attention mask; the Attention panel's layer may be a deeper encoder layer. It
    // follows from the positions, the window and the sinks alone: no attention is computed for it.
    const int64_t layer = std::min(c.prefs.layer, r->rows.n_layer - 1);
    const MapExtent m = map_extent(s.trace(), step, AttentionKind::Self);
    const long long p = (long long)m.first_query;
    // p is a position (as in the timeline), not a column of the map.
    dump_text("mask header", wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text], "%s x %s, first query at position p = %lld",
                                          count_of(m.n_query, "new query", "new queries").c_str(),
                                          count_of(m.n_key, "key").c_str(), p));
    if (r->id.window > 0 && r->id.sinks > 0)
        wrapped_disabled("rule: the query at position p+r sees keys at positions p+r-%lld+1 .. p+r (window W = %lld), "
                            "plus the attention sinks 0..%lld (the first S = %lld positions stay visible)",
                            (long long)r->id.window, (long long)r->id.window, (long long)(r->id.sinks - 1),
                            (long long)r->id.sinks);
    else if (r->id.window > 0)
        wrapped_disabled("rule: the query at position p+r sees keys at positions p+r-%lld+1 .. p+r (window W = %lld)",
                            (long long)r->id.window, (long long)r->id.window);
    else
        wrapped_disabled("rule: the query at position p+r sees keys at positions <= p+r (causal)");
    if (r->id.window > 0 && r->id.sinks > 0 && r->id.sink_positions == SinkPositions::Cache)
        wrapped_disabled("sink positions: cache (StreamingLLM) \u2014 scores treat the sinks as sitting right before the "
                         "window; for the last query, %lld positions later than their text positions",
                         (long long)r->visible_keys(r->last_position()).sink_shift);
    const int64_t n_visible = visible_cells(*r, layer, m.first_query, m.n_query, m.first_key, m.n_key);
    wrapped_disabled("%lld of %lld cells visible: green = visible, striped = masked", (long long)n_visible,
                     (long long)(m.n_query * m.n_key));
    if (r->rows.encoder) {
        ImGui::TextDisabled("decoder self-attention only");
        help_marker("This is the decoder's self-attention mask; cross-attention and the encoder mask nothing: every "
                    "query sees all source tokens.");
    }
    HeatmapStyle st;
    st.mask_only = true;
    // At least a few lines tall: a short panel scrolls to the map rather than squeezing it to nothing.
    ImVec2 room = ImGui::GetContentRegionAvail();
    room.y = std::max(room.y, ImGui::GetFontSize() * 4);
    const ImVec2 size = heatmap_fit(m.n_query, m.n_key, room);
    // A mask-only tile: the same visibility, drawn flat; a block is visible when any of its cells is.
    const MapWindow w = MapWindow::whole(m.n_query, m.n_key, int64_t(std::ceil(size.y)), int64_t(std::ceil(size.x)));
    const MapTile* tile = c.maps.mask_tile(s.trace(), step, layer, w);
    HeatmapResult h = heatmap("mask", {HeatmapLayer{tile ? tile->tex : 0, w}}, m.n_query, m.n_key, size, st);
    dump_item("mask map");
    // The cell selected in the attention map (or here), outlined in the same colour as there.
    const int64_t row = c.prefs.sel_query - m.first_query, col = c.prefs.sel_key - m.first_key;
    if (row >= 0 && row < m.n_query && col >= 0 && col < m.n_key) {
        const ImVec2 a = h.cell_min(row, col);
        const ImVec2 b = h.cell_max(row, col);
        ImGui::GetWindowDrawList()->AddRect({a.x - 1, a.y - 1}, {b.x + 1, b.y + 1}, IM_COL32(90, 220, 255, 255), 0, 0, 2);
        ImGui::SetCursorScreenPos(a);
        ImGui::Dummy({std::max(1.0f, b.x - a.x), std::max(1.0f, b.y - a.y)});
        dump_item("mask selected cell");
    }
    if (h.hover_row >= 0) {
        const int64_t qp = m.first_query + h.hover_row, kp = m.first_key + h.hover_col;
        if (h.clicked) c.prefs.sel_query = qp, c.prefs.sel_key = kp;
        const bool vis = r->visible_keys(qp, layer).contains(kp);
        const KeyRange k = r->visible_keys(qp);
        ImGui::SetTooltip("query pos %lld, key pos %lld: %s", (long long)qp, (long long)kp,
                          !vis          ? (kp > qp ? "masked (future)" : "masked (evicted: outside the window)")
                          : kp < k.n_sink ? "visible (attention sink)"
                                          : "visible");
    }
    end_panel();
}

}  // namespace kvscope::gui
