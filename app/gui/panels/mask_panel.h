#pragma once
// The Mask panel (mask_panel.cpp): the causal (and window) mask of the step and the rule it follows.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_mask(PanelContext& c);
Figure mask_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw

}  // namespace kvscope::gui
