// `kvscope gui`: the window, the frame loop and scripted screenshots. The loop each frame: take the
// controller's newest snapshot (its worker thread does the stepping), draw every panel from it, render,
// and in scripted mode feed the next script line once the worker is idle, or capture the framebuffer.
#include <epoxy/gl.h>  // before GLFW, so GLFW does not pull in the system GL header
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>

#include <algorithm>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.h"
#include "io/json_write.h"
#include "panels/controls_panel.h"
#include "panels/lesson_panel.h"
#include "panels/panel_list.h"
#include "report/export.h"
#include "widgets/gl.h"
#include "logic/window_settings.h"
#include "widgets/shortcuts.h"
#include "window/help.h"
#include "window/menu_bar.h"
#include "window/script.h"
#include "window/ui_scale.h"
#include "window/window.h"

namespace kvscope {
namespace {


double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string glfw_error;
void on_glfw_error(int, const char* what) { glfw_error = what ? what : "unknown GLFW error"; }

std::vector<std::string> dropped;
void on_drop(GLFWwindow*, int n, const char** paths) {
    if (n > 0) dropped.emplace_back(paths[0]);  // one model folder at a time
}

// Shortcuts (widgets/shortcuts.h) in the order they were pressed. ImGui 1.86 keeps only the state of a
// key at the frame, so a press and release inside one slow frame (both cores busy) would be lost; GLFW
// reports each one here. A character shortcut ('?') comes through the character callback, whatever keys
// the keyboard layout types it with.
struct PressedKey {
    const gui::Shortcut* shortcut;
    int index;  // which key of the shortcut's run (1-5: the workspace)
};
std::vector<PressedKey> pressed_keys;
void on_key(GLFWwindow*, int key, int, int action, int) {
    if (action != GLFW_PRESS) return;
    if (const gui::Shortcut* s = gui::shortcut_for_key(key)) pressed_keys.push_back({s, key - s->glfw_key});
}
void on_char(GLFWwindow*, unsigned codepoint) {
    if (const gui::Shortcut* s = gui::shortcut_for_char(codepoint)) pressed_keys.push_back({s, 0});
}

std::string shaders_dir() {
    if (const char* s = std::getenv("KVSCOPE_SHADERS"); s && *s) return s;
    return KVSCOPE_SHADERS_DIR;
}

bool write_png(const std::string& path, int w, int h, const std::vector<uint8_t>& rgba) {
    std::vector<uint8_t> rgb(size_t(w) * size_t(h) * 3);  // drop alpha: the window is opaque
    for (size_t i = 0; i < size_t(w) * size_t(h); ++i)
        for (int c = 0; c < 3; ++c) rgb[i * 3 + size_t(c)] = rgba[i * 4 + size_t(c)];
    try {
        write_png_rgb(path, w, h, rgb.data());
    } catch (const std::exception&) {
        return false;
    }
    return true;
}

struct Glfw {
    ~Glfw() { glfwTerminate(); }
};

// Ctrl-C in the terminal or a SIGTERM closes the interactive window as its close button does: the loop ends between
// frames and what the window remembers is saved. The previous handlers come back when the window closes.
volatile std::sig_atomic_t close_requested = 0;
void on_close_signal(int) { close_requested = 1; }
struct CloseSignals {
    void (*old_int)(int) = std::signal(SIGINT, on_close_signal);
    void (*old_term)(int) = std::signal(SIGTERM, on_close_signal);
    ~CloseSignals() {
        std::signal(SIGINT, old_int);
        std::signal(SIGTERM, old_term);
    }
};

}  // namespace

namespace gui {
namespace {

// The OS window with an OpenGL 3.3 context, sized to fit the screen unless the size was given.
GLFWwindow* open_window(const Model& model, const WindowOptions& o, const WindowSettings& remembered) {
    int width = o.width, height = o.height;
    if (!o.scripted && !o.size_given && remembered.width > 0) width = remembered.width, height = remembered.height;
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
    glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
    glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
    if (o.scripted) glfwWindowHint(GLFW_RESIZABLE, GLFW_FALSE);
    if (!o.scripted && !o.size_given)
        if (GLFWmonitor* mon = glfwGetPrimaryMonitor()) {
            int x = 0, y = 0, w = 0, h = 0;
            glfwGetMonitorWorkarea(mon, &x, &y, &w, &h);
            if (w > 0 && h > 0) {
                width = std::min(width, int(w * 0.95));
                height = std::min(height, int(h * 0.92));
            }
        }
    const std::string title = "kvscope - " + model.dir();
    GLFWwindow* window = glfwCreateWindow(width, height, title.c_str(), nullptr, nullptr);
    if (!window) throw LoadError("OpenGL 3.3 window", glfw_error, "needs an OpenGL 3.3 driver (Mesa llvmpipe works under Xvfb)");
    glfwMakeContextCurrent(window);
    glfwSwapInterval(o.scripted ? 0 : 1);
    glfwSetDropCallback(window, on_drop);
    glfwSetKeyCallback(window, on_key);  // before ImGui's backend, which chains to them
    glfwSetCharCallback(window, on_char);
    return window;
}

// Framebuffer pixels per window coordinate (2 on a Retina Mac, 1 on X11).
float framebuffer_scale(GLFWwindow* window) {
    int w = 0, h = 0, fw = 0, fh = 0;
    glfwGetWindowSize(window, &w, &h);
    glfwGetFramebufferSize(window, &fw, &fh);
    return w > 0 && fw > 0 ? float(fw) / float(w) : 0.0f;  // 0 (minimized): keep the last one
}

void on_content_scale(GLFWwindow*, float xscale, float yscale) { set_content_scale(std::max(xscale, yscale)); }

// ImGui on the window: the font and style at the UI scale (window/ui_scale.h), the backends and the heatmap
// shaders. No imgui.ini: the workspaces place every panel, and what is remembered is in logic/window_settings.h.
void start_imgui(GLFWwindow* window) {
    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    float xscale = 1, yscale = 1;
    glfwGetWindowContentScale(window, &xscale, &yscale);
    set_content_scale(std::max(xscale, yscale));
    glfwSetWindowContentScaleCallback(window, on_content_scale);  // moved to another monitor
    apply_ui_scale(framebuffer_scale(window));
    ImGui_ImplGlfw_InitForOpenGL(window, true);
    ImGui_ImplOpenGL3_Init("#version 330 core");
    if (!Gl::init(shaders_dir())) {
        ImGui_ImplOpenGL3_Shutdown();
        ImGui_ImplGlfw_Shutdown();
        ImGui::DestroyContext();
        glfwDestroyWindow(window);
        throw LoadError(shaders_dir(), Gl::error(), "the heatmap shaders ship in the source tree's shaders/ folder");
    }
}

void write_layout_state(const std::string& path, const Snapshot& snap, const ViewPrefs& prefs, const Controller& ctl,
                        bool idle) {
    // Rewritten only when a rectangle moved; the step count tells tests the frame caught up.
    const StepRecord* shown = viewed_step(snap, prefs);
    const Inputs in = ctl.inputs();
    write_layout_dump(path, {{"steps", snap.trace().size()},
                             {"idle", idle},
                             {"turns", snap.turns.size()},
                             {"errors", snap.n_errors},
                             {"cache_on", snap.options().use_cache},
                             {"layer", prefs.layer},
                             {"head", prefs.head},
                             {"zoom", prefs.zoom},  // the attention map's, and its pan centre in uv
                             {"zoom_center", {prefs.center.x, prefs.center.y}},
                             {"shown_step", shown ? int64_t(shown->id.index) : int64_t(-1)},
                             {"frames", ImGui::GetFrameCount()},
                             {"ui_scale", ui_scale()},                      // in effect (Auto resolved)
                             {"ui_scale_setting", ui_scale_setting()},      // 0 = auto
                             {"font_px", ui_font_px()},                     // framebuffer pixels
                             {"framebuffer_scale", ImGui::GetIO().DisplayFramebufferScale.x},
                             {"status", snap.status},
                             {"prompt", in.prompt},
                             {"source", in.source},
                             {"attention", attention_kind_name(prefs.attention)},
                             {"chunk", snap.options().prefill_chunk},
                             {"window", snap.options().window},
                             {"max_new_tokens", snap.options().max_new_tokens},
                             {"pending_options", pending_options(prefs, snap)},
                             {"problem", {{"place", place_name(snap.problem.place)},
                                          {"text", snap.problem.text},
                                          {"shown", snap.problem.id != 0 && snap.problem.id != prefs.dismissed_problem}}},
                             {"last_export", snap.last_export},
                             {"eviction", eviction_policy_name(snap.options().eviction.kind)},
                             {"workspace", workspace_info(prefs.workspace).name},
                             {"kv_budget", snap.options().eviction.budget}});
}

// A script's progress through its lines: which line the worker is applying, the frames to draw before
// the next, and a `measure` in progress. Each step returns false when the script stops (exit_code set).
struct ScriptRun {
    const WindowOptions& o;
    size_t next_line = 0;
    int64_t pending = -1;          // script line whose intents the worker is applying
    uint64_t pending_errors = 0;   // Snapshot::n_errors before that line
    uint64_t expected_errors = 0;  // Snapshot::n_errors after the last `expect-error` line failed as expected
    ScriptEffect pending_fx{};
    int wait_frames = 2, measure_left = 0, measure_total = 0, warmup = 0;
    std::vector<double> frame_ms{}, work_ms{};
    int exit_code = 0;

