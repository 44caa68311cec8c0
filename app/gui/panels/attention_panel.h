#pragma once
// The Attention panel (attention_panel.cpp): scores / weights with the mask, one head or all heads, hover, zoom,
// selection; encoder-decoder: self / cross / encoder attention.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_attention(PanelContext& c);

}  // namespace kvscope::gui
