// Cache edits: evict, restore or patch one position between steps (core/cache/cache_edit.h), and what the edit
// does to the next prediction: KL, top-1 before and after, the tokens whose probability moved most.
// The newest edit since the last step is shown; once a step ran, the edits it ran after.
#include "panels/edits_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <cmath>
#include <cstdio>

#include "logic/workbench.h"

namespace kvscope::gui {
namespace {

std::string target(const CacheEdit& e) {
    return (e.layer < 0 ? std::string("all layers") : "layer " + std::to_string(e.layer)) + ", " +
           (e.kv_head < 0 ? std::string("all K/V heads") : "K/V head " + std::to_string(e.kv_head));
}

void draw_comparison(const Model& model, const CacheEditRecord& r) {
    const EditComparison& x = r.effect;
    char line[256];
    std::snprintf(line, sizeof line, "KL(before || after) = %.6g nats", x.kl);
    ImGui::TextUnformatted(line);
    dump_text("edits kl", line);
    std::snprintf(line, sizeof line, "top-1: %d '%s' %.1f%%  ->  %d '%s' %.1f%%%s", x.top1_before,
                  short_token(model, x.top1_before).c_str(), 100 * x.p_top1_before, x.top1_after,
                  short_token(model, x.top1_after).c_str(), 100 * x.p_top1_after,
                  x.top1_before == x.top1_after ? "" : "  (changed)");
    ImGui::TextColored(x.top1_before == x.top1_after ? ImVec4(0.8f, 0.8f, 0.85f, 1) : ImVec4(1, 0.78f, 0.25f, 1), "%s", line);
    dump_text("edits top1", std::to_string(x.top1_before) + " " + std::to_string(x.top1_after));
    wrapped_disabled("the prediction after token %d '%s' enters at position %lld, before and after the edits",
                     x.token, short_token(model, x.token).c_str(), (long long)x.position);
    std::string movers;
    if (ImGui::BeginTable("movers", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
        ImGui::TableSetupColumn("token");
        ImGui::TableSetupColumn("before");
        ImGui::TableSetupColumn("after");
        ImGui::TableSetupColumn("change");
        ImGui::TableHeadersRow();
        for (const TokenShift& m : x.movers) {
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::Text("%d '%s'", m.token, short_token(model, m.token).c_str());
            ImGui::TableNextColumn();
            ImGui::Text("%.2f%%", 100 * m.p_before);
            ImGui::TableNextColumn();
            ImGui::Text("%.2f%%", 100 * m.p_after);
            ImGui::TableNextColumn();
            const double d = m.p_after - m.p_before;
            ImGui::TextColored(d >= 0 ? ImVec4(0.5f, 0.85f, 0.5f, 1) : ImVec4(0.95f, 0.5f, 0.45f, 1), "%+.2f%%", 100 * d);
            char w[64];
            std::snprintf(w, sizeof w, "%s%d:%.6g:%.6g", movers.empty() ? "" : " ", m.token, m.p_before, m.p_after);
            movers += w;
        }
        ImGui::EndTable();
    }
    dump_text("edits movers", movers);
}

}  // namespace

void draw_cache_edits(PanelContext& c) {
    if (!begin_panel(Panel::Edits)) return;
    problem_box(c, Place::Edits);
    const Snapshot& s = c.snap;
    ViewPrefs& v = c.prefs;
    const ModelConfig& cfg = s.model().config();
    const StepRecord* newest = s.trace().empty() ? nullptr : &s.trace().back();
    const int64_t n_positions = newest ? newest->cache.next_position : 0;
    if (!newest) {
        wrapped_disabled("Run a step first: an edit changes the KV cache between two steps.");
        end_panel();
        return;
    }
    // pass 1: what to edit
    stepper("edit position", v.edit_position, 0, std::max<int64_t>(0, n_positions - 1));
    stepper("edit layer", v.edit_layer, -1, cfg.n_layer - 1);
    if (v.edit_layer < 0) text_after({0.6f, 0.6f, 0.65f, 1}, "(-1 = all)");
    stepper("edit K/V head", v.edit_head, -1, cfg.kv_heads() - 1);
    if (v.edit_head < 0) text_after({0.6f, 0.6f, 0.65f, 1}, "(-1 = all)");
    auto push = [&](CacheEditKind kind) {
        EditCache e;
        e.kind = kind;
        e.position = v.edit_position;
        e.layer = v.edit_layer;
        e.head = kind == CacheEditKind::Patch ? -1 : v.edit_head;
        e.patch_text = v.patch_text;
        c.ctl.push(e);
    };
    if (ImGui::Button("Evict")) push(CacheEditKind::Evict);
    dump_item("edits evict");
    ImGui::SameLine();
    if (ImGui::Button("Restore")) push(CacheEditKind::Restore);
    dump_item("edits restore");
    ImGui::SameLine();
    help_marker("Evict: the position's keys get attention weight 0 from the next query on. Restore: put evicted "
                "keys back. Patch: write the K/V the other prompt's run computed at this position (all layers or "
                "the layer chosen). Step back undoes the newest edit exactly.");
    ImGui::SetNextItemWidth(std::max(80.0f, ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("Patch").x - 24));
    ImGui::InputTextWithHint("##patch", "other prompt (patch source)", &v.patch_text);
    dump_item("edits patch text");
    ImGui::SameLine();
    ImGui::BeginDisabled(v.patch_text.empty());
    if (ImGui::Button("Patch")) push(CacheEditKind::Patch);
    ImGui::EndDisabled();
    dump_item("edits patch");
    ImGui::Separator();
    // pass 2: the edits since the last step, else those the shown step ran after
    const std::vector<CacheEditRecord>* edits = &s.pending_edits;
    std::string header = std::to_string(s.pending_edits.size()) + " edit(s) since step " + std::to_string(newest->id.index);
    if (edits->empty()) {
        size_t index = 0;
        const StepRecord* shown = viewed_step(s, v, &index);
        if (shown && !shown->edits.empty()) {
            edits = &shown->edits;
            header = "step " + std::to_string(index) + " ran after " + std::to_string(edits->size()) + " edit(s)";
        }
    }
    ImGui::TextUnformatted(header.c_str());
    dump_text("edits header", header);
    dump_text("edits pending", std::to_string(s.pending_edits.size()));
    if (edits->empty()) {
        wrapped_disabled("No edits. Choose a position and press Evict: the next prediction is shown before and after.");
        end_panel();
        return;
    }
    for (const CacheEditRecord& r : *edits) {
        ImGui::Bullet();
        ImGui::SameLine();
        wrapped_text({0.85f, 0.85f, 0.9f, 1}, "%s position %lld (%s)%s%s", cache_edit_kind_name(r.edit.kind),
                     (long long)r.edit.position, target(r.edit).c_str(), r.edit.source.empty() ? "" : " from: ",
                     r.edit.source.c_str());
    }
    draw_comparison(s.model(), edits->back());
    end_panel();
}

}  // namespace kvscope::gui
