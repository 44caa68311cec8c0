// What each head does: previous-token and induction scores from core/heads, measured on the worker
// on request; clicking a row shows that head's attention map.
#include "panels/heads_panel.h"

#include <algorithm>
#include <cstdio>

#include "panels/figures.h"

namespace kvscope::gui {

void draw_heads(PanelContext& c) {
    if (!begin_panel(Panel::Heads)) return;
    problem_box(c, Place::Heads);
    figure_button(c, Panel::Heads);
    const std::vector<HeadScore>& heads = c.snap.heads;
    if (heads.empty()) {
        // The probe prompts are decoder-only prompts: an encoder-decoder would also need a source for each.
        const bool ed = c.snap.encoder_decoder();
        ImGui::BeginDisabled(!c.snap.model().tokenizer() || ed);
        const bool measure = ImGui::Button("Explain heads");
        dump_item("Explain heads");
        ImGui::EndDisabled();
        if (measure) c.ctl.push(ExplainHeads{});
        help_marker("Runs probe prompts through the model and scores every head: previous-token = mean "
                    "attention to the position just before; induction = on a random span repeated once, "
                    "mean attention from a token's second occurrence to the token after its first. "
                    "Needs the model's tokenizer.");
        if (ed) {
            wrapped_disabled("not measured for encoder-decoder models: the probe prompts have no source");
        }
        end_panel();
        return;
    }
    // Strongest heads first: by the larger of the two scores.
    std::vector<const HeadScore*> rows;
    for (const HeadScore& h : heads) rows.push_back(&h);
    std::stable_sort(rows.begin(), rows.end(), [](const HeadScore* a, const HeadScore* b) {
        return std::max(a->previous_token, a->induction) > std::max(b->previous_token, b->induction);
    });
    ImGui::TextDisabled("click a head to show its map");
    if (ImGui::BeginTable("heads", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY, ImVec2(-1, -1))) {
        const float digit = ImGui::CalcTextSize("0").x;
        ImGui::TableSetupScrollFreeze(0, 1);
        ImGui::TableSetupColumn("layer", ImGuiTableColumnFlags_WidthFixed, digit * 6);
        ImGui::TableSetupColumn("head", ImGuiTableColumnFlags_WidthFixed, digit * 6);
        ImGui::TableSetupColumn("prev-token", ImGuiTableColumnFlags_WidthStretch);
        ImGui::TableSetupColumn("induction", ImGuiTableColumnFlags_WidthStretch);
        ImGui::TableHeadersRow();
        for (const HeadScore* h : rows) {
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            char label[32];
            std::snprintf(label, sizeof label, "%lld##head%lld_%lld", (long long)h->layer, (long long)h->layer,
                          (long long)h->head);
            const bool selected = c.prefs.layer == h->layer && c.prefs.head == h->head;
            if (ImGui::Selectable(label, selected, ImGuiSelectableFlags_SpanAllColumns)) {
                c.prefs.layer = h->layer;
                c.prefs.head = h->head;
                c.prefs.all_heads = false;
            }
            ImGui::TableNextColumn();
            ImGui::Text("%lld", (long long)h->head);
            for (double score : {h->previous_token, h->induction}) {
                ImGui::TableNextColumn();
                const bool strong = score > 0.5;
                if (strong) ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.99f, 0.80f, 0.25f, 1));
                ImGui::Text("%.2f", score);
                if (strong) ImGui::PopStyleColor();
            }
        }
        ImGui::EndTable();
    }
    end_panel();
}

Figure heads_figure(const Snapshot& s, const ViewPrefs&) {
    using namespace fig;
    if (s.heads.empty()) nothing("the heads are not measured (Explain heads)");
    int64_t L = 0, H = 0;
    for (const HeadScore& h : s.heads) L = std::max(L, h.layer + 1), H = std::max(H, h.head + 1);
    Figure f;
    f.name = "heads";
    for (int which = 0; which < 2; ++which) {
        FigureMap m;
        m.part = which ? "induction" : "previous_token";
        m.values.assign(size_t(L * H), 0.0f);
        m.visible.assign(size_t(L * H), 0);
        for (const HeadScore& h : s.heads) {
            m.values[size_t(h.layer * H + h.head)] = float(which ? h.induction : h.previous_token);
            m.visible[size_t(h.layer * H + h.head)] = 1;
        }
        HeatmapPlot& p = m.plot;
        p.title = model_name(s) + ": " + (which ? "induction" : "previous-token") + " score of every head";
        p.value_label = "score";
        p.rows = L, p.cols = H;
        p.lo = 0, p.hi = 1;  // a mean attention weight: viridis over [0, 1]
        p.row_positions = iota(L);
        p.col_positions = iota(H);
        p.x_label = "head";
        p.y_label = "layer";
        p.masked_label = "not measured";
        f.maps.push_back(std::move(m));
    }
    return f;
}

}  // namespace kvscope::gui
