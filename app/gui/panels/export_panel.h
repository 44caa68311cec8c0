#pragma once
// The Export panel (export_panel.cpp): export snapshot / session buttons and where the files went.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_export(PanelContext& c);

}  // namespace kvscope::gui