    bool done() const { return next_line >= o.script.size() && pending < 0 && wait_frames == 0 && measure_left == 0; }

    // The pending line once the worker applied it (or it runs in the background): its error, if any.
    bool finish_line(const Snapshot& snap, bool idle) {
        if (pending < 0 || !(idle || pending_fx.background || !pending_fx.pushed)) return true;
        const ScriptLine& l = o.script[size_t(pending)];
        const bool failed = pending_fx.pushed && !pending_fx.background && snap.n_errors != pending_errors;
        if (l.expect_error && !failed) {
            std::fprintf(stderr, "error: %s:%d: %s: expected it to fail, it did not\n", o.script_path.c_str(), l.line,
                         l.words[0].c_str());
            exit_code = 2;
            return false;
        }
        if (failed && l.expect_error) expected_errors = snap.n_errors;
        if (failed && !l.expect_error) {
            std::fprintf(stderr, "error: %s:%d: %s: %s\n", o.script_path.c_str(), l.line, l.words[0].c_str(),
                         snap.status.c_str());
            exit_code = 2;
            return false;
        }
        // After the last line a few frames more: scrollbars and wrapped text settle a frame late.
        wait_frames = std::max(next_line >= o.script.size() ? 3 : 1, pending_fx.frames);
        if (pending_fx.measure > 0) {
            warmup = 2;  // the first frames compute maps and upload textures
            measure_left = measure_total = pending_fx.measure;
            frame_ms.clear();
            work_ms.clear();
        }
        pending = -1;
        return true;
    }

