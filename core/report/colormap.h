#pragma once
// Colour tables for heatmaps, shared by the PNG exporter and the GUI, and the CPU heatmap renderer.
//
//   Rgb, ColorTable                 8-bit sRGB triple; 256 entries, entry i stands for t = i / 255
//   viridis()                       sequential, perceptually uniform, colour-blind safe: weights in [lo, hi]
//   diverging()                     blue - near white - red, built in Oklab: signed values centred on 0
//   color_for(v, lo, hi, table)     table entry for v clamped to [lo, hi]; NaN -> masked_color(0, 0)
//   masked_color(x, y)              the hatch drawn on masked cells: diagonal stripes of two neutral greys
//                                   that neither table produces (every table entry is tinted or lighter)
//   heatmap_cell_px(rows, cols)     nearest-neighbour scale: >= 8 px per cell, image side capped at 2048
//   render_heatmap(...)             (rows, cols) values -> (height, width, 3) RGB bytes, masked cells hatched
//
// viridis() is evaluated from a published degree-6 polynomial fit of matplotlib's viridis (fit error
// under 2/255 per channel); diverging() interpolates in Oklab between Moreland's "cool-warm" endpoints
// through a neutral light grey, so lightness rises to the middle and falls after it on both sides.
#include <array>
#include <cstdint>
#include <vector>

namespace kvscope {

using Rgb = std::array<uint8_t, 3>;
using ColorTable = std::array<Rgb, 256>;

const ColorTable& viridis();
const ColorTable& diverging();

inline constexpr Rgb masked_dark = {64, 64, 64};     // hatch stripes
inline constexpr Rgb masked_light = {128, 128, 128};
inline constexpr int64_t masked_stripe_px = 3;       // width of one stripe, along x + y

Rgb color_for(float value, float lo, float hi, const ColorTable& table = viridis());
Rgb masked_color(int64_t x, int64_t y);

inline constexpr int64_t heatmap_min_cell_px = 8;
inline constexpr int64_t heatmap_max_side_px = 2048;
int64_t heatmap_cell_px(int64_t rows, int64_t cols);

struct HeatmapImage {
    int64_t width = 0, height = 0;
    std::vector<uint8_t> rgb;  // (height, width, 3)
};
// values (rows, cols) row-major; visible (rows, cols) with 1 = draw the value, 0 = hatch; null = all visible.
// Pixel (x, y) shows cell (y * rows / height, x * cols / width): square cells unless a side hit the cap.
HeatmapImage render_heatmap(int64_t rows, int64_t cols, const float* values, const uint8_t* visible, float lo,
                            float hi, const ColorTable& table = viridis());

}  // namespace kvscope
