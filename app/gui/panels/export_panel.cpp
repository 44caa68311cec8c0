// Export: the folder, selected head or all heads, PNG at a scale or SVG, and the buttons that export the
// shown step or the whole session (the same files as `kvscope generate --trace DIR`).
#include "panels/export_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

namespace kvscope::gui {

void draw_export(PanelContext& c) {
    if (!begin_panel(Panel::Export)) return;
    ViewPrefs& v = c.prefs;
    problem_box(c, Place::Export);  // first: the panel is short, and a failure is what matters now
    ImGui::SetNextItemWidth(-1);
    ImGui::InputText("##dir", &v.export_dir);
    dump_item("export dir");
    ImGui::RadioButton("selected head", !v.export_all_heads) && (v.export_all_heads = false);
    ImGui::SameLine();
    ImGui::RadioButton("all heads", v.export_all_heads) && (v.export_all_heads = true);
    dump_item("export all heads");
    PlotOutput& plots = v.export_plots;
    ImGui::RadioButton("PNG", plots.format == PlotFormat::Png) && (plots.format = PlotFormat::Png, true);
    ImGui::SameLine();
    ImGui::RadioButton("SVG", plots.format == PlotFormat::Svg) && (plots.format = PlotFormat::Svg, true);
    dump_item("export format");
    if (plots.format == PlotFormat::Png) {
        ImGui::SameLine();
        ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
        ImGui::SliderInt("scale", &plots.scale, 1, plot_max_scale, "%dx", ImGuiSliderFlags_AlwaysClamp);
        dump_item("export scale");
    }
    const bool any = !c.snap.trace().empty();
    ImGui::BeginDisabled(!any);
    const int64_t layer = v.export_all_heads ? -1 : v.layer, head = v.export_all_heads ? -1 : v.head;
    const bool snapshot = ImGui::Button("Export snapshot");
    dump_item("Export snapshot");
    if (snapshot) {
        size_t i = 0;
        c.ctl.push(ExportStep{v.export_dir, viewed_step(c.snap, v, &i) ? int64_t(i) : -1, layer, head, plots});
    }
    ImGui::SameLine();
    const bool session = ImGui::Button("Export session");
    dump_item("Export session");
    if (session) c.ctl.push(ExportSession{v.export_dir, layer, head, plots});
    ImGui::EndDisabled();
    help_marker("PNG (scaled 1-8x) or SVG heatmaps + .npy arrays + JSON, the same files as `kvscope generate --trace "
                "DIR [--format svg] [--scale N]`.");
    if (!c.snap.last_export.empty()) {
        wrapped_disabled("exported to %s", c.snap.last_export.c_str());
        dump_item("export last");
    }
    end_panel();
}

}  // namespace kvscope::gui
