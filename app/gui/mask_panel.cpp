// Mask: which keys each query of the step may see, drawn at the step's shape (new x cached), with the
// offset, the window band, the attention sinks' columns and the rule written out.
#include <imgui.h>

#include <algorithm>

#include "panels.h"

namespace kvscope::gui {

void draw_mask(PanelContext& c) {
    if (!begin_panel(Panel::Mask)) return;
    const Snapshot& s = c.snap;
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    if (!r || !r->recorded()) {
        ImGui::TextDisabled("No step yet.");
        end_panel();
        return;
    }
    // The decoder's self-attention mask; the Attention panel's layer may be a deeper encoder layer.
    const AttentionMap* mp = c.maps.map(s.trace(), step, std::min(c.prefs.layer, r->rows.n_layer - 1), c.prefs.head);
    if (!mp) {
        ImGui::TextDisabled("computing the mask of step %zu...", step);
        end_panel();
        return;
    }
    const AttentionMap& m = *mp;
    const long long p = (long long)m.query_positions.front();
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
    int64_t n_visible = 0;
    for (uint8_t x : m.visible) n_visible += x;
    wrapped_disabled("%lld of %lld cells visible: green = visible, striped = masked", (long long)n_visible,
                     (long long)m.visible.size());
    if (r->rows.encoder) {
        ImGui::TextDisabled("decoder self-attention only");
        help_marker("This is the decoder's self-attention mask; cross-attention and the encoder mask nothing: every "
                    "query sees all source tokens.");
    }
    // A mask-only texture: the same visibility, drawn flat.
    // The mask depends only on the query positions, the key range, the window and the sinks.
    static unsigned tex = 0;
    static int64_t key[5] = {-1, -1, -1, -1, -1};
    const int64_t now[5] = {m.query_positions.front(), m.n_query, m.n_key, r->id.window, r->id.sinks};
    if (!std::equal(now, now + 5, key)) {
        tex = Gl::upload(tex, m.n_query, m.n_key, nullptr, m.visible.data());
        std::copy(now, now + 5, key);
    }
    HeatmapStyle st;
    st.mask_only = true;
    // At least a few lines tall: a short panel scrolls to the map rather than squeezing it to nothing.
    ImVec2 room = ImGui::GetContentRegionAvail();
    room.y = std::max(room.y, ImGui::GetFontSize() * 4);
    const ImVec2 size = heatmap_fit(m.n_query, m.n_key, room);
    HeatmapResult h = heatmap("mask", tex, m.n_query, m.n_key, size, st);
    dump_item("mask map");
    // The cell selected in the attention map (or here), outlined in the same colour as there.
    const auto row = std::find(m.query_positions.begin(), m.query_positions.end(), c.prefs.sel_query);
    const auto col = std::find(m.key_positions.begin(), m.key_positions.end(), c.prefs.sel_key);
    if (row != m.query_positions.end() && col != m.key_positions.end()) {
        const ImVec2 a = h.cell_min(row - m.query_positions.begin(), col - m.key_positions.begin());
        const ImVec2 b = h.cell_max(row - m.query_positions.begin(), col - m.key_positions.begin());
        ImGui::GetWindowDrawList()->AddRect({a.x - 1, a.y - 1}, {b.x + 1, b.y + 1}, IM_COL32(90, 220, 255, 255), 0, 0, 2);
        ImGui::SetCursorScreenPos(a);
        ImGui::Dummy({std::max(1.0f, b.x - a.x), std::max(1.0f, b.y - a.y)});
        dump_item("mask selected cell");
    }
    if (h.hover_row >= 0) {
        const int64_t qp = m.query_positions[size_t(h.hover_row)], kp = m.key_positions[size_t(h.hover_col)];
        if (h.clicked) c.prefs.sel_query = qp, c.prefs.sel_key = kp;
        const bool vis = m.visible[size_t(h.hover_row * m.n_key + h.hover_col)];
        const KeyRange k = r->visible_keys(qp);
        ImGui::SetTooltip("query pos %lld, key pos %lld: %s", (long long)qp, (long long)kp,
                          !vis          ? (kp > qp ? "masked (future)" : "masked (evicted: outside the window)")
                          : kp < k.n_sink ? "visible (attention sink)"
                                          : "visible");
    }
    end_panel();
}

}  // namespace kvscope::gui
