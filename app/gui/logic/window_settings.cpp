// The remembered window settings (see window_settings.h).
#include "logic/window_settings.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/json_write.h"
#include "io/read_file.h"

namespace kvscope::gui {

namespace {
constexpr int k_max_side = 16384;  // a remembered size beyond any screen is not a size
}

bool parse_ui_scale(const std::string& text, float& out) {
    if (text == "auto") return out = kUiScaleAuto, true;
    const bool percent = !text.empty() && text.back() == '%';
    const std::string number = percent ? text.substr(0, text.size() - 1) : text;
    if (number.empty()) return false;
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end) / (percent ? 100.0 : 1.0);
    if (end != number.c_str() + number.size() || !std::isfinite(v) || v < kUiScaleMin - 1e-6 || v > kUiScaleMax + 1e-6)
        return false;
    out = float(v);
    return true;
}

std::string settings_path() {
    if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) return std::string(x) + "/kvscope/settings.json";
    if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.config/kvscope/settings.json";
    return "";
}

WindowSettings load_settings(const std::string& path, std::string& warning) {
    warning.clear();
    WindowSettings s;
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return s;
    try {
        const Json doc = Json::parse(read_file_bounded(path, k_config_file));
        if (!doc.is_object()) throw JsonError("not a JSON object", 0);
        WindowSettings read;
        if (const Json* w = doc.find("workspace"))
            if (!workspace_named(w->as_string(), read.workspace))
                throw JsonError("no workspace named " + json_escape(w->as_string()), std::string::npos);
        auto side = [](const Json* v, int& out) {
            if (!v) return;
            if (!v->is_integer() || v->as_integer() < 1 || v->as_integer() > k_max_side)
                throw JsonError("a window size is a whole number from 1 to " + std::to_string(k_max_side), std::string::npos);
            out = int(v->as_integer());
        };
        side(doc.find("width"), read.width);
        side(doc.find("height"), read.height);
        if ((read.width == 0) != (read.height == 0)) throw JsonError("width and height go together", std::string::npos);
        if (const Json* u = doc.find("ui_scale"))
            if (!parse_ui_scale(u->as_string(), read.ui_scale))
                throw JsonError("ui_scale " + json_escape(u->as_string()) + " is not auto or a factor from 0.75 to 3",
                                std::string::npos);
        return read;
    } catch (const std::exception& e) {
        warning = path + ": " + e.what() + "; the window starts with its defaults and leaves the file as it is";
        return s;
    }
}

bool save_settings(const std::string& path, const WindowSettings& s, std::string& error) {
    error.clear();
    if (path.empty()) return error = "no config folder (set XDG_CONFIG_HOME or HOME)", false;
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", double(s.ui_scale));
    JsonOut out = {{"workspace", workspace_info(s.workspace).name},
                   {"ui_scale", s.ui_scale == kUiScaleAuto ? std::string("auto") : std::string(scale)}};
    if (s.width > 0 && s.height > 0) {
        out["width"] = s.width;
        out["height"] = s.height;
    }
    try {
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
        write_file_atomic(path, json_text(out, 2) + "\n");
    } catch (const std::exception& e) {
        error = e.what();
        return false;
    }
    return true;
}

}  // namespace kvscope::gui
