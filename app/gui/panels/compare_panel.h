#pragma once
// The Cache on vs off panel (compare_panel.cpp): cache on vs off for the same step, time and FLOPs charts over
// the generation.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_compare(PanelContext& c);
Figure compare_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw

}  // namespace kvscope::gui
