#pragma once
// The Memory panel (memory_panel.cpp): paged caches: the block pool as a grid coloured by owner, block tables, sharing,
// COW.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_memory(PanelContext& c);
Figure memory_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw

}  // namespace kvscope::gui