    // The next line once the previous one is done and drawn.
    bool start_line(Controller& ctl, const Snapshot& snap, ViewPrefs& prefs) {
        if (pending >= 0 || wait_frames != 0 || measure_left != 0 || next_line >= o.script.size()) return true;
        try {
            pending_errors = snap.n_errors;
            pending_fx = apply_script_line(o.script[next_line], ctl, snap, prefs);
            pending_fx.background = o.script[next_line].background;
            pending = int64_t(next_line);
        } catch (const UsageError& e) {
            std::string what = e.what();  // "line N: ..." -> "FILE:N: ..."
            if (what.rfind("line ", 0) == 0) what = what.substr(5);
            std::fprintf(stderr, "error: %s:%s\n", o.script_path.c_str(), what.c_str());
            exit_code = 2;
            return false;
        }
        ++next_line;
        return true;
    }

    // `measure N`: this frame's times (from t0, the frame's start, and frame_start, the previous swap).
    void measure(const MapCache& maps, const Controller& ctl, double t0, double frame_start) {
        if (measure_left <= 0) return;
        Gl::finish();
        const double t1 = now_s();
        if (warmup > 0 || maps.incomplete()) {
            if (!maps.incomplete()) --warmup;  // measure frames that draw every map
            return;
        }
        work_ms.push_back((t1 - t0) * 1e3);
        frame_ms.push_back((t1 - frame_start) * 1e3);
        if (--measure_left > 0) return;
        auto mean = [](const std::vector<double>& v) {
            double s = 0;
            for (double x : v) s += x;
            return s / double(v.size());
        };
        std::vector<double> sorted = frame_ms;
        std::sort(sorted.begin(), sorted.end());
        const double m = mean(frame_ms);
        std::printf("frames %d: mean frame %.2f ms (%.1f fps), p95 %.2f ms, draw+render %.2f ms, "
                    "map textures %.1f MB%s\n",
                    measure_total, m, 1000.0 / m, sorted[size_t(double(sorted.size() - 1) * 0.95)],
                    mean(work_ms), double(maps.tile_bytes()) / (1 << 20),
                    ctl.busy() ? " (worker still busy at the end)" : "");
        std::fflush(stdout);
    }

