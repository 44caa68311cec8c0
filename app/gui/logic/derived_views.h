#pragma once
// What the KV cache, Logit lens and Rotary panels compute from a step record, and the caches that keep it between
// frames (record_cache.h: keyed by the record itself, never by its step index or address). No ImGui: the panels draw these,
// the figures export them, and tests/gui_controller.tests.cpp checks them without a window.
//
//   kLensTop                       the Logit lens's tokens per depth
//   lens_position(r, sel_query)    the query position the lens reads: the selected one when step r computed
//                                  it, else the step's last
//   LensCache::get(model, r, q_pos)   the lens of record r (held) at q_pos; each depth is a (V x C) product
//   RotaryShown                    the Rotary panel's query and key in a recorded step
//   rotary_shown(trace, step, layer, head, sel_query, sel_key)   the selected cell clamped to the step, or
//                                  the step's last query and key 0 (itself when 0 is not cached)
//   rotary_view_of(cfg, shown)     their rotary_view, scores at distances 0 .. min(n_ctx - 1, 4095)
//   RotaryPlots                    a rotary view and the float series the panel plots from it
//   RotaryCache::get(cfg, r, shown)   the plots of record r (held) for `shown`
//   kv_slots(trace, step, layer, head, values)   (S, D) K or V of the cache slots after `step`, empty slots
//                                  hidden: what the KV cache panel's textures hold and its figure shows
#include <cstdint>
#include <memory>
#include <vector>

#include "analysis/logit_lens.h"
#include "analysis/rotary_view.h"
#include "forward/model.h"
#include "logic/record_cache.h"
#include "run/trace.h"

namespace kvscope::gui {

inline constexpr int64_t kLensTop = 5;
int64_t lens_position(const StepRecord& r, int64_t sel_query);

class LensCache {
public:
    const LogitLens& get(const Model& model, std::shared_ptr<const StepRecord> r, int64_t q_pos);
    uint64_t makes() const { return cache_.makes(); }

private:
    RecordCache<int64_t, LogitLens> cache_;  // key: the query position
};

struct RotaryShown {
    size_t step = 0;
    int64_t layer = 0, head = 0, query_position = 0, key_position = 0, turned_back = 0;
    const float* q = nullptr;             // (D) the query as the step computed it (rotated)
    const float* k = nullptr;             // (D) the key as cached (rotated)
    double scale = 0;
};
RotaryShown rotary_shown(const Trace& trace, size_t step, int64_t layer, int64_t head, int64_t sel_query,
                         int64_t sel_key);
RotaryView rotary_view_of(const ModelConfig& cfg, const RotaryShown& shown);

struct RotaryPlots {
    RotaryView view;
    std::vector<float> log_freq, log_freq_unscaled, query_angle;  // (D/2) log10 radians per position; radians
    std::vector<float> key_before, key_after;                     // (D)
    std::vector<float> by_distance;                               // (distances)
};

class RotaryCache {
public:
    const RotaryPlots& get(const ModelConfig& cfg, std::shared_ptr<const StepRecord> r, const RotaryShown& shown);
    uint64_t makes() const { return cache_.makes(); }

private:
    struct Key {
        int64_t layer = -1, head = -1, query = -1, key = -1, turned_back = -1;
        bool operator==(const Key&) const = default;
    };
    RecordCache<Key, RotaryPlots> cache_;
};

struct KvSlots {
    int64_t n_slot = 0, head_dim = 0;     // S, D
    std::vector<float> values;            // (S, D) 0 in empty slots
    std::vector<uint8_t> visible;         // (S, D) 1 where the slot holds a position
    float absmax = 0;                     // max |value|
};
KvSlots kv_slots(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values);

}  // namespace kvscope::gui
