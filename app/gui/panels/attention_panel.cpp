// Attention: for the viewed step, scaled scores or softmax weights of one head (large, zoomable) or of
// every head of a layer (small multiples). Rows = this step's queries, columns = keys in the cache;
// masked cells are striped. Hover shows the query and key tokens with score and weight; a click selects
// that query row and key column in every panel. Encoder-decoder models choose between the decoder's
// self-attention, its cross-attention (decoder queries x source tokens, read from the fixed cross cache)
// and the encoder's own attention (source x source, unmasked), labelled with source tokens.
#include "panels/attention_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/errors.h"

namespace kvscope::gui {
namespace {

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

// Tokens at the positions of a map's rows and columns: decoder tokens for self-attention, the source for
// the encoder, one of each for cross-attention.
struct AxisTokens {
    const std::vector<TokenId>* rows;
    const std::vector<TokenId>* cols;
};

std::string token_at(const Model& model, const std::vector<TokenId>& tokens, int64_t p, size_t max_chars = 0) {
    if (p < 0 || p >= int64_t(tokens.size())) return "?";
    return max_chars ? short_token(model, tokens[size_t(p)], max_chars) : token_text(model, tokens[size_t(p)]);
}

// The hovered cell, exact (one recomputed row); where the map is drawn pooled, also the block the pixel
// under the mouse stands for and its strongest value, the colour shown.
void cell_tooltip(const Model& model, AxisTokens t, AttentionKind kind, const MapExtent& x, int64_t layer, int64_t head,
                  int64_t row, int64_t col, const MapCell* cell, const PooledMap* pooled) {
    const int64_t qp = x.first_query + row, kp = x.first_key + col;
    ImGui::BeginTooltip();
    // Encoder and decoder are named only where a model has both.
    const bool ed = model.config().encoder_decoder;
    const char* layer_kind = !ed ? "" : kind == AttentionKind::Encoder ? "encoder " : "decoder ";
    const char* query_kind = !ed ? "" : kind == AttentionKind::Encoder ? "source " : "decoder ";
    const char* key_kind = !ed ? "" : kind == AttentionKind::Self ? "decoder " : "source ";
    ImGui::Text("%slayer %lld head %lld", layer_kind, (long long)layer, (long long)head);
    dump_text("attention tooltip", std::string(layer_kind) + "layer " + std::to_string(layer) + " head " + std::to_string(head));
    // Each line as drawn is also in --layout-dump's texts ("attention query", ...), for the real-input tests.
    const std::string query = std::string("query  ") + query_kind + "position " + std::to_string(qp) + "  '" + token_at(model, *t.rows, qp) + "'";
    const std::string key = std::string("key    ") + key_kind + "position " + std::to_string(kp) + "  '" + token_at(model, *t.cols, kp) + "'";
    ImGui::TextUnformatted(query.c_str());
    dump_text("attention query", query);
    ImGui::TextUnformatted(key.c_str());
    dump_text("attention key", key);
    char line[256];
    if (kind == AttentionKind::Cross) ImGui::TextDisabled("key and value from the cross-attention cache (fixed)");
    if (!cell) ImGui::TextDisabled("computing the cell...");
    else {
        ImGui::Text("score  %.5f", double(cell->score));
        // Six significant digits: a long context's weights are near 1/n (0.000122 at 8,192 keys).
        if (cell->visible) {
            std::snprintf(line, sizeof line, "weight %.6g", double(cell->weight));
            ImGui::TextUnformatted(line);
        } else {
            std::snprintf(line, sizeof line, "masked: %s", kp > qp ? "a future position" : "outside the window");
            ImGui::TextColored({1, 0.6f, 0.4f, 1}, "%s", line);
        }
        dump_text("attention weight", line);
    }
    if (pooled && !pooled->window.exact()) {
        const MapWindow& w = pooled->window;
        const int64_t tr = (row - w.row0) / w.block_rows, tc = (col - w.col0) / w.block_cols;
        const int64_t r0 = w.row0 + tr * w.block_rows, c0 = w.col0 + tc * w.block_cols;
        const int64_t r1 = std::min(r0 + w.block_rows, w.row0 + w.n_rows), c1 = std::min(c0 + w.block_cols, w.col0 + w.n_cols);
        const size_t i = size_t(tr * w.out_cols() + tc);
        ImGui::Separator();
        if (pooled->visible[i])
            std::snprintf(line, sizeof line,
                          "this pixel: the strongest of %lld x %lld cells (queries %lld..%lld, keys %lld..%lld) = %.6g\n"
                          "zoom in (wheel) until cells are exact",
                          (long long)(r1 - r0), (long long)(c1 - c0), (long long)(x.first_query + r0),
                          (long long)(x.first_query + r1 - 1), (long long)(x.first_key + c0),
                          (long long)(x.first_key + c1 - 1), double(pooled->values[i]));
        else std::snprintf(line, sizeof line, "this pixel: %lld x %lld cells, all masked", (long long)(r1 - r0), (long long)(c1 - c0));
        ImGui::TextDisabled("%s", line);
        dump_text("attention pixel", line);
    }
    ImGui::EndTooltip();
}

// Key-axis labels under a map (cross and encoder maps: the source tokens), staggered over two lines
// when a column is too narrow for one label.
float key_labels(const Model& model, const std::vector<TokenId>& tokens, const MapExtent& m, const HeatmapResult& h,
                 int64_t selected) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float line = ImGui::GetTextLineHeight();
    const float col_w = m.n_key > 0 ? h.cell_max(0, 0).x - h.cell_min(0, 0).x : 0;
    const bool stagger = col_w < ImGui::CalcTextSize("wwwwww").x;
    if (col_w < ImGui::CalcTextSize("ww").x / 2) return 0;  // too narrow even staggered: hover says which token
    dl->PushClipRect({h.p0.x - 40, h.p1.y}, {h.p1.x + 40, h.p1.y + 2 * line + 6}, true);
    for (int64_t col = 0; col < m.n_key; ++col) {
        const float x0 = h.cell_min(0, col).x, x1 = h.cell_max(0, col).x;
        if (x1 < h.p0.x || x0 > h.p1.x) continue;
        const int64_t kp = m.first_key + col;
        const std::string text = token_at(model, tokens, kp, stagger ? 6 : 10);
        const float y = h.p1.y + 2 + (stagger && col % 2 ? line : 0);
        const float w = ImGui::CalcTextSize(text.c_str()).x;
        dl->AddText({(x0 + x1) / 2 - w / 2, y}, kp == selected ? IM_COL32(90, 220, 255, 255) : IM_COL32(215, 190, 240, 255),
                    text.c_str());
    }
    dl->PopClipRect();
    return (stagger ? 2 : 1) * line + 4;
}

// "position 7" or "positions 3..9".
std::string positions(int64_t first, int64_t n) {
    if (n == 1) return "position " + std::to_string(first);
    return "positions " + std::to_string(first) + ".." + std::to_string(first + n - 1);
}

// The cells r0..r1-1 x c0..c1-1 a heatmap of (rows, cols) shows at zoom state z.
void view_cells(const HeatmapZoom& z, int64_t rows, int64_t cols, int64_t& r0, int64_t& r1, int64_t& c0, int64_t& c1) {
    ImVec2 uv0, uv1;
    heatmap_view(z, uv0, uv1);
    r0 = std::clamp<int64_t>(int64_t(std::floor(double(uv0.y) * double(rows))), 0, rows);
    r1 = std::clamp<int64_t>(int64_t(std::ceil(double(uv1.y) * double(rows))), r0, rows);
    c0 = std::clamp<int64_t>(int64_t(std::floor(double(uv0.x) * double(cols))), 0, cols);
    c1 = std::clamp<int64_t>(int64_t(std::ceil(double(uv1.x) * double(cols))), c0, cols);
}

// Averaging would let a single strong key vanish into its block; the maximum keeps it (map_overview.h).
std::string overview_note(const MapExtent& m, const MapWindow& whole) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "%lld x %lld cells: each pixel the strongest of its %lld x %lld block (zoom in for exact cells)",
                  (long long)m.n_query, (long long)m.n_key, (long long)whole.block_rows, (long long)whole.block_cols);
    return text;
}

