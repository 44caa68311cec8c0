#include "widgets/heatmap.h"

#include <imgui_internal.h>  // SetItemUsingMouseWheel

#include <algorithm>
#include <cmath>

#include "report/colormap.h"

namespace kvscope::gui {

ImVec2 HeatmapResult::cell_min(int64_t row, int64_t col) const {
    const float u = float(col) / float(cols), v = float(row) / float(rows);
    return {p0.x + (u - uv0.x) / (uv1.x - uv0.x) * (p1.x - p0.x), p0.y + (v - uv0.y) / (uv1.y - uv0.y) * (p1.y - p0.y)};
}

ImVec2 HeatmapResult::cell_max(int64_t row, int64_t col) const { return cell_min(row + 1, col + 1); }

ImVec2 heatmap_fit(int64_t rows, int64_t cols, ImVec2 avail, float min_row_px) {
    if (rows <= 0 || cols <= 0 || avail.x <= 1 || avail.y <= 1) return {std::max(avail.x, 1.0f), std::max(avail.y, 1.0f)};
    const float cw = avail.x / float(cols), ch = avail.y / float(rows);
    float s = std::min(cw, ch);
    float w = s * float(cols), h = s * float(rows);
    // A wide, short map (a decode step: 1 query x P keys) would be a sliver: give rows more height, up to
    // a row label's (28 px at 16 px text, so it grows with the UI scale).
    const float row_max = ImGui::GetFontSize() * 1.75f;
    const float min_h = std::min(avail.y, std::max(float(rows) * min_row_px, std::min(avail.y, row_max)));
    if (h < min_h) {
        w = avail.x;
        h = std::min(avail.y, std::max(min_h, float(rows) * std::min(cw, row_max)));
    }
    return {std::max(w, 1.0f), std::max(h, 1.0f)};
}

void heatmap_pixels(ImVec2 size, int64_t& px_rows, int64_t& px_cols) {
    const ImVec2 fb = ImGui::GetIO().DisplayFramebufferScale;
    px_rows = std::max<int64_t>(1, int64_t(std::ceil(size.y * std::max(fb.y, 1.0f))));
    px_cols = std::max<int64_t>(1, int64_t(std::ceil(size.x * std::max(fb.x, 1.0f))));
}

void heatmap_view(const HeatmapZoom& zoom, ImVec2& uv0, ImVec2& uv1) {
    const float z = zoom.zoom ? std::max(1.0f, *zoom.zoom) : 1.0f;
    ImVec2 c = zoom.center ? *zoom.center : ImVec2(0.5f, 0.5f);
    const float half = 0.5f / z;
    c.x = std::clamp(c.x, half, 1 - half);
    c.y = std::clamp(c.y, half, 1 - half);
    uv0 = {c.x - half, c.y - half};
    uv1 = {c.x + half, c.y + half};
}

HeatmapResult heatmap(const char* id, unsigned tex, int64_t rows, int64_t cols, ImVec2 size, const HeatmapStyle& style,
                      HeatmapZoom zoom) {
    MapWindow whole;
    whole.n_rows = rows;
    whole.n_cols = cols;
    return heatmap(id, std::vector<HeatmapLayer>{{tex, whole}}, rows, cols, size, style, zoom);
}

HeatmapResult heatmap(const char* id, const std::vector<HeatmapLayer>& layers, int64_t rows, int64_t cols, ImVec2 size,
                      const HeatmapStyle& style, HeatmapZoom zoom) {
    HeatmapResult r;
    r.rows = rows;
    r.cols = cols;
    r.p0 = ImGui::GetCursorScreenPos();
    r.p1 = {r.p0.x + size.x, r.p0.y + size.y};
    ImGui::InvisibleButton(id, size);
    // A zoomable map takes the wheel: it must not also scroll its panel, moving the map under the mouse.
    if (zoom.zoom) ImGui::SetItemUsingMouseWheel();
    const bool hovered = ImGui::IsItemHovered();
    ImGuiIO& io = ImGui::GetIO();

    float z = zoom.zoom ? std::max(1.0f, *zoom.zoom) : 1.0f;
    ImVec2 c = zoom.center ? *zoom.center : ImVec2(0.5f, 0.5f);
    if (zoom.zoom && hovered && io.MouseWheel != 0) {
        // Zoom around the cursor: the uv under the mouse stays under the mouse.
        const float mx = (io.MousePos.x - r.p0.x) / size.x, my = (io.MousePos.y - r.p0.y) / size.y;
        const float u = c.x + (mx - 0.5f) / z, v = c.y + (my - 0.5f) / z;
        const float nz = std::clamp(z * std::pow(1.25f, io.MouseWheel), 1.0f, 256.0f);
        c = {u - (mx - 0.5f) / nz, v - (my - 0.5f) / nz};
        z = nz;
    }
    if (zoom.zoom && ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f)) {
        c.x -= io.MouseDelta.x / size.x / z;
        c.y -= io.MouseDelta.y / size.y / z;
    }
    if (zoom.zoom && hovered && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
        z = 1;
        c = {0.5f, 0.5f};
    }
    const float half = 0.5f / z;
    c.x = std::clamp(c.x, half, 1 - half);
    c.y = std::clamp(c.y, half, 1 - half);
    if (zoom.zoom) {
        *zoom.zoom = z;
        *zoom.center = c;
    }
    r.uv0 = {c.x - half, c.y - half};
    r.uv1 = {c.x + half, c.y + half};

