#pragma once
// What the scripted GUI tests read, written in one place. Panels only name their widgets (dump_item,
// dump_window) and, for `attention-json`, hand over the map they drew; every file is made here, through
// the atomic writer.
//
//   dump_item(name)                   the last ImGui item's rectangle, for --layout-dump
//   dump_window(name)                 the current window's rectangle (call between Begin/End)
//   write_layout_dump(path, state)    {"state": state, "widgets": {"name": [x0, y0, x1, y1], ...}}; rewritten on change
//   write_memory_json(path, s, step)  script `memory-json FILE`: the block pool as of the shown step
//   write_attention_json(...)         script `attention-json FILE`: the map the Attention panel shows, as drawn
//                                     (kind, positions, token ids, scores, weights)
// Each returns false when the file cannot be written.
#include <cstdint>
#include <string>
#include <vector>

#include "json_write.h"
#include "snapshot.h"

namespace kvscope::gui {

void dump_item(const char* name);
void dump_window(const char* name);
bool write_layout_dump(const std::string& path, const JsonOut& state);
bool write_memory_json(const std::string& path, const Snapshot& s, int64_t step);
bool write_attention_json(const std::string& path, const char* kind, size_t step, const AttentionMap& m,
                          const std::vector<TokenId>& row_tokens, const std::vector<TokenId>& col_tokens);

}  // namespace kvscope::gui