    // After the last line: the screenshot, and the status line's error unless the script expected it.
    void finish(const Snapshot& snap, int fb_w, int fb_h) {
        if (!o.screenshot.empty()) {
            const std::vector<uint8_t> rgba = Gl::read_framebuffer(fb_w, fb_h);
            if (!write_png(o.screenshot, fb_w, fb_h, rgba)) {
                std::fprintf(stderr, "error: cannot write %s\n", o.screenshot.c_str());
                exit_code = 1;
            }
        }
        if (snap.status_error && snap.n_errors != expected_errors) {
            std::fprintf(stderr, "error: %s\n", snap.status.c_str());
            exit_code = exit_code ? exit_code : 2;
        }
    }
};

// Until the next frame: input, or the worker's next publish. Busy, the frame rate stays up for the
// progress indicator; idle, the loop sleeps.
void wait_for_frame(bool scripted, bool busy, bool measuring, const MapCache& maps, double frame_begin) {
    if (scripted) {
        glfwPollEvents();
        // Waiting for the worker (a long prefill): ten frames a second, so the drawing does not take the
        // worker's core (a full frame costs llvmpipe ~20 ms); `measure` draws flat out.
        if (busy && !measuring)
            glfwWaitEventsTimeout(std::max(0.002, 1.0 / 10 - (now_s() - frame_begin)));
        else if (maps.incomplete()) glfwWaitEventsTimeout(0.01);  // leave the cores to the map threads
    }
    else if (busy || maps.incomplete())
        // Keep the progress ticking at about 40 fps, sleeping only what is left of the frame budget
        // (the rest of the machine belongs to the worker).
        glfwWaitEventsTimeout(std::max(0.002, 1.0 / 40 - (now_s() - frame_begin)));
    else glfwWaitEventsTimeout(0.25);  // idle: sleep until input, but keep tooltips alive
}

// One frame of every panel, drawn into the back buffer; returns the framebuffer's size.
void draw_frame(GLFWwindow* window, Controller& ctl, const Snapshot& snap, const Progress& progress, ViewPrefs& prefs,
                MapCache& maps, bool scripted, int& fb_w, int& fb_h) {
    ImGuiIO& io = ImGui::GetIO();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    if (scripted) io.MousePos = {-FLT_MAX, -FLT_MAX};  // no stray hover tooltips in screenshots
    ImGui::NewFrame();
    Gl::begin_frame();
    maps.begin_frame();
    // Keys never wait for the worker: each press queues its intent in order (a step pressed during a
    // run follows it; step back and reset end it). Typing in a text box keeps its keys.
    if (!io.WantTextInput)
        for (const auto& [key, index] : pressed_keys) switch (key->action) {
            case ShortcutAction::Step: ctl.push(Step{}); break;
            case ShortcutAction::Back: ctl.push(Back{1}); break;
            case ShortcutAction::Reset: ctl.push(Reset{}); break;
            case ShortcutAction::Help: prefs.help_open = !prefs.help_open; break;
            case ShortcutAction::CloseHelp: prefs.help_open = false; break;
            case ShortcutAction::Workspace:
                if (size_t(index) < workspaces().size()) prefs.workspace = workspaces()[size_t(index)].workspace;
                break;
            case ShortcutAction::InTextBox: break;
        }
    pressed_keys.clear();
    begin_dump_frame();
    PanelContext pc{ctl, snap, progress, prefs, maps, io.DisplaySize};
    const float bar = draw_menu_bar(pc);
    lesson_begin_frame(pc);
    for (const Slot& slot : arrange_panels(io.DisplaySize, bar, prefs.workspace, prefs.lesson.open())) {
        begin_slot(slot);
        for (Panel p : slot.panels) panel_module(p).draw(pc);
        end_slot();
    }
    end_layout_frame();
    draw_help(prefs.help_open);
    ImGui::Render();
    glfwGetFramebufferSize(window, &fb_w, &fb_h);
    glViewport(0, 0, fb_w, fb_h);
    glClearColor(0.08f, 0.08f, 0.09f, 1);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

}  // namespace

int run_window(std::shared_ptr<const Model> model, const WindowOptions& o) {
    const bool scripted = o.scripted;
    glfwSetErrorCallback(on_glfw_error);
    if (!glfwInit()) throw UsageError("cannot open a window (" + glfw_error + "); try xvfb-run or the CLI: kvscope generate");
    Glfw glfw_guard;
    // What the last interactive run left: its workspace and window size (scripts start from the defaults).
    const std::string settings_file = scripted ? "" : settings_path();
    std::string settings_note;
    WindowSettings settings = load_settings(settings_file, settings_note);
    if (!settings_note.empty()) std::fprintf(stderr, "warning: %s\n", settings_note.c_str());
    GLFWwindow* window = open_window(*model, o, settings);
    set_ui_scale_setting(o.ui_scale ? *o.ui_scale : settings.ui_scale);  // --ui-scale over the remembered one
    start_imgui(window);
    // Saved when they change (never for a script); a file kvscope did not write, or one it could not read,
    // is kept, said once.
    bool settings_refused = !settings_note.empty();
    auto remember = [&](const WindowSettings& now) {
        if (scripted || settings_file.empty() || settings_refused || now == settings) return;
        if (!save_settings(settings_file, now, settings_note)) {
            std::fprintf(stderr, "warning: the window's settings are not remembered: %s\n", settings_note.c_str());
            settings_refused = true;
        }
        settings = now;
    };

    SessionOptions options;  // max_new_tokens: the same default as `kvscope generate` (SessionOptions)
    options.n_top = 10;
    int exit_code = 0;
    {
        Controller ctl(model, options);
        ctl.set_wake([] { glfwPostEmptyEvent(); });  // a published step redraws at once
        ViewPrefs prefs;
        prefs.workspace = settings.workspace;
        bool paged = false;  // the session's cache was paged last frame
        MapCache maps;
        if (!scripted && model->tokenizer()) {
            ctl.push(SetPrompt{"Tom saw the cookie at school. Tom saw the"});  // a repeat: the induction head shows
        }
        if (o.lesson > 0)
            for (const Command& c : open_lesson(*ctl.snapshot(), prefs, o.lesson - 1)) ctl.push(c);
        uint64_t generation = ctl.snapshot()->generation;
        ScriptRun run{o};
        double frame_start = now_s();
        double frame_begin = now_s();
        std::optional<CloseSignals> signals;  // a script stopped by a signal is not a finished script: it dies as usual
        if (!scripted) signals.emplace();
        while (!glfwWindowShouldClose(window) && !close_requested) {
            wait_for_frame(scripted, ctl.busy(), run.measure_left > 0, maps, frame_begin);
            for (const std::string& path : dropped) ctl.push(LoadModel{path});
            dropped.clear();

            // Idle is checked before the snapshot is taken: when idle, the snapshot is the final one.
            const bool idle = !ctl.busy();
            const std::shared_ptr<const Snapshot> snap = ctl.snapshot();
            const gui::Progress progress = ctl.progress();
            if (scripted && !(run.finish_line(*snap, idle) && run.start_line(ctl, *snap, prefs))) break;
            if (snap->generation != generation) {
                maps.clear();
                generation = snap->generation;
                prefs.view_step = -1;
                prefs.sel_query = prefs.sel_key = prefs.sel_source = -1;
                glfwSetWindowTitle(window, ("kvscope - " + snap->model().dir()).c_str());
            }

            // A batch that became paged shows its pool (the Memory workspace) once; the user may leave it.
            if (!snap->pool_views.empty() && !paged) prefs.workspace = Workspace::Memory;
            paged = !snap->pool_views.empty();

            const double t0 = now_s();
            frame_begin = t0;
            apply_ui_scale(framebuffer_scale(window));  // between frames: a new setting or another monitor
            int fb_w = 0, fb_h = 0;
            draw_frame(window, ctl, *snap, progress, prefs, maps, scripted, fb_w, fb_h);
            if (!o.layout_dump.empty()) write_layout_state(o.layout_dump, *snap, prefs, ctl, idle);
            run.measure(maps, ctl, t0, frame_start);
            // Script lines and the screenshot wait for frames whose maps were all ready (reproducible pictures).
            if (scripted && run.wait_frames > 0 && run.pending < 0 && !maps.incomplete()) --run.wait_frames;
            if (scripted && run.done() && idle && !maps.incomplete()) {
                run.finish(*snap, fb_w, fb_h);
                break;
            }
            WindowSettings now = settings;
            now.workspace = prefs.workspace;
            now.ui_scale = ui_scale_setting();
            remember(now);
            frame_start = now_s();
            glfwSwapBuffers(window);
        }
        if (!scripted) {
            WindowSettings last = settings;
            glfwGetWindowSize(window, &last.width, &last.height);
            remember(last);
        }
        exit_code = run.exit_code;
        // The controller's destructor waits for a step in progress: close the window at once meanwhile.
        glfwHideWindow(window);
        maps.clear();
    }
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
    glfwDestroyWindow(window);
    return exit_code;
}

}  // namespace gui
}  // namespace kvscope
