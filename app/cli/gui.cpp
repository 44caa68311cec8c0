// kvscope gui: parse the command line, load the model, open the window (app/gui/window/window.h). Without the
// GUI build (KVSCOPE_GUI=OFF) it explains how to get it.
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "base/errors.h"
#include "commands.h"
#include "common.h"
#include "io/output_path.h"
#ifdef KVSCOPE_WITH_GUI
#include "gui/panels/lesson_panel.h"
#include "gui/window/script.h"
#include "gui/window/ui_scale.h"
#include "gui/window/window.h"
#endif

namespace kvscope {

#ifdef KVSCOPE_WITH_GUI
namespace {

// The script commands as --help lists them, from the parser's own table.
std::string script_help() {
    std::string out = "script commands (--script FILE: one per line; '# comment'; 'background LINE' sends LINE and\n"
                      "goes on without waiting for it; 'expect-error LINE' needs LINE to fail and goes on; every other\n"
                      "line waits until its steps are done and drawn):\n";
    for (const gui::ScriptCommand& c : gui::script_commands()) out += help_entry("  " + c.usage, c.help, 34);
    return out;
}

}  // namespace
#endif

int cli_gui(int argc, char** argv) {
#ifndef KVSCOPE_WITH_GUI
    (void)argc, (void)argv;
    throw UsageError("this kvscope was built without the window (cmake -DKVSCOPE_GUI=ON); "
                     "use the subcommands: generate, inspect, tokenize, detokenize, bench");
#else
    CliArgs args("gui", "Open the step-through debugger window.");
    add_model_option(args);
    args.option("--script", "FILE", "run the commands in FILE, listed below (prompt, prefill, decode N, back, ...)")
        .option("--screenshot", "OUT.png", "after the script, render, save the window as PNG and exit")
        .option("--size", "WxH", "window size in pixels (default 1600x1000)")
        .option("--lesson", "N", "open guided lesson N at start (assets/lessons/, the Learn menu's N-th)")
        .option("--layout-dump", "FILE", "keep FILE updated with named widget rectangles as JSON (for UI tests)")
        .option("--ui-scale", "S", "size of text and widgets: auto (the screen's content scale, the default) or a "
                                   "factor from 0.75 to 3 (1.5 or 150%); the View menu changes it while running")
        .epilogue(script_help());
    if (!args.parse(argc, argv)) return 0;

    gui::WindowOptions o;
    if (auto size = args.text("--size")) {
        if (std::sscanf(size->c_str(), "%dx%d", &o.width, &o.height) != 2 || o.width < 320 || o.height < 240 ||
            o.width > 8192 || o.height > 8192)
            throw UsageError("--size: expected WxH between 320x240 and 8192x8192, got '" + *size + "'");
        o.size_given = true;
    }
    if (auto scale = args.text("--ui-scale")) {
        float s = 0;
        if (!gui::parse_ui_scale(*scale, s))
            throw UsageError("--ui-scale: expected auto or a factor from 0.75 to 3 (e.g. 1.5 or 150%), got '" + *scale + "'");
        o.ui_scale = s;
    }
    o.script_path = args.text("--script").value_or("");
    if (!o.script_path.empty()) o.script = gui::parse_script(o.script_path);
    o.scripted = args.has("--script") || args.has("--screenshot");
    o.screenshot = args.text("--screenshot").value_or("");
    o.layout_dump = args.text("--layout-dump").value_or("");
    if (args.has("--lesson")) {
        const size_t n = gui::lesson_library().size();  // a bad lesson file: one LoadError line naming it
        o.lesson = args.integer("--lesson", 1, 1, int64_t(n));
    }
    // Every output is checked before the window opens (core/io/output_path.h), not after the script ran.
    OutputSet outputs;
    if (!o.screenshot.empty()) outputs.add_file("--screenshot", o.screenshot, OutputKind::Png);
    if (!o.layout_dump.empty()) outputs.add_file("--layout-dump", o.layout_dump, OutputKind::Json);
    std::set<std::string> script_outputs;  // a script may write one path again (two exports into one folder)
    for (const gui::ScriptLine& l : o.script) {
        if (l.expect_error) continue;  // meant to fail, in the window's words
        const std::string where = o.script_path + ":" + std::to_string(l.line) + ": " + l.words[0];
        const std::string key = std::to_string(int(l.output)) + ":" + (l.words.size() > 1 ? l.words[1] : "");
        if (l.output == gui::ScriptOutput::None || !script_outputs.insert(key).second) continue;
        if (l.output == gui::ScriptOutput::Folder) outputs.add_folder(where, l.words[1]);
        if (l.output == gui::ScriptOutput::JsonFile) outputs.add_file(where, l.words[1], OutputKind::Json);
        if (l.output == gui::ScriptOutput::PromptCacheFile && l.words[1] != "off")
            outputs.add_file(where, l.words[1], OutputKind::PromptCache);
    }
    const char* display = std::getenv("DISPLAY");
    const char* wayland = std::getenv("WAYLAND_DISPLAY");
    if ((!display || !*display) && (!wayland || !*wayland))
        throw UsageError("no display (DISPLAY is not set); try kvscope gui --script FILE --screenshot OUT.png under "
                         "xvfb-run, or the CLI: kvscope generate --prompt TEXT");
    return gui::run_window(load_model_from(args), o);
#endif
}

}  // namespace kvscope
