#pragma once
// The window's workspaces, declared once: each is a task with its own layout over the same session
// (panels/layout.cpp places its panels). The bar at the top of the window, the keys 1-5, the script's
// `workspace NAME`, the help overlay and the settings file all read this table; switching changes only
// what is drawn, never the session.
//
//   Workspace            Step, Cache, Memory, Lab, Chat (in the bar's order; key 1 = Step ... 5 = Chat)
//   WorkspaceInfo        its name as the bar shows it and what it is for, one line
//   workspaces()         every workspace, in Workspace order
//   workspace_info(w)    one of them
//   workspace_named(s)   "Cache", "cache" or "2" -> Workspace::Cache; false when none
#include <string>
#include <vector>

namespace kvscope::gui {

enum class Workspace { Step, Cache, Memory, Lab, Chat };

struct WorkspaceInfo {
    Workspace workspace;
    const char* name;  // the bar's label and the script's name
    const char* for_;  // what it is for, one line (the help overlay and the bar's tooltip)
};

const std::vector<WorkspaceInfo>& workspaces();
const WorkspaceInfo& workspace_info(Workspace w);
bool workspace_named(const std::string& name, Workspace& out);

}  // namespace kvscope::gui
