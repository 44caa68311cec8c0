// Mask: which keys each query of the step may see, drawn at the step's shape (new x cached), with the
// offset, the window band, the attention sinks' columns and the rule written out.
#include "panels/mask_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "logic/record_cache.h"
#include "panels/figures.h"

namespace kvscope::gui {
namespace {

// Keys evicted from the shown head's K/V head, counted once per (step record, layer, head): a long chunk
// has many rows.
struct LayerHead {
    int64_t layer = -1, head = -1;
    bool operator==(const LayerHead&) const = default;
};
struct EvictedCells {
    int64_t n_evicted = 0;
    std::vector<uint8_t> gone;                           // (P) 1 = evicted, or empty
    std::vector<std::pair<int64_t, int64_t>> rows;       // (P) first and last query row the rule lets see it
};
RecordCache<LayerHead, EvictedCells> evicted_cells;

}  // namespace

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
    // The shown layer's own rule: a sliding layer (Gemma 3, Mistral) narrows the session's window.
    const MaskRule rule = r->mask_rule(layer);
    const long long W = (long long)rule.window(), S = (long long)rule.sinks;
    const std::string whose = rule.own_window() ? " (the model's sliding window for this layer)"
                              : W > 0           ? " (the session's window)"
                                                : " (full attention)";
    const std::string seen = W > 0 ? "p+r-" + std::to_string(W) + "+1 .. p+r" : "<= p+r";
    std::string sinks;
    if (S > 0 && rule.own_window())
        sinks = ", plus the attention sinks 0.." + std::to_string(S - 1) + " where the session's window " +
                std::to_string(rule.cache_window) + " leaves them out";
    else if (S > 0)
        sinks = ", plus the attention sinks 0.." + std::to_string(S - 1) + " (the first S = " + std::to_string(S) +
                " positions stay visible)";
    dump_text("mask rule", wrapped_disabled("layer %lld rule: %s%s \u2014 the query at position p+r sees keys at positions %s%s",
                                            (long long)layer, rule.name().c_str(), whose.c_str(), seen.c_str(),
                                            sinks.c_str()));
    if (r->id.window > 0 && r->id.sinks > 0 && r->id.sink_positions == SinkPositions::Cache)
        wrapped_disabled("sink positions: cache (StreamingLLM) \u2014 scores treat the sinks as sitting right before the "
                         "window; for the last query, %lld positions later than their text positions",
                         (long long)r->visible_keys(r->last_position()).sink_shift);
    const int64_t n_visible = visible_cells(*r, layer, m.first_query, m.n_query, m.first_key, m.n_key);
    // Keys the eviction policy or an edit took from the selected head's K/V head: the rule lets the query see
    // them, the cache gives them weight 0. The map below draws the rule; those cells are veiled red.
    const int64_t head = std::clamp<int64_t>(c.prefs.head, 0, std::max<int64_t>(1, r->rows.n_head) - 1);
    const EvictedCells& ev = evicted_cells.get(s.trace().share(step), {layer, head}, [&](EvictedCells& e) {
        e.n_evicted = 0;
        e.gone = evicted_before(s.trace(), step, layer, head, m.first_key, m.n_key);
        e.rows.assign(e.gone.size(), {-1, -2});
        for (int64_t i = 0; i < m.n_query && !e.gone.empty(); ++i) {
            const KeyRange k = r->visible_keys(m.first_query + i, layer);
            for (int64_t j = 0; j < int64_t(e.gone.size()); ++j)
                if (e.gone[size_t(j)] && k.contains(m.first_key + j)) {
                    ++e.n_evicted;
                    auto& g = e.rows[size_t(j)];
                    g = {g.first < 0 ? i : g.first, i};
                }
        }
    });
    const std::vector<uint8_t>& gone = ev.gone;
    const auto& gone_rows = ev.rows;
    const int64_t n_evicted = ev.n_evicted;
    if (n_evicted > 0)
        dump_text("mask count", wrapped_disabled("%lld of %lld cells: %lld visible, %lld evicted (head %lld's K/V head): green = "
                                                 "visible, red = evicted, striped = masked",
                                                 (long long)n_visible, (long long)(m.n_query * m.n_key),
                                                 (long long)(n_visible - n_evicted), (long long)n_evicted, (long long)head));
    else
        dump_text("mask count", wrapped_disabled("%lld of %lld cells visible: green = visible, striped = masked",
                                                 (long long)n_visible, (long long)(m.n_query * m.n_key)));
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
    int64_t px_rows = 0, px_cols = 0;
    heatmap_pixels(size, px_rows, px_cols);
    const MapWindow w = MapWindow::whole(m.n_query, m.n_key, px_rows, px_cols);
    const MapTile* tile = c.maps.mask_tile(s.trace(), step, layer, w);
    HeatmapResult h = heatmap("mask", {HeatmapLayer{tile ? tile->tex : 0, w}}, m.n_query, m.n_key, size, st);
    dump_item("mask map");
    for (size_t j = 0; j < gone_rows.size(); ++j)  // evicted keys: a red veil over the cells the rule lets through
        if (gone_rows[j].first >= 0) {
            const ImVec2 a = h.cell_min(gone_rows[j].first, int64_t(j)), b = h.cell_max(gone_rows[j].second, int64_t(j));
            ImGui::GetWindowDrawList()->AddRectFilled(a, {std::max(b.x, a.x + 1), b.y}, IM_COL32(200, 50, 45, 200));
        }
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
        const bool evicted = vis && size_t(h.hover_col) < gone.size() && gone[size_t(h.hover_col)];
        ImGui::SetTooltip("query pos %lld, key pos %lld: %s", (long long)qp, (long long)kp,
                          !vis          ? (kp > qp ? "masked (future)" : "masked (evicted: outside the window)")
                          : evicted     ? ("evicted from head " + std::to_string(head) + "'s K/V head: weight 0").c_str()
                          : kp < k.n_sink ? "visible (attention sink)"
                                          : "visible");
    }
    end_panel();
}

