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
    const float h = height();
    // The turn the leftmost visible chip belongs to stays named at the strip's left edge when its own
    // mark has scrolled out of view (marks are in position order, so their x grows).
    const float left = ImGui::GetWindowPos().x + 2;
    const Mark* scrolled = nullptr;
    const Mark* next = nullptr;
    for (const Mark& m : marks_) {
        if (!m.placed) continue;
        if (m.x < left) scrolled = &m;
        else if (!next) next = &m;
    }
    if (scrolled) {
        const bool user = scrolled->role != "assistant";
        const std::string label = "< " + scrolled->role + " " + std::to_string(scrolled->turn);
        if (!next || next->x > left + ImGui::CalcTextSize(label.c_str()).x + 12)
            dl->AddText({left + 2, y}, user ? IM_COL32(120, 180, 255, 170) : IM_COL32(120, 220, 140, 170), label.c_str());
    }
    for (const Mark& m : marks_) {
        if (!m.placed) continue;
        const bool user = m.role != "assistant";
        const ImU32 col = user ? IM_COL32(120, 180, 255, 255) : IM_COL32(120, 220, 140, 255);
        dl->AddLine({m.x, y}, {m.x, y + h + 2}, col, 2);
        const std::string label = m.role + " " + std::to_string(m.turn);
        dl->AddText({m.x + 4, y}, col, label.c_str());
    }
}

}  // namespace kvscope::gui
