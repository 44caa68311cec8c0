// What the window remembers between runs (app/gui/logic/window_settings.h): the file round-trips, a bad
// file gives the defaults and says why, a file kvscope did not write is never replaced, and the path
// follows XDG_CONFIG_HOME, then HOME.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "io/json.h"
#include "logic/window_settings.h"
#include "logic/workspace.h"
#include "scratch_dir.h"

using namespace kvscope;
using namespace kvscope::gui;
using kvscope::test::fresh_dir;
using kvscope::test::read_bytes;
using kvscope::test::write_bytes;

TEST_CASE("the workspaces are named once, by name or by their key") {
    Workspace w = Workspace::Step;
    REQUIRE(workspaces().size() == 5);
    const char* names[] = {"Step", "Cache", "Memory", "Lab", "Chat"};
    for (size_t i = 0; i < 5; ++i) {
        CHECK(std::string(workspaces()[i].name) == names[i]);
        CHECK(workspace_named(names[i], w));
        CHECK(w == workspaces()[i].workspace);
        CHECK(workspace_named(std::to_string(i + 1), w));
        CHECK(w == workspaces()[i].workspace);
    }
    CHECK(workspace_named("lab", w));
    CHECK(w == Workspace::Lab);
    CHECK_FALSE(workspace_named("6", w));
    CHECK_FALSE(workspace_named("0", w));
    CHECK_FALSE(workspace_named("", w));
    CHECK_FALSE(workspace_named("Steps", w));
}

TEST_CASE("settings round-trip through the file, which holds what it says") {
    const auto dir = fresh_dir("window_settings", "round_trip");
    const std::string path = (dir / "kvscope" / "settings.json").string();
    std::string warning, error;
    CHECK(load_settings(path, warning) == WindowSettings{});  // no file yet: the defaults, quietly
    CHECK(warning.empty());
    WindowSettings s;
    s.workspace = Workspace::Lab;
    s.width = 1500;
    s.height = 900;
    s.ui_scale = 1.5f;
    REQUIRE(save_settings(path, s, error));  // the folder is made
    const Json doc = Json::parse(read_bytes(path));
    CHECK(doc.find("workspace")->as_string() == "Lab");
    CHECK(doc.find("width")->as_integer() == 1500);
    CHECK(doc.find("height")->as_integer() == 900);
    CHECK(doc.find("ui_scale")->as_string() == "1.5");
    CHECK(load_settings(path, warning) == s);
    CHECK(warning.empty());
    s.workspace = Workspace::Chat;  // kvscope's own file is replaced
    s.ui_scale = kUiScaleAuto;
    REQUIRE(save_settings(path, s, error));
    CHECK(load_settings(path, warning) == s);
    CHECK(Json::parse(read_bytes(path)).find("ui_scale")->as_string() == "auto");
}

TEST_CASE("a bad settings file gives the defaults and one line naming it") {
    const auto dir = fresh_dir("window_settings", "bad");
    const std::string path = (dir / "settings.json").string();
    const char* bad[] = {"{", "[]", "{\"workspace\": \"Kitchen\"}", "{\"workspace\": 3}", "{\"width\": 800}",
                         "{\"width\": 0, \"height\": 600}", "{\"width\": 1e9, \"height\": 600}", "{\"width\": 80.5, \"height\": 600}",
                         "{\"ui_scale\": \"9\"}", "{\"ui_scale\": 1.5}", "{\"ui_scale\": \"0.5\"}"};
    for (const char* text : bad) {
        INFO(text);
        write_bytes(path, text);
        std::string warning;
        CHECK(load_settings(path, warning) == WindowSettings{});
        CHECK(warning.rfind(path + ": ", 0) == 0);
        CHECK(warning.find('\n') == std::string::npos);
    }
}

TEST_CASE("a settings file kvscope did not write is kept as it was") {
    const auto dir = fresh_dir("window_settings", "foreign");
    const std::string path = (dir / "settings.json").string();
    const std::string mine = "{\"workspace\": \"Cache\"}\n";  // written by the user, valid
    write_bytes(path, mine);
    std::string warning, error;
    CHECK(load_settings(path, warning).workspace == Workspace::Cache);  // read, and honoured
    WindowSettings s;
    s.workspace = Workspace::Memory;
    CHECK_FALSE(save_settings(path, s, error));
    CHECK(error.find("settings.json") != std::string::npos);
    CHECK(read_bytes(path) == mine);
}

TEST_CASE("the settings live in the config folder: XDG_CONFIG_HOME, else HOME/.config") {
    const char* old_xdg = std::getenv("XDG_CONFIG_HOME");
    const char* old_home = std::getenv("HOME");
    const std::string xdg = old_xdg ? old_xdg : "", home = old_home ? old_home : "";
    setenv("XDG_CONFIG_HOME", "/tmp/x", 1);
    CHECK(settings_path() == "/tmp/x/kvscope/settings.json");
    setenv("XDG_CONFIG_HOME", "", 1);
    setenv("HOME", "/home/u", 1);
    CHECK(settings_path() == "/home/u/.config/kvscope/settings.json");
    unsetenv("XDG_CONFIG_HOME");
    unsetenv("HOME");
    CHECK(settings_path().empty());
    if (old_xdg) setenv("XDG_CONFIG_HOME", xdg.c_str(), 1);
    if (old_home) setenv("HOME", home.c_str(), 1);
}