HeatmapLayer layer_of(const MapTile* t) { return t ? HeatmapLayer{t->tex, t->window()} : HeatmapLayer{}; }

// What one frame of the panel draws from: the viewed step, the kind of attention and the map's shape.
struct AttentionFrame {
    PanelContext& c;
    const Snapshot& s;
    const Model& model;
    ViewPrefs& v;
    const ModelConfig& cfg;
    AttentionKind kind;
    const StepRecord* r;
    size_t step;
    std::vector<TokenId> tokens;         // prompt then generated
    const std::vector<TokenId>& source;  // the encoder's input; empty for decoder-only models
    AxisTokens axis;
    MapExtent m0;

    // The selection, as a click sets it: the query's row and the key's column (decoder or source positions).
    void select(int64_t row, int64_t col) {
        const int64_t qp = m0.first_query + row, kp = m0.first_key + col;
        if (kind == AttentionKind::Self) v.sel_query = qp, v.sel_key = kp;
        if (kind == AttentionKind::Cross) v.sel_query = qp, v.sel_source = kp;
        if (kind == AttentionKind::Encoder) v.sel_source = kp;
    }
    void hover(const HeatmapResult& h, int64_t head, const std::vector<const MapTile*>& layers) {
        MapCell cell;
        const bool exact = c.maps.cell(s.trace(), step, v.layer, head, kind, h.hover_row, h.hover_col, cell);
        const PooledMap* under = nullptr;  // the finest tile drawn under the mouse
        for (const MapTile* t : layers)
            if (t && t->window().covers(h.hover_row, h.hover_row + 1, h.hover_col, h.hover_col + 1)) under = t->pooled.get();
        cell_tooltip(model, axis, kind, m0, v.layer, head, h.hover_row, h.hover_col, exact ? &cell : nullptr, under);
    }
};

