#pragma once
// The UI scale: how large text and widgets are drawn. The setting is Auto (the screen's content scale,
// e.g. 1.5 on a 1920x1080 laptop at 150 %, from Xft.dpi on X11) or a factor chosen with `kvscope gui
// --ui-scale`, the View menu or the script line `ui-scale`. A change is applied between frames: the font
// atlas rasterized again at the new pixel size (never a bitmap stretched), the style's sizes scaled from
// an unscaled copy (never scaled twice).
//
// Units: ImGui coordinates are the window's coordinates (GLFW's, the mouse's); the framebuffer may have
// more pixels per coordinate (DisplayFramebufferScale: 2 on a Retina Mac, 1 on X11). The UI scale is in
// ImGui coordinates; fonts are rasterized at UI scale x framebuffer scale pixels, so text stays sharp.
//
//   kUiScaleAuto, parse_ui_scale  the setting's values and its parser: logic/window_settings.h
//   ui_scale_setting()            the setting: kUiScaleAuto or a factor (the settings file persists this)
//   set_ui_scale_setting(s)       choose a setting; clamped to the range; applied before the next frame
//   set_content_scale(s)          the screen's content scale (GLFW), read at start and when it changes
//   ui_scale()                    the factor in effect (Auto resolved)
//   ui_font_px()                  the font's height in framebuffer pixels
//   apply_ui_scale(fb_scale)      between frames: rebuild fonts, the font texture (when the GL backend
//                                 runs) and the style if the factor or framebuffer scale changed;
//                                 true when it did
//   draw_view_menu()              the View menu's items (call between BeginMenu("View") and EndMenu)
#include <string>

#include "logic/window_settings.h"

namespace kvscope::gui {

float ui_scale_setting();
void set_ui_scale_setting(float s);
void set_content_scale(float s);
float ui_scale();
float ui_font_px();
bool apply_ui_scale(float fb_scale);
void draw_view_menu();

}  // namespace kvscope::gui