    ImDrawList* dl = ImGui::GetWindowDrawList();
    // Each layer where its window meets the view: screen rectangle and texture uv of that part.
    const double vx0 = double(r.uv0.x) * double(cols), vx1 = double(r.uv1.x) * double(cols);
    const double vy0 = double(r.uv0.y) * double(rows), vy1 = double(r.uv1.y) * double(rows);
    for (const HeatmapLayer& l : layers) {
        const MapWindow& w = l.window;
        if (!l.tex || w.n_rows <= 0 || w.n_cols <= 0) continue;
        const double x0 = std::max(vx0, double(w.col0)), x1 = std::min(vx1, double(w.col0 + w.n_cols));
        const double y0 = std::max(vy0, double(w.row0)), y1 = std::min(vy1, double(w.row0 + w.n_rows));
        if (x1 <= x0 || y1 <= y0) continue;
        const double span_x = double(w.out_cols() * w.block_cols), span_y = double(w.out_rows() * w.block_rows);
        auto sx = [&](double x) { return float(double(r.p0.x) + (x - vx0) / (vx1 - vx0) * double(size.x)); };
        auto sy = [&](double y) { return float(double(r.p0.y) + (y - vy0) / (vy1 - vy0) * double(size.y)); };
        const ImVec2 t0 = {float((x0 - double(w.col0)) / span_x), float((y0 - double(w.row0)) / span_y)};
        const ImVec2 t1 = {float((x1 - double(w.col0)) / span_x), float((y1 - double(w.row0)) / span_y)};
        Gl::draw_heatmap(dl, l.tex, w.exact() ? w.out_rows() : 0, w.exact() ? w.out_cols() : 0, {sx(x0), sy(y0)},
                         {sx(x1), sy(y1)}, t0, t1, style);
    }
    dl->AddRect({r.p0.x - 1, r.p0.y - 1}, {r.p1.x + 1, r.p1.y + 1}, IM_COL32(120, 120, 130, 255));

    if (hovered && rows > 0 && cols > 0) {
        const float u = r.uv0.x + (io.MousePos.x - r.p0.x) / size.x * (r.uv1.x - r.uv0.x);
        const float v = r.uv0.y + (io.MousePos.y - r.p0.y) / size.y * (r.uv1.y - r.uv0.y);
        r.hover_col = std::clamp<int64_t>(int64_t(u * float(cols)), 0, cols - 1);
        r.hover_row = std::clamp<int64_t>(int64_t(v * float(rows)), 0, rows - 1);
        if (ImGui::IsMouseReleased(ImGuiMouseButton_Left)) {
            const ImVec2 d = ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0.0f);
            r.clicked = d.x * d.x + d.y * d.y < 9.0f;
        }
    }
    return r;
}

void colorbar(const HeatmapStyle& style, float width, const char* lo_text, const char* hi_text) {
    const ColorTable& t = style.colormap == Colormap::Viridis ? viridis() : diverging();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float h = ImGui::GetTextLineHeight() * 0.6f;
    const int n = 64;
    for (int i = 0; i < n; ++i) {
        const auto& rgb = t[size_t(i * 255 / (n - 1))];
        dl->AddRectFilled({p.x + width * float(i) / n, p.y}, {p.x + width * float(i + 1) / n + 0.5f, p.y + h},
                          IM_COL32(rgb[0], rgb[1], rgb[2], 255));
    }
    ImGui::Dummy({width, h});
    const float start = p.x - ImGui::GetWindowPos().x + ImGui::GetScrollX();
    ImGui::TextDisabled("%s", lo_text);
    ImGui::SameLine(start + width - ImGui::CalcTextSize(hi_text).x);
    ImGui::TextDisabled("%s", hi_text);
}

}  // namespace kvscope::gui