// The kind of attention (encoder-decoder models), layer, head and value toggles; returns the kind this
// frame draws (a radio button pressed now counts from the next frame).
AttentionKind attention_controls(ViewPrefs& v, const ModelConfig& cfg) {
    const bool ed = cfg.encoder_decoder;
    if (!ed) v.attention = AttentionKind::Self;
    const AttentionKind kind = v.attention;
    if (ed) {
        ImGui::AlignTextToFramePadding();
        ImGui::TextUnformatted("attention");
        const std::pair<AttentionKind, const char*> kinds[] = {
            {AttentionKind::Self, "self"}, {AttentionKind::Cross, "cross"}, {AttentionKind::Encoder, "encoder"}};
        for (const auto& [k, label] : kinds) {
            ImGui::SameLine();
            if (ImGui::RadioButton(label, v.attention == k)) v.attention = k;
            dump_item((std::string("attention ") + attention_kind_name(k)).c_str());
        }
        help_marker("self: the decoder's masked self-attention over its own KV cache (grows each step).\n"
                    "cross: each decoder query against every source token, keys and values from the cross-attention "
                    "cache the encoder filled once; no mask.\n"
                    "encoder: the encoder's own self-attention over the source (no mask), computed when the encoder ran.");
    }
    // The encoder has its own layer count; the other panels clamp the shared layer to the decoder's.
    const int64_t n_layers = kind == AttentionKind::Encoder ? cfg.n_encoder_layer : cfg.n_layer;
    v.layer = std::clamp<int64_t>(v.layer, 0, n_layers - 1);
    v.head = std::clamp<int64_t>(v.head, 0, cfg.n_head - 1);

    stepper("layer", v.layer, 0, n_layers - 1);
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
    dump_item("log scale");
    ImGui::SameLine();
    ImGui::Checkbox("row-normalise", &v.row_norm);
    ImGui::SameLine();
    if (ImGui::SmallButton("reset zoom")) {
        v.zoom = 1;
        v.center = {0.5f, 0.5f};
    }

    return kind;
}

