// K/V quantization: what storing this step's keys and values as int8, int4 (KIVI) or fp8 would cost, for
// the selected layer and head (core/analysis/kv_quant_error.h). The error of every reconstructed K and V cell,
// beside how the step's attention scores move when its queries read the reconstructed keys. It reads the
// recorded float32 rows, so it answers "what if" on an unquantized session; a quantized session already
// records reconstructions and says so instead.
#include "panels/kv_quant_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "analysis/kv_quant_error.h"
#include "base/errors.h"
#include "logic/record_cache.h"
#include "panels/figures.h"
#include "run/options.h"
#include "widgets/test_dumps.h"

namespace kvscope::gui {
namespace {

// The error view of (step record, layer, head, format) and its three textures (K error, V error, score
// change), kept by a RecordCache: made again only when one of them changes.
struct QuantKey {
    int64_t layer = -1, head = -1;
    KvQuant format = KvQuant::None;
    int64_t group = 0, residual = 0;
    bool operator==(const QuantKey&) const = default;
};
struct QuantView {
    KvQuantError error;
    std::string problem;  // why there is no view (int4 with a window, a group that does not divide D, ...)
    unsigned tex[3] = {0, 0, 0};
};
RecordCache<QuantKey, QuantView> quant_cache;

std::string spec_name(const KvQuantSpec& s) {
    if (s.format != KvQuant::Int4) return to_string(s.format);
    return "int4 G=" + std::to_string(s.group) + " R=" + std::to_string(s.residual);
}

// Bytes of K and V for one position of one K/V head, as a cache of that format stores them.
double bytes_per_position(const KvQuantSpec& s, int64_t D) {
    if (s.format == KvQuant::Int4)  // keys: G positions share a group; values per row
        return double(int4_key_group_bytes(D, s.group)) / double(s.group) + double(int4_value_row_bytes(D, s.group));
    return 2.0 * double(row_bytes(s.format, D));
}

void refresh(QuantView& q, const Trace& trace, size_t step, int64_t layer, int64_t head, const KvQuantSpec& spec) {
    q.problem.clear();
    q.error = {};
    try {
        q.error = kv_quant_error(spec, trace, step, layer, head, kQuantMaxQueries);
    } catch (const UsageError& e) {
        q.problem = render_labels(e.what());
        return;
    }
    const KvQuantError& e = q.error;
    const int64_t P = e.n_keys, T = e.n_queries, D = e.head_dim;
    q.tex[0] = Gl::upload(q.tex[0], P, D, e.key_error.data(), nullptr);
    q.tex[1] = Gl::upload(q.tex[1], P, D, e.value_error.data(), nullptr);
    std::vector<uint8_t> seen;  // (T, P) 1 where the query sees the key
    std::vector<float> change;
    score_change_cells(e, change, seen);
    q.tex[2] = Gl::upload(q.tex[2], T, P, change.data(), seen.data());
}

// A diverging map of (rows, cols) values in ±range with its title; returns the hovered cell.
HeatmapResult error_map(const char* title, const char* id, unsigned tex, int64_t rows, int64_t cols, float range, ImVec2 size) {
    ImGui::TextUnformatted(title);
    HeatmapStyle st;
    st.colormap = Colormap::Diverging;
    st.lo = -std::max(range, 1e-12f);
    st.hi = std::max(range, 1e-12f);
    const HeatmapResult h = heatmap(id, tex, rows, cols, size, st);
    dump_item(id);
    return h;
}

}  // namespace

void draw_kv_quant(PanelContext& c) {
    if (!begin_panel(Panel::Quant)) return;
    figure_button(c, Panel::Quant);
    const Snapshot& s = c.snap;
    ViewPrefs& v = c.prefs;
    size_t step = 0;
    const StepRecord* r = viewed_step(s, v, &step);

    // The format to try: int8 / int4 / fp8, and for int4 the group and the full-precision residual.
    KvQuantSpec& spec = v.quant_view;
    if (!spec.quantized()) spec.format = KvQuant::Int8;
    int format = spec.format == KvQuant::Int8 ? 0 : spec.format == KvQuant::Int4 ? 1 : 2;
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("format");
    for (int i = 0; i < 3; ++i) {
        ImGui::SameLine();
        if (ImGui::RadioButton(i == 0 ? "int8" : i == 1 ? "int4 (KIVI)" : "fp8 e4m3", &format, i))
            spec.format = i == 0 ? KvQuant::Int8 : i == 1 ? KvQuant::Int4 : KvQuant::Fp8;
        dump_item(i == 0 ? "quant int8" : i == 1 ? "quant int4" : "quant fp8");
    }
    dump_item("quant format");
    if (spec.format == KvQuant::Int4) {
        ImGui::AlignTextToFramePadding();
        ImGui::TextUnformatted("group");
        ImGui::SameLine();
        int g = int(spec.group), res = int(spec.residual);
        ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
        if (ImGui::InputInt("G ##group", &g, 0)) spec.group = std::max(1, g);
        ImGui::SameLine();
        ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
        if (ImGui::InputInt("R (float32 residual)", &res, 0)) spec.residual = std::max(0, res);
    }
    help_marker("int8 and fp8 store each key and value row with one float32 scale. int4 (KIVI) groups keys by G "
                "positions per channel and values by G channels per row; the latest R..R+G-1 positions stay float32. "
                "The panel quantizes the step's recorded float32 rows as the cache would and shows what changes; the "
                "session itself is not changed (choose the cache's format under Controls, Session options). With int4 "
                "a step reads its own new rows in float32 and packs them afterwards, so this is what later steps read.");

    if (!r || !r->recorded()) {
        ImGui::TextDisabled("%s", r ? "This step was run without recording." : "No step yet.");
        end_panel();
        return;
    }
    const KvQuantSpec& session_format = s.options().kv_quant;
    if (session_format.quantized()) {
        wrapped_text({0.95f, 0.70f, 0.25f, 1},
                     "This session's cache stores %s K/V: the recorded rows are already its reconstructions, so there "
                     "is nothing left to compare. Set the K/V format to f32 under Session options to see what %s "
                     "would change.", spec_name(session_format).c_str(), spec_name(spec).c_str());
        dump_item("quant session note");
        end_panel();
        return;
    }
    const int64_t layer = std::clamp<int64_t>(v.layer, 0, r->rows.n_layer - 1);
    const int64_t head = std::clamp<int64_t>(v.head, 0, r->rows.n_head - 1);
    const QuantView& cache = quant_cache.get(s.trace().share(step), {layer, head, spec.format, spec.group, spec.residual},
                                             [&](QuantView& q) { refresh(q, s.trace(), step, layer, head, spec); });
    if (!cache.problem.empty()) {
        wrapped_text({1, 0.5f, 0.4f, 1}, "%s", cache.problem.c_str());
        dump_text("quant problem", cache.problem);
        end_panel();
        return;
    }
    const KvQuantError& e = cache.error;
    const int64_t P = e.n_keys, T = e.n_queries, D = e.head_dim;
    const int64_t K = r->rows.n_kv_head > 0 ? r->rows.n_kv_head : r->rows.n_head;
    char head_name[64];
    if (K < r->rows.n_head)
        std::snprintf(head_name, sizeof head_name, "head %lld (K/V head %lld)", (long long)head,
                      (long long)(head / (r->rows.n_head / K)));
    else
        std::snprintf(head_name, sizeof head_name, "head %lld", (long long)head);
    const double f32 = 2.0 * double(D) * 4.0, packed = bytes_per_position(spec, D);
    dump_text("quant header",
              wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text],
                           "layer %lld %s, step %zu: %lld keys, %lld queries%s. %s stores K+V of a position "
                           "in %.1f bytes per head instead of %.0f (%.2fx smaller)",
                           (long long)layer, head_name, step, (long long)P, (long long)T,
                           r->cost.n_rows_computed > T ? " (the step's last ones)" : "", spec_name(spec).c_str(),
                           packed, f32, f32 / packed));
    char maxima[256];
    std::snprintf(maxima, sizeof maxima, "max |K error| %.4g  max |V error| %.4g  max |score change| %.4g  max |weight change| %.4g",
                  double(e.key_error_max), double(e.value_error_max), double(e.score_change_max),
                  double(e.weight_change_max));
    dump_text("quant maxima", wrapped_disabled("%s", maxima));
    char exact[256];  // the same to float precision, for the tests
    std::snprintf(exact, sizeof exact, "%.9g %.9g %.9g %.9g", double(e.key_error_max), double(e.value_error_max),
                  double(e.score_change_max), double(e.weight_change_max));
    dump_text("quant maxima exact", exact);

    // K error and V error (P x D) side by side, the score change (T x P) beside them: blue below, red above.
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float gap = 12, title_h = ImGui::GetTextLineHeight() + ImGui::GetStyle().ItemSpacing.y;
    const float kv_w = std::max(40.0f, (avail.x - 2 * gap) * 0.22f), score_w = std::max(60.0f, avail.x - 2 * (kv_w + gap));
    const float map_h = std::max(40.0f, avail.y - title_h - 4);
    const ImVec2 kv_size = heatmap_fit(P, D, {kv_w, map_h}, 1.0f), score_size = heatmap_fit(T, P, {score_w, map_h}, 1.0f);
    ImGui::BeginGroup();
    const HeatmapResult hk = error_map("K error", "quant K error", cache.tex[0], P, D, e.key_error_max, kv_size);
    ImGui::EndGroup();
    ImGui::SameLine(0, gap);
    ImGui::BeginGroup();
    const HeatmapResult hv = error_map("V error", "quant V error", cache.tex[1], P, D, e.value_error_max, kv_size);
    ImGui::EndGroup();
    ImGui::SameLine(0, gap);
    ImGui::BeginGroup();
    const HeatmapResult hs = error_map("score change (query x key)", "quant score change", cache.tex[2], T, P,
                                       e.score_change_max, score_size);
    ImGui::EndGroup();

    for (int which = 0; which < 2; ++which) {
        const HeatmapResult& h = which ? hv : hk;
        if (h.hover_row < 0 || h.hover_col < 0) continue;
        const size_t i = size_t(h.hover_row * D + h.hover_col);
        const float err = which ? e.value_error[i] : e.key_error[i];
        char tip[160];
        std::snprintf(tip, sizeof tip, "%s of position %lld, channel %lld\nreconstruction error %.6g",
                      which ? "value" : "key", (long long)e.key_positions[size_t(h.hover_row)], (long long)h.hover_col,
                      double(err));
        ImGui::SetTooltip("%s", tip);
        dump_text("quant tooltip", tip);
    }
    if (hs.hover_row >= 0 && hs.hover_col >= 0) {
        const size_t i = size_t(hs.hover_row * P + hs.hover_col);
        char tip[200];
        if (std::isnan(e.score_change[i]))
            std::snprintf(tip, sizeof tip, "query %lld does not see key %lld", (long long)e.query_positions[size_t(hs.hover_row)],
                          (long long)e.key_positions[size_t(hs.hover_col)]);
        else
            std::snprintf(tip, sizeof tip, "query %lld, key %lld\nscore change %.6g\nweight change %.6g",
                          (long long)e.query_positions[size_t(hs.hover_row)], (long long)e.key_positions[size_t(hs.hover_col)],
                          double(e.score_change[i]), double(e.weight_change[i]));
        ImGui::SetTooltip("%s", tip);
        dump_text("quant tooltip", tip);
    }
    end_panel();
}

