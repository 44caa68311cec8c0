#pragma once
// Scripted mode: a text file of the same intents the buttons and keys send, one per line.
//
//   prompt TEXT            set the prompt (resets)           prefill          one prefill chunk
//   prompt                 (nothing after it) an empty prompt: encoder-decoder models decode from the start token
//   source TEXT            encoder-decoder models: the encoder's input (resets)
//   decode [N]             N decode steps (default 1)        step [N]         N steps of whatever is next
//   run N | run end        like the Run buttons              back [N]         step back N times
//   reset                  back to before the first step    cache on|off     the KV cache switch
//   pause                  stop a run (after `background run ...`)
//   heads                  measure every head (the Heads panel's "Explain heads")
//   compare on|off         shadow session for the on/off panel
//   options k=v ...        chunk=, window=, max-new=, temperature=, top-k=, top-p=, seed= (restarts);
//                          sinks=S, block=B (0 = contiguous cache), share=0|1, seqs=N (a batch of N)
//   edit k=v ...           the same keys typed into the Controls' option boxes, not applied (pending)
//   suffix I [TEXT]        sequence I's prompt is the prompt + TEXT (grows the batch to I+1; restarts)
//   sequence I             which sequence of the batch the panels show
//   prompt-cache FILE|off  load the prompt's K/V from FILE when it matches, write it after the prefill
//   memory-json FILE       write the block pool as of the shown step as JSON (Memory panel's numbers)
//   model DIR              load another model folder
//   layer N | head N       select layer / head               view one-head|all-heads
//   values weights|scores  scale linear|log                  rownorm on|off
//   attention self|cross|encoder   which attention the Attention panel shows (encoder-decoder models)
//   attention-json FILE    write the map the Attention panel shows (kind, positions, token ids, scores,
//                          weights of the selected head) as JSON, once it is drawn
//   select QPOS KPOS       select a query and a key position (as a click in the attention map)
//   show-step N|newest     which step the panels show        zoom F [U V]     attention zoom and centre
//   export DIR [all-heads] export the shown step (selected head unless all-heads)
//   export-session DIR [all-heads]
//   frames N               render N frames                   measure N        render N frames, print timing
//   expect-error LINE      LINE's intent must fail; the script goes on (the window shows the error)
//   dismiss                close the error box, as its Dismiss button does
//   panel NAME             bring a panel that shares its place with others (a tab) to the front:
//                          "panel Cache on vs off", "panel Memory", "panel Heads"
//   background LINE        send LINE's intents and go on without waiting for the worker (e.g. a long
//                          prefill followed by `measure N`: frame times while the worker steps)
//   # comment, blank lines ignored
//
// Every other line waits until the worker has finished its intents (and at least one frame shows the
// result) before the next line runs, so a script always produces the same screenshot.
#include <string>
#include <vector>

#include "controller.h"
#include "view.h"

namespace kvscope::gui {

struct ScriptLine {
    int line = 0;                   // 1-based line number in the file
    std::vector<std::string> words; // words[0] = the command; prompt and source keep the rest of the line in words[1]
    bool background = false;        // `background LINE`: do not wait for the worker after this line
    bool expect_error = false;      // `expect-error LINE`: the line's intent must fail
};

// Parse and check every line up front; throws UsageError "FILE:LINE: ..." on the first bad line.
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
