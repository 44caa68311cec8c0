// The menu bar (see menu_bar.h). Switching a workspace changes only prefs.workspace: what is drawn.
#include "window/menu_bar.h"

#include <imgui.h>

#include <string>

#include "panels/lesson_panel.h"
#include "widgets/test_dumps.h"
#include "window/ui_scale.h"
#include "logic/workspace.h"

namespace kvscope::gui {

float draw_menu_bar(PanelContext& c) {
    if (!ImGui::BeginMainMenuBar()) return 0;
    const float height = ImGui::GetWindowHeight();
    dump_panel_window("menu bar");
    for (size_t i = 0; i < workspaces().size(); ++i) {
        const WorkspaceInfo& w = workspaces()[i];
        const bool current = c.prefs.workspace == w.workspace;
        const std::string label = std::to_string(i + 1) + " " + w.name;
        if (current) ImGui::PushStyleColor(ImGuiCol_Text, {1.0f, 0.84f, 0.45f, 1});
        if (ImGui::MenuItem(label.c_str(), nullptr, current)) c.prefs.workspace = w.workspace;
        if (current) ImGui::PopStyleColor();
        dump_item(("workspace " + std::string(w.name)).c_str());
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s (key %zu)", w.for_, i + 1);
    }
    ImGui::Separator();
    if (ImGui::BeginMenu("Learn")) {
        draw_learn_menu(c);
        ImGui::EndMenu();
    }
    dump_item("menu Learn");
    const bool view = ImGui::BeginMenu("View");
    dump_item("menu View");
    if (view) {
        draw_view_menu();
        ImGui::EndMenu();
    }
    if (ImGui::MenuItem("Help", "F1", c.prefs.help_open)) c.prefs.help_open = !c.prefs.help_open;
    dump_item("menu Help");
    ImGui::EndMainMenuBar();
    return height;
}

}  // namespace kvscope::gui
