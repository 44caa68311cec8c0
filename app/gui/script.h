#pragma once
// Scripted mode: a text file of the same intents the buttons and keys send, one per line.
//
//   prompt TEXT            set the prompt (resets)           prefill          one prefill chunk
//   decode [N]             N decode steps (default 1)        step [N]         N steps of whatever is next
//   run N | run end        like the Run buttons              back [N]         step back N times
//   reset                                                     cache on|off     the KV cache switch
//   compare on|off         shadow session for the on/off panel
//   options k=v ...        chunk=, window=, max-new=, temperature=, top-k=, top-p=, seed= (restarts)
//   model DIR              load another model folder
//   layer N | head N       select layer / head               view one-head|all-heads
//   values weights|scores  scale linear|log                  rownorm on|off
//   select QPOS KPOS       select a query and a key position (as a click in the attention map)
//   show-step N|newest     which step the panels show        zoom F [U V]     attention zoom and centre
//   export DIR [all-heads] export the shown step (selected head unless all-heads)
//   export-session DIR [all-heads]
//   frames N               render N frames                   measure N        render N frames, print timing
//   # comment, blank lines ignored
#include <string>
#include <vector>

#include "commands.h"
#include "view.h"

namespace kvscope::gui {

struct ScriptLine {
    int line = 0;                   // 1-based line number in the file
    std::vector<std::string> words; // words[0] = the command; prompt keeps the rest of the line in words[1]
};

// Parse and check every line up front; throws UsageError "FILE:LINE: ..." on the first bad line.
std::vector<ScriptLine> parse_script(const std::string& path);

// What a line asks of the window loop beyond commands and view changes.
struct ScriptEffect {
    int frames = 0;        // render this many frames before the next line
    int measure = 0;       // render and time this many frames
};

// Apply one line: commands go through the controller at once, view lines change prefs.
// Throws UsageError with the controller's message when the command fails.
ScriptEffect apply_script_line(const ScriptLine& line, Controller& ctl, ViewPrefs& prefs);

}  // namespace kvscope::gui
