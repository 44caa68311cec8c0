#pragma once
// The Next token panel (next_token_panel.cpp): top-k bars, the chosen token, entropy.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_next_token(PanelContext& c);

}  // namespace kvscope::gui
