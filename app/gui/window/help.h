#pragma once
// The help overlay (F1, ?, or the Controls panel's "?" button; Escape or F1 closes it): every keyboard
// shortcut, read from the one table the window dispatches them from (widgets/shortcuts.h), and one line per
// panel on what it shows, read from the list of panels (panels/panel_list.h).
//
//   draw_help(open)   a window over the panels while open; its close button clears `open`. Dumps the lines
//                     it lists as texts "help shortcuts" and "help panels" (one per line) for the tests
#include "widgets/view.h"

namespace kvscope::gui {

void draw_help(bool& open);

}  // namespace kvscope::gui