// The line above the map: which step, how many queries and keys, where they come from.
void attention_header(const AttentionFrame& f) {
    const Snapshot& s = f.s;
    const StepRecord* r = f.r;
    const size_t step = f.step;
    const AttentionKind kind = f.kind;
    const MapExtent& m0 = f.m0;
    const ViewPrefs& v = f.v;
    if (kind == AttentionKind::Self)
        dump_text("attention header", wrapped_disabled("step %zu (%s): %s (rows, %s) x %s (cols, %s)", step, phase_name(r->id.phase),
                         count_of(m0.n_query, "query", "queries").c_str(), positions(m0.first_query, m0.n_query).c_str(),
                         count_of(m0.n_key, "key").c_str(), positions(m0.first_key, m0.n_key).c_str()));
    else if (kind == AttentionKind::Cross)
        wrapped_disabled("step %zu (%s): cross-attention, %s (rows, %s) x %s (cols); keys and values from the fixed "
                         "cross-attention cache, no mask",
                         step, phase_name(r->id.phase), count_of(m0.n_query, "decoder query", "decoder queries").c_str(),
                         positions(m0.first_query, m0.n_query).c_str(), count_of(m0.n_key, "source token").c_str());
    else {
        const int64_t ran = encoder_step(s.trace(), r->rows.encoder.get());
        wrapped_disabled("encoder layer %lld: %s x %s, no mask; computed once at step %lld%s", (long long)v.layer,
                         count_of(m0.n_query, "source query", "source queries").c_str(),
                         count_of(m0.n_key, "source key").c_str(), (long long)ran,
                            r->rows.ran_encoder ? " (this step)" : ", read since through the cross-attention cache");
    }

}

// Where the maps go, and the colour bar's legend above them.
struct MapLayout {
    std::string legend;
    float bar_w = 0, label_w = 0, key_label_h = 0, head_label_h = 0;
    int64_t H = 0, G = 1, grid_cols = 1, grid_rows = 1;
    ImVec2 size, cell_avail;  // one map's size; a grid cell's room (all heads)
};

