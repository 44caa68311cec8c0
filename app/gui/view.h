#pragma once
// What the panels share: the view toggles (one plain struct, edited by the panels and by script lines)
// and the cache of derived attention maps and their textures. attention_map() recomputes scores and
// weights from a step's q/k rows (a 1000x1000 map of a 64-wide head takes a good fraction of a second),
// so maps are computed on background threads from a copy of the immutable trace, kept by (step record,
// layer, head), and textures are uploaded again only when that key or the value kind changes.
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <string>

#include <imgui.h>

#include "commands.h"
#include "trace.h"

namespace kvscope::gui {

struct ViewPrefs {
    int64_t layer = 0, head = 0;
    bool all_heads = false;       // attention: every head of the layer as small multiples
    bool show_scores = false;     // attention: scaled scores (diverging) instead of weights (viridis)
    bool log_scale = false;
    bool row_norm = false;        // divide each row by its largest |value|
    int64_t view_step = -1;       // step shown by the panels; -1 = the newest
    int64_t sel_query = -1;       // selected query position (click in the attention map), -1 = none
    int64_t sel_key = -1;         // selected key position
    std::string export_dir = "kvscope_export";
    bool export_all_heads = false;
    float zoom = 1;               // attention map zoom (1 = whole map) and pan centre in uv
    ImVec2 center = {0.5f, 0.5f};
};

// The step the panels show, or nullptr before the first step.
const StepRecord* viewed_step(const Snapshot& s, const ViewPrefs& prefs, size_t* index = nullptr);

class MapCache {
public:
    // The map, or nullptr while a background thread computes it (draw a "computing" note and come back
    // next frame) or when it cannot be made (see error()).
    const AttentionMap* map(const Trace& trace, size_t step, int64_t layer, int64_t head);
    // Texture of the map's weights or scores (optionally row-normalised); 0 when the step was not recorded
    // or the map is not ready yet.
    unsigned texture(const Trace& trace, size_t step, int64_t layer, int64_t head, bool scores, bool row_norm);
    void begin_frame() { n_missing_ = 0; }
    bool incomplete() const { return n_missing_ > 0; }  // a map asked for this frame was not ready
    const std::string& error() const { return error_; }
    // (S, D) K or V of the cache slots after `step` for (layer, head); masked rows = empty slots.
    unsigned kv_texture(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values, float* absmax);
    void clear();
    ~MapCache() { clear(); }

private:
    struct Entry {
        std::shared_ptr<const StepRecord> record;  // held so the address identifies the step
        int64_t layer = 0, head = 0;
        int kind = 0;                              // 0 map only, 1 weights, 2 scores, +2 row norm; 10 K, 11 V
        std::shared_ptr<const AttentionMap> map;
        std::shared_future<std::shared_ptr<const AttentionMap>> computing;  // valid until the map arrives
        unsigned tex = 0;
        float absmax = 0;
    };
    Entry* find(const StepRecord* r, int64_t layer, int64_t head, int kind);
    Entry& insert(Entry e);
    std::list<Entry> entries_;  // most recently used first
    std::list<std::shared_future<std::shared_ptr<const AttentionMap>>> dropped_;  // evicted while computing
    int n_missing_ = 0;
    std::string error_;
};

}  // namespace kvscope::gui