constexpr int64_t kMaxFigureCells = int64_t(2048) * 2048;  // a bigger mask is refused (67M cells of 8192 tokens)

Figure mask_figure(const Snapshot& s, const ViewPrefs& v) {
    using namespace fig;
    const Shown w = shown_step(s, v);
    const MapExtent x = map_extent(s.trace(), w.step, AttentionKind::Self);
    if (x.n_query * x.n_key > kMaxFigureCells)
        throw UsageError("the mask has " + std::to_string(x.n_query * x.n_key) + " cells, more than a figure holds (" +
                         std::to_string(kMaxFigureCells) + "): save the attention map through Export instead");
    const Model& model = s.model();
    const std::vector<TokenId> tokens = tokens_of(s);
    Figure f;
    f.name = base_name("mask", w, false);
    FigureMap m;
    m.values.assign(size_t(x.n_query * x.n_key), 1.0f);
    m.visible.assign(m.values.size(), 0);
    for (int64_t i = 0; i < x.n_query; ++i) {
        const KeyRange seen = w.r->visible_keys(x.first_query + i, w.layer);
        for (int64_t j = 0; j < x.n_key; ++j) m.visible[size_t(i * x.n_key + j)] = seen.contains(x.first_key + j) ? 1 : 0;
    }
    // Keys an eviction policy or an edit took from the shown head's K/V head: the rule lets the query see
    // them, the cache gives them weight 0, as the panel veils them red. They are 0 on the bar, visible 1.
    const std::vector<uint8_t> gone = evicted_before(s.trace(), w.step, w.layer, w.head, x.first_key, x.n_key);
    int64_t n_gone = 0;
    for (int64_t i = 0; i < x.n_query && !gone.empty(); ++i)
        for (int64_t j = 0; j < x.n_key; ++j)
            if (gone[size_t(j)] && m.visible[size_t(i * x.n_key + j)]) m.values[size_t(i * x.n_key + j)] = 0.0f, ++n_gone;
    HeatmapPlot& p = m.plot;
    p.title = where(s, w, false) + ": attention mask (visible cells; masked hatched)";
    p.value_label = "visible";
    if (n_gone > 0) {
        f.name = base_name("mask", w);
        p.title = where(s, w) + ": attention mask (1 = visible, 0 = evicted from this head's K/V; masked hatched)";
        p.value_label = "visible (0 = evicted)";
    }
    p.rows = x.n_query, p.cols = x.n_key;
    p.lo = 0, p.hi = 1;
    p.row_positions = iota(x.n_query, x.first_query);
    p.col_positions = iota(x.n_key, x.first_key);
    for (int64_t q : p.row_positions) p.row_labels.push_back(token_label(model, tokens, q));
    for (int64_t k : p.col_positions) p.col_labels.push_back(token_label(model, tokens, k));
    f.maps.push_back(std::move(m));
    return f;
}

}  // namespace kvscope::gui