MapLayout map_layout(const AttentionFrame& f) {
    const ViewPrefs& v = f.v;
    const ModelConfig& cfg = f.cfg;
    const AttentionKind kind = f.kind;
    const MapExtent& m0 = f.m0;
    MapLayout out;
    // Where the maps go: one large map (row labels on the left; cross and encoder maps label their columns
    // under it), or a grid of n_head small ones, as square as the panel allows. Grouped-query models keep
    // the query heads of one K/V head side by side in a frame (rows hold whole groups). The colour bar
    // takes about two lines above them.
    ImVec2 avail = ImGui::GetContentRegionAvail();
    // The legend beside the bar may wrap on a narrow panel: the block takes its real height, so the hint
    // under the map is never cut off.
    const std::string legend = std::string("  ") + (v.show_scores ? "q.k/sqrt(D)" : "softmax weight") +
                               (v.row_norm ? " / row max" : "") +
                               (v.show_scores && !v.row_norm ? (v.all_heads ? ", range shared by all heads" : ", symmetric range") : "") +
                               (kind == AttentionKind::Self ? "; striped = masked" : "; nothing is masked");
    const float bar_w = std::min(240.0f, std::round(avail.x * 0.35f));
    const float legend_h = ImGui::CalcTextSize(legend.c_str(), nullptr, false,
                                               avail.x - bar_w - ImGui::GetStyle().ItemSpacing.x).y;
    avail.y -= std::max(2 * ImGui::GetTextLineHeightWithSpacing(), legend_h + ImGui::GetStyle().ItemSpacing.y);
    // A map with more cells than pixels also gets the overview note (pooled blocks) under the colour bar.
    const float note_h = m0.n_query * m0.n_key > int64_t(avail.x * avail.y)
                             ? ImGui::CalcTextSize(overview_note(m0, MapWindow::whole(m0.n_query, m0.n_key, 999, 999)).c_str(),
                                                   nullptr, false, avail.x).y + ImGui::GetStyle().ItemSpacing.y
                             : 0.0f;
    avail.y -= note_h;
    const float label_w = ImGui::CalcTextSize("0000 wwwwwwww").x;
    const float key_label_h = kind == AttentionKind::Self ? 0 : 2 * ImGui::GetTextLineHeight() + 6;
    const int64_t H = cfg.n_head;
    const int64_t G = kind == AttentionKind::Self ? H / cfg.kv_heads() : 1;
    const float head_label_h = ImGui::GetTextLineHeight();
    int64_t grid_cols = 1, grid_rows = 1;
    ImVec2 size, cell_avail;
    if (!v.all_heads) {
        size = heatmap_fit(m0.n_query, m0.n_key,
                           {avail.x - label_w, avail.y - ImGui::GetTextLineHeightWithSpacing() - 6 - key_label_h});
    } else {
        float best_cell = 0;
        grid_cols = G;
        for (int64_t cols = G; cols <= H; cols += G) {
            const int64_t rows = (H + cols - 1) / cols;
            const ImVec2 ca = {avail.x / float(cols) - 8, avail.y / float(rows) - head_label_h - 8};
            const ImVec2 sz = heatmap_fit(m0.n_query, m0.n_key, ca, 1.0f);
            if (sz.x * sz.y > best_cell) {
                best_cell = sz.x * sz.y;
                grid_cols = cols;
            }
        }
        grid_rows = (H + grid_cols - 1) / grid_cols;
        cell_avail = {avail.x / float(grid_cols) - 8, avail.y / float(grid_rows) - head_label_h - 8};
        size = heatmap_fit(m0.n_query, m0.n_key, cell_avail, 1.0f);
    }

    out.legend = legend;
    out.bar_w = bar_w, out.label_w = label_w, out.key_label_h = key_label_h, out.head_label_h = head_label_h;
    out.H = H, out.G = G, out.grid_cols = grid_cols, out.grid_rows = grid_rows;
    out.size = size, out.cell_avail = cell_avail;
    return out;
}

