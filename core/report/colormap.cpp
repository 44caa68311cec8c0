#include "report/colormap.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace kvscope {
namespace {

uint8_t to_byte(double c) { return uint8_t(std::lround(std::clamp(c, 0.0, 1.0) * 255.0)); }

ColorTable make_viridis() {
    // Coefficients c0..c6 of the polynomial fit rgb(t) = Σ c_k t^k (public-domain fit of viridis).
    static constexpr double c[7][3] = {
        {0.2777273272234177, 0.005407344544966578, 0.3340998053353061},
        {0.1050930431085774, 1.404613529898575, 1.384590162594685},
        {-0.3308618287255563, 0.214847559468213, 0.09509516302823659},
        {-4.634230498983486, -5.799100973351585, -19.33244095627987},
        {6.228269936347081, 14.17993336680509, 56.69055260068105},
        {4.776384997670288, -13.74514537774601, -65.35303263337234},
        {-5.435455855934631, 4.645852612178535, 26.3124352495832},
    };
    ColorTable table{};
    for (int i = 0; i < 256; ++i) {
        const double t = i / 255.0;
        for (int ch = 0; ch < 3; ++ch) {
            double v = 0;
            for (int k = 6; k >= 0; --k) v = v * t + c[k][ch];  // Horner
            table[size_t(i)][size_t(ch)] = to_byte(v);
        }
    }
    return table;
}

// sRGB <-> Oklab (Ottosson 2020), on doubles in [0, 1].
struct Lab { double L, a, b; };

double srgb_to_linear(double c) { return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4); }
double linear_to_srgb(double c) { return c <= 0.0031308 ? 12.92 * c : 1.055 * std::pow(c, 1 / 2.4) - 0.055; }

Lab oklab_from_rgb(Rgb rgb) {
    const double r = srgb_to_linear(rgb[0] / 255.0), g = srgb_to_linear(rgb[1] / 255.0),
                 b = srgb_to_linear(rgb[2] / 255.0);
    const double l = std::cbrt(0.4122214708 * r + 0.5363325363 * g + 0.0514459929 * b);
    const double m = std::cbrt(0.2119034982 * r + 0.6806995451 * g + 0.1073969566 * b);
    const double s = std::cbrt(0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b);
    return {0.2104542553 * l + 0.7936177850 * m - 0.0040720468 * s,
            1.9779984951 * l - 2.4285922050 * m + 0.4505937099 * s,
            0.0259040371 * l + 0.7827717662 * m - 0.8086757660 * s};
}

Rgb rgb_from_oklab(Lab c) {
    const double l = std::pow(c.L + 0.3963377774 * c.a + 0.2158037573 * c.b, 3);
    const double m = std::pow(c.L - 0.1055613458 * c.a - 0.0638541728 * c.b, 3);
    const double s = std::pow(c.L - 0.0894841775 * c.a - 1.2914855480 * c.b, 3);
    return {to_byte(linear_to_srgb(4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s)),
            to_byte(linear_to_srgb(-1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s)),
            to_byte(linear_to_srgb(-0.0041960863 * l - 0.7034186147 * m + 1.7076147010 * s))};
}

ColorTable make_diverging() {
    const Lab cool = oklab_from_rgb({59, 76, 192}), middle = oklab_from_rgb({242, 242, 242}),
              warm = oklab_from_rgb({180, 4, 38});
    auto mix = [](Lab x, Lab y, double u) {
        return Lab{x.L + (y.L - x.L) * u, x.a + (y.a - x.a) * u, x.b + (y.b - x.b) * u};
    };
    ColorTable table{};
    for (int i = 0; i < 256; ++i) {
        const double t = i / 255.0;  // 0 = most negative, 0.5 = zero, 1 = most positive
        table[size_t(i)] = rgb_from_oklab(t < 0.5 ? mix(cool, middle, t * 2) : mix(middle, warm, t * 2 - 1));
    }
    return table;
}

}  // namespace

const ColorTable& viridis() {
    static const ColorTable table = make_viridis();
    return table;
}

const ColorTable& diverging() {
    static const ColorTable table = make_diverging();
    return table;
}

Rgb color_for(float value, float lo, float hi, const ColorTable& table) {
    if (std::isnan(value)) return masked_color(0, 0);
    const double span = double(hi) - double(lo);
    const double t = span > 0 ? (double(value) - double(lo)) / span : 0.5;
    return table[size_t(std::lround(std::clamp(t, 0.0, 1.0) * 255.0))];
}

Rgb masked_color(int64_t x, int64_t y) {
    return ((x + y) / masked_stripe_px) % 2 == 0 ? masked_dark : masked_light;
}

int64_t heatmap_cell_px(int64_t rows, int64_t cols) {
    const int64_t side = std::max<int64_t>({rows, cols, 1});
    // Small maps get bigger cells so the image is ~256 px across; big ones shrink to fit the cap.
    int64_t px = std::max<int64_t>(heatmap_min_cell_px, 256 / side);
    if (side * px > heatmap_max_side_px) px = std::max<int64_t>(1, heatmap_max_side_px / side);
    return px;
}

HeatmapImage render_heatmap(int64_t rows, int64_t cols, const float* values, const uint8_t* visible, float lo,
                            float hi, const ColorTable& table) {
    assert(rows > 0 && cols > 0 && "render_heatmap needs a non-empty map");
    const int64_t px = heatmap_cell_px(rows, cols);
    HeatmapImage image;
    image.width = std::min(cols * px, heatmap_max_side_px);
    image.height = std::min(rows * px, heatmap_max_side_px);
    image.rgb.resize(size_t(image.width * image.height * 3));
    for (int64_t y = 0; y < image.height; ++y) {
        const int64_t i = y * rows / image.height;
        for (int64_t x = 0; x < image.width; ++x) {
            const int64_t j = x * cols / image.width, cell = i * cols + j;
            const Rgb c = visible && !visible[cell] ? masked_color(x, y) : color_for(values[cell], lo, hi, table);
            std::copy(c.begin(), c.end(), image.rgb.begin() + (y * image.width + x) * 3);
        }
    }
    return image;
}

}  // namespace kvscope
