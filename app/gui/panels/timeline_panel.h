#pragma once
// The Token timeline panel (timeline_panel.cpp): every token with its position, pointer, cache fill, window, evicted
// tokens.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_timeline(PanelContext& c);

}  // namespace kvscope::gui
