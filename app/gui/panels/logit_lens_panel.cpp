// Logit lens: what the model would predict at the selected query position if it stopped after each
// layer — the recorded residual stream through the final norm and the output layer at every depth
// (core/analysis/logit_lens.h). One row per depth, the five most likely tokens as cells shaded by probability;
// the token the full model predicts there is outlined wherever it appears, so one sees the layer where
// the answer surfaces.
#include "panels/logit_lens_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "analysis/logit_lens.h"
#include "logic/derived_views.h"
#include "panels/figures.h"
#include "report/plot_layout.h"
#include "widgets/test_dumps.h"

namespace kvscope::gui {
namespace {
LensCache lens_cache;  // logic/derived_views.h: by (step record, query position)

// What the "embeddings" row is, for this model, and what it names here. The row reads the residual stream
// entering layer 0 — the input token's embedding as the model feeds it in — through the same final norm and
// output layer as the last layer's output; nothing trains that reading to name any token, so whether it names
// the input token (often, with a tied output layer) is said from the numbers, not assumed. Returns the text drawn.
std::string embeddings_caption(const Model& model, const LensDepth& embeddings, const StepRecord& r,
                               const std::vector<TokenId>& all_tokens, int64_t q_pos) {
    const ModelConfig& cfg = model.config();
    std::string what = "the input token's embedding";
    if (cfg.embedding_scale != 1.0) what += " (times " + std::to_string(cfg.embedding_scale).substr(0, 6) + ")";
    if (cfg.family != Family::Llama) what += " plus its position vector";
    const std::string readout = cfg.final_layer_norm ? "the final norm and output layer" : "the output layer";
    const TokenProbability& top = embeddings.top.front();
    // The step's own tokens first (a step without the cache recomputes earlier positions: those are the session's).
    const int64_t k = q_pos - r.id.first_position;
    const TokenId input = k >= 0 && k < int64_t(r.id.tokens.size()) ? r.id.tokens[size_t(k)]
                          : q_pos >= 0 && q_pos < int64_t(all_tokens.size()) ? all_tokens[size_t(q_pos)]
                                                                              : -1;
    char here[160];
    if (top.id == input)
        std::snprintf(here, sizeof here, "here it names the input token itself, '%s' (%.0f%%)",
                      short_token(model, top.id, 12).c_str(), 100.0 * double(top.probability));
    else
        std::snprintf(here, sizeof here, "here it names '%s' (%.0f%%), not the input '%s'",
                      short_token(model, top.id, 12).c_str(), 100.0 * double(top.probability),
                      input >= 0 ? short_token(model, input, 12).c_str() : "?");
    const std::string text = "Row 'embeddings': " + what + " before any layer, through " + readout +
                             ". Nothing trains it to predict a token; " + here + ".";
    return wrapped_disabled("%s", text.c_str());
}
}  // namespace

void draw_logit_lens(PanelContext& c) {
    if (!begin_panel(Panel::Lens)) return;
    figure_button(c, Panel::Lens);
    const Snapshot& s = c.snap;
    const Model& model = s.model();
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    if (!r || !r->recorded() || r->rows.residual.empty()) {
        ImGui::TextDisabled(r ? "This step was run without recording." : "No step yet.");
        end_panel();
        return;
    }
    const int64_t q_pos = lens_position(*r, c.prefs.sel_query);
    const LogitLens& lens = lens_cache.get(model, s.trace().share(step), q_pos);
    const int64_t L = int64_t(lens.depths.size()) - 1;
    const TokenId final_top = lens.depths.back().top.front().id;
    dump_text("lens header", wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text],
                                          "position %lld (step %zu): the next token read after each layer; the full "
                                          "model's choice, '%s', outlined",
                                          (long long)q_pos, step, short_token(model, final_top, 12).c_str()));
    help_marker("The residual stream entering each layer goes through the model's final norm and output layer, "
                "as the last layer's output does. Select a cell in the attention map to choose the position.");
    dump_text("lens embeddings", embeddings_caption(model, lens.depths.front(), *r, fig::tokens_of(s), q_pos));
    const ImGuiTableFlags flags = ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                  ImGuiTableFlags_SizingStretchSame;
    // As many token columns as fit legibly ("token 100%"); the layout dump always gets all five.
    const float depth_w = ImGui::CalcTextSize("after layer 00").x, entropy_w = ImGui::CalcTextSize("entropy").x;
    const float cell_w = ImGui::CalcTextSize("wwwwwww 100%").x + 8;
    const int64_t shown = std::clamp<int64_t>(
        int64_t((ImGui::GetContentRegionAvail().x - depth_w - entropy_w - 24) / cell_w), 2, kLensTop);
    if (ImGui::BeginTable("##lens", int(shown) + 2, flags, ImGui::GetContentRegionAvail())) {
        ImGui::TableSetupScrollFreeze(0, 1);
        ImGui::TableSetupColumn("depth", ImGuiTableColumnFlags_WidthFixed, depth_w);
        for (int64_t k = 0; k < shown; ++k) {
            char name[16];
            std::snprintf(name, sizeof name, "top %lld", (long long)(k + 1));
            ImGui::TableSetupColumn(name);
        }
        ImGui::TableSetupColumn("entropy", ImGuiTableColumnFlags_WidthFixed, entropy_w);
        ImGui::TableHeadersRow();
        for (int64_t d = 0; d <= L; ++d) {
            const LensDepth& depth = lens.depths[size_t(d)];
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            if (d == 0) ImGui::TextUnformatted("embeddings");
            else ImGui::Text("after layer %lld", (long long)(d - 1));
            std::string dumped;  // "id:probability ..." for the layout dump
            for (const TokenProbability& t : depth.top) {
                char part[48];
                std::snprintf(part, sizeof part, "%s%d:%.6f", dumped.empty() ? "" : " ", t.id, double(t.probability));
                dumped += part;
                if (&t - depth.top.data() >= shown) continue;
                ImGui::TableNextColumn();
                const float p = t.probability;
                ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg,
                                       ImGui::GetColorU32(ImVec4{0.16f + 0.1f * p, 0.3f + 0.45f * p, 0.55f + 0.3f * p, 0.25f + 0.6f * p}));
                const bool answer = t.id == final_top;
                if (answer) {
                    const ImVec2 p0 = ImGui::GetCursorScreenPos();
                    const float w = ImGui::GetContentRegionAvail().x;
                    ImGui::GetWindowDrawList()->AddRect({p0.x - 2, p0.y - 1}, {p0.x + w, p0.y + ImGui::GetTextLineHeight() + 1},
                                                        IM_COL32(250, 200, 60, 255), 2, 0, 2);
                }
                ImGui::Text("%s %.0f%%", short_token(model, t.id, 7).c_str(), 100.0 * double(p));
                if (ImGui::IsItemHovered())
                    ImGui::SetTooltip("token %d '%s'\nprobability %.5f\nlogit %.4f", t.id, token_text(model, t.id).c_str(),
                                      double(p), double(t.logit));
            }
            ImGui::TableNextColumn();
            ImGui::Text("%.2f", depth.entropy);
            dump_text(("lens depth " + std::to_string(d)).c_str(), dumped);
        }
        ImGui::EndTable();
    }
    end_panel();
}

