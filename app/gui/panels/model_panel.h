#pragma once
// The Model panel (model_panel.cpp): the loaded model's config in words, KV cache bytes per token, the assets/ folder
// picker.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_model(PanelContext& c);

}  // namespace kvscope::gui
