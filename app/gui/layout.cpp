// The first-start layout and small helpers shared by the panels. Proportions were chosen on a
// 1600x1000 window: controls in a left column, the timeline across the top, attention and the KV
// cache side by side in the middle, mask / next token / cache comparison along the bottom.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "errors.h"
#include "panels.h"

namespace kvscope::gui {

void place_panel(Panel p, ImVec2 d) {
    const float left = std::round(std::max(d.x * 0.23f, std::min(360.0f, d.x * 0.4f))), top = std::round(std::max(d.y * 0.16f, ImGui::GetFontSize() * 9.8f)), bottom = std::round(d.y * 0.69f);
    const float mid = std::round(left + (d.x - left) * 0.55f);
    const float b1 = std::round(left + (d.x - left) * 0.30f), b2 = std::round(left + (d.x - left) * 0.60f);
    const float export_top = std::round(d.y * 0.87f), heads_top = std::round(d.y * 0.73f);
    // The Model panel shares the top row with the timeline, at least 19 font heights wide.
    const float model_left = std::round(std::min(left + (d.x - left) * 0.74f, d.x - ImGui::GetFontSize() * 19));
    ImVec2 pos, size;
    switch (p) {
    case Panel::Controls: pos = {0, 0}; size = {left, heads_top}; break;
    case Panel::Heads: pos = {0, heads_top}; size = {left, export_top - heads_top}; break;
    case Panel::Export: pos = {0, export_top}; size = {left, d.y - export_top}; break;
    case Panel::Timeline: pos = {left, 0}; size = {model_left - left, top}; break;
    case Panel::Model: pos = {model_left, 0}; size = {d.x - model_left, top}; break;
    case Panel::Attention: pos = {left, top}; size = {mid - left, bottom - top}; break;
    case Panel::KvCache: pos = {mid, top}; size = {d.x - mid, bottom - top}; break;
    case Panel::Mask: pos = {left, bottom}; size = {b1 - left, d.y - bottom}; break;
    case Panel::NextToken: pos = {b1, bottom}; size = {b2 - b1, d.y - bottom}; break;
    case Panel::Compare: pos = {b2, bottom}; size = {d.x - b2, d.y - bottom}; break;
    // Shown once the cache is paged, over the next-token and comparison panels (a batch has no comparison).
    case Panel::Memory: pos = {b1, bottom}; size = {d.x - b1, d.y - bottom}; break;
    }
    ImGui::SetNextWindowPos(pos, ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowSize(size, ImGuiCond_FirstUseEver);
}

std::string short_token(const Model& model, TokenId id, size_t max_chars) {
    std::string t = token_text(model, id);
    // A chip must never look empty or show an escape for a line break: spaces alone become middle dots
    // and a newline a return arrow (the tooltip keeps the exact bytes).
    if (!t.empty() && t.find_first_not_of(' ') == std::string::npos) {
        std::string dots;
        for (size_t k = 0; k < t.size(); ++k) dots += "\u00b7";
        t = dots;
    }
    for (size_t at; (at = t.find("\\x0a")) != std::string::npos;) t.replace(at, 4, "\u21b5");
    // Count UTF-8 code points, cut at max_chars.
    size_t n = 0, i = 0;
    for (; i < t.size(); ++i) {
        if ((uint8_t(t[i]) & 0xC0) != 0x80) {
            if (n == max_chars) break;
            ++n;
        }
    }
    if (i < t.size()) t = t.substr(0, i) + "..";
    return t;
}

std::string human_bytes(double b) {
    char buf[32];
    if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1 << 30));
    else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1 << 20));
    else if (b >= 1 << 10) std::snprintf(buf, sizeof buf, "%.1f KiB", b / double(1 << 10));
    else std::snprintf(buf, sizeof buf, "%.0f B", b);
    return buf;
}

int64_t encoder_step(const Trace& t, const EncoderOutput* enc) {
    for (size_t i = 0; enc && i < t.size(); ++i)
        if (t[i].rows.encoder.get() == enc) return int64_t(i);
    return -1;
}

std::string human_count(double n, const char* unit) {
    const struct { double scale; const char* prefix; const char* format; } steps[] = {
        {1e12, "T", "%.2f"}, {1e9, "G", "%.2f"}, {1e6, "M", "%.2f"}, {1e3, "k", "%.1f"}, {1, "", "%.0f"}};
    for (const auto& s : steps)
        if (n >= s.scale || s.scale == 1) {
            char num[32];
            std::snprintf(num, sizeof num, s.format, n / s.scale);
            // A unit is written apart from the number ("16.14 MFLOP", "523 FLOP"); a bare count keeps its
            // prefix attached ("3.4M")
            return std::string(num) + (*unit ? " " : "") + s.prefix + unit;
        }
    return {};
}

void help_marker(const char* text) {
    ImGui::SameLine();
    ImGui::TextDisabled("(?)");
    if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30.0f);
        ImGui::TextUnformatted(text);
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
    }
}

bool stepper(const char* label, int64_t& v, int64_t lo, int64_t hi) {
    ImGui::PushID(label);
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(label);
    ImGui::SameLine(0, 4);
    bool changed = false;
    const std::string name = label;
    ImGui::BeginDisabled(v <= lo);
    if (ImGui::ArrowButton("dec", ImGuiDir_Left)) v = std::max(lo, v - 1), changed = true;
    ImGui::EndDisabled();
    dump_item((name + " -").c_str());
    ImGui::SameLine(0, 2);
    // A drag box shows the whole number (a slider's grab would cover it); drag or double-click to type.
    int x = int(v);
    ImGui::SetNextItemWidth(ImGui::CalcTextSize("0000").x + ImGui::GetStyle().FramePadding.x * 2);
    if (ImGui::DragInt("##v", &x, 0.05f, int(lo), int(hi), "%d", ImGuiSliderFlags_AlwaysClamp)) v = x, changed = true;
    dump_item((name + " value").c_str());
    ImGui::SameLine(0, 2);
    ImGui::BeginDisabled(v >= hi);
    if (ImGui::ArrowButton("inc", ImGuiDir_Right)) v = std::min(hi, v + 1), changed = true;
    ImGui::EndDisabled();
    dump_item((name + " +").c_str());
    ImGui::SameLine(0, 4);
    ImGui::TextDisabled("of %lld", (long long)(hi + 1));
    ImGui::PopID();
    return changed;
}


}  // namespace kvscope::gui
