#pragma once
// A loss curve as a PNG, drawn pixel by pixel (no font: the axes are described where the image is shown).
//
//   write_loss_png(path, losses, w, h)   white background; light grid at every 10% of the steps (x) and at
//                                        every whole nat (y, from 0 to the first loss rounded up); the raw
//                                        per-step loss in light blue, its 50-step moving average in dark
//                                        blue. Throws LoadError when the file cannot be written,
//                                        UsageError when losses is empty or w, h < 32.
#include <string>
#include <vector>

namespace kvscope {

void write_loss_png(const std::string& path, const std::vector<double>& losses, int width = 800, int height = 400);

}  // namespace kvscope
