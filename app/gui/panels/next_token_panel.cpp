// Next token: the most likely tokens after the viewed step as probability bars, the chosen one marked,
// and the entropy of the distribution the choice was drawn from.
#include "panels/next_token_panel.h"

#include <imgui.h>

#include <cmath>
#include <cstdio>
#include <string>


namespace kvscope::gui {

void draw_next_token(PanelContext& c) {
    if (!begin_panel(Panel::NextToken)) return;
    const Snapshot& s = c.snap;
    const Model& model = c.snap.model();
    const StepRecord* r = viewed_step(s, c.prefs);
    if (!r) {
        ImGui::TextDisabled("No prediction yet.");
        end_panel();
        return;
    }
    if (!r->prediction.chosen) {
        wrapped_disabled("This prefill chunk does not end the prompt, so it predicts nothing yet.");
        end_panel();
        return;
    }
    const SamplerOptions& so = s.options().sampling;
    // As the chips show tokens (a newline as a return arrow, spaces as dots); the bars' tooltips keep the bytes.
    const std::string chosen = "chosen: " + std::to_string(*r->prediction.chosen) + " '" +
                               short_token(model, *r->prediction.chosen, 32) + "'";
    ImGui::TextUnformatted(chosen.c_str());
    dump_text("next token chosen", chosen);
    wrapped_disabled("entropy %.3f nats (perplexity %.1f), %s", r->prediction.entropy, std::exp(r->prediction.entropy),
                        so.temperature == 0 ? "greedy" : "sampled");
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float line = ImGui::GetTextLineHeight();
    const float label_w = ImGui::CalcTextSize("00000 wwwwwwwwww").x;
    const float bar_max = std::max(40.0f, ImGui::GetContentRegionAvail().x - label_w - ImGui::CalcTextSize("100.0%").x - 16);
    for (const TokenProbability& tp : r->prediction.top) {
        const ImVec2 p = ImGui::GetCursorScreenPos();
        const bool chosen = tp.id == *r->prediction.chosen;
        char label[64];
        std::snprintf(label, sizeof label, "%s%d %s", chosen ? "> " : "", tp.id, short_token(model, tp.id, 9).c_str());
        dl->AddText(p, chosen ? IM_COL32(250, 200, 60, 255) : IM_COL32(210, 210, 220, 255), label);
        const float bw = std::max(1.0f, bar_max * tp.probability);
        dl->AddRectFilled({p.x + label_w, p.y + 2}, {p.x + label_w + bw, p.y + line - 2},
                          chosen ? IM_COL32(250, 200, 60, 255) : IM_COL32(70, 150, 220, 255), 2);
        char pct[16];
        std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * double(tp.probability));
        dl->AddText({p.x + label_w + bw + 6, p.y}, IM_COL32(190, 190, 200, 255), pct);
        ImGui::Dummy({label_w + bar_max, line});
        if (ImGui::IsItemHovered())
            ImGui::SetTooltip("token %d '%s'\nprobability %.5f\nlogit %.4f", tp.id, token_text(model, tp.id).c_str(),
                              double(tp.probability), double(tp.logit));
    }
    end_panel();
}

}  // namespace kvscope::gui
