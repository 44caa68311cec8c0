#pragma once
// Attention snapshots on disk, the one format shared by `generate --trace`, the GUI's export buttons and
// tests. For each exported step s, layer l, head h, in DIR:
//   step_0003/meta.json                  tokens (ids, display text), positions, phase, shapes, mask offset,
//                                        window, chosen token, top-k, cache state, file list
//   step_0003/l01_h05_weights.png        softmax weights as a heatmap (perceptual colormap; masked cells
//                                        drawn in a distinct hatch colour), rows = queries, cols = keys
//   step_0003/l01_h05_scores.npy         (R, P) float32 scaled scores before masking
//   step_0003/l01_h05_weights.npy        (R, P) float32 softmax weights (0 where masked)
//   step_0003/l01_h05_mask.npy           (R, P) uint8, 1 = visible
//   step_0003/q.npy, k.npy, v.npy        (L, R, C) float32 rows computed this step
//   step_0003/logits.npy                 (V) float32 when the step predicted a token
//   trace.json                           one summary line per step (index, phase, positions, chosen, ...)
//
//   ExportScope                    all heads of all layers, or one (layer, head)
//   export_step(trace, s, tok, dir, scope)   write one step's folder; returns the folder path
//   export_trace(trace, tok, dir, scope, on_step)   every step, then trace.json; on_step(i) for progress
// Everything is written atomically per file; a failure throws UsageError naming the path.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "colormap.h"
#include "tokenizer.h"
#include "trace.h"

namespace kvscope {

struct ExportScope {
    std::optional<int64_t> layer;  // nullopt = every layer
    std::optional<int64_t> head;   // nullopt = every head
};

std::string export_step(const Trace& trace, size_t step, const Tokenizer* tokenizer, const std::string& dir,
                        const ExportScope& scope = {});
void export_trace(const Trace& trace, const Tokenizer* tokenizer, const std::string& dir,
                  const ExportScope& scope = {}, const std::function<void(size_t)>& on_step = {});

// The heatmap colouring (core/colormap.h), shared with anything else that writes PNGs.
//   write_heatmap_png(path, rows, cols, values, visible, lo, hi)          viridis; visible may be null
//   write_heatmap_png(path, rows, cols, values, visible, lo, hi, table)   any 256-entry table
void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi);
void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi, const ColorTable& table);

}  // namespace kvscope
