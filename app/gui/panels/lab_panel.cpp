// Cache lab: what each KV cache configuration would cost on this session's own tokens (core/analysis/cache_lab.h,
// the numbers `kvscope lab` prints). The worker feeds the shown sequence's prompt and reply so far through
// the model once per configuration, teacher-forced; the tab shows the table and, over the positions, each
// configuration's loss above the full cache and its KL to it.
#include "panels/lab_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "panels/figures.h"
#include "widgets/test_dumps.h"

namespace kvscope::gui {
namespace {

constexpr ImU32 kSeries[] = {IM_COL32(230, 230, 235, 255), IM_COL32(86, 180, 233, 255), IM_COL32(230, 159, 0, 255),
                             IM_COL32(0, 158, 115, 255),   IM_COL32(240, 228, 66, 255), IM_COL32(204, 121, 167, 255),
                             IM_COL32(213, 94, 0, 255),    IM_COL32(0, 114, 178, 255)};  // Okabe-Ito, white first

ImU32 series_colour(size_t i) { return kSeries[i % std::size(kSeries)]; }

// One line per run over the positions, in one box; y from the lowest to the highest value shown.
void series_chart(const char* title, const std::vector<std::vector<double>>& ys, const std::vector<std::string>& names,
                  ImVec2 size, const char* fmt) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::Dummy(size);
    double lo = 0, hi = 0;
    size_t n = 0;
    for (const auto& y : ys) {
        n = std::max(n, y.size());
        for (double v : y) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (hi <= lo) hi = lo + 1;
    const float line = ImGui::GetTextLineHeight();
    char top[32];
    std::snprintf(top, sizeof top, fmt, hi);
    // The highest value right of the title, or under it where a narrow chart (1280x720) has no room beside it.
    const float top_width = ImGui::CalcTextSize(top).x;
    const bool beside = ImGui::CalcTextSize(title).x + 12 + top_width <= size.x - 8;
    const ImVec2 a = {p.x + 4, p.y + (beside ? 1 : 2) * line + 4}, b = {p.x + size.x - 4, p.y + size.y - 4};
    dl->AddRectFilled(p, {p.x + size.x, p.y + size.y}, IM_COL32(28, 28, 34, 255), 3);
    dl->AddText({p.x + 4, p.y}, IM_COL32(200, 200, 210, 255), title);
    dl->AddText({b.x - top_width, beside ? p.y : p.y + line}, IM_COL32(150, 150, 160, 255), top);
    auto pt = [&](size_t i, double v) {
        const float fx = n > 1 ? float(i) / float(n - 1) : 0.5f;
        return ImVec2{a.x + fx * (b.x - a.x), b.y - float((v - lo) / (hi - lo)) * (b.y - a.y)};
    };
    if (lo < 0) dl->AddLine(pt(0, 0), pt(n ? n - 1 : 0, 0), IM_COL32(90, 90, 100, 255));
    for (size_t r = ys.size(); r-- > 0;)  // the reference (run 0 in white) last, on top
        for (size_t i = 1; i < ys[r].size(); ++i) dl->AddLine(pt(i - 1, ys[r][i - 1]), pt(i, ys[r][i]), series_colour(r), 1.5f);
    if (ImGui::IsItemHovered() && n > 1) {
        const float fx = std::clamp((ImGui::GetIO().MousePos.x - a.x) / (b.x - a.x), 0.0f, 1.0f);
        const size_t i = size_t(std::lround(fx * float(n - 1)));
        std::string tip = "position " + std::to_string(i);
        for (size_t r = 0; r < ys.size(); ++r)
            if (i < ys[r].size()) {
                char v[48];
                std::snprintf(v, sizeof v, fmt, ys[r][i]);
                tip += "\n" + names[r] + ": " + v;
            }
        ImGui::SetTooltip("%s", tip.c_str());
    }
}

}  // namespace

void draw_lab(PanelContext& c) {
    if (!begin_panel(Panel::Lab)) return;
    const Snapshot& s = c.snap;
    const int64_t n_tokens = int64_t(s.prompt().size() + s.generated().size());
    const std::shared_ptr<const LabReport>& lab = s.lab;
    // A short panel (1280x720) shows the table or the curves, each at full height; a tall one both. The
    // controls take two lines (the Measure button, Save figure, the view switch and what was scored; the
    // configurations), so every row of the table fits at 1280x720.
    static int shown = 0;  // 0 table, 1 curves
    const float row_h = ImGui::GetTextLineHeight() + 2;  // compact table rows (cell padding 1)
    const float controls_h = ImGui::GetFrameHeightWithSpacing() * 2;
    const bool both = lab && ImGui::GetContentRegionAvail().y - controls_h > row_h * float(lab->runs.size() + 1) + 140;
    const bool usable = !s.encoder_decoder() && n_tokens >= 2;
    ImGui::BeginDisabled(!usable || c.progress.running);
    char label[96];
    std::snprintf(label, sizeof label, "Measure on this sequence's %lld tokens", (long long)n_tokens);
    if (ImGui::Button(label)) c.ctl.push(MeasureLab{split_lab_specs(c.prefs.lab_specs)});
    dump_item("Measure lab");
    ImGui::EndDisabled();
    help_marker("Feeds the shown sequence's prompt and reply so far through the model once per configuration, one "
                "token per step as generation would (teacher forcing), and compares every position's next-token "
                "distribution with the full float32 cache's: loss = -ln p(the next token of the text), KL(full || "
                "configuration), top-1 agreement. The same numbers as `kvscope lab --text-ids ...`.");
    ImGui::SameLine();
    figure_button(c, Panel::Lab);
    if (lab && !both) {
        const ImGuiStyle& st = ImGui::GetStyle();
        const float radios = ImGui::GetFrameHeight() * 2 + ImGui::CalcTextSize("tablecurves").x + st.ItemInnerSpacing.x * 2 +
                             st.ItemSpacing.x * 2;
        ImGui::SameLine();
        if (ImGui::GetContentRegionAvail().x < radios) ImGui::NewLine();
        ImGui::RadioButton("table", &shown, 0);
        ImGui::SameLine();
        ImGui::RadioButton("curves", &shown, 1);
        dump_item("lab view");
    }
    // The configurations box, and after it what the table scored.
    std::string header;
    bool same = true;
    if (lab) {
        std::vector<TokenId> now = s.prompt();
        now.insert(now.end(), s.generated().begin(), s.generated().end());
        same = now == lab->tokens;
        header = std::to_string(lab->tokens.size() - 1) + " positions scored (" +
                 (same ? "this sequence's tokens)" : "the sequence has changed since: measure again)");
    }
    const float header_w = header.empty() ? 0.0f : ImGui::CalcTextSize(header.c_str()).x + 8;
    const float input_w = ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("(?)").x - 16;
    const bool header_beside = input_w - header_w >= ImGui::GetFontSize() * 12;  // else on a line of its own
    ImGui::SetNextItemWidth(header_beside ? input_w - header_w : input_w);
    ImGui::InputTextWithHint("##configurations", "configurations: full; window=32; window=32,sinks=4; int8; fp8; int4,g=32",
                             &c.prefs.lab_specs);
    dump_item("lab configurations");
    if (ImGui::IsItemHovered() && !c.prefs.lab_specs.empty()) ImGui::SetTooltip("%s", c.prefs.lab_specs.c_str());
    help_marker(lab_config_grammar());
    if (lab) {
        if (header_beside) ImGui::SameLine();
        ImGui::AlignTextToFramePadding();
        ImGui::TextColored(same ? ImGui::GetStyle().Colors[ImGuiCol_TextDisabled] : ImVec4(1.0f, 0.75f, 0.35f, 1), "%s",
                           header.c_str());
        dump_item("lab header");
        dump_text("lab header", header);
    }
    if (!usable)
        ImGui::TextDisabled("%s", s.encoder_decoder() ? "the lab runs decoder-only models" : "needs at least 2 tokens: set a prompt");
    problem_box(c, Place::Lab);
    if (!lab) {
        end_panel();
        return;
    }
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit |
                                  (both ? 0 : ImGuiTableFlags_ScrollY);
    const ImVec2 table_size = {0, both ? 0.0f : ImGui::GetContentRegionAvail().y};  // short panel: the table scrolls
    ImGui::PushStyleVar(ImGuiStyleVar_CellPadding, {ImGui::GetStyle().CellPadding.x, 1});
    const bool table = (both || shown == 0) && ImGui::BeginTable("lab table", 6, flags, table_size);
    ImGui::PopStyleVar();
    if (table) {
        ImGui::TableSetupScrollFreeze(0, 1);
        for (const char* h : {"configuration", "bytes/token", "loss", "dloss", "KL mean", "top-1"})
            ImGui::TableSetupColumn(h);
        ImGui::TableHeadersRow();
        for (size_t i = 0; i < lab->runs.size(); ++i) {
            const LabRun& r = lab->runs[i];
            const LabTotals& t = r.totals;
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(series_colour(i)), "%s%s", r.config.name.c_str(),
                               i == lab->reference ? " (reference)" : "");
            dump_item(("lab row " + std::to_string(i)).c_str());
            ImGui::TableNextColumn();
            // int4's bytes hold float32 rows of the newest positions (KIVI's residual): marked and said apart, since
            // on a text shorter than the residual nothing is packed and int4 costs what full does.
            ImGui::Text("%.1f%s", t.bytes_per_token, t.bytes_residual > 0 ? " *" : "");
            if (t.bytes_residual > 0 && ImGui::IsItemHovered()) ImGui::SetTooltip("%s (not yet packed)", residual_split(t).c_str());
            ImGui::TableNextColumn();
            ImGui::Text("%.4f", t.loss_mean);
            ImGui::TableNextColumn();
            ImGui::Text("%+.4f", t.loss_delta);
            ImGui::TableNextColumn();
            ImGui::Text("%.5f", t.kl_mean);
            ImGui::TableNextColumn();
            ImGui::Text("%.1f %%", 100.0 * t.top1_rate);
            char row[256];
            std::snprintf(row, sizeof row, "%s %.9g %.9g %.9g %.9g", r.config.name.c_str(), t.bytes_per_token,
                          t.loss_mean, t.kl_mean, t.top1_rate);
            dump_text(("lab row " + std::to_string(i)).c_str(), row);
        }
        ImGui::EndTable();
    }
    if (!both && shown == 0) {
        end_panel();
        return;
    }
    // Over the positions: the loss each configuration adds (cumulative, as the CLI's chart), and its KL.
    const LabCurves curves = lab_curves(*lab);
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const ImVec2 chart = {(avail.x - 8) / 2, std::max(70.0f, avail.y - 4)};
    series_chart("loss added, summed (nats)", curves.added, curves.names, chart, "%.3g");
    ImGui::SameLine();
    series_chart("KL to full per position", curves.kl, curves.names, chart, "%.3g");
    end_panel();
}