// One head's map: row labels, the selection, zoom into a finer tile, hover and click.
void one_map(AttentionFrame& f, const MapLayout& ml, const MapWindow& whole, const HeatmapStyle& st,
             const MapTile* base, std::vector<const PooledMap*>& json_tiles) {
    PanelContext& c = f.c;
    const Snapshot& s = f.s;
    const Model& model = f.model;
    ViewPrefs& v = f.v;
    const AttentionKind kind = f.kind;
    const size_t step = f.step;
    const MapExtent& m0 = f.m0;
    const AxisTokens& axis = f.axis;
    const std::vector<TokenId>& source = f.source;
    const ImVec2 size = ml.size;
    const float label_w = ml.label_w;
    // Zoomed in: a finer tile of the cells in view (exact once a cell is a pixel or more). Until it is
    // pooled the whole map stands in; a tile of the same blocks that still covers the view is reused.
    std::vector<const MapTile*> layers = {base};
    if (v.zoom > 1) {
        int64_t r0, r1, c0, c1;
        view_cells({&v.zoom, &v.center}, m0.n_query, m0.n_key, r0, r1, c0, c1);
        int64_t px_rows = 0, px_cols = 0;
        heatmap_pixels(size, px_rows, px_cols);
        const MapWindow want = MapWindow::detail(m0.n_query, m0.n_key, r0, r1, c0, c1, px_rows, px_cols);
        if (want.block_rows < whole.block_rows || want.block_cols < whole.block_cols) {
            const MapTile* fine = c.maps.covering(s.trace(), step, v.layer, v.head, kind, v.show_scores, v.row_norm,
                                                  want.block_rows, want.block_cols, r0, r1, c0, c1);
            if (!fine) fine = c.maps.tile(s.trace(), step, v.layer, v.head, kind, v.show_scores, v.row_norm, want);
            if (fine) {
                layers.push_back(fine);
                json_tiles.push_back(fine->pooled.get());
            }
        }
    }
    std::vector<HeatmapLayer> drawn;
    for (const MapTile* t : layers) drawn.push_back(layer_of(t));
    const bool labels = size.y / float(m0.n_query) * v.zoom >= ImGui::GetTextLineHeight();
    const ImVec2 top = ImGui::GetCursorScreenPos();
    ImGui::SetCursorScreenPos({top.x + label_w, top.y});
    HeatmapResult h = heatmap("map", drawn, m0.n_query, m0.n_key, size, st, {&v.zoom, &v.center});
    dump_item("attention map");
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->PushClipRect({top.x, h.p0.y}, h.p1, true);
    if (labels) {
        // Only the rows in view (a long prefill has thousands).
        const int64_t first = std::max<int64_t>(0, int64_t(h.uv0.y * float(m0.n_query)) - 1);
        const int64_t last = std::min<int64_t>(m0.n_query, int64_t(h.uv1.y * float(m0.n_query)) + 2);
        for (int64_t row = first; row < last; ++row) {
            const float y0 = h.cell_min(row, 0).y, y1 = h.cell_max(row, 0).y;
            const int64_t qp = m0.first_query + row;
            char label[64];
            std::snprintf(label, sizeof label, "%lld %s", (long long)qp, token_at(model, *axis.rows, qp, 8).c_str());
            dl->AddText({top.x, (y0 + y1) / 2 - ImGui::GetTextLineHeight() / 2}, IM_COL32(200, 200, 210, 255), label);
        }
    }
    dl->PopClipRect();
    dl->PushClipRect(h.p0, h.p1, true);
    // Selection: the query's row and the key's column (decoder positions, or source positions).
    const int64_t sel_row = (kind == AttentionKind::Encoder ? -1 : v.sel_query) - m0.first_query;
    const int64_t sel_col = (kind == AttentionKind::Self ? v.sel_key : v.sel_source) - m0.first_key;
    if (sel_row >= 0 && sel_row < m0.n_query)
        dl->AddRect({h.p0.x, h.cell_min(sel_row, 0).y}, {h.p1.x, h.cell_max(sel_row, 0).y}, IM_COL32(255, 110, 110, 255), 0, 0, 2);
    if (sel_col >= 0 && sel_col < m0.n_key)
        dl->AddRect({h.cell_min(0, sel_col).x, h.p0.y}, {h.cell_max(0, sel_col).x, h.p1.y}, IM_COL32(90, 220, 255, 255), 0, 0, 2);
    dl->PopClipRect();
    const float below = kind == AttentionKind::Self ? 0 : key_labels(model, source, m0, h, v.sel_source);
    if (h.hover_row >= 0) {
        f.hover(h, v.head, layers);
        if (h.clicked) f.select(h.hover_row, h.hover_col);
    }
    ImGui::SetCursorScreenPos({top.x, h.p1.y + 4 + below});
    ImGui::TextDisabled("wheel = zoom, drag = pan, double-click = reset, click = select");
}

