#pragma once
// A heatmap widget: reserves a rectangle, draws a value texture through the heatmap shader, and reports
// the hovered / clicked cell. With a HeatmapZoom it also zooms (mouse wheel, around the cursor) and pans
// (drag); double-click resets. Cells keep a sane aspect: square when they fit, never thinner than a line.
// A map may be drawn from several textures (layers, in order): each covers a window of its cells, pooled
// in blocks (map_overview.h) — e.g. the whole map at screen resolution under a finer tile of the part in
// view. Cell borders appear only on layers of exact cells.
#include <cstdint>
#include <vector>

#include <imgui.h>

#include "analysis/map_overview.h"
#include "widgets/gl.h"

namespace kvscope::gui {

struct HeatmapZoom {
    float* zoom = nullptr;    // 1 = whole map
    ImVec2* center = nullptr; // uv of the view centre
};

struct HeatmapResult {
    ImVec2 p0, p1;            // screen rectangle of the map
    ImVec2 uv0, uv1;          // visible uv window
    int64_t hover_row = -1, hover_col = -1;
    bool clicked = false;     // released without dragging on a cell
    // Screen rectangle of a cell (for overlays); may lie outside p0..p1 when zoomed.
    ImVec2 cell_min(int64_t row, int64_t col) const;
    ImVec2 cell_max(int64_t row, int64_t col) const;
    int64_t rows = 0, cols = 0;
};

// Size of a (rows, cols) map that fits `avail`: square cells when possible, rows at least min_row_px tall.
ImVec2 heatmap_fit(int64_t rows, int64_t cols, ImVec2 avail, float min_row_px = 3.0f);

// The framebuffer pixels (rows, cols) a map of `size` (ImGui units) is drawn on: what an overview is pooled
// to, so a screen with more pixels per unit (DisplayFramebufferScale 2) gets a map as sharp as its pixels.
void heatmap_pixels(ImVec2 size, int64_t& px_rows, int64_t& px_cols);

struct HeatmapLayer {
    unsigned tex = 0;
    MapWindow window;  // the cells the texture holds, one texel per block
};

HeatmapResult heatmap(const char* id, unsigned tex, int64_t rows, int64_t cols, ImVec2 size, const HeatmapStyle& style,
                      HeatmapZoom zoom = {});
HeatmapResult heatmap(const char* id, const std::vector<HeatmapLayer>& layers, int64_t rows, int64_t cols, ImVec2 size,
                      const HeatmapStyle& style, HeatmapZoom zoom = {});
// The uv window a zoom state shows (what heatmap() will draw, before this frame's wheel and drag).
void heatmap_view(const HeatmapZoom& zoom, ImVec2& uv0, ImVec2& uv1);

// A small horizontal colour bar with the range written under it.
void colorbar(const HeatmapStyle& style, float width, const char* lo_text, const char* hi_text);

}  // namespace kvscope::gui
