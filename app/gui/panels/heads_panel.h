#pragma once
// The Heads panel (heads_panel.cpp): what each head does (previous-token, induction scores); a row jumps to its map.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_heads(PanelContext& c);
Figure heads_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw

}  // namespace kvscope::gui
