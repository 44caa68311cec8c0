// The help overlay (see help.h): the shortcut table and the list of panels, drawn over the window.
#include "window/help.h"

#include <imgui.h>

#include <algorithm>
#include <string>

#include "panels/panel_list.h"
#include "widgets/shortcuts.h"
#include "widgets/test_dumps.h"
#include "logic/workspace.h"

namespace kvscope::gui {

void draw_help(bool& open) {
    if (!open) return;
    const ImVec2 d = ImGui::GetIO().DisplaySize;
    const float font = ImGui::GetFontSize();
    // Centred, as wide as the text wants up to most of the window; tall enough for both lists, scrolling
    // when the window is smaller than that.
    const ImVec2 size = {std::min(d.x - 40, font * 52), std::min(d.y - 40, font * 40)};
    ImGui::SetNextWindowPos({(d.x - size.x) / 2, (d.y - size.y) / 2}, ImGuiCond_Always);
    ImGui::SetNextWindowSize(size, ImGuiCond_Always);
    ImGui::SetNextWindowFocus();
    ImGui::PushStyleColor(ImGuiCol_WindowBg, {0.09f, 0.10f, 0.13f, 0.97f});
    const bool shown = ImGui::Begin("Help (F1, Escape closes)", &open, ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoResize |
                                                                    ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings);
    ImGui::PopStyleColor();
    if (!shown) {
        ImGui::End();
        return;
    }
    dump_window("help");
    const float key_w = font * 7;
    ImGui::TextColored({0.95f, 0.80f, 0.40f, 1}, "Keyboard");
    ImGui::TextDisabled("(not while typing in a text box, which keeps its keys)");
    std::string keys;
    for (const Shortcut& s : shortcuts()) {
        ImGui::TextUnformatted(s.keys);
        ImGui::SameLine(key_w);
        ImGui::PushTextWrapPos(0);
        ImGui::TextDisabled("%s", s.what);
        ImGui::PopTextWrapPos();
        keys += std::string(keys.empty() ? "" : "\n") + s.keys + ": " + s.what;
    }
    dump_text("help shortcuts", keys);
    ImGui::Spacing();
    ImGui::TextColored({0.95f, 0.80f, 0.40f, 1}, "Workspaces");
    ImGui::TextDisabled("(the bar at the top, or keys 1-5: each shows the panels of one task over the same session)");
    std::string spaces;
    for (size_t i = 0; i < workspaces().size(); ++i) {
        const WorkspaceInfo& w = workspaces()[i];
        ImGui::Text("%zu %s", i + 1, w.name);
        ImGui::SameLine(key_w);
        ImGui::PushTextWrapPos(0);
        ImGui::TextDisabled("%s", w.for_);
        ImGui::PopTextWrapPos();
        spaces += std::string(spaces.empty() ? "" : "\n") + std::to_string(i + 1) + " " + w.name + ": " + w.for_;
    }
    dump_text("help workspaces", spaces);
    ImGui::Spacing();
    ImGui::TextColored({0.95f, 0.80f, 0.40f, 1}, "Panels");
    ImGui::TextDisabled("(a panel sharing its place with others is a tab of that window)");
    const float title_w = font * 9;
    std::string panels;
    for (const PanelModule& m : panel_modules()) {
        ImGui::TextUnformatted(m.title);
        ImGui::SameLine(title_w);
        ImGui::PushTextWrapPos(0);
        ImGui::TextDisabled("%s", m.shows);
        ImGui::PopTextWrapPos();
        panels += std::string(panels.empty() ? "" : "\n") + m.title + ": " + m.shows;
    }
    dump_text("help panels", panels);
    ImGui::End();
}

}  // namespace kvscope::gui
