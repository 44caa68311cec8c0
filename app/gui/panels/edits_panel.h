#pragma once
// The Cache edits panel (edits_panel.cpp): evict / restore / patch a position between steps; the next prediction before
// and after.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_cache_edits(PanelContext& c);

}  // namespace kvscope::gui
