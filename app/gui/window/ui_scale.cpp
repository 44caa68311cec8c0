#include "window/ui_scale.h"

#include <imgui.h>
#include <backends/imgui_impl_opengl3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "widgets/test_dumps.h"

namespace kvscope::gui {
namespace {

constexpr float kBaseFontPx = 16;  // DejaVu Sans at scale 1; ImGui's built-in font is drawn at 13

struct UiScale {
    float setting = kUiScaleAuto;
    float content = 1;            // the screen's content scale
    float applied = 0;            // the factor the fonts and style were last built for (0: never)
    float applied_fb = 0;         // and the framebuffer scale
    float font_px = 0;
    ImGuiStyle unscaled;          // the style at scale 1, kept so a change never scales twice
    bool has_unscaled = false;
};
UiScale state;

float clamp_scale(float s) { return std::clamp(s, kUiScaleMin, kUiScaleMax); }

// The font at `px` pixels, and its pixel height.
float load_font(float px) {
    ImGuiIO& io = ImGui::GetIO();
    io.Fonts->Clear();
    // Latin, Latin extended, Greek, Cyrillic, punctuation, arrows, math, geometric shapes: enough for
    // most token text; anything else shows as ImGui's fallback box (the tooltip also gives the bytes).
    static const ImWchar ranges[] = {0x0020, 0x024F, 0x0370, 0x03FF, 0x0400, 0x04FF, 0x2000, 0x206F,
                                     0x2190, 0x21FF, 0x2200, 0x22FF, 0x25A0, 0x25FF, 0};
    const std::string dejavu = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";  // tools/setup.sh installs it
    const float size = std::round(kBaseFontPx * px);
    if (std::filesystem::exists(dejavu) && io.Fonts->AddFontFromFileTTF(dejavu.c_str(), size, nullptr, ranges))
        return size;
    ImFontConfig cfg;
    cfg.SizePixels = std::round(13.0f * px);
    io.Fonts->AddFontDefault(&cfg);
    return cfg.SizePixels;
}

ImGuiStyle unscaled_style() {
    ImGuiStyle s;
    ImGui::StyleColorsDark(&s);
    s.WindowRounding = 0;
    s.FrameRounding = 3;
    s.GrabRounding = 3;
    s.WindowPadding = {8, 6};
    s.ItemSpacing = {8, 5};
    s.WindowBorderSize = 1;
    s.Colors[ImGuiCol_WindowBg] = {0.11f, 0.11f, 0.13f, 1};
    s.Colors[ImGuiCol_TitleBg] = {0.15f, 0.16f, 0.20f, 1};
    s.Colors[ImGuiCol_TitleBgActive] = {0.20f, 0.26f, 0.38f, 1};
    return s;
}

}  // namespace

float ui_scale_setting() { return state.setting; }
void set_ui_scale_setting(float s) { state.setting = s == kUiScaleAuto ? kUiScaleAuto : clamp_scale(s); }
void set_content_scale(float s) {
    if (std::isfinite(s) && s > 0) state.content = s;
}

float ui_scale() {
    // Auto on a screen whose framebuffer already has more pixels per coordinate (a Mac) is 1 in coordinates.
    const float fb = state.applied_fb > 0 ? state.applied_fb : 1;
    return state.setting == kUiScaleAuto ? clamp_scale(state.content / fb) : state.setting;
}

float ui_font_px() { return state.font_px; }

bool apply_ui_scale(float fb_scale) {
    if (!std::isfinite(fb_scale) || fb_scale <= 0) fb_scale = state.applied_fb > 0 ? state.applied_fb : 1;
    const float scale = state.setting == kUiScaleAuto ? clamp_scale(state.content / fb_scale) : state.setting;
    if (scale == state.applied && fb_scale == state.applied_fb) return false;
    ImGuiIO& io = ImGui::GetIO();
    // The backend holds the old atlas as a texture; a context without one yet makes it at its first frame.
    const bool has_texture = io.BackendRendererUserData != nullptr;
    if (has_texture) ImGui_ImplOpenGL3_DestroyFontsTexture();
    state.font_px = load_font(scale * fb_scale);
    io.FontGlobalScale = 1 / fb_scale;  // glyphs of fb_scale pixels per coordinate
    if (has_texture) ImGui_ImplOpenGL3_CreateFontsTexture();
    if (!state.has_unscaled) {
        state.unscaled = unscaled_style();
        state.has_unscaled = true;
    }
    ImGuiStyle& s = ImGui::GetStyle();
    s = state.unscaled;
    s.ScaleAllSizes(scale);
    state.applied = scale;
    state.applied_fb = fb_scale;
    return true;
}

void draw_view_menu() {
    char label[64];
    std::snprintf(label, sizeof label, "Auto (this screen: %.0f %%)", double(clamp_scale(state.content / (state.applied_fb > 0 ? state.applied_fb : 1)) * 100));
    if (ImGui::MenuItem(label, nullptr, state.setting == kUiScaleAuto)) set_ui_scale_setting(kUiScaleAuto);
    dump_item("view scale auto");
    for (const int percent : {100, 125, 150, 175, 200}) {
        std::snprintf(label, sizeof label, "%d %%", percent);
        const float s = float(percent) / 100;
        if (ImGui::MenuItem(label, nullptr, state.setting == s)) set_ui_scale_setting(s);
        std::snprintf(label, sizeof label, "view scale %d", percent);
        dump_item(label);
    }
}

}  // namespace kvscope::gui
