#pragma once
// Every OpenGL call of the app lives in gl.cpp: the heatmap shader program, value textures, colour
// tables and the framebuffer read-back for screenshots. Panels only see texture ids and draw styles.
//
//   Gl::init(shaders_dir)             compile shaders/heatmap.{vert,frag}; false + error() on failure
//   Gl::upload(tex, rows, cols, v, m) (rows, cols) values + optional visibility -> RG32F texture;
//                                     reuses `tex` when non-zero; returns the texture id
//   Gl::release(tex)                  delete a texture
//   Gl::draw_heatmap(dl, tex, ...)    queue a textured quad drawn with the heatmap shader (ImGui callback)
//   Gl::read_framebuffer(w, h)        RGBA8 rows top to bottom of the back buffer
//   Gl::finish()                      wait for the GPU (frame timing)
#include <cstdint>
#include <string>
#include <vector>

#include <imgui.h>

namespace kvscope::gui {

enum class Colormap { Viridis, Diverging };
enum class Scale { Linear, Log, SymLog };

struct HeatmapStyle {
    Colormap colormap = Colormap::Viridis;
    Scale scale = Scale::Linear;
    bool mask_only = false;  // flat colour for visible cells, stripes for masked ones
    float lo = 0, hi = 1;    // value range mapped onto the table
};

namespace Gl {
bool init(const std::string& shaders_dir);
const std::string& error();
unsigned upload(unsigned tex, int64_t rows, int64_t cols, const float* values, const uint8_t* visible);
void release(unsigned tex);
// Draw texture `tex` (rows x cols cells) into the screen rectangle p0..p1 showing the uv window uv0..uv1;
// rows = cols = 0 for a texture of pooled blocks (no cell borders).
void draw_heatmap(ImDrawList* dl, unsigned tex, int64_t rows, int64_t cols, ImVec2 p0, ImVec2 p1, ImVec2 uv0,
                  ImVec2 uv1, const HeatmapStyle& style);
void begin_frame();  // recycles the per-frame draw parameters
std::vector<uint8_t> read_framebuffer(int width, int height);
void finish();
}  // namespace Gl

}  // namespace kvscope::gui
