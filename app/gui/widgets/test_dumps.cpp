// What scripted tests read, written in one place (see test_dumps.h). Panels only name their widgets
// (dump_item) and hand over what they drew; the files are made here.
#include "widgets/test_dumps.h"

#include <imgui.h>

#include <cmath>
#include <map>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "io/json_write.h"

namespace kvscope::gui {

namespace {
// name -> (x0, y0, x1, y1) in window pixels, as drawn this frame
std::map<std::string, ImVec4> dumped;   // items and panel windows (or a tab's area)
std::map<std::string, ImVec4> clips;    // item -> what its window shows of it
std::map<std::string, std::pair<bool, bool>> scrolls;  // item -> its window scrolls (horizontally, vertically)
std::map<std::string, ImVec4> windows;  // top-level windows: a panel, or a window of tabs
std::map<std::string, std::string> texts;

JsonOut rects(const std::map<std::string, ImVec4>& m) {
    JsonOut out = JsonOut::object();
    for (const auto& [name, r] : m)  // whole pixels: tests click at these
        out[name] = {std::lround(r.x), std::lround(r.y), std::lround(r.z), std::lround(r.w)};
    return out;
}
}  // namespace

void begin_dump_frame() {
    dumped.clear();
    clips.clear();
    scrolls.clear();
    windows.clear();
    texts.clear();
}

void dump_text(const char* name, const std::string& text) { texts[name] = text; }

void dump_item(const char* name) {
    const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
    dumped[name] = {a.x, a.y, b.x, b.y};
    const ImVec2 c0 = ImGui::GetWindowDrawList()->GetClipRectMin(), c1 = ImGui::GetWindowDrawList()->GetClipRectMax();
    clips[name] = {c0.x, c0.y, c1.x, c1.y};
    scrolls[name] = {ImGui::GetScrollMaxX() > 0, ImGui::GetScrollMaxY() > 0};
}

void dump_box(const char* name, float x0, float y0, float x1, float y1) {
    dumped[name] = {x0, y0, x1, y1};
    const ImVec2 c0 = ImGui::GetWindowDrawList()->GetClipRectMin(), c1 = ImGui::GetWindowDrawList()->GetClipRectMax();
    clips[name] = {c0.x, c0.y, c1.x, c1.y};
    scrolls[name] = {ImGui::GetScrollMaxX() > 0, ImGui::GetScrollMaxY() > 0};
}

void dump_panel_window(const char* name) {
    const ImVec2 a = ImGui::GetWindowPos(), s = ImGui::GetWindowSize();
    windows[name] = {a.x, a.y, a.x + s.x, a.y + s.y};
}

void dump_window(const char* name) {
    const ImVec2 a = ImGui::GetWindowPos(), s = ImGui::GetWindowSize();
    dumped[name] = {a.x, a.y, a.x + s.x, a.y + s.y};
}

bool write_layout_dump(const std::string& path, const JsonOut& state) {
    JsonOut scrolling = JsonOut::object();
    for (const auto& [name, s] : scrolls) scrolling[name] = {s.first, s.second};
    const ImVec2 d = ImGui::GetIO().DisplaySize;
    const std::string text = json_text({{"state", state},
                                        {"viewport", {std::lround(d.x), std::lround(d.y)}},
                                        {"widgets", rects(dumped)},
                                        {"windows", rects(windows)},
                                        {"clips", rects(clips)},
                                        {"scrolls", scrolling},
                                        {"texts", texts}},
                                       2) + "\n";
    static std::string last;
    if (text == last) return true;
    try {
        write_file_atomic(path, text);
    } catch (const LoadError&) {
        return false;
    }
    last = text;
    return true;
}

bool write_memory_json(const std::string& path, const Snapshot& s, int64_t step) {
    const PoolView* m = s.pool_at(step);
    JsonOut j;
    // Every sequence's positions whose K/V were not computed, by source (all steps so far).
    JsonOut& not_computed = j["not_computed"] = JsonOut::array();
    for (const auto& seq : s.sequences) {
        int64_t shared = 0, cached = 0;
        for (size_t k = 0; k < seq.trace.size(); ++k)
            (seq.trace[k].cost.adopted_from == StepCost::Source::PromptCache ? cached : shared) += seq.trace[k].cost.n_adopted;
        not_computed.push_back({{"shared_prefix", shared}, {"prompt_cache", cached}});
    }
    j["paged"] = m != nullptr;
    if (m) {
        int64_t in_use = 0, shared = 0, max_sharers = 0, n_alloc = 0, n_shared = 0, n_copied = 0, n_freed = 0;
        for (int32_t b = 0; b < int32_t(m->blocks.size()); ++b) {
            const PoolView::Block& k = m->blocks[size_t(b)];
            const uint8_t change = m->change(b);
            in_use += k.refs > 0;
            shared += k.seqs.size() > 1;
            max_sharers = std::max<int64_t>(max_sharers, int64_t(k.seqs.size()));
            n_alloc += (change & PoolView::Allocated) != 0;
            n_shared += (change & PoolView::Shared) != 0;
            n_copied += (change & PoolView::Copied) != 0;
            n_freed += (change & PoolView::Freed) != 0;
        }
        j["batch_step"] = m->group_step;
        j["sequences"] = m->tables.size();
        j["block_size"] = m->block_size;
        j["n_blocks"] = m->blocks.size();
        j["bytes_per_block"] = m->bytes_per_block;
        j["n_free"] = m->n_free;
        j["in_use"] = in_use;
        j["mapped"] = m->n_mapped();
        j["unshared"] = m->n_unshared();
        j["bytes_saved"] = (m->n_unshared() - m->n_mapped()) * m->bytes_per_block;
        j["shared_blocks"] = shared;
        j["max_sharers"] = max_sharers;
        j["copies_on_write"] = m->copies_on_write;
        j["positions_adopted"] = m->positions_adopted;
        j["this_step"] = {{"allocated", n_alloc}, {"shared", n_shared}, {"copied", n_copied}, {"freed", n_freed}};
        j["tables"] = m->tables;
        j["adopted"] = m->adopted;
        JsonOut& blocks = j["blocks"] = JsonOut::array();
        for (size_t b = 0; b < m->blocks.size(); ++b) {
            const auto& k = m->blocks[b];
            const uint8_t change = m->change(int32_t(b));
            if (k.refs == 0 && !change) continue;
            blocks.push_back({{"id", b},
                              {"refs", k.refs},
                              {"logical", k.logical},
                              {"seqs", k.seqs},
                              {"change", change},
                              {"copied_from", m->copied_from(int32_t(b))},
                              {"n_tokens", k.tokens.size()}});
        }
    }
    try {
        write_file_atomic(path, json_text(j, 2) + "\n");
    } catch (const LoadError&) {
        return false;
    }
    return true;
}

bool write_rotary_json(const std::string& path, size_t step, int64_t layer, int64_t head, const RotaryView& v) {
    JsonOut pairs = JsonOut::array();
    for (const RotaryPairView& p : v.pairs)
        pairs.push_back({{"inv_freq", p.inv_freq}, {"inv_freq_unscaled", p.inv_freq_unscaled},
                         {"wavelength", p.wavelength}, {"query_angle", p.query_angle}, {"key_angle", p.key_angle}});
    const JsonOut doc = {{"step", step},
                         {"layer", layer},
                         {"head", head},
                         {"query_position", v.query_position},
                         {"key_position", v.key_position},
                         {"pairs", pairs},
                         {"query_rotated", v.query_rotated},
                         {"query_unrotated", v.query_unrotated},
                         {"key_rotated", v.key_rotated},
                         {"key_unrotated", v.key_unrotated},
                         {"score", v.score},
                         {"query_turned_back", v.query_turned_back},
                         {"scored_distance", v.scored_distance},
                         {"score_by_distance", v.score_by_distance}};
    try {
        write_file_atomic(path, json_text(doc) + "\n");
    } catch (const LoadError&) {
        return false;
    }
    return true;
}

bool write_attention_json(const std::string& path, const char* kind, size_t step, int64_t layer, int64_t head,
                          int64_t n_query, int64_t n_key, int64_t first_query, int64_t first_key, const AttentionMap* m,
                          const std::vector<const PooledMap*>& tiles, const std::vector<TokenId>& row_tokens,
                          const std::vector<TokenId>& col_tokens) {
    std::vector<int64_t> query_positions, key_positions;
    for (int64_t i = 0; i < n_query; ++i) query_positions.push_back(first_query + i);
    for (int64_t j = 0; j < n_key; ++j) key_positions.push_back(first_key + j);
    auto ids_at = [](const std::vector<int64_t>& pos, const std::vector<TokenId>& tokens) {
        std::vector<int64_t> ids;  // -1 where the position has no token
        for (int64_t p : pos) ids.push_back(p >= 0 && p < int64_t(tokens.size()) ? tokens[size_t(p)] : -1);
        return ids;
    };
    auto matrix = [](const float* v, int64_t rows, int64_t cols) {  // (rows, cols) as rows
        JsonOut out = JsonOut::array();
        for (int64_t r = 0; r < rows; ++r) out.push_back(std::vector<float>(v + r * cols, v + (r + 1) * cols));
        return out;
    };
    JsonOut doc = {{"kind", kind},
                   {"step", step},
                   {"layer", layer},
                   {"head", head},
                   {"n_query", n_query},
                   {"n_key", n_key},
                   {"query_positions", query_positions},
                   {"query_ids", ids_at(query_positions, row_tokens)},
                   {"key_positions", key_positions},
                   {"key_ids", ids_at(key_positions, col_tokens)}};
    if (m) {
        doc["scores"] = matrix(m->scores.data(), m->n_query, m->n_key);
        doc["weights"] = matrix(m->weights.data(), m->n_query, m->n_key);
    }
    JsonOut drawn = JsonOut::array();
    for (const PooledMap* t : tiles) {
        const MapWindow& w = t->window;
        std::vector<int> visible(t->visible.begin(), t->visible.end());
        JsonOut vis = JsonOut::array();
        for (int64_t r = 0; r < w.out_rows(); ++r)
            vis.push_back(std::vector<int>(visible.begin() + r * w.out_cols(), visible.begin() + (r + 1) * w.out_cols()));
        drawn.push_back({{"row0", w.row0}, {"col0", w.col0}, {"n_rows", w.n_rows}, {"n_cols", w.n_cols},
                         {"block_rows", w.block_rows}, {"block_cols", w.block_cols}, {"out_rows", w.out_rows()},
                         {"out_cols", w.out_cols()}, {"values", matrix(t->values.data(), w.out_rows(), w.out_cols())},
                         {"visible", vis}});
    }
    doc["tiles"] = drawn;
    try {
        write_file_atomic(path, json_text(doc) + "\n");
    } catch (const LoadError&) {
        return false;
    }
    return true;
}

}  // namespace kvscope::gui
