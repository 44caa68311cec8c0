#pragma once
// Attention snapshots on disk, the one format shared by `generate --trace`, the GUI's export buttons and
// tests (docs/cli.md "Trace and export files" documents it for users). For each exported step s, layer l,
// head h, in DIR:
//   step_0003/meta.json                  format "kvscope-attention-step" version 2: tokens (ids, text or
//                                        null), query/key positions, phase, shapes, mask {first_query_position,
//                                        first_key_position, own_key_column, window, sinks, values, rule},
//                                        chosen token, top-k, entropy, flops, seconds, cache state, heatmaps
//                                        {written, reason}, "files": every file with dtype, shape, axes
//                                        and meaning (PNGs also where their cells are), and "edits": the
//                                        cache edits made before the step (edits_json)
//   step_0003/l01_h05_weights.png        softmax weights, viridis on [0, 1], with a title, query positions
//                                        down the left, key positions along the bottom (with a tokenizer,
//                                        each ticked position's token text too) and a colour bar
//   step_0003/l01_h05_scores.png         scores, diverging map on ±max|visible score| (0 = light grey)
//                                        With ExportScope::plots both are .svg instead (svg.h: the same
//                                        layout, vector axes and labels), or PNGs scaled up 1..8 times;
//                                        the same map in the other format, left by an earlier export, is
//                                        removed
//   step_0003/l01_h05_scores.npy         (R, P) float32 scaled scores q.k/sqrt(D); -inf where masked
//   step_0003/l01_h05_weights.npy        (R, P) float32 softmax weights (0 where masked) = softmax(scores)
//   step_0003/l01_h05_mask.npy           (R, P) uint8, 1 = visible, 0 = masked
//   step_0003/q.npy, k.npy, v.npy        (L, R, C) float32 rows computed this step (recorded steps only)
//   step_0003/logits.npy                 (V) float32 when the step predicted a token
//   trace.json                           {"format", "version", "model", "n_steps", "steps": [one line each]}
//
// Columns: column c is key position key_positions[c] = first_key_position + c. own_key_column =
// query_positions[0] - key_positions[0] is a column index: row r's own key is column own_key_column + r;
// row r sees columns <= own_key_column + r, and with a window W only those > own_key_column + r - W.
// PNGs: nearest-neighbour cells of >= 8 px, rows taller for maps of few rows, the cell area capped at
// 2048 px a side; masked cells are a two-grey hatch no colormap entry produces. Steps run with recording
// off get meta.json (heatmaps.written = false, with the reason) and logits.npy only.
//
// Folders follow output_path.h: DIR is created if missing (its parent must exist) and written into
// only when empty or kvscope's (its kvscope-manifest.tsv proves every file in it; ownership.h).
//
//   ExportScope                    all heads of all layers, or one (layer, head); the heatmaps' format
//   export_step(trace, s, tok, dir, scope)   write one step's folder; returns the folder path
//   export_trace(trace, tok, dir, scope, on_step)   every step, then trace.json; on_step(i) for progress.
//                                       Step folders an earlier, longer trace left in dir are removed (only
//                                       the files kvscope's manifest proves); returns how many
// Every file is written by write_file_atomic (atomic_file.h). A bad scope or folder throws UsageError,
// a file that cannot be written LoadError; both name the path.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "io/json_write.h"
#include "report/colormap.h"
#include "report/plot.h"
#include "run/trace.h"
#include "text/tokenizer.h"

namespace kvscope {

class Model;

struct ExportScope {
    std::optional<int64_t> layer;  // nullopt = every layer
    std::optional<int64_t> head;   // nullopt = every head
    const Model* logit_lens = nullptr;  // the step's model: also logit_lens.json, the last computed row's lens
    PlotOutput plots{};            // heatmaps as PNG (at plots.scale) or SVG: l01_h05_weights.svg etc.
};

std::string export_step(const Trace& trace, size_t step, const Tokenizer* tokenizer, const std::string& dir,
                        const ExportScope& scope = {});
// Cache edits (cache_edit.h) as meta.json's "edits" lists them: kind, position, layer, kv_head ("all" or a
// number), source, n_changed, next_position, next_token, kl, top1 before / after, movers.
JsonOut edits_json(const Tokenizer* tokenizer, const std::vector<CacheEditRecord>& edits);
int64_t export_trace(const Trace& trace, const Tokenizer* tokenizer, const std::string& dir,
                  const ExportScope& scope = {}, const std::function<void(size_t)>& on_step = {});

// PNGs, shared with anything else that writes them (charts, screenshots); written by write_file_atomic.
//   write_heatmap_png(path, rows, cols, values, visible, lo, hi)          viridis; visible may be null
//   write_heatmap_png(path, rows, cols, values, visible, lo, hi, table)   any 256-entry table (colormap.h)
//   write_png_rgb(path, width, height, rgb)                               8-bit RGB rows, top row first
//   encode_png_rgb(width, height, rgb)                                    the same PNG file's bytes in memory
void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi);
void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi, const ColorTable& table);
void write_png_rgb(const std::string& path, int64_t width, int64_t height, const uint8_t* rgb);
std::string encode_png_rgb(int64_t width, int64_t height, const uint8_t* rgb);

}  // namespace kvscope
