#pragma once
// Attention snapshots on disk, the one format shared by `generate --trace`, the GUI's export buttons and
// tests. For each exported step s, layer l, head h, in DIR:
//   step_0003/meta.json                  tokens (ids, display text or null), query/key positions, phase,
//                                        shapes, mask {offset, window, rule}, chosen token, top-k, entropy,
//                                        flops, seconds, cache state, heatmaps {written, reason}, file list
//   step_0003/l01_h05_weights.png        softmax weights, viridis on [0, 1]; rows = queries, cols = keys
//   step_0003/l01_h05_scores.png         scores, diverging map on ±max|visible score| (0 = light grey)
//   step_0003/l01_h05_scores.npy         (R, P) float32 scaled scores before masking
//   step_0003/l01_h05_weights.npy        (R, P) float32 softmax weights (0 where masked)
//   step_0003/l01_h05_mask.npy           (R, P) uint8, 1 = visible
//   step_0003/q.npy, k.npy, v.npy        (L, R, C) float32 rows computed this step (recorded steps only)
//   step_0003/logits.npy                 (V) float32 when the step predicted a token
//   trace.json                           {"format", "version", "model", "n_steps", "steps": [one line each]}
//
// Columns: column c is key position key_positions[0] + c. mask.offset = query_positions[0] -
// key_positions[0], the number of key columns before the first query's own key, so row r's own key is
// column offset + r; row r sees columns <= offset + r, and with a window W only those > offset + r - W.
// PNGs: nearest-neighbour cells of >= 8 px, sides capped at 2048 px; masked cells are a two-grey hatch
// no colormap entry produces. Steps run with recording off get meta.json (heatmaps.written = false,
// with the reason) and logits.npy only.
//
//   ExportScope                    all heads of all layers, or one (layer, head)
//   export_step(trace, s, tok, dir, scope)   write one step's folder; returns the folder path
//   export_trace(trace, tok, dir, scope, on_step)   every step, then trace.json; on_step(i) for progress.
//                                       Step folders an earlier, longer trace left in dir are removed (the
//                                       trace owns step_NNNN); returns how many
// Every file is written by write_file_atomic (atomic_file.h). A bad scope or folder throws UsageError,
// a file that cannot be written LoadError; both name the path.
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
int64_t export_trace(const Trace& trace, const Tokenizer* tokenizer, const std::string& dir,
                  const ExportScope& scope = {}, const std::function<void(size_t)>& on_step = {});

// PNGs, shared with anything else that writes them (charts, screenshots); written by write_file_atomic.
//   write_heatmap_png(path, rows, cols, values, visible, lo, hi)          viridis; visible may be null
//   write_heatmap_png(path, rows, cols, values, visible, lo, hi, table)   any 256-entry table (colormap.h)
//   write_png_rgb(path, width, height, rgb)                               8-bit RGB rows, top row first
void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi);
void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi, const ColorTable& table);
void write_png_rgb(const std::string& path, int64_t width, int64_t height, const uint8_t* rgb);

}  // namespace kvscope