Figure lens_figure(const Snapshot& s, const ViewPrefs& v) {
    using namespace fig;
    const Shown w = shown_step(s, v);
    if (w.r->rows.residual.empty()) nothing("step " + std::to_string(w.step) + " recorded no residual stream");
    const Model& model = s.model();
    const int64_t q_pos = lens_position(*w.r, v.sel_query);
    const LogitLens lens = logit_lens(model, w.r->rows, q_pos - w.r->cost.first_computed_position, kLensTop);
    const std::vector<TokenId> tokens = tokens_of(s);
    const int64_t depths = int64_t(lens.depths.size());
    Figure f;
    f.name = "logit_lens_step" + std::to_string(w.step) + "_pos" + std::to_string(q_pos);
    FigureMap m;
    HeatmapPlot& p = m.plot;
    m.values.assign(size_t(depths * kLensTop), 0.0f);
    m.visible.assign(size_t(depths * kLensTop), 0);
    p.cell_texts.assign(size_t(depths * kLensTop), "");
    for (int64_t d = 0; d < depths; ++d) {
        const LensDepth& depth = lens.depths[size_t(d)];
        for (size_t k = 0; k < depth.top.size() && int64_t(k) < kLensTop; ++k) {
            const size_t cell = size_t(d * kLensTop) + k;
            m.values[cell] = depth.top[k].probability;
            m.visible[cell] = 1;
            p.cell_texts[cell] = short_token(model, depth.top[k].id, plot_label_chars);
        }
        p.row_labels.push_back(d == 0 ? "embeddings" : "after L" + std::to_string(d - 1));  // fits the axis's 12 characters
    }
    const TokenId answer = lens.depths.back().top.front().id;
    p.title = model_name(s) + ", step " + std::to_string(w.step) + ": logit lens at position " + std::to_string(q_pos) +
              " '" + token_label(model, tokens, q_pos) + "' (the full model's choice: '" +
              short_token(model, answer, plot_label_chars) + "')";
    p.value_label = "probability";
    p.show_masked = false;  // every cell holds a token
    p.rows = depths, p.cols = kLensTop;
    p.lo = 0, p.hi = 1;
    p.row_positions = iota(depths);
    p.col_positions = iota(kLensTop, 1);
    p.x_label = "rank";
    p.y_label = "depth (the residual after layer L)";
    f.maps.push_back(std::move(m));
    return f;
}

}  // namespace kvscope::gui
