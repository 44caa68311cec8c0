#pragma once
// The timeline's chat turn marks: above the token chips, a coloured tick and label where each turn's
// message starts ("user 1") and where its reply starts ("assistant 1"), from Session::turns() as the
// snapshot holds them. The timeline tells it where each chip went; the marks draw themselves and name
// their positions for the scripted tests ("timeline turns").
//
//   TurnMarks(snap)          the marks of a chat (none for a plain prompt); nothing drawn yet
//   height()                 room to leave above the chips (0 without marks)
//   place(p, x)              the chip of position p starts at x (called for every position, drawn or not)
//   draw(dl, y)              ticks and labels in the band [y, y + height()); labels never overlap (each is
//                            shortened, "a1", or left out where the next mark follows too closely; a tick's
//                            tooltip names its marks); the turn of the leftmost visible chip is named at the left
//                            edge when its own mark has scrolled away. Each label drawn is dumped as
//                            "timeline turn label N"
#include <cstdint>
#include <string>
#include <vector>

#include "logic/snapshot.h"

struct ImDrawList;

namespace kvscope::gui {

class TurnMarks {
public:
    explicit TurnMarks(const Snapshot& s);
    float height() const;
    void place(int64_t p, float x);
    void draw(ImDrawList* dl, float y) const;

private:
    struct Mark {
        int64_t position = 0;
        int64_t turn = 0;
        std::string role;                // "user" | "assistant" | a system turn's role
        float x = 0;                     // where its chip starts (left of the window when scrolled away)
        bool placed = false;
    };
    std::vector<Mark> marks_;            // in position order
};

}  // namespace kvscope::gui
