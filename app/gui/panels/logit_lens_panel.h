#pragma once
// The Logit lens panel (logit_lens_panel.cpp): the next token read after each layer at the selected query.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_logit_lens(PanelContext& c);
Figure lens_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw

}  // namespace kvscope::gui
