#include "widgets/turn_marks.h"

#include <imgui.h>

#include "widgets/test_dumps.h"

namespace kvscope::gui {

TurnMarks::TurnMarks(const Snapshot& s) {
    // A plain prompt is one turn with no role: no marks. A chat's first turn came from set_prompt, so its
    // role is empty too; it is the first user message.
    if (s.chat.empty() && s.turns.size() < 2) return;
    const int64_t n_tokens = int64_t(s.prompt().size() + s.generated().size());
    for (size_t k = 0; k < s.turns.size(); ++k) {
        const Turn& t = s.turns[k];
        // Numbered from 1 as a reader counts turns (and as `chat --json` does); Session::turns() from 0.
        marks_.push_back({t.first_position, int64_t(k) + 1, t.role.empty() ? "user" : t.role});
        const int64_t reply = t.first_position + t.n_appended();
        // The reply's first token sits at `reply` once sampled (the last prompt token predicts it).
        if (reply < n_tokens) marks_.push_back({reply, int64_t(k) + 1, "assistant"});
    }
    std::string text;
    for (const Mark& m : marks_)
        text += (text.empty() ? "" : " ") + m.role + " " + std::to_string(m.turn) + "@" + std::to_string(m.position);
    dump_text("timeline turns", text);
}

float TurnMarks::height() const { return marks_.empty() ? 0.0f : ImGui::GetTextLineHeight() + 4; }

void TurnMarks::place(int64_t p, float x) {
    for (Mark& m : marks_)
        if (m.position == p) m.x = x, m.placed = true;
}

void TurnMarks::draw(ImDrawList* dl, float y) const {
    const float h = height(), gap = 6;
    // Labels never overlap: each runs from its tick towards the next placed mark and takes the longest form
    // that fits there ("assistant 1", then "a1"), or none (the tick stays, and its tooltip names it). The
    // turn the leftmost visible chip belongs to stays named at the strip's left edge when its own mark has
    // scrolled out of view (marks are in position order, so their x grows).
    const float left = ImGui::GetWindowPos().x + 2;
    std::vector<const Mark*> placed;
    const Mark* scrolled = nullptr;
    for (const Mark& m : marks_) {
        if (!m.placed) continue;
        if (m.x < left) scrolled = &m;
        else placed.push_back(&m);
    }
    auto colour = [](const Mark& m, int alpha) {
        return m.role != "assistant" ? IM_COL32(120, 180, 255, alpha) : IM_COL32(120, 220, 140, alpha);
    };
    // The widest form of m's label that fits in [x0, x1), "" if none does.
    auto fitting = [&](const Mark& m, const std::string& prefix, float x0, float x1) {
        const std::string turn = std::to_string(m.turn);
        for (const std::string& label : {prefix + m.role + " " + turn, prefix + m.role.substr(0, 1) + turn})
            if (x0 + ImGui::CalcTextSize(label.c_str()).x <= x1) return label;
        return std::string();
    };
    int n_label = 0;
    auto label_at = [&](const Mark& m, float x0, float x1, const std::string& prefix, int alpha) {
        const std::string label = fitting(m, prefix, x0, x1);
        if (label.empty()) return;
        dl->AddText({x0, y}, colour(m, alpha), label.c_str());
        dump_box(("timeline turn label " + std::to_string(n_label++)).c_str(), x0, y, x0 + ImGui::CalcTextSize(label.c_str()).x,
                 y + ImGui::GetTextLineHeight());
    };
    const float no_limit = 1e30f;
    if (scrolled) label_at(*scrolled, left + 2, placed.empty() ? no_limit : placed[0]->x - gap, "< ", 170);
    for (size_t i = 0; i < placed.size(); ++i) {
        const Mark& m = *placed[i];
        dl->AddLine({m.x, y}, {m.x, y + h + 2}, colour(m, 255), 2);
        label_at(m, m.x + 4, i + 1 < placed.size() ? placed[i + 1]->x - gap : no_limit, "", 255);
    }
    // Hovering a tick names every mark within a few pixels of it (marks at one position share a tick).
    if (!ImGui::IsWindowHovered()) return;
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    if (mouse.y < y || mouse.y > y + h + 2) return;
    std::string tip;
    for (const Mark* m : placed)
        if (mouse.x >= m->x - 4 && mouse.x <= m->x + 4)
            tip += (tip.empty() ? "" : "\n") + m->role + " " + std::to_string(m->turn) + " starts at position " +
                   std::to_string(m->position);
    if (!tip.empty()) ImGui::SetTooltip("%s", tip.c_str());
}

}  // namespace kvscope::gui
