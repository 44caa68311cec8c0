#pragma once
// The KV cache panel (kv_cache_panel.cpp): K and V of one layer/head as heatmaps, written rows, write pointer, fill
// overview; encoder-decoder: the fixed cross-attention cache beside it.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_kv_cache(PanelContext& c);
Figure kv_cache_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw

}  // namespace kvscope::gui
