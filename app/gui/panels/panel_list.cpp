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
#include "panels/lesson_panel.h"
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
        {Panel::Controls, "Controls",
         "the prompt (or a chat), the step buttons, the KV cache switch, the session options and the status line",
         draw_controls},
        {Panel::Heads, "Heads",
         "what each head does on this prompt (Explain heads measures every head: previous-token, induction, copying)",
         draw_heads, "heads", heads_figure},
        {Panel::Export, "Export",
         "writes the shown step or the whole session (tensors as .npy, maps as PNG or SVG, meta.json) into a folder",
         draw_export},
        {Panel::Timeline, "Token timeline",
         "every token as a chip at its position, the step being viewed, the next position and how full the cache is",
         draw_timeline},
        {Panel::Model, "Model",
         "the loaded model's shape and every architecture key as a chip; pick an example or open any model folder",
         draw_model},
        {Panel::Attention, "Attention",
         "the attention map of the viewed step (queries x keys) for one head or all; wheel zooms, drag pans, click selects",
         draw_attention},
        {Panel::KvCache, "KV cache",
         "the K and V rows each layer stores, the slots used and the bytes they take",
         draw_kv_cache, "kv-cache", kv_cache_figure},
        {Panel::Mask, "Mask",
         "which keys each query may see at this step, and the rule that decides it (causal, window, sinks, evicted)",
         draw_mask, "mask", mask_figure},
        {Panel::NextToken, "Next token",
         "the probabilities of the next token after this step and the token chosen",
         draw_next_token},
        {Panel::Compare, "Cache on vs off",
         "the same step computed with the cache and without it: FLOPs, time and the rows computed or reused",
         draw_compare, "compare", compare_figure},
        {Panel::Memory, "Memory",
         "a paged cache's block pool and each sequence's block table: shared blocks, copies on write, what sharing saved",
         draw_memory, "memory", memory_figure},
        {Panel::Rotary, "Rotary",
         "rotary position embeddings: the angle each pair of a query and a key turns by, and the score by distance",
         draw_rotary, "rotary", rotary_figure},
        {Panel::Lens, "Logit lens",
         "what the model would predict after each layer (each layer's output read through the final norm and head)",
         draw_logit_lens, "logit-lens", lens_figure},
        {Panel::Quant, "K/V quant",
         "the recorded K and V rows stored in int8, fp8 or int4: the bytes saved and the error it adds",
         draw_kv_quant, "kv-quant", quant_figure},
        {Panel::Lab, "Cache lab",
         "what each cache configuration (window, sinks, formats) would cost on this sequence: bytes, loss, KL, top-1",
         draw_lab, "lab", lab_figure},
        {Panel::Edits, "Cache edits",
         "evict, restore or patch positions of the cache and see the next prediction before and after",
         draw_cache_edits},
        {Panel::Lesson, "Lesson",
         "the open guided lesson: its step, what to look at, and whether the engine's record shows it yet (Learn menu)",
         draw_lesson},
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
