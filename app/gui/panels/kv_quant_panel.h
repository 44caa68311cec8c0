#pragma once
// The K/V quant panel (kv_quant_panel.cpp): what int8 / int4 / fp8 K/V would change: per-cell K and V reconstruction
// error beside the step's attention score change, for the selected layer and head.
#include <cstdint>
#include <vector>

#include "analysis/kv_quant_error.h"
#include "panels/panel.h"

namespace kvscope::gui {

void draw_kv_quant(PanelContext& c);
Figure quant_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw
// The score-change map: (T, P) values with 0 and seen = 0 where the query does not see the key; it covers
// the step's last kQuantMaxQueries queries only.
inline constexpr int64_t kQuantMaxQueries = 256;
void score_change_cells(const KvQuantError& e, std::vector<float>& change, std::vector<uint8_t>& seen);

}  // namespace kvscope::gui
