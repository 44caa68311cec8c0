#pragma once
// What the window remembers between runs: the workspace shown last, the window's size and the UI scale
// setting (window/ui_scale.h applies it). One small
// JSON file in the user's config folder, $XDG_CONFIG_HOME/kvscope/settings.json (else
// ~/.config/kvscope/settings.json), never in the working directory; scripted runs neither read nor write it.
//
//   WindowSettings         the remembered values (width/height 0: not remembered)
//   kUiScaleAuto, kUiScaleMin, kUiScaleMax   the UI scale setting: Auto (0) or a factor from 0.75 to 3
//   parse_ui_scale(text, out)   "auto" or a factor in range (also "150%"): --ui-scale, the script, this file
//   settings_path()        the file's path; "" when neither XDG_CONFIG_HOME nor HOME is set
//   load_settings(path)    the file's values; a missing file gives the defaults; a file that is not valid
//                          (bad JSON, an unknown workspace, a size out of range) gives the defaults and a
//                          one-line warning; the window then does not save over it
//   save_settings(path, s) writes the file atomically (io/atomic_file.h); a file there that kvscope did not
//                          write is kept, and the error says so: kvscope only replaces its own file
#include <string>

#include "logic/workspace.h"

namespace kvscope::gui {

constexpr float kUiScaleAuto = 0, kUiScaleMin = 0.75f, kUiScaleMax = 3;
bool parse_ui_scale(const std::string& text, float& out);

struct WindowSettings {
    Workspace workspace = Workspace::Step;
    int width = 0, height = 0;  // the window's size in screen coordinates at the end of the last run
    float ui_scale = kUiScaleAuto;
    bool operator==(const WindowSettings&) const = default;
};

std::string settings_path();
WindowSettings load_settings(const std::string& path, std::string& warning);
bool save_settings(const std::string& path, const WindowSettings& s, std::string& error);

}  // namespace kvscope::gui
