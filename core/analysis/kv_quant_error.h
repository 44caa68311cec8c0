#pragma once
// What quantizing one K/V head costs at one step, as plain values for a view (the window's panel):
// per cell (key position, channel) the reconstruction error of K and of V, and per (query, key) how
// the attention scores and weights move when the keys are the dequantized ones. A pure function of
// float32 rows: the caller brings the rows as computed (e.g. from a float32 run of the same tokens;
// a quantized cache no longer holds them) and the queries that read them.
//
// P = keys, T = queries, D = head dim
//
//   kv_quant_error(spec, q, k, v, query_positions, key_positions, D, scale, window)
//       int8 / fp8: each row through quantize_row -> dequantize_row, as the cache stores it;
//       int4: KIVI as docs/engine.md defines it for keys at positions 0..P-1 (groups of G positions,
//       values per token in groups of G channels; positions >= floor((P - R) / G) * G stay float32)
//       Scores are q·k·scale summed in double: the size of the change, not the engine's bits.
//   kv_quant_error(spec, trace, step, layer, head, max_queries)
//       the same for query head `head` of a recorded step: its queries are the step's computed rows, its
//       keys every position one of them sees (StepRecord::visible_keys: window, sinks and the layer's own
//       window; sinks scored at their text positions), as the trace holds them (Trace::key_row). Meaningful on a float32 or bfloat16 session: a
//       quantized session records the reconstructed rows.
#include <cstdint>
#include <vector>

#include "cache/kv_quant.h"
#include "run/trace.h"

namespace kvscope {

struct KvQuantError {
    KvQuantSpec spec;
    int64_t n_keys = 0, n_queries = 0, head_dim = 0;  // P, T, D
    std::vector<int64_t> key_positions;    // (P) absolute position of each key row
    std::vector<int64_t> query_positions;  // (T)
    std::vector<float> key_error;          // (P, D) dequantized k − k; 0 where a row stays float32
    std::vector<float> value_error;        // (P, D) dequantized v − v
    std::vector<float> score_change;       // (T, P) q·k̂·scale − q·k·scale; NaN where the query does not see the key
    std::vector<float> weight_change;      // (T, P) softmax over the visible keys, quantized − float32; NaN likewise
    float key_error_max = 0, value_error_max = 0, score_change_max = 0, weight_change_max = 0;  // max |.|
};

// q (T, D), k and v (P, D); window W > 0: a query at t sees keys t-W+1 .. t (else every key <= t).
// Throws UsageError for int4 when D does not suit G or key_positions are not 0..P-1.
KvQuantError kv_quant_error(const KvQuantSpec& spec, const float* q, const float* k, const float* v,
                            const std::vector<int64_t>& query_positions, const std::vector<int64_t>& key_positions,
                            int64_t D, float scale, int64_t window = 0);

// Throws UsageError when the step was not recorded or one of its keys was computed by an unrecorded step,
// and for int4 when the keys do not start at position 0 (a window evicted them).
// max_queries > 0: only the step's last max_queries rows (a long prefill's map would cost T·P·D).
KvQuantError kv_quant_error(const KvQuantSpec& spec, const Trace& trace, size_t step, int64_t layer, int64_t head,
                            int64_t max_queries = 0);

}  // namespace kvscope
