#pragma once
// The Controls panel (controls_panel.cpp): (encoder-decoder: source + chips) prompt + token chips, step buttons, run/pause,
// options, cache switch, status; with a chat template, the chat.
#include "panels/panel.h"

namespace kvscope::gui {

void draw_controls(PanelContext& c);
// The option boxes: reset to the applied options when the session was rebuilt; what differs from the
// applied options, in words ("window 0 → 6, seed 0 → 3"), empty when nothing is pending.
void sync_option_edits(ViewPrefs& prefs, const Snapshot& snap);
std::string pending_options(const ViewPrefs& prefs, const Snapshot& snap);

}  // namespace kvscope::gui
