#pragma once
// What the panels share: the view toggles (one plain struct, edited by the panels and by script lines)
// and the cache of derived attention maps and their textures. attention_map() recomputes scores and
// weights from a step's q/k rows (a 1000x1000 map of a 64-wide head takes a good fraction of a second),
// so maps are computed on background threads from a copy of the immutable trace, kept by (step record,
// layer, head), and textures are uploaded again only when that key or the value kind changes.
// Long contexts: an (R, P) map of an 8192-token prefill is 67 million cells per head, so the attention and
// mask panels never hold one. They draw tiles (map_overview.h): the whole map pooled to about the pixels
// it is drawn on, each texel the strongest cell of its block, and when zoomed a finer tile of the cells in
// view, exact once a cell is a pixel or more. Tiles cost 13 bytes a texel (RG32F texture + pooled values
// and mask); the cache evicts the least recently used beyond kTileBudget bytes (never one drawn this frame).
// Hover reads the exact cell from one recomputed row.
// Encoder-decoder models add two kinds of map: cross-attention (a step's decoder queries x the source)
// and the encoder's own attention, kept by the encoder output they come from (one per source, however
// many steps read it), like the cross-attention cache's K/V textures.
#include <atomic>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <string>

#include <imgui.h>

#include "analysis/map_overview.h"
#include "logic/lesson.h"
#include "logic/snapshot.h"
#include "report/plot.h"
#include "run/trace.h"
#include "logic/workspace.h"

namespace kvscope::gui {

// Which attention the Attention panel shows (encoder-decoder models; decoder-only ones have only Self).
enum class AttentionKind { Self, Cross, Encoder };
const char* attention_kind_name(AttentionKind k);  // "self" | "cross" | "encoder"

struct ViewPrefs {
    int64_t layer = 0, head = 0;
    bool all_heads = false;       // attention: every head of the layer as small multiples
    bool show_scores = false;     // attention: scaled scores (diverging) instead of weights (viridis)
    bool log_scale = false;
    bool row_norm = false;        // divide each row by its largest |value|
    int64_t view_step = -1;       // step shown by the panels; -1 = the newest
    int64_t sel_query = -1;       // selected query position (click in the attention map), -1 = none
    int64_t sel_key = -1;         // selected key position
    AttentionKind attention = AttentionKind::Self;
    int64_t sel_source = -1;      // selected source position (cross / encoder maps, the cross cache)
    std::string attention_json;   // script `attention-json FILE`: the panel writes the shown map there, then clears it
    std::string rotary_json;      // script `rotary-json FILE`: the Rotary panel writes its view there, then clears it
    int kv_heads_open = -1;       // script `kv-heads open|closed`: 1 / 0 opens / closes the KV panel's K/V heads section once
    // The session option boxes as typed: a change is pending until Apply (the session runs on the applied ones).
    SessionOptions edit_options;
    BatchOptions edit_batch;
    uint64_t edit_generation = ~0ull;    // Snapshot::generation the boxes were last reset to
    uint64_t dismissed_problem = 0;      // Problem::id of the last error box the user closed
    std::string export_dir = "kvscope_export";
    bool export_all_heads = false;
    float zoom = 1;               // attention map zoom (1 = whole map) and pan centre in uv
    ImVec2 center = {0.5f, 0.5f};
    PlotOutput export_plots;      // the Export panel's heatmap format: PNG (at a scale) or SVG
    KvQuantSpec quant_view{KvQuant::Int8};  // the K/V quantization panel's format (what-if on the recorded rows)
    std::string lab_specs;        // the Cache lab tab's configurations, ';'-separated; empty = the default list
    // The Cache edits tab's boxes: the position, layer and K/V head an edit targets (-1 = all), the patch prompt.
    int64_t edit_position = 0, edit_layer = -1, edit_head = -1;
    std::string patch_text;
    bool help_open = false;       // the help overlay (F1, ?, the Controls' "?" button, script `help on`)
    Workspace workspace = Workspace::Step;  // the layout shown (the bar, keys 1-5, script `workspace NAME`)
    LessonRun lesson;             // the open guided lesson (Learn menu, script `lesson N`, gui --lesson N)
};

// The step the panels show, or nullptr before the first step.
const StepRecord* viewed_step(const Snapshot& s, const ViewPrefs& prefs, size_t* index = nullptr);

// Shape of the map a step shows for an attention kind (no attention computed): rows are positions
// first_query.., columns first_key...
struct MapExtent {
    int64_t n_query = 0, n_key = 0, first_query = 0, first_key = 0;
};
MapExtent map_extent(const Trace& trace, size_t step, AttentionKind kind);

// A tile: the texture of a window of a map (map_overview.h) and what it was pooled from.
struct MapTile {
    unsigned tex = 0;
    std::shared_ptr<const PooledMap> pooled;
    const MapWindow& window() const { return pooled->window; }
};

// One cell read back exactly (hover, tooltips).
struct MapCell {
    float score = 0, weight = 0;
    bool visible = false;
};

class MapCache {
public:
    static constexpr int64_t kTileBudget = int64_t(256) << 20;  // bytes of tiles kept beyond this frame's
    // Tile of map (step, layer, head) for window w: weights or scores (optionally row-normalised); nullptr
    // while a background thread pools it (counted as missing) or when it cannot be made (error()).
    const MapTile* tile(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind, bool scores,
                        bool row_norm, const MapWindow& w);
    // A ready tile of the same map and values in blocks of exactly (block_rows, block_cols) that covers cells
    // r0..r1-1 x c0..c1-1; nullptr when none (nothing is started).
    const MapTile* covering(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind,
                            bool scores, bool row_norm, int64_t block_rows, int64_t block_cols, int64_t r0, int64_t r1,
                            int64_t c0, int64_t c1);
    // The self-attention mask of (step, layer) alone, pooled into window w (computed on this thread: no attention).
    const MapTile* mask_tile(const Trace& trace, size_t step, int64_t layer, const MapWindow& w);
    // Cell (row, col) of the map, exact; false when it cannot be computed.
    bool cell(const Trace& trace, size_t step, int64_t layer, int64_t head, AttentionKind kind, int64_t row, int64_t col,
              MapCell& out);
    int64_t tile_bytes() const { return tile_bytes_; }  // held now, textures and pooled values

