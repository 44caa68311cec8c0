#pragma once
// The Rotary panel (rotary_panel.cpp): rotary models: each dimension pair's frequency and angle, the selected key before
// and after rotation, the score of the selected query and key at every distance.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_rotary(PanelContext& c);
Figure rotary_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw

}  // namespace kvscope::gui
