// The keyboard shortcuts, one table (see shortcuts.h). The GLFW header only names the key codes here.
#include "widgets/shortcuts.h"

#include <GLFW/glfw3.h>

namespace kvscope::gui {

const std::vector<Shortcut>& shortcuts() {
    static const std::vector<Shortcut> table = {
        {"Space", "step: the next prefill chunk, then one decode step at a time", ShortcutAction::Step, GLFW_KEY_SPACE, 0, "step"},
        {"Backspace", "step back one step (the cache rolls back with it)", ShortcutAction::Back, GLFW_KEY_BACKSPACE, 0, "back"},
        {"R", "reset: back to before the first step, the prompt kept", ShortcutAction::Reset, GLFW_KEY_R, 0, "reset"},
        {"F1", "show or hide this help", ShortcutAction::Help, GLFW_KEY_F1},
        {"?", "show or hide this help", ShortcutAction::Help, -1, '?'},
        {"Escape", "close this help", ShortcutAction::CloseHelp, GLFW_KEY_ESCAPE},
        {"1-5", "show a workspace: 1 Step, 2 Cache, 3 Memory, 4 Lab, 5 Chat (the session stays as it is)",
         ShortcutAction::Workspace, GLFW_KEY_1, 0, nullptr, 5},
        {"Enter", "in the chat's message box: send the message; in the model path box: load the folder",
         ShortcutAction::InTextBox},
    };
    return table;
}

const Shortcut* shortcut_for_key(int glfw_key) {
    for (const Shortcut& s : shortcuts())
        if (s.action != ShortcutAction::InTextBox && s.glfw_key >= 0 && glfw_key >= s.glfw_key &&
            glfw_key < s.glfw_key + s.n_keys)
            return &s;
    return nullptr;
}

const Shortcut* shortcut_for_char(unsigned codepoint) {
    for (const Shortcut& s : shortcuts())
        if (s.codepoint != 0 && s.codepoint == codepoint) return &s;
    return nullptr;
}

std::string shortcut_hint() {
    std::string line;
    for (const Shortcut& s : shortcuts())
        if (s.hint) line += (line.empty() ? "" : "  ") + std::string(s.keys) + " = " + s.hint;
    return line;
}

}  // namespace kvscope::gui
