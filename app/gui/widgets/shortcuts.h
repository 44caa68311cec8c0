#pragma once
// The window's keyboard shortcuts, declared once: the window's key handler dispatches from this table, the
// Controls panel's hint line and the help overlay (F1 or ?) list it, so neither can go stale.
//
//   Shortcut              one key: its name as shown, what it does, and what it asks of the window
//   shortcuts()           every shortcut, in the order the help lists them
//   shortcut_for_key(k)   the window-level shortcut of a GLFW key code (ImGui 1.86's backend indexes
//                         io.KeysDown by the same codes), nullptr if none; a shortcut may cover a run of
//                         keys (1-5: one workspace each), key - glfw_key says which
//   shortcut_for_char(c)  the window-level shortcut of a typed character ('?'), nullptr if none
//   shortcut_hint()       "Space = step  Backspace = back  R = reset": the shortcuts marked for the
//                         Controls panel's hint line
#include <string>
#include <vector>

namespace kvscope::gui {

enum class ShortcutAction {
    Step,       // the next prefill chunk or decode step
    Back,       // step back one step
    Reset,      // back to before the first step
    Help,       // show or hide the help overlay
    CloseHelp,  // hide the help overlay
    Workspace,  // show workspace (key - glfw_key) of widgets/workspace.h
    InTextBox,  // handled by the text box that has the keyboard (listed, not dispatched by the window)
};

struct Shortcut {
    const char* keys;        // as the help shows it: "Space", "F1", "?"
    const char* what;        // what it does, one line
    ShortcutAction action;
    int glfw_key = -1;       // the key that triggers it (GLFW key code), -1: typed as a character
    unsigned codepoint = 0;  // the character that triggers it, 0: a key
    const char* hint = nullptr;  // its word in the Controls panel's hint line, nullptr: not there
    int n_keys = 1;              // it covers keys glfw_key .. glfw_key + n_keys - 1
};

const std::vector<Shortcut>& shortcuts();
const Shortcut* shortcut_for_key(int glfw_key);
const Shortcut* shortcut_for_char(unsigned codepoint);
std::string shortcut_hint();

}  // namespace kvscope::gui