// Every head of the layer as small multiples, grouped by K/V head; a click selects the head and the cell.
void head_grid(AttentionFrame& f, const MapLayout& ml, const HeatmapStyle& st, const std::vector<const MapTile*>& shown) {
    ViewPrefs& v = f.v;
    const ModelConfig& cfg = f.cfg;
    const MapExtent& m0 = f.m0;
    const int64_t H = ml.H, G = ml.G, grid_cols = ml.grid_cols, grid_rows = ml.grid_rows;
    const ImVec2 size = ml.size, cell_avail = ml.cell_avail;
    const float head_label_h = ml.head_label_h;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImVec2 group_p0;
    for (int64_t hh = 0; hh < H; ++hh) {
        const float x = origin.x + float(hh % grid_cols) * (cell_avail.x + 8);
        const float y = origin.y + float(hh / grid_cols) * (cell_avail.y + head_label_h + 8);
        ImGui::SetCursorScreenPos({x, y});
        if (G > 1 && hh % G == 0) {
            group_p0 = {x - 3, y - 1};
            ImGui::TextColored(cfg.kv_head_of(v.head) == hh / G ? ImVec4{1, 0.8f, 0.3f, 1} : ImVec4{0.6f, 0.75f, 0.95f, 1},
                               "KV%lld", (long long)(hh / G));
            ImGui::SameLine();
        }
        ImGui::Text("h%lld", (long long)hh);
        ImGui::SetCursorScreenPos({x, y + head_label_h + 2});
        ImGui::PushID(int(hh));
        HeatmapResult h = heatmap("small", {layer_of(shown[size_t(hh)])}, m0.n_query, m0.n_key, size, st);
        ImGui::PopID();
        dump_box(("head map " + std::to_string(hh)).c_str(), h.p0.x, h.p0.y, h.p1.x, h.p1.y);
        if (hh == v.head)
            ImGui::GetWindowDrawList()->AddRect({h.p0.x - 3, h.p0.y - 3}, {h.p1.x + 3, h.p1.y + 3}, IM_COL32(250, 200, 60, 255), 0, 0, 2);
        if (G > 1 && hh % G == G - 1) {  // the group's frame: these heads read one K/V head
            const bool mine = cfg.kv_head_of(v.head) == hh / G;
            ImGui::GetWindowDrawList()->AddRect(group_p0, {h.p1.x + 4, h.p1.y + 4},
                                                mine ? IM_COL32(250, 200, 60, 200) : IM_COL32(90, 110, 150, 255), 4, 0, 1.5f);
            dump_box(("kv group " + std::to_string(hh / G)).c_str(), group_p0.x, group_p0.y, h.p1.x + 4, h.p1.y + 4);
        }
        if (h.hover_row >= 0) {
            f.hover(h, hh, {shown[size_t(hh)]});
            if (h.clicked) {
                v.head = hh;
                f.select(h.hover_row, h.hover_col);
            }
        }
    }
    ImGui::SetCursorScreenPos({origin.x, origin.y + float(grid_rows) * (cell_avail.y + head_label_h + 8)});
}

// Script `attention-json FILE`: the shown head's tiles as drawn, and every cell when the map is small.
void write_json(AttentionFrame& f, const std::vector<const PooledMap*>& json_tiles) {
    PanelContext& c = f.c;
    const Snapshot& s = f.s;
    ViewPrefs& v = f.v;
    const AttentionKind kind = f.kind;
    const size_t step = f.step;
    const MapExtent& m0 = f.m0;
    const AxisTokens& axis = f.axis;
    // Small maps also write every cell; the full map is computed for that (source-sized or short prompts).
    const AttentionMap* full = nullptr;
    const bool small = m0.n_query * m0.n_key <= (int64_t(1) << 20);
    if (small) full = c.maps.map(s.trace(), step, v.layer, v.all_heads ? v.head : v.head, kind);
    if (!small || full) {
        if (!write_attention_json(v.attention_json, attention_kind_name(kind), step, v.layer, v.head, m0.n_query,
                                  m0.n_key, m0.first_query, m0.first_key, full, json_tiles, *axis.rows, *axis.cols))
            std::fprintf(stderr, "error: cannot write %s\n", v.attention_json.c_str());
        v.attention_json.clear();
    }
}

}  // namespace

