#pragma once
// A PNG read back for the tests with stb_image (not kvscope's writer): size and 8-bit RGB pixels.
//
//   read_png(path)   the image as RGB, REQUIREs that it decodes
//   Png::at(x, y)    the pixel at column x, row y
#include <array>
#include <cstdint>
#include <filesystem>
#include <vector>

#include <catch2/catch.hpp>
#include <stb/stb_image.h>  // implementation compiled into Debian's libstb

namespace kvtest {

struct Png {
    int width = 0, height = 0;
    std::vector<uint8_t> rgb;  // (height, width, 3)
    std::array<uint8_t, 3> at(int x, int y) const {
        const size_t o = (size_t(y) * size_t(width) + size_t(x)) * 3;
        return {rgb[o], rgb[o + 1], rgb[o + 2]};
    }
};

inline Png read_png(const std::filesystem::path& path) {
    Png png;
    int channels = 0;
    uint8_t* pixels = stbi_load(path.string().c_str(), &png.width, &png.height, &channels, 3);
    INFO("reading " << path);
    REQUIRE(pixels != nullptr);
    png.rgb.assign(pixels, pixels + size_t(png.width) * size_t(png.height) * 3);
    stbi_image_free(pixels);
    return png;
}

}  // namespace kvtest
