#include "loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <stb_image_write.h>

#include "errors.h"

namespace kvscope {
namespace {

struct Canvas {
    int w, h;
    std::vector<uint8_t> rgb;  // (h, w, 3)
    Canvas(int w_, int h_) : w(w_), h(h_), rgb(size_t(w_) * size_t(h_) * 3, 255) {}
    void dot(int x, int y, const uint8_t c[3]) {
        if (x < 0 || y < 0 || x >= w || y >= h) return;
        std::copy(c, c + 3, rgb.begin() + (size_t(y) * size_t(w) + size_t(x)) * 3);
    }
    // Bresenham, 2 px thick
    void line(int x0, int y0, int x1, int y1, const uint8_t c[3], bool thick) {
        const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
        int err = dx + dy;
        for (;;) {
            dot(x0, y0, c);
            if (thick) dot(x0, y0 + 1, c), dot(x0 + 1, y0, c);
            if (x0 == x1 && y0 == y1) break;
            const int e2 = 2 * err;
            if (e2 >= dy) err += dy, x0 += sx;
            if (e2 <= dx) err += dx, y0 += sy;
        }
    }
};

}  // namespace

void write_loss_png(const std::string& path, const std::vector<double>& losses, int width, int height) {
    if (losses.empty()) throw UsageError("loss plot: no losses to draw");
    if (width < 32 || height < 32) throw UsageError("loss plot: image smaller than 32x32");
    Canvas cv(width, height);
    const int m = 10;  // margin
    const int pw = width - 2 * m, ph = height - 2 * m;
    double top = 1;
    for (double l : losses)
        if (std::isfinite(l)) top = std::max(top, l);
    top = std::ceil(top);
    const size_t n = losses.size();
    auto px = [&](size_t i) { return m + int(std::lround(double(pw) * double(i) / double(std::max<size_t>(1, n - 1)))); };
    auto py = [&](double l) { return m + ph - int(std::lround(double(ph) * std::clamp(l, 0.0, top) / top)); };
    const uint8_t grid[3] = {225, 225, 225}, axis[3] = {90, 90, 90}, raw[3] = {160, 190, 240}, avg[3] = {20, 60, 170};
    for (int k = 0; k <= 10; ++k) {
        const int x = m + pw * k / 10;
        cv.line(x, m, x, m + ph, grid, false);
    }
    for (int k = 0; k <= int(top); ++k) cv.line(m, py(k), m + pw, py(k), grid, false);
    cv.line(m, m, m, m + ph, axis, false);
    cv.line(m, m + ph, m + pw, m + ph, axis, false);
    for (size_t i = 1; i < n; ++i) cv.line(px(i - 1), py(losses[i - 1]), px(i), py(losses[i]), raw, false);
    // pass 2: moving average over the last 50 steps, drawn on top
    double sum = 0, prev = 0;
    for (size_t i = 0; i < n; ++i) {
        sum += losses[i];
        if (i >= 50) sum -= losses[i - 50];
        const double mean = sum / double(std::min<size_t>(i + 1, 50));
        if (i) cv.line(px(i - 1), py(prev), px(i), py(mean), avg, true);
        prev = mean;
    }
    if (!stbi_write_png(path.c_str(), width, height, 3, cv.rgb.data(), width * 3))
        throw LoadError(path, "cannot write PNG");
}

}  // namespace kvscope