void draw_attention(PanelContext& c) {
    if (!begin_panel(Panel::Attention)) return;
    const Snapshot& s = c.snap;
    ViewPrefs& v = c.prefs;
    const ModelConfig& cfg = s.model().config();
    const AttentionKind kind = attention_controls(v, cfg);
    size_t step = 0;
    const StepRecord* r = viewed_step(s, v, &step);
    if (!r) {
        ImGui::TextDisabled("Run a step to see attention.");
        end_panel();
        return;
    }
    if (!r->recorded()) {
        ImGui::TextDisabled("This step was not recorded.");
        end_panel();
        return;
    }
    static const std::vector<TokenId> no_source;
    AttentionFrame f{c, s, s.model(), v, cfg, kind, r, step, s.prompt(), r->rows.encoder ? r->rows.encoder->source : no_source,
                     {}, {}};
    f.tokens.insert(f.tokens.end(), s.generated().begin(), s.generated().end());
    f.axis = {kind == AttentionKind::Encoder ? &f.source : &f.tokens, kind == AttentionKind::Self ? &f.tokens : &f.source};
    if (kind != AttentionKind::Self && !r->rows.encoder) {
        ImGui::TextDisabled("This step has no encoder output.");
        end_panel();
        return;
    }
    f.m0 = map_extent(s.trace(), step, kind);
    const MapExtent& m0 = f.m0;
    attention_header(f);
    const MapLayout ml = map_layout(f);
    const ImVec2 size = ml.size;
    const int64_t H = ml.H;

    // Every tile this view needs: each head's whole map pooled to the pixels it is drawn on; they are
    // pooled off the UI thread, so the first frames may wait.
    int64_t px_rows = 0, px_cols = 0;
    heatmap_pixels(size, px_rows, px_cols);
    const MapWindow whole = MapWindow::whole(m0.n_query, m0.n_key, px_rows, px_cols);
    std::vector<const MapTile*> shown;
    int64_t n_ready = 0;
    for (int64_t hh = 0; hh < (v.all_heads ? H : 1); ++hh) {
        shown.push_back(c.maps.tile(s.trace(), step, v.layer, v.all_heads ? hh : v.head, kind, v.show_scores, v.row_norm, whole));
        n_ready += shown.back() != nullptr;
    }
    if (n_ready < int64_t(shown.size())) {
        ImGui::Text("computing attention of step %zu, layer %lld: %lld of %zu ready...", step, (long long)v.layer,
                    (long long)n_ready, shown.size());
        if (m0.n_query * m0.n_key > whole.out_rows() * whole.out_cols())
            ImGui::TextDisabled("%lld x %lld cells, shown as %lld x %lld: each pixel the strongest cell of its block",
                                (long long)m0.n_query, (long long)m0.n_key, (long long)whole.out_rows(), (long long)whole.out_cols());
        if (!c.maps.error().empty()) ImGui::TextColored({1, 0.5f, 0.4f, 1}, "%s", c.maps.error().c_str());
        end_panel();
        return;
    }
    float score_abs = 0;  // the largest |visible score| of the shown heads (every cell counts in a whole tile)
    for (const MapTile* t : shown) score_abs = std::max(score_abs, t->pooled->absmax);
    const HeatmapStyle st = style_for(v, v.show_scores && !v.row_norm ? score_abs : 1.0f);
    char lo[32], hi[32];
    std::snprintf(lo, sizeof lo, v.show_scores ? "%.3g" : "%.0e", double(st.lo));
    std::snprintf(hi, sizeof hi, "%.3g", double(st.hi));
    if (!v.log_scale && !v.show_scores) std::snprintf(lo, sizeof lo, "0");
    colorbar(st, ml.bar_w, lo, hi);
    ImGui::SameLine();
    wrapped_disabled("%s", ml.legend.c_str());
    if (!whole.exact()) dump_text("attention overview", wrapped_disabled("%s", overview_note(m0, whole).c_str()));

    // What attention-json writes: the shown head's tiles as drawn (and every cell when the map is small).
    const int64_t json_head = v.all_heads ? v.head : 0;
    std::vector<const PooledMap*> json_tiles = {shown[size_t(json_head)]->pooled.get()};
    if (!v.all_heads) one_map(f, ml, whole, st, shown[0], json_tiles);
    else head_grid(f, ml, st, shown);
    if (!v.attention_json.empty()) write_json(f, json_tiles);
    end_panel();
}

}  // namespace kvscope::gui
