#include "window/script.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "base/errors.h"
#include "io/read_file.h"
#include "panels/controls_panel.h"
#include "io/atomic_file.h"
#include "panels/figures.h"
#include "panels/lesson_panel.h"
#include "panels/panel.h"
#include "window/ui_scale.h"

namespace kvscope::gui {
namespace {

std::string where(const std::string& path, int line) { return path + ":" + std::to_string(line) + ": "; }

bool to_int(const std::string& s, int64_t& out) {
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end;
}

bool to_real(const std::string& s, double& out) {
    try {
        size_t used = 0;
        out = std::stod(s, &used);
        return used == s.size();
    } catch (...) {
        return false;
    }
}

// Every script command: the parser checks argument counts against it and `kvscope gui --help` prints it
// (script_commands()). output: which argument names a file or folder the line writes, 0 = none.
struct Spec {
    const char* name;
    int min_args, max_args;
    const char* usage;
    const char* help;
    ScriptOutput output = ScriptOutput::None;
};
const Spec kSpecs[] = {
    {"prompt", 1, 1, "prompt TEXT", "set the prompt (resets); nothing after it: an empty prompt (encoder-decoder models decode from the start token)"},
    {"source", 1, 1, "source TEXT", "encoder-decoder models: the encoder's input (resets)"},
    {"chat", 1, 1, "chat TEXT", "models with a chat template: send a user message (the first starts the chat) and run "
                                "until the reply ends"},
    {"prefill", 0, 0, "prefill", "one prefill chunk"},
    {"decode", 0, 1, "decode [N]", "N decode steps (default 1)"},
    {"step", 0, 1, "step [N]", "N steps of whatever is next"},
    {"run", 1, 1, "run N | run end", "like the Run buttons"},
    {"back", 0, 1, "back [N]", "step back N times"},
    {"reset", 0, 0, "reset", "back to before the first step"},
    {"pause", 0, 0, "pause", "stop a run (after `background run ...`)"},
    {"cache", 1, 1, "cache on|off", "the KV cache switch"},
    {"compare", 1, 1, "compare on|off", "shadow session for the Cache on vs off panel"},
    {"edit", 1, 12, "edit k=v ...", "the keys of options, typed into the Controls' option boxes without applying (pending)"},
    {"options", 1, 12, "options k=v ...", "(the keys: options_help())"},
    {"model", 1, 1, "model DIR", "load another model folder"},
    {"layer", 1, 1, "layer N", "select a layer"},
    {"head", 1, 1, "head N", "select a head"},
    {"view", 1, 1, "view one-head|all-heads", "one head or every head of the layer"},
    {"values", 1, 1, "values weights|scores", "what the attention map shows"},
    {"scale", 1, 1, "scale linear|log", "colour scale of the attention map"},
    {"rownorm", 1, 1, "rownorm on|off", "normalise each row of the attention map"},
    {"select", 2, 2, "select QPOS KPOS", "select a query and a key position (as a click in the attention map)"},
    {"show-step", 1, 1, "show-step N|newest", "which step the panels show"},
    {"zoom", 1, 3, "zoom F [U V]", "attention zoom and centre"},
    {"export", 1, 2, "export DIR [all-heads]", "export the shown step (selected head unless all-heads)", ScriptOutput::Folder},
    {"export-session", 1, 2, "export-session DIR [all-heads]", "export every step of the shown sequence", ScriptOutput::Folder},
    {"export-dir", 1, 1, "export-dir DIR", "the Export panel's folder, as typed into its box (exports and figures go there)"},
    {"save-figure", 1, 2, "save-figure PANEL [NAME]", "the panel's Save figure button: kv-cache, mask, kv-quant, heads, compare, lab or logit-lens, "
                                                      "as the Export panel's format into its folder's figures/; NAME replaces the file "
                                                      "name (the part and extension are added)"},
    {"export-format", 1, 2, "export-format png [N] | svg", "the Export panel's heatmap format: PNG at scale N (1..8, default 1) or SVG"},
    {"frames", 1, 1, "frames N", "render N frames"},
    {"measure", 1, 1, "measure N", "render N frames, print timing"},
    {"heads", 0, 0, "heads", "measure every head (the Heads panel's \"Explain heads\")"},
    {"suffix", 1, 2, "suffix I [TEXT]", "sequence I's prompt is the prompt + TEXT (grows the batch to I+1; restarts)"},
    {"sequence", 1, 1, "sequence I", "which sequence of the batch the panels show"},
    {"memory-json", 1, 1, "memory-json FILE", "write the block pool as of the shown step as JSON", ScriptOutput::JsonFile},
    {"prompt-cache", 1, 1, "prompt-cache FILE|off", "load the prompt's K/V from FILE when it matches, write it after the prefill",
     ScriptOutput::PromptCacheFile},
    {"attention", 1, 1, "attention self|cross|encoder", "which attention the Attention panel shows (encoder-decoder models)"},
    {"attention-json", 1, 1, "attention-json FILE", "write the map the Attention panel shows as JSON, once it is drawn",
     ScriptOutput::JsonFile},
    {"rotary-json", 1, 1, "rotary-json FILE", "write the Rotary panel's view (selected query and key) as JSON, once it is drawn",
     ScriptOutput::JsonFile},
    {"evict", 1, 3, "evict POS [LAYER|all [HEAD|all]]", "evict position POS's keys from the cache (every layer and K/V head "
                                                        "unless given); the Cache edits tab shows the next prediction before and after"},
    {"restore", 1, 3, "restore POS [LAYER|all [HEAD|all]]", "put evicted keys of POS back"},
    {"patch", 3, 3, "patch POS LAYER|all TEXT", "overwrite POS's K/V (one layer or all) with those of a run of the prompt TEXT"},
    {"dismiss", 0, 0, "dismiss", "close the error box, as its Dismiss button does"},
    {"lab", 0, 12, "lab [SPEC; SPEC ...]", "the Cache lab tab's Measure button: configurations separated by ';' (none: the default list)"},
    {"quant-view", 1, 3, "quant-view int8|fp8|int4 [G R]", "the K/V quant tab's format (int4: group G, residual R)"},
    {"kv-heads", 1, 1, "kv-heads open|closed", "open or close the KV cache panel's K/V heads section (groups, bytes per token)"},
    {"help", 1, 1, "help on|off", "the help overlay (F1 or ?): every keyboard shortcut and what each panel shows"},
    {"lesson", 1, 1, "lesson N", "open guided lesson N (the Learn menu's N-th, assets/lessons/): loads the model folder it names, "
                                   "restores the default options and the cache switch"},
    {"lesson-do", 0, 0, "lesson-do", "the open lesson's \"Do it for me\": the step's intents and view settings"},
    {"lesson-next", 0, 0, "lesson-next", "the lesson's Next: the step's check must pass against the engine's record, else the "
                                         "line fails with the lesson's message (expected vs what the record shows)"},
    {"lesson-json", 1, 1, "lesson-json FILE", "write the open lesson's state as JSON: lesson, step, check state and message, "
                                              "and the values the check compared (name, actual, expected)", ScriptOutput::JsonFile},
    {"ui-scale", 1, 1, "ui-scale S", "size of text and widgets: auto or a factor from 0.75 to 3 (the View menu; --ui-scale)"},
    {"panel", 1, 4, "panel NAME", "show a panel: its workspace (unless the one shown has it), and its tab in front: \"panel Cache on vs off\", \"panel Memory\", \"panel Heads\""},
    {"workspace", 1, 1, "workspace NAME", "show a workspace, as the bar at the top or keys 1-5 do: Step, Cache, Memory, Lab or Chat (or 1-5)"},
};

bool on_off(const std::string& s, bool& out) {
    if (s == "on") return out = true, true;
    if (s == "off") return out = false, true;
    return false;
}

}  // namespace

std::vector<ScriptCommand> script_commands() {
    std::vector<ScriptCommand> out;
    for (const Spec& s : kSpecs)
        out.push_back({s.name, s.usage, std::string(s.name) == "options" ? script_options_help() : s.help, s.output});
    return out;
}

std::vector<ScriptLine> parse_script(const std::string& path) {
    std::istringstream f(read_file_bounded(path, k_script_file));  // a file that cannot be read: LoadError, exit 1
    std::vector<ScriptLine> out;
    std::string text;
    int n = 0;
    while (std::getline(f, text)) {
        ++n;
        if (!text.empty() && text.back() == '\r') text.pop_back();
        const size_t first = text.find_first_not_of(" \t");
        if (first == std::string::npos || text[first] == '#') continue;
        text = text.substr(first);
        ScriptLine l;
        l.line = n;
        if (text.rfind("background", 0) == 0 && (text.size() == 10 || text[10] == ' ' || text[10] == '\t')) {
            const size_t rest = text.find_first_not_of(" \t", 10);
            if (rest == std::string::npos) throw UsageError(where(path, n) + "background needs a command line after it");
            text = text.substr(rest);
            l.background = true;
        }
        if (text.rfind("expect-error", 0) == 0 && (text.size() == 12 || text[12] == ' ' || text[12] == '\t')) {
            const size_t rest = text.find_first_not_of(" \t", 12);
            if (rest == std::string::npos) throw UsageError(where(path, n) + "expect-error needs a command line after it");
            text = text.substr(rest);
            l.expect_error = true;
        }
        const size_t sp = text.find_first_of(" \t");
        l.words.push_back(text.substr(0, sp));
        if (l.words[0] == "prompt" || l.words[0] == "chat") {
            // An empty prompt is allowed: an encoder-decoder's decoder starts from its start token alone.
            l.words.push_back(sp == std::string::npos ? std::string() : text.substr(sp + 1));
        } else if (l.words[0] == "source") {
            if (sp == std::string::npos) throw UsageError(where(path, n) + "source needs text");
            l.words.push_back(text.substr(sp + 1));
        } else if (l.words[0] == "patch" && sp != std::string::npos) {
            // patch POS LAYER TEXT: TEXT is the rest of the line, spaces kept
            std::istringstream rest(text.substr(sp));
            std::string w;
            for (int i = 0; i < 2 && rest >> w; ++i) l.words.push_back(w);
            std::string tail;
            std::getline(rest, tail);
            const size_t t0 = tail.find_first_not_of(" \t");
            if (t0 != std::string::npos) l.words.push_back(tail.substr(t0));
        } else if (l.words[0] == "suffix" && sp != std::string::npos) {
            // suffix I TEXT: the rest of the line after the index, spaces kept (TEXT may be empty)
            const std::string rest = text.substr(text.find_first_not_of(" \t", sp));
            const size_t sp2 = rest.find_first_of(" \t");
            l.words.push_back(rest.substr(0, sp2));
            if (sp2 != std::string::npos) l.words.push_back(rest.substr(sp2 + 1));
        } else {
            std::istringstream rest(sp == std::string::npos ? "" : text.substr(sp));
            std::string w;
            while (rest >> w) l.words.push_back(w);
        }
        const Spec* spec = nullptr;
        for (const Spec& s : kSpecs)
            if (l.words[0] == s.name) spec = &s;
        if (!spec) throw UsageError(where(path, n) + "unknown command '" + l.words[0] + "' (kvscope gui --help lists them)");
        const int n_args = int(l.words.size()) - 1;
        if (n_args < spec->min_args || n_args > spec->max_args)
            throw UsageError(where(path, n) + l.words[0] + " takes " + std::to_string(spec->min_args) +
                             (spec->max_args != spec->min_args ? ".." + std::to_string(spec->max_args) : "") +
                             " argument(s): " + spec->usage + " (see kvscope gui --help)");
        // Check argument syntax now, so a typo fails before anything runs.
        const std::string& cmd = l.words[0];
        int64_t x = 0;
        bool b = false;
        auto bad = [&](const std::string& why) {
            throw UsageError(where(path, n) + cmd + ": " + why + " (usage: " + spec->usage + "; see kvscope gui --help)");
        };
        if (cmd == "lesson" && (!to_int(l.words[1], x) || x < 1)) bad("expected a lesson number >= 1, got '" + l.words[1] + "'");
        if ((cmd == "decode" || cmd == "step" || cmd == "back" || cmd == "layer" || cmd == "head" || cmd == "frames" ||
             cmd == "measure" || cmd == "sequence" || cmd == "suffix") && n_args >= 1 && (!to_int(l.words[1], x) || x < 0))
            bad("expected a number >= 0, got '" + l.words[1] + "'");
        if (cmd == "evict" || cmd == "restore" || cmd == "patch") {
            if (!to_int(l.words[1], x)) bad("expected a position, got '" + l.words[1] + "'");
            for (int i = 2; i <= std::min(n_args, cmd == "patch" ? 2 : 3); ++i)
                if (l.words[size_t(i)] != "all" && !to_int(l.words[size_t(i)], x))
                    bad("expected a number or all, got '" + l.words[size_t(i)] + "'");
        }
        if (cmd == "run" && l.words[1] != "end" && (!to_int(l.words[1], x) || x < 1)) bad("expected N >= 1 or 'end'");
        if ((cmd == "cache" || cmd == "compare" || cmd == "rownorm" || cmd == "help") && !on_off(l.words[1], b))
            bad("expected on or off");
        float scale = 0;
        if (cmd == "ui-scale" && !parse_ui_scale(l.words[1], scale)) bad("expected auto or a factor from 0.75 to 3");
        if (cmd == "view" && l.words[1] != "one-head" && l.words[1] != "all-heads") bad("expected one-head or all-heads");
        if (cmd == "values" && l.words[1] != "weights" && l.words[1] != "scores") bad("expected weights or scores");
        if (cmd == "attention" && l.words[1] != "self" && l.words[1] != "cross" && l.words[1] != "encoder")
            bad("expected self, cross or encoder");
        if (cmd == "scale" && l.words[1] != "linear" && l.words[1] != "log") bad("expected linear or log");
        if (cmd == "kv-heads" && l.words[1] != "open" && l.words[1] != "closed") bad("expected open or closed");
        if (cmd == "panel") {
            std::string title;
            for (size_t i = 1; i < l.words.size(); ++i) title += (i > 1 ? " " : "") + l.words[i];
            Panel p;
            if (!panel_named(title, p)) bad("no panel '" + title + "' (Controls, Heads, Export, Token timeline, Model, "
                                            "Attention, KV cache, Mask, Next token, Cache on vs off, Memory, Rotary, Logit lens, K/V quant, Cache lab, Cache edits, Lesson)");
        }
        if (Workspace w; cmd == "workspace" && !workspace_named(l.words[1], w))
            bad("no workspace '" + l.words[1] + "' (Step, Cache, Memory, Lab, Chat or 1-5)");
        if (cmd == "quant-view") {
            if (l.words[1] != "int8" && l.words[1] != "fp8" && l.words[1] != "int4") bad("expected int8, fp8 or int4");
            for (int i = 2; i <= n_args; ++i)
                if (!to_int(l.words[size_t(i)], x) || x < (i == 2 ? 1 : 0)) bad("expected G >= 1 and R >= 0");
        }
        if (cmd == "select" && (!to_int(l.words[1], x) || !to_int(l.words[2], x))) bad("expected two positions");
        if (cmd == "show-step" && l.words[1] != "newest" && (!to_int(l.words[1], x) || x < 0)) bad("expected N or newest");
        if (cmd == "save-figure") {
            Panel p;
            if (!figure_panel_named(l.words[1], p)) bad("no figure '" + l.words[1] + "' (kv-cache, mask, kv-quant, heads, compare, lab, logit-lens)");
            if (n_args == 2 && l.words[2].find('/') != std::string::npos) bad("NAME is a file name, without a folder");
        }
        if (cmd == "export-format" && l.words[1] != "png" && l.words[1] != "svg") bad("expected png or svg");
        if (cmd == "export-format" && n_args == 2 &&
            (l.words[1] != "png" || !to_int(l.words[2], x) || x < 1 || x > plot_max_scale))
            bad("expected png N with N in 1.." + std::to_string(plot_max_scale) + " (an SVG has no scale)");
        if ((cmd == "export" || cmd == "export-session") && n_args == 2 && l.words[2] != "all-heads")
            bad("the second word can only be all-heads");
        if (cmd == "zoom") {
            double r = 0;
            for (int i = 1; i <= n_args; ++i)
                if (!to_real(l.words[size_t(i)], r)) bad("expected numbers");
        }
        if (cmd == "options" || cmd == "edit")
            for (int i = 1; i <= n_args; ++i) {
                try {
                    script_option(l.words[size_t(i)]);  // the key and its value, as the option table says
                } catch (const UsageError& e) {
                    bad(e.what());
                }
            }
        l.output = spec->output;
        if (l.background && (cmd == "frames" || cmd == "measure" || cmd == "layer" || cmd == "head" || cmd == "view" ||
                             cmd == "values" || cmd == "scale" || cmd == "rownorm" || cmd == "select" ||
                             cmd == "show-step" || cmd == "zoom" || cmd == "memory-json" || cmd == "attention" ||
                             cmd == "attention-json" || cmd == "rotary-json" || cmd == "edit" || cmd == "dismiss" || cmd == "panel" ||
                             cmd == "help" || cmd == "ui-scale" || cmd == "lesson" || cmd == "lesson-do" || cmd == "lesson-next" || cmd == "lesson-json" ||
                             cmd == "kv-heads" || cmd == "export-format" || cmd == "save-figure" || cmd == "export-dir" || cmd == "quant-view"))
            bad("only intents for the worker can run in the background");
        out.push_back(std::move(l));
    }
    return out;
}

// "evict|restore POSITION [LAYER|all] [HEAD|all]" or "patch POSITION LAYER TEXT" as an intent.
static EditCache cache_edit_of(const ScriptLine& l, int64_t position) {
    const std::string& cmd = l.words[0];
    EditCache e;
    e.kind = cmd == "evict" ? CacheEditKind::Evict : cmd == "restore" ? CacheEditKind::Restore : CacheEditKind::Patch;
    e.position = position;
    auto index = [&](size_t i) {
        int64_t v = -1;
        if (l.words.size() > i && l.words[i] != "all") to_int(l.words[i], v);
        return v;
    };
    e.layer = index(2);
    if (e.kind == CacheEditKind::Patch) {
        e.patch_text = l.words[3];
    } else {
        e.head = index(3);
    }
    return e;
}

namespace {

// One line being applied: its command and first argument (as a count, 1 when absent), where it goes, and
// what it asks of the window loop.
struct LineRun {
    const ScriptLine& l;
    const std::string& cmd;
    const std::string arg;
    int64_t n;
    Controller& ctl;
    const Snapshot& snap;
    ViewPrefs& v;
    ScriptEffect fx;

