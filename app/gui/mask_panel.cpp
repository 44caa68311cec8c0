// Mask: which keys each query of the step may see, drawn at the step's shape (new x cached), with the
// offset, the window band, the attention sinks' columns and the rule written out.
#include <imgui.h>

#include <algorithm>

#include "panels.h"

namespace kvscope::gui {

void draw_mask(PanelContext& c) {
    place_panel(Panel::Mask, c.display);
    if (!ImGui::Begin("Mask")) {
        ImGui::End();
        return;
    }
    dump_window("Mask");
    const Snapshot& s = c.snap;
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    if (!r || !r->recorded()) {
        ImGui::TextDisabled("No step yet.");
        ImGui::End();
        return;
    }
    // The decoder's self-attention mask; the Attention panel's layer may be a deeper encoder layer.
    const AttentionMap* mp = c.maps.map(s.trace(), step, std::min(c.prefs.layer, r->rows.n_layer - 1), c.prefs.head);
    if (!mp) {
        ImGui::TextDisabled("computing the mask of step %zu...", step);
        ImGui::End();
        return;
    }
    const AttentionMap& m = *mp;
    const long long p = (long long)m.query_positions.front();
    ImGui::Text("%lld new x %lld keys, offset p = %lld", (long long)m.n_query, (long long)m.n_key, p);
    ImGui::PushTextWrapPos(0);
    if (r->id.window > 0 && r->id.sinks > 0)
        ImGui::TextDisabled("rule: the query at position p+r sees keys at positions p+r-%lld+1 .. p+r (window W = %lld), "
                            "plus the attention sinks 0..%lld (the first S = %lld positions stay visible)",
                            (long long)r->id.window, (long long)r->id.window, (long long)(r->id.sinks - 1),
                            (long long)r->id.sinks);
    else if (r->id.window > 0)
        ImGui::TextDisabled("rule: the query at position p+r sees keys at positions p+r-%lld+1 .. p+r (window W = %lld)",
                            (long long)r->id.window, (long long)r->id.window);
    else
        ImGui::TextDisabled("rule: the query at position p+r sees keys at positions <= p+r (causal)");
    if (r->rows.encoder)
        ImGui::TextDisabled("this is the decoder's self-attention mask; cross-attention and the encoder mask nothing "
                            "(every query sees all %lld source tokens)", (long long)r->rows.encoder->n_source());
    ImGui::PopTextWrapPos();
    int64_t n_visible = 0;
    for (uint8_t x : m.visible) n_visible += x;
    ImGui::TextDisabled("%lld of %lld cells visible", (long long)n_visible, (long long)m.visible.size());
    ImGui::TextDisabled("green = visible, striped = masked");
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
    const ImVec2 size = heatmap_fit(m.n_query, m.n_key, ImGui::GetContentRegionAvail());
    HeatmapResult h = heatmap("mask", tex, m.n_query, m.n_key, size, st);
    if (h.hover_row >= 0) {
        const int64_t qp = m.query_positions[size_t(h.hover_row)], kp = m.key_positions[size_t(h.hover_col)];
        const bool vis = m.visible[size_t(h.hover_row * m.n_key + h.hover_col)];
        const KeyRange k = r->visible_keys(qp);
        ImGui::SetTooltip("query pos %lld, key pos %lld: %s", (long long)qp, (long long)kp,
                          !vis          ? (kp > qp ? "masked (future)" : "masked (evicted: outside the window)")
                          : kp < k.n_sink ? "visible (attention sink)"
                                          : "visible");
    }
    ImGui::End();
}

}  // namespace kvscope::gui
