#pragma once
// The window: the frame loop that draws every panel from the controller's newest snapshot, and the
// scripted mode that feeds script lines and saves a screenshot. `kvscope gui` (app/cli/gui.cpp) parses
// the command line and calls run_window.
//
//   run_window(model, options)   open the window on `model` and run until it closes (or the script ends);
//                                returns the process exit code; throws UsageError when no window can open
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forward/model.h"
#include "window/script.h"

namespace kvscope::gui {

struct WindowOptions {
    int width = 1600, height = 1000;     // pixels
    bool size_given = false;             // false: shrink to the monitor's work area
    std::string script_path;             // scripted mode: the file the lines came from (for messages)
    std::vector<ScriptLine> script;      // scripted mode: the intents, one per line (parse_script)
    bool scripted = false;               // a script or a screenshot was asked for
    std::string screenshot;              // scripted mode: save the window as PNG after the script
    std::string layout_dump;             // keep this file updated with widget rectangles (UI tests)
    int64_t lesson = 0;                  // > 0: open guided lesson N at start (gui --lesson N)
    std::optional<float> ui_scale;       // --ui-scale: kUiScaleAuto or a factor (window/ui_scale.h); unset: keep the setting
};

int run_window(std::shared_ptr<const Model> model, const WindowOptions& options);

}  // namespace kvscope::gui
