#pragma once
// The list of panels (panel_list.cpp): one entry per panel, its title, draw function and figure, in Panel
// order. A new panel is an enum value in panel.h, its module (NAME_panel.h + NAME_panel.cpp) and a line in
// panel_list.cpp; the window draws panel_module(p).draw for each panel of a slot, the figures find
// PanelModule::figure here.
#include <vector>

#include "panels/panel.h"

namespace kvscope::gui {

struct PanelModule {
    Panel panel;
    const char* title;                                   // its window's title or its tab's name
    const char* shows;                                   // what it shows, one line (the help overlay lists it)
    void (*draw)(PanelContext& c);
    const char* figure_name = nullptr;                   // "kv-cache", ...: the script's and the files' name
    Figure (*figure)(const Snapshot& s, const ViewPrefs& v) = nullptr;  // nullptr: nothing to save
};
const std::vector<PanelModule>& panel_modules();         // in Panel order
const PanelModule& panel_module(Panel p);
const char* panel_title(Panel p);                        // panel_module(p).title

}  // namespace kvscope::gui
