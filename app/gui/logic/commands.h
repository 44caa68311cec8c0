#pragma once
// The user's intents: the only way back from the window to the engine. Buttons, keys, dropped folders and
// script lines each make one of these small structs and push it to the Controller (controller.h), whose
// worker applies it to the Workbench (workbench.h) between steps. One struct per intent, so no field
// means different things in different commands.
//
//   Command                  std::variant of every intent below
//   command_name(c)          "prefill", "set options", ... for messages
//   stops_run(c)             intents that end a run in progress (the rest wait for it, or apply between steps)
//   is_step(c)               intents that step the engine (they queue behind a run)
//   place_of(c)              the panel whose button (or drop, or script line) sends it: where its error shows
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "report/plot.h"
#include "run/session.h"

namespace kvscope::gui {

// Several sequences stepped together. Sequence i's prompt is the prompt's tokens followed by the tokens of
// suffixes[i] (tokenized on its own, so the shared part stays token-identical), and it samples with
// seed + i, so identical prompts can diverge.
struct BatchOptions {
    int64_t n_seq = 1;                   // N >= 1
    std::vector<std::string> suffixes;   // (at most N) text after the prompt for sequence i; missing = none
    std::string prompt_cache;            // N = 1: prompt cache file (prompt_cache.h) loaded by the first prefill
                                         // when it matches, (re)written after the prefill; empty = none
    bool operator==(const BatchOptions&) const = default;
};

struct SetPrompt { std::string text; };      // prompt text ("1,2,3" ids without a tokenizer); resets
struct SetSource { std::string text; };      // encoder-decoder models: the encoder's input; resets
struct Prefill {};                           // one prefill chunk
struct Decode { int64_t n = 1; };            // n decode steps
struct Step {};                              // whatever comes next, once
struct Run { int64_t n = -1; };              // n steps of whatever comes next; n < 0 = to the end
struct Pause {};                             // stop a run after the step in progress
struct Back { int64_t n = 1; };              // undo the last n steps
struct Reset {};                             // back to before the first step, same prompt
struct SetCache { bool on = true; };         // the KV cache switch, from the next step on
struct SetCompare { bool on = true; };       // keep the shadow session (cache flipped) in step
struct SetOptions {                          // rebuild with the same prompt
    SessionOptions options;
    BatchOptions batch;
    std::vector<std::string> given;          // option names (core/run/options.h) typed explicitly (a script's
};                                           // keys): each must apply to the rest
struct LoadModel { std::string dir; };       // on failure the current model stays
struct ExportStep { std::string dir; int64_t step = -1, layer = -1, head = -1; PlotOutput plots{}; };  // step -1 = newest;
                                                                                   // layer -1 = all; plots: PNG/SVG
struct ExportSession { std::string dir; int64_t layer = -1, head = -1; PlotOutput plots{}; };  // layer -1 = all heads
struct ExplainHeads {};                      // every head's previous-token and induction score (core/analysis/heads.h)
struct Select { int64_t sequence = 0; };     // the sequence of the batch the panels show
struct SendChat { std::string text; };       // a user message: the first starts the chat (sets the prompt), later
                                             // ones append a turn to the cache; the reply then runs to its end
struct MeasureLab { std::vector<std::string> specs; };  // the cache lab (core/analysis/cache_lab.h) over the shown sequence's
                                                        // tokens so far; specs empty = lab_default_specs
struct EditCache {                           // evict / restore / patch one position between steps (cache_edit.h)
    CacheEditKind kind = CacheEditKind::Evict;
    int64_t position = 0;
    int64_t layer = -1, head = -1;           // -1 = every layer / every K/V head
    std::string patch_text;                  // Patch: the other prompt, whose run supplies the rows
};

using Command = std::variant<SetPrompt, SetSource, Prefill, Decode, Step, Run, Pause, Back, Reset, SetCache, SetCompare,
                             SetOptions, LoadModel, ExportStep, ExportSession, ExplainHeads, Select, SendChat,
                             MeasureLab, EditCache>;

// Where an intent comes from, so its error shows there: the model picker (and a folder dropped on the
// window), the Export panel, the Heads panel, the Cache lab tab, the Cache edits tab, or Controls for
// everything else.
enum class Place { Controls, Model, Export, Heads, Lab, Edits };
const char* place_name(Place p);  // "controls" | "model" | "export" | "heads" | "lab" | "edits"
Place place_of(const Command& c);

const char* command_name(const Command& c);
bool stops_run(const Command& c);
bool is_step(const Command& c);

}  // namespace kvscope::gui
