#pragma once
// The bar across the top of the window: one button per workspace (logic/workspace.h; keys 1-5 do the
// same), then the menus (Learn: the guided lessons; View: the UI scale) and Help. Returns its height in pixels: the layout starts below it.
#include "panels/panel.h"

namespace kvscope::gui {

float draw_menu_bar(PanelContext& c);

}  // namespace kvscope::gui