    LineRun(const ScriptLine& line, Controller& c, const Snapshot& s, ViewPrefs& prefs)
        : l(line), cmd(line.words[0]), arg(line.words.size() > 1 ? line.words[1] : ""), n(1), ctl(c), snap(s), v(prefs) {
        if (l.words.size() > 1) to_int(arg, n);
    }
    void run(Command c) {  // push an intent; a refused one fails the line
        fx.pushed = true;
        if (!ctl.push(c)) throw UsageError("line " + std::to_string(l.line) + ": " + cmd + ": " + ctl.progress().notice);
    }
    std::string rest() const {  // words[1..] joined by spaces
        std::string text;
        for (size_t i = 1; i < l.words.size(); ++i) text += (i > 1 ? " " : "") + l.words[i];
        return text;
    }
};

// Stepping the session and its inputs: prompt, steps, run, back, reset, pause, cache, compare, lab, heads.
bool apply_step_line(LineRun& r) {
    const std::string& cmd = r.cmd;
    if (cmd == "prompt") r.run(SetPrompt{r.arg});
    else if (cmd == "source") r.run(SetSource{r.arg});
    else if (cmd == "chat") r.run(SendChat{r.arg});
    else if (cmd == "prefill") r.run(Prefill{});
    else if (cmd == "decode" || cmd == "step")
        for (int64_t i = 0; i < r.n; ++i) r.run(cmd == "decode" ? Command(Decode{1}) : Command(Step{}));
    else if (cmd == "run") r.run(Run{r.arg == "end" ? -1 : r.n});
    else if (cmd == "back") r.run(Back{r.n});
    else if (cmd == "reset") r.run(Reset{});
    else if (cmd == "pause") r.run(Pause{});
    else if (cmd == "lab") {
        const std::string text = r.rest();
        r.v.lab_specs = text;
        r.run(MeasureLab{split_lab_specs(text)});
    } else if (cmd == "heads") r.run(ExplainHeads{});
    else if (cmd == "cache") r.run(SetCache{r.arg == "on"});
    else if (cmd == "compare") r.run(SetCompare{r.arg == "on"});
    else if (cmd == "evict" || cmd == "restore" || cmd == "patch") r.run(cache_edit_of(r.l, r.n));
    else if (cmd == "sequence") r.run(Select{r.n});
    else if (cmd == "model") r.run(LoadModel{r.arg});
    else return false;
    return true;
}

// Session options, applied (options, suffix, prompt-cache) or typed into the Controls' boxes (edit).
bool apply_options_line(LineRun& r) {
    const std::string& cmd = r.cmd;
    const ScriptLine& l = r.l;
    if (cmd == "options") {
        SetOptions c{r.snap.options(), r.snap.batch, {}};
        for (size_t i = 1; i < l.words.size(); ++i) {
            set_script_option(c.options, c.batch, l.words[i]);
            c.given.push_back(script_option(l.words[i]).name);
        }
        r.run(c);
    } else if (cmd == "edit") {
        sync_option_edits(r.v, r.snap);
        for (size_t i = 1; i < l.words.size(); ++i) set_script_option(r.v.edit_options, r.v.edit_batch, l.words[i]);
    } else if (cmd == "suffix") {
        SetOptions c{r.snap.options(), r.snap.batch, {}};
        const int64_t n = r.n;
        if (c.batch.suffixes.size() <= size_t(n)) c.batch.suffixes.resize(size_t(n) + 1);
        c.batch.suffixes[size_t(n)] = l.words.size() > 2 ? l.words[2] : "";
        if (n >= c.batch.n_seq) c.batch.n_seq = n + 1;
        r.run(c);
    } else if (cmd == "prompt-cache") {
        SetOptions c{r.snap.options(), r.snap.batch, {}};
        c.batch.prompt_cache = r.arg == "off" ? "" : r.arg;
        r.run(c);
    } else {
        return false;
    }
    return true;
}

// What the panels show: layer, head, attention kind, map settings, selection, step, zoom, tabs, quant view.
bool apply_view_line(LineRun& r) {
    const std::string& cmd = r.cmd;
    const std::string& arg = r.arg;
    const ScriptLine& l = r.l;
    ViewPrefs& v = r.v;
    if (cmd == "layer" || cmd == "head") {
        const ModelConfig& cfg = r.snap.model().config();
        const int64_t limit = cmd == "head" ? cfg.n_head : v.attention == AttentionKind::Encoder ? cfg.n_encoder_layer : cfg.n_layer;
        if (r.n >= limit)
            throw UsageError("line " + std::to_string(l.line) + ": " + cmd + " " + arg + " out of range (0.." +
                             std::to_string(limit - 1) + ")");
        (cmd == "layer" ? v.layer : v.head) = r.n;
    } else if (cmd == "attention") {
        if (arg != "self" && !r.snap.encoder_decoder())
            throw UsageError("line " + std::to_string(l.line) + ": attention " + arg +
                             ": the model is decoder-only (only self-attention)");
        v.attention = arg == "cross" ? AttentionKind::Cross : arg == "encoder" ? AttentionKind::Encoder : AttentionKind::Self;
    } else if (cmd == "view") {
        v.all_heads = arg == "all-heads";
    } else if (cmd == "values") {
        v.show_scores = arg == "scores";
    } else if (cmd == "scale") {
        v.log_scale = arg == "log";
    } else if (cmd == "rownorm") {
        v.row_norm = arg == "on";
    } else if (cmd == "select") {
        to_int(l.words[1], v.sel_query);
        to_int(l.words[2], v.sel_key);
    } else if (cmd == "show-step") {
        v.view_step = arg == "newest" ? -1 : r.n;
        if (v.view_step >= int64_t(r.snap.trace().size()))
            throw UsageError("line " + std::to_string(l.line) + ": no step " + arg + " yet");
    } else if (cmd == "zoom") {
        double z = 1, u = 0.5, w = 0.5;
        to_real(l.words[1], z);
        if (l.words.size() > 2) to_real(l.words[2], u);
        if (l.words.size() > 3) to_real(l.words[3], w);
        v.zoom = float(z);
        v.center = {float(u), float(w)};
    } else if (cmd == "panel") {
        Panel p;
        if (panel_named(r.rest(), p)) {
            v.workspace = workspace_holding(p, v.workspace);
            show_tab(p);
        }
        r.fx.frames = 2;
    } else if (cmd == "workspace") {
        workspace_named(arg, v.workspace);
        r.fx.frames = 2;
    } else if (cmd == "help") {
        v.help_open = arg == "on";
        r.fx.frames = 2;
    } else if (cmd == "ui-scale") {
        float scale = 0;
        parse_ui_scale(arg, scale);
        set_ui_scale_setting(scale);  // the window applies it before the next frame
        r.fx.frames = 3;              // rebuilt fonts; wrapped text and scrollbars settle a frame later
    } else if (cmd == "dismiss") {
        v.dismissed_problem = r.snap.problem.id;
    } else if (cmd == "quant-view") {
        v.quant_view.format = parse_kv_quant(arg);
        if (l.words.size() > 2) to_int(l.words[2], v.quant_view.group);
        if (l.words.size() > 3) to_int(l.words[3], v.quant_view.residual);
    } else if (cmd == "kv-heads") {
        v.kv_heads_open = arg == "open" ? 1 : 0;
    } else {
        return false;
    }
    return true;
}

// What goes to files: exports, figures, the JSON dumps of panels.
bool apply_output_line(LineRun& r) {
    const std::string& cmd = r.cmd;
    const std::string& arg = r.arg;
    const ScriptLine& l = r.l;
    ViewPrefs& v = r.v;
    const Snapshot& snap = r.snap;
    if (cmd == "memory-json") {
        if (!write_memory_json(arg, snap, v.view_step))
            throw UsageError("line " + std::to_string(l.line) + ": cannot write " + arg);
    } else if (cmd == "attention-json") {
        if (snap.trace().empty()) throw UsageError("line " + std::to_string(l.line) + ": attention-json: no step yet");
        v.attention_json = arg;
        v.workspace = workspace_holding(Panel::Attention, v.workspace);  // the panel writes what it draws
        r.fx.frames = 2;  // the panel writes it on the next frame that has the map
    } else if (cmd == "rotary-json") {
        if (snap.trace().empty()) throw UsageError("line " + std::to_string(l.line) + ": rotary-json: no step yet");
        if (snap.model().config().family != Family::Llama)
            throw UsageError("line " + std::to_string(l.line) + ": rotary-json: the model has no rotary positions");
        v.rotary_json = arg;
        v.workspace = workspace_holding(Panel::Rotary, v.workspace);
        show_tab(Panel::Rotary);
        r.fx.frames = 3;  // the tab comes to the front, then the panel writes it
    } else if (cmd == "export-dir") {
        v.export_dir = arg;
    } else if (cmd == "save-figure") {
        Panel p = Panel::KvCache;
        figure_panel_named(arg, p);
        try {
            for (const std::string& path : save_figure(p, snap, v, l.words.size() > 2 ? l.words[2] : ""))
                std::printf("saved %s\n", path.c_str());
        } catch (const UsageError& e) {
            throw UsageError("line " + std::to_string(l.line) + ": save-figure " + arg + ": " + e.what());
        }
    } else if (cmd == "export-format") {
        v.export_plots.format = parse_plot_format("export-format", arg);
        v.export_plots.scale = l.words.size() > 2 ? int(std::stol(l.words[2])) : 1;
    } else if (cmd == "export" || cmd == "export-session") {
        const bool all = l.words.size() > 2;
        const int64_t layer = all ? -1 : v.layer, head = all ? -1 : v.head;
        if (cmd == "export") r.run(ExportStep{arg, v.view_step, layer, head, v.export_plots});
        else r.run(ExportSession{arg, layer, head, v.export_plots});
    } else {
        return false;
    }
    return true;
}

// Guided lessons: open, do a step, go on when its check passes, write the state.
bool apply_lesson_line(LineRun& r) {
    const std::string& cmd = r.cmd;
    const std::string line = "line " + std::to_string(r.l.line) + ": " + cmd + ": ";
    try {
        if (cmd == "lesson") {
            for (const Command& c : open_lesson(r.snap, r.v, r.n - 1)) r.run(c);
            r.fx.frames = 2;
        } else if (cmd == "lesson-do") {
            if (!r.v.lesson.open()) throw UsageError("no lesson is open (lesson N)");
            for (const Command& c : lesson_step_intents(r.snap, r.v)) r.run(c);
            r.fx.frames = 2;
        } else if (cmd == "lesson-next") {
            const std::string why = lesson_next(r.snap, r.v);
            if (!why.empty()) throw UsageError(why);
            r.fx.frames = 2;
        } else if (cmd == "lesson-json") {
            if (!r.v.lesson.open()) throw UsageError("no lesson is open (lesson N)");
            const Lesson& l = lesson_library()[size_t(r.v.lesson.lesson)];
            if (!r.v.lesson.finished) r.v.lesson.result = check_step(l.steps[size_t(r.v.lesson.step)], r.snap);
            write_file_atomic(r.arg, json_text(lesson_json(r.v.lesson, l), 2) + "\n");
        } else {
            return false;
        }
    } catch (const UsageError& e) {
        const std::string what = e.what();
        throw UsageError(what.rfind("line ", 0) == 0 ? what : line + what);
    } catch (const LoadError& e) {
        throw UsageError(line + e.what());
    }
    return true;
}

}  // namespace

ScriptEffect apply_script_line(const ScriptLine& l, Controller& ctl, const Snapshot& snap, ViewPrefs& v) {
    LineRun r(l, ctl, snap, v);
    if (apply_step_line(r) || apply_options_line(r) || apply_view_line(r) || apply_output_line(r) || apply_lesson_line(r))
        return r.fx;
    if (r.cmd == "frames") r.fx.frames = int(r.n);
    else if (r.cmd == "measure") r.fx.measure = int(r.n);
    return r.fx;
}

}  // namespace kvscope::gui
