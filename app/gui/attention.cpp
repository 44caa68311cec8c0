// Attention: for the viewed step, scaled scores or softmax weights of one head (large, zoomable) or of
// every head of a layer (small multiples). Rows = this step's queries, columns = keys in the cache;
// masked cells are striped. Hover shows the query and key tokens with score and weight; a click selects
// that query row and key column in every panel.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "panels.h"

namespace kvscope::gui {
namespace {

// Largest |score| over the visible cells of the maps (one head, or every head of the layer).
float score_absmax(const std::vector<const AttentionMap*>& maps) {
    float mx = 0;
    for (const AttentionMap* m : maps)
        for (size_t i = 0; i < m->scores.size(); ++i)
            if (m->visible[i]) mx = std::max(mx, std::fabs(m->scores[i]));
    return mx;
}

// Scores use a symmetric range: |max| of the shown head, or shared by every head in the small multiples
// (so colours compare across heads); weights are probabilities, always 0..1.
HeatmapStyle style_for(const ViewPrefs& v, float score_abs) {
    HeatmapStyle st;
    if (v.show_scores) {
        st.colormap = Colormap::Diverging;
        float mx = v.row_norm ? 1.0f : score_abs;
        st.lo = -std::max(mx, 1e-6f);
        st.hi = std::max(mx, 1e-6f);
        st.scale = v.log_scale ? Scale::SymLog : Scale::Linear;
    } else {
        st.colormap = Colormap::Viridis;
        st.lo = v.log_scale ? 1e-4f : 0.0f;
        st.hi = 1.0f;
        st.scale = v.log_scale ? Scale::Log : Scale::Linear;
    }
    return st;
}

void cell_tooltip(const Model& model, const std::vector<TokenId>& tokens, const AttentionMap& m, int64_t row, int64_t col) {
    const size_t i = size_t(row * m.n_key + col);
    const int64_t qp = m.query_positions[size_t(row)], kp = m.key_positions[size_t(col)];
    auto tok = [&](int64_t p) { return p < int64_t(tokens.size()) ? token_text(model, tokens[size_t(p)]) : std::string("?"); };
    ImGui::BeginTooltip();
    ImGui::Text("layer %lld head %lld", (long long)m.layer, (long long)m.head);
    ImGui::Text("query  pos %lld  '%s'", (long long)qp, tok(qp).c_str());
    ImGui::Text("key    pos %lld  '%s'", (long long)kp, tok(kp).c_str());
    ImGui::Text("score  %.5f", double(m.scores[i]));
    if (m.visible[i]) ImGui::Text("weight %.5f", double(m.weights[i]));
    else ImGui::TextColored({1, 0.6f, 0.4f, 1}, "masked: %s", kp > qp ? "a future position" : "outside the window");
    ImGui::EndTooltip();
}

}  // namespace

void draw_attention(PanelContext& c) {
    place_panel(Panel::Attention, c.display);
    if (!ImGui::Begin("Attention")) {
        ImGui::End();
        return;
    }
    dump_window("Attention");
    const Snapshot& s = c.snap;
    const Model& model = c.snap.model();
    ViewPrefs& v = c.prefs;
    const ModelConfig& cfg = model.config();
    v.layer = std::clamp<int64_t>(v.layer, 0, cfg.n_layer - 1);
    v.head = std::clamp<int64_t>(v.head, 0, cfg.n_head - 1);

    stepper("layer", v.layer, 0, cfg.n_layer - 1);
    ImGui::SameLine(0, 16);
    stepper("head", v.head, 0, cfg.n_head - 1);
    ImGui::SameLine(0, 16);
    ImGui::Checkbox("all heads", &v.all_heads);
    dump_item("all heads");
    if (ImGui::RadioButton("weights", !v.show_scores)) v.show_scores = false;
    ImGui::SameLine();
    if (ImGui::RadioButton("scores", v.show_scores)) v.show_scores = true;
    ImGui::SameLine();
    ImGui::Checkbox("log", &v.log_scale);
    ImGui::SameLine();
    ImGui::Checkbox("row-normalise", &v.row_norm);
    ImGui::SameLine();
    if (ImGui::SmallButton("reset zoom")) {
        v.zoom = 1;
        v.center = {0.5f, 0.5f};
    }

    size_t step = 0;
    const StepRecord* r = viewed_step(s, v, &step);
    if (!r) {
        ImGui::TextDisabled("Run a step to see attention.");
        ImGui::End();
        return;
    }
    if (!r->recorded()) {
        ImGui::TextDisabled("This step was not recorded.");
        ImGui::End();
        return;
    }
    std::vector<TokenId> tokens = s.prompt();
    tokens.insert(tokens.end(), s.generated().begin(), s.generated().end());

    // Every map this view needs; the maps are computed off the UI thread, so the first frames may wait.
    std::vector<const AttentionMap*> shown;
    int64_t n_ready = 0;
    for (int64_t hh = 0; hh < (v.all_heads ? cfg.n_head : 1); ++hh) {
        shown.push_back(c.maps.map(s.trace(), step, v.layer, v.all_heads ? hh : v.head));
        n_ready += shown.back() != nullptr;
    }
    if (n_ready < int64_t(shown.size())) {
        ImGui::Text("computing attention of step %zu, layer %lld: %lld / %zu head(s) ready...", step, (long long)v.layer,
                    (long long)n_ready, shown.size());
        if (!c.maps.error().empty()) ImGui::TextColored({1, 0.5f, 0.4f, 1}, "%s", c.maps.error().c_str());
        ImGui::End();
        return;
    }
    const AttentionMap& m0 = *shown[0];
    ImGui::TextDisabled("step %zu (%s): %lld queries (rows, positions %lld..%lld) x %lld keys (cols, %lld..%lld)", step,
                        phase_name(r->phase), (long long)m0.n_query, (long long)m0.query_positions.front(),
                        (long long)m0.query_positions.back(), (long long)m0.n_key, (long long)m0.key_positions.front(),
                        (long long)m0.key_positions.back());

    const HeatmapStyle st = style_for(v, v.show_scores && !v.row_norm ? score_absmax(shown) : 1.0f);
    char lo[32], hi[32];
    std::snprintf(lo, sizeof lo, v.show_scores ? "%.3g" : "%.0e", double(st.lo));
    std::snprintf(hi, sizeof hi, "%.3g", double(st.hi));
    if (!v.log_scale && !v.show_scores) std::snprintf(lo, sizeof lo, "0");
    colorbar(st, std::min(240.0f, ImGui::GetContentRegionAvail().x), lo, hi);
    ImGui::SameLine();
    ImGui::PushTextWrapPos(0);
    ImGui::TextDisabled("  %s%s%s; striped = masked", v.show_scores ? "q.k/sqrt(D)" : "softmax weight",
                        v.row_norm ? " / row max" : "",
                        v.show_scores && !v.row_norm ? (v.all_heads ? ", range shared by all heads" : ", symmetric range") : "");
    ImGui::PopTextWrapPos();

    const ImVec2 avail = ImGui::GetContentRegionAvail();
    if (!v.all_heads) {
        // Row labels (query tokens) on the left when rows are tall enough to read.
        const float label_w = ImGui::CalcTextSize("0000 wwwwwwww").x;
        ImVec2 size = heatmap_fit(m0.n_query, m0.n_key, {avail.x - label_w, avail.y - ImGui::GetTextLineHeightWithSpacing() - 6});
        const bool labels = size.y / float(m0.n_query) * v.zoom >= ImGui::GetTextLineHeight();
        const ImVec2 top = ImGui::GetCursorScreenPos();
        ImGui::SetCursorScreenPos({top.x + label_w, top.y});
        const unsigned tex = c.maps.texture(s.trace(), step, v.layer, v.head, v.show_scores, v.row_norm);
        HeatmapResult h = heatmap("map", tex, m0.n_query, m0.n_key, size, st, {&v.zoom, &v.center});
        ImDrawList* dl = ImGui::GetWindowDrawList();
        dl->PushClipRect({top.x, h.p0.y}, h.p1, true);
        if (labels)
            for (int64_t row = 0; row < m0.n_query; ++row) {
                const float y0 = h.cell_min(row, 0).y, y1 = h.cell_max(row, 0).y;
                if (y1 < h.p0.y || y0 > h.p1.y) continue;
                const int64_t qp = m0.query_positions[size_t(row)];
                char label[64];
                std::snprintf(label, sizeof label, "%lld %s", (long long)qp,
                              qp < int64_t(tokens.size()) ? short_token(model, tokens[size_t(qp)], 8).c_str() : "");
                dl->AddText({top.x, (y0 + y1) / 2 - ImGui::GetTextLineHeight() / 2}, IM_COL32(200, 200, 210, 255), label);
            }
        dl->PopClipRect();
        dl->PushClipRect(h.p0, h.p1, true);
        // Selection: the query's row and the key's column.
        for (int64_t row = 0; row < m0.n_query; ++row)
            if (m0.query_positions[size_t(row)] == v.sel_query)
                dl->AddRect({h.p0.x, h.cell_min(row, 0).y}, {h.p1.x, h.cell_max(row, 0).y}, IM_COL32(255, 110, 110, 255), 0, 0, 2);
        for (int64_t col = 0; col < m0.n_key; ++col)
            if (m0.key_positions[size_t(col)] == v.sel_key)
                dl->AddRect({h.cell_min(0, col).x, h.p0.y}, {h.cell_max(0, col).x, h.p1.y}, IM_COL32(90, 220, 255, 255), 0, 0, 2);
        dl->PopClipRect();
        if (h.hover_row >= 0) {
            cell_tooltip(model, tokens, m0, h.hover_row, h.hover_col);
            if (h.clicked) {
                v.sel_query = m0.query_positions[size_t(h.hover_row)];
                v.sel_key = m0.key_positions[size_t(h.hover_col)];
            }
        }
        ImGui::SetCursorScreenPos({top.x, h.p1.y + 4});
        ImGui::TextDisabled("wheel = zoom, drag = pan, double-click = reset, click = select");
    } else {
        // Small multiples: a grid of n_head maps, as square as the panel allows.
        const int64_t H = cfg.n_head;
        int64_t best_cols = 1;
        float best_cell = 0;
        const float label_h = ImGui::GetTextLineHeight();
        for (int64_t cols = 1; cols <= H; ++cols) {
            const int64_t rows = (H + cols - 1) / cols;
            const ImVec2 cell_avail = {avail.x / float(cols) - 8, avail.y / float(rows) - label_h - 8};
            const ImVec2 sz = heatmap_fit(m0.n_query, m0.n_key, cell_avail, 1.0f);
            if (sz.x * sz.y > best_cell) {
                best_cell = sz.x * sz.y;
                best_cols = cols;
            }
        }
        const int64_t grid_rows = (H + best_cols - 1) / best_cols;
        const ImVec2 cell_avail = {avail.x / float(best_cols) - 8, avail.y / float(grid_rows) - label_h - 8};
        const ImVec2 sz = heatmap_fit(m0.n_query, m0.n_key, cell_avail, 1.0f);
        const ImVec2 origin = ImGui::GetCursorScreenPos();
        for (int64_t hh = 0; hh < H; ++hh) {
            const float x = origin.x + float(hh % best_cols) * (cell_avail.x + 8);
            const float y = origin.y + float(hh / best_cols) * (cell_avail.y + label_h + 8);
            ImGui::SetCursorScreenPos({x, y});
            ImGui::Text("h%lld", (long long)hh);
            ImGui::SetCursorScreenPos({x, y + label_h + 2});
            const unsigned tex = c.maps.texture(s.trace(), step, v.layer, hh, v.show_scores, v.row_norm);
            ImGui::PushID(int(hh));
            HeatmapResult h = heatmap("small", tex, m0.n_query, m0.n_key, sz, st);
            ImGui::PopID();
            if (hh == v.head)
                ImGui::GetWindowDrawList()->AddRect({h.p0.x - 3, h.p0.y - 3}, {h.p1.x + 3, h.p1.y + 3}, IM_COL32(250, 200, 60, 255), 0, 0, 2);
            if (h.hover_row >= 0) {
                cell_tooltip(model, tokens, *shown[size_t(hh)], h.hover_row, h.hover_col);
                if (h.clicked) {
                    v.head = hh;
                    v.sel_query = m0.query_positions[size_t(h.hover_row)];
                    v.sel_key = m0.key_positions[size_t(h.hover_col)];
                }
            }
        }
        ImGui::SetCursorScreenPos({origin.x, origin.y + float(grid_rows) * (cell_avail.y + label_h + 8)});
    }
    ImGui::End();
}

}  // namespace kvscope::gui
