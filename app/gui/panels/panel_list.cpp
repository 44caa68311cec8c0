// The panels, one line each: a new panel is an enum value in panel.h, its module (NAME_panel.h +
// NAME_panel.cpp), and a line here.
#include "panels/panel_list.h"

#include <cassert>

#include "panels/attention_panel.h"
#include "panels/compare_panel.h"
#include "panels/controls_panel.h"
#include "panels/edits_panel.h"
#include "panels/export_panel.h"
#include "panels/figures.h"
#include "panels/heads_panel.h"
#include "panels/kv_cache_panel.h"
#include "panels/kv_quant_panel.h"
#include "panels/lab_panel.h"
#include "panels/logit_lens_panel.h"
#include "panels/mask_panel.h"
#include "panels/memory_panel.h"
#include "panels/model_panel.h"
#include "panels/next_token_panel.h"
#include "panels/rotary_panel.h"
#include "panels/timeline_panel.h"

namespace kvscope::gui {

const std::vector<PanelModule>& panel_modules() {
    static const std::vector<PanelModule> modules = {
        {Panel::Controls, "Controls", draw_controls},
        {Panel::Heads, "Heads", draw_heads, "heads", heads_figure},
        {Panel::Export, "Export", draw_export},
        {Panel::Timeline, "Token timeline", draw_timeline},
        {Panel::Model, "Model", draw_model},
        {Panel::Attention, "Attention", draw_attention},
        {Panel::KvCache, "KV cache", draw_kv_cache, "kv-cache", kv_cache_figure},
        {Panel::Mask, "Mask", draw_mask, "mask", mask_figure},
        {Panel::NextToken, "Next token", draw_next_token},
        {Panel::Compare, "Cache on vs off", draw_compare, "compare", compare_figure},
        {Panel::Memory, "Memory", draw_memory, "memory", memory_figure},
        {Panel::Rotary, "Rotary", draw_rotary, "rotary", rotary_figure},
        {Panel::Lens, "Logit lens", draw_logit_lens, "logit-lens", lens_figure},
        {Panel::Quant, "K/V quant", draw_kv_quant, "kv-quant", quant_figure},
        {Panel::Lab, "Cache lab", draw_lab, "lab", lab_figure},
        {Panel::Edits, "Cache edits", draw_cache_edits},
    };
    return modules;
}

const PanelModule& panel_module(Panel p) {
    const PanelModule& m = panel_modules()[size_t(p)];
    assert(m.panel == p && "panel_modules() lists the panels in the order of enum Panel");
    return m;
}

const char* panel_title(Panel p) { return panel_module(p).title; }

}  // namespace kvscope::gui
