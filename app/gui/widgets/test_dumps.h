#pragma once
// What the scripted GUI tests read, written in one place. Panels only name their widgets (dump_item,
// dump_window) and, for `attention-json`, hand over the map they drew; every file is made here, through
// the atomic writer.
//
//   begin_dump_frame()                forget the last frame's rectangles (the dump holds what one frame drew)
//   dump_item(name)                   the last ImGui item's rectangle and what its window shows of it
//   dump_window(name)                 the current window's rectangle (call between Begin/End)
//   dump_panel_window(name)           the same, for a top-level window (a panel or a window of tabs)
//   dump_text(name, text)             a line of text as drawn (headers, the status line, a tooltip)
//   write_layout_dump(path, state)    {"state": state, "viewport": [w, h], "widgets": {"name": [x0, y0, x1, y1]},
//                                     "windows": {top-level windows}, "clips": {item: visible part of its window},
//                                     "scrolls": {item: [its window scrolls horizontally, vertically]},
//                                     "texts": {name: text}}; rewritten on change
//   write_memory_json(path, s, step)  script `memory-json FILE`: the block pool as of the shown step
//   write_attention_json(...)         script `attention-json FILE`: the map the Attention panel shows, as drawn
//                                     (kind, positions, token ids; scores and weights when the map is given;
//                                     "tiles": the textures drawn, each {row0, col0, n_rows, n_cols, block_rows,
//                                     block_cols, out_rows, out_cols, values (out_rows, out_cols), visible})
//   write_rotary_json(...)            script `rotary-json FILE`: the Rotary panel's view (positions, per pair
//                                     frequencies and angles, the key before / after rotation, score by distance)
// Each returns false when the file cannot be written.
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/map_overview.h"
#include "analysis/rotary_view.h"
#include "io/json_write.h"
#include "logic/snapshot.h"

namespace kvscope::gui {

void begin_dump_frame();
void dump_item(const char* name);
void dump_box(const char* name, float x0, float y0, float x1, float y1);  // a drawn shape, not an item
void dump_window(const char* name);
void dump_panel_window(const char* name);
void dump_text(const char* name, const std::string& text);
bool write_layout_dump(const std::string& path, const JsonOut& state);
bool write_memory_json(const std::string& path, const Snapshot& s, int64_t step);
bool write_attention_json(const std::string& path, const char* kind, size_t step, int64_t layer, int64_t head,
                          int64_t n_query, int64_t n_key, int64_t first_query, int64_t first_key, const AttentionMap* m,
                          const std::vector<const PooledMap*>& tiles, const std::vector<TokenId>& row_tokens,
                          const std::vector<TokenId>& col_tokens);
bool write_rotary_json(const std::string& path, size_t step, int64_t layer, int64_t head, const RotaryView& v);

}  // namespace kvscope::gui