    // The map, or nullptr while a background thread computes it (draw a "computing" note and come back
    // next frame) or when it cannot be made (see error()).
    // Encoder maps use the encoder's layers (n_encoder_layer) and come from the step's shared encoder output.
    const AttentionMap* map(const Trace& trace, size_t step, int64_t layer, int64_t head,
                            AttentionKind kind = AttentionKind::Self);
    void begin_frame() {
        n_missing_ = 0;
        ++frame_;
    }
    bool incomplete() const { return n_missing_ > 0; }  // a map asked for this frame was not ready
    const std::string& error() const { return error_; }
    // (S, D) K or V of the cache slots after `step` for (layer, head); masked rows = empty slots.
    unsigned kv_texture(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values, float* absmax);
    // (S, D) K or V of the cross-attention cache the encoder left, for decoder layer `layer`, head `head`.
    unsigned cross_kv_texture(std::shared_ptr<const EncoderOutput> enc, int64_t layer, int64_t head, bool values,
                              float* absmax);
    void clear();
    ~MapCache() { clear(); }

private:
    struct Entry {
        std::shared_ptr<const void> record;        // the step record (or encoder output), held so the address identifies it
        int64_t layer = 0, head = 0;
        int kind = 0;                              // 0 map only; tiles: 100 + (1 weights, 2 scores, +2 row
                                                   // norm), 99 the mask; 10 K, 11 V; + 20 cross, + 40 encoder
        std::shared_ptr<const AttentionMap> map;
        std::shared_future<std::shared_ptr<const AttentionMap>> computing;  // valid until the map arrives
        unsigned tex = 0;
        float absmax = 0;
        // Tiles (kind + 100): the window, the pooled texels while and after they are computed.
        MapWindow window;
        std::shared_future<std::shared_ptr<const PooledMap>> pooling;
        std::shared_ptr<std::atomic<bool>> cancel;
        MapTile tile;
        int64_t bytes = 0;
        uint64_t used_frame = 0;
    };
    Entry* find_tile(const void* r, int64_t layer, int64_t head, int kind, const MapWindow& w);
    const MapTile* finish_tile(Entry& e);  // the tile once its texels arrived (uploads them), else nullptr
    Entry* find(const void* r, int64_t layer, int64_t head, int kind);
    Entry& insert(Entry e);
    // A new entry holding a (rows, cols) texture uploaded from values (+ optional visibility).
    unsigned insert_texture(std::shared_ptr<const void> record, int64_t layer, int64_t head, int kind, int64_t rows,
                            int64_t cols, const float* values, const uint8_t* visible, float absmax);
    std::list<Entry> entries_;  // most recently used first
    std::list<std::shared_future<std::shared_ptr<const AttentionMap>>> dropped_;  // evicted while computing
    std::list<std::shared_future<std::shared_ptr<const PooledMap>>> dropped_tiles_;
    int n_missing_ = 0;
    std::string error_;
    uint64_t frame_ = 1;
    int64_t tile_bytes_ = 0;
    // The last row read by cell(): (record, layer, head, kind, row) and its values.
    struct RowKey {
        const void* record = nullptr;
        int64_t layer = -1, head = -1, row = -1;
        int kind = -1;
        bool operator==(const RowKey&) const = default;
    } row_key_;
    std::shared_ptr<const void> row_owner_;  // holds the record, so its address names it
    std::vector<float> row_scores_, row_weights_;
    std::vector<uint8_t> row_visible_;
};

}  // namespace kvscope::gui