Figure quant_figure(const Snapshot& s, const ViewPrefs& v) {
    using namespace fig;
    const Shown w = shown_step(s, v);
    KvQuantSpec spec = v.quant_view;
    if (!spec.quantized()) spec.format = KvQuant::Int8;  // as the panel shows it
    if (s.options().kv_quant.quantized())
        nothing("this session's cache already stores quantized K/V (the panel has nothing to compare)");
    const KvQuantError e = kv_quant_error(spec, s.trace(), w.step, w.layer, w.head, kQuantMaxQueries);
    const Model& model = s.model();
    const std::vector<TokenId> tokens = tokens_of(s);
    std::string fmt = to_string(spec.format);
    if (spec.format == KvQuant::Int4) fmt += " G=" + std::to_string(spec.group) + " R=" + std::to_string(spec.residual);
    Figure f;
    f.name = base_name("kv_quant", w);
    auto labels = [&](const std::vector<int64_t>& positions) {
        std::vector<std::string> out;
        for (int64_t p : positions) out.push_back(token_label(model, tokens, p));
        return out;
    };
    for (int which = 0; which < 2; ++which) {
        FigureMap m;
        m.part = which ? "V_error" : "K_error";
        m.values = which ? e.value_error : e.key_error;
        HeatmapPlot& p = m.plot;
        p.title = where(s, w) + ": " + fmt + " " + (which ? "V" : "K") + " error (dequantized - float32)";
        p.value_label = "error";
        p.rows = e.n_keys, p.cols = e.head_dim;
        signed_range(p, which ? e.value_error_max : e.key_error_max);
        p.row_positions = e.key_positions;
        p.row_labels = labels(e.key_positions);
        p.col_positions = iota(e.head_dim);
        p.x_label = "head dimension";
        p.y_label = "key position";
        f.maps.push_back(std::move(m));
    }
    FigureMap m;
    m.part = "score_change";
    score_change_cells(e, m.values, m.visible);
    HeatmapPlot& p = m.plot;
    p.title = where(s, w) + ": " + fmt + " score change (query x key)";
    p.value_label = "change";
    p.masked_label = "not seen";
    p.rows = e.n_queries, p.cols = e.n_keys;
    signed_range(p, e.score_change_max);
    p.row_positions = e.query_positions;
    p.row_labels = labels(e.query_positions);
    p.col_positions = e.key_positions;
    p.col_labels = labels(e.key_positions);
    f.maps.push_back(std::move(m));
    return f;
}

void score_change_cells(const KvQuantError& e, std::vector<float>& change, std::vector<uint8_t>& seen) {
    seen.resize(e.score_change.size());
    change.resize(e.score_change.size());
    for (size_t i = 0; i < seen.size(); ++i) {
        seen[i] = std::isnan(e.score_change[i]) ? 0 : 1;
        change[i] = seen[i] ? e.score_change[i] : 0.0f;
    }
}

}  // namespace kvscope::gui