Figure lab_figure(const Snapshot& s, const ViewPrefs&) {
    using namespace fig;
    if (!s.lab) nothing("the cache lab has not measured (Measure)");
    const LabCurves c = lab_curves(*s.lab);
    Figure f;
    f.name = "cache_lab";
    LineChart added{model_name(s) + ": loss added, summed over the positions", "position", "nats", {}};
    LineChart kl{model_name(s) + ": KL to the full cache per position", "position", "nats", {}};
    for (size_t i = 0; i < c.names.size(); ++i) {
        added.series.push_back(series(c.names[i], i, c.added[i]));
        kl.series.push_back(series(c.names[i], i, c.kl[i]));
    }
    f.charts = {added, kl};
    return f;
}

LabCurves lab_curves(const LabReport& lab) {
    LabCurves c;
    const int64_t N = int64_t(lab.tokens.size()) - 1;
    const LabRun& ref = lab.runs[lab.reference];
    for (const LabRun& r : lab.runs) {
        std::vector<double> added;
        double sum = 0;
        for (int64_t p = 0; p < N; ++p) {
            sum += r.loss[size_t(p)] - ref.loss[size_t(p)];
            added.push_back(sum);
        }
        c.added.push_back(std::move(added));
        c.kl.push_back(r.kl);
        c.names.push_back(r.config.name);
    }
    return c;
}

}  // namespace kvscope::gui
