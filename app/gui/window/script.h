#pragma once
// Scripted mode: a text file of the same intents the buttons and keys send, one per line. The commands,
// their arguments and what they do are listed once, in script.cpp's kSpecs: script_commands() returns
// them and `kvscope gui --help` prints them. Besides those:
//   expect-error LINE      LINE's intent must fail; the script goes on (the window shows the error)
//   background LINE        send LINE's intents and go on without waiting for the worker (e.g. a long
//                          prefill followed by `measure N`: frame times while the worker steps)
//   # comment, blank lines ignored
//
// Every other line waits until the worker has finished its intents (and at least one frame shows the
// result) before the next line runs, so a script always produces the same screenshot.
#include <string>
#include <vector>

#include "logic/controller.h"
#include "widgets/view.h"

namespace kvscope::gui {

// What a command's first argument names, so the output rules (core/io/output_path.h) are checked before
// the script runs.
enum class ScriptOutput { None, Folder, JsonFile, PromptCacheFile };

struct ScriptCommand {
    std::string name, usage, help;
    ScriptOutput output = ScriptOutput::None;
};
std::vector<ScriptCommand> script_commands();  // every command the parser accepts, in kSpecs order

struct ScriptLine {
    int line = 0;                   // 1-based line number in the file
    std::vector<std::string> words; // words[0] = the command; prompt and source keep the rest of the line in words[1]
    bool background = false;        // `background LINE`: do not wait for the worker after this line
    ScriptOutput output = ScriptOutput::None;  // words[1] is a file or folder this line writes
    bool expect_error = false;      // `expect-error LINE`: the line's intent must fail
};

// Parse and check every line up front; throws UsageError "FILE:LINE: ..." on the first bad line,
// LoadError when FILE cannot be read.
std::vector<ScriptLine> parse_script(const std::string& path);

// What a line asks of the window loop beyond commands and view changes.
struct ScriptEffect {
    int frames = 0;        // render this many frames before the next line
    int measure = 0;       // render and time this many frames
    bool background = false;  // go on without waiting for the worker
    bool pushed = false;      // the line sent intents (only such lines wait for the worker)
};

// Apply one line: commands are pushed to the controller (the window loop waits for the worker and then
// checks Snapshot::n_errors), view lines change prefs. `snap` is the state after the previous line.
// Throws UsageError for a line that cannot apply to that state (layer out of range, no such step).
ScriptEffect apply_script_line(const ScriptLine& line, Controller& ctl, const Snapshot& snap, ViewPrefs& prefs);

}  // namespace kvscope::gui
