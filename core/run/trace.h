#pragma once
// What a session did, step by step: immutable StepRecords in an append-only Trace, and the attention
// views derived from them on demand.
//
// A record keeps the small facts of a step and, when recording is on, the q, k, v rows the step
// computed. Scores, masks and softmax weights are not stored: attention_map() recomputes them from
// those rows with the very function the forward pass used (attend_row), so they are the exact numbers
// the model used, and a 1024-token prefill does not need gigabytes of heatmaps.
//
//   Probe, probe_name(p)            names of the intermediates, shared by views and exported files
//   StepRecord                      one step: StepId id, StepCost cost, RecordedRows rows,
//                                   KvCacheView cache (kv_cache.h), Prediction prediction
//   MaskRule, StepRecord::mask_rule(il)  the rule layer il applies (session window and sinks, the
//                                   layer's own sliding window): its name and formula, for the views
//   Trace::append / truncate        grow by one step; drop steps from the end (step back)
//   Trace::key_row / value_row      (D) K or V of (layer, head, position) as of a step
//   attention_map(trace, s, il, h)  scores, mask and weights of step s for layer il, head h
//   AttentionRows                   the same map one query row at a time, for maps too large to hold
//
// Shapes: n = new tokens of the step, R = rows computed, A = positions adopted, L = layers, H = heads,
// D = head dim, C = H*D, V = vocab; S and B as in kv_cache.h.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_edit.h"
#include "cache/kv_cache.h"
#include "forward/encoder.h"
#include "kernels/attention.h"
#include "run/sampler.h"
#include "text/tokenizer.h"

namespace kvscope {

enum class Probe { Query, Key, Value, Scores, Mask, Weights, Logits };
const char* probe_name(Probe p);  // "q", "k", "v", "scores", "mask", "weights", "logits"

enum class Phase { Prefill, Decode };
const char* phase_name(Phase p);  // "prefill" | "decode"

// Which step this was and what it was asked to do.
struct StepId {
    int64_t index = 0;                   // 0-based step number in the trace
    Phase phase = Phase::Prefill;
    bool cache_on = true;                // false: this step recomputed every position from scratch
    std::vector<TokenId> tokens;         // (n) tokens that are new this step
    int64_t first_position = 0;          // absolute position of tokens[0]
    int64_t window = 0;                  // 0 = no window
    int64_t sinks = 0;                   // first positions that stay visible beside the window (0 = none)
    // What a shift-before-write cache of exactly W entries (the GPT-2 walkthrough's) would have hidden in
    // this step: (query, key) pairs inside a query's window that it evicts before the chunk attends.
    // 0 when nothing differs; -1 when that cache would refuse the chunk (more than W tokens).
    int64_t shift_cache_hidden_pairs = 0;
    SinkPositions sink_positions = SinkPositions::Text;  // where the sinks count as sitting (attention.h)
    int64_t turn = 0;                    // the session's turn this step belongs to (Session::turns())
};

// One turn of a conversation in one cache: the tokens appended at once (Session::set_prompt or
// append_turn), then the reply decoded after them. The reply runs from first_position + n_appended() to
// the next turn's first_position (or the end); its last token enters the cache with the next turn's
// first prefill step, the first to read it. A turn that rolled the cache back (append_turn with keep)
// starts before the previous turn's end: the prompt no longer holds what it overwrote, the turns still do.
struct Turn {
    int64_t first_position = 0;          // absolute position of the first appended token
    std::vector<TokenId> ids;            // the tokens appended: the turn's prompt (a chat: the rendered message)
    std::string role;                    // who wrote them: "user", "system"...; "" when not a chat
    int64_t max_new_tokens = 0;          // the reply's budget
    int64_t n_appended() const { return int64_t(ids.size()); }
};

// What the step computed, what it took instead of computing, and the time and flops it spent. The
// computed rows are counted here, not in RecordedRows: they are the step's work whether or not it was
// recorded (benchmarks count them with recording off); RecordedRows lays its rows out over them.
struct StepCost {
    int64_t n_rows_computed = 0;         // R: rows the forward pass ran (n, or every position when uncached)
    int64_t first_computed_position = 0; // position of computed row 0
    int64_t n_rows_reused = 0;           // K/V rows read from the cache instead of being recomputed
    // Positions first_position .. +n_adopted-1 were not computed: their K/V came from elsewhere.
    enum class Source { None, SharedPrefix, PromptCache };
    Source adopted_from = Source::None;
    int64_t n_adopted = 0;               // A
    double flops = 0;
    double seconds = 0;                  // wall time of the whole step: undo entry, forward pass, recording,
                                         // sampling (what this step cost the session that ran it)
    double compute_seconds = 0;          // the model arithmetic alone: the forward pass(es) and the encoder.
                                         // With recording on it includes writing the probe rows; a batch
                                         // step's is the shared forward pass over every sequence
};

// The rows the step computed (empty when recording is off): row r is position
// cost.first_computed_position + r. The shape and the encoder are set either way.
struct RecordedRows {
    int64_t n_layer = 0, n_head = 0, head_dim = 0;  // L, H, D; C = H * D
    float attention_scale = 0;           // the factor on q·k the model used (ModelConfig::attention_scale)
    std::vector<int64_t> layer_window;   // (L) the model's own sliding window per layer, 0 = full; empty: none
    // Rotary models: (D/2) inverse frequencies per layer kind (model.h), to turn queries back for sinks
    // numbered inside the cache (SinkPositions::Cache); empty otherwise.
    std::vector<float> rotary_inv_freq, local_rotary_inv_freq;
    const std::vector<float>& inv_freq_of(int64_t il) const {
        return window_of(il) > 0 && !local_rotary_inv_freq.empty() ? local_rotary_inv_freq : rotary_inv_freq;
    }
    int64_t window_of(int64_t il) const { return layer_window.empty() ? 0 : layer_window[size_t(il)]; }
    int64_t n_kv_head = 0;               // K: the cache's heads (GQA/MQA: fewer than H); 0 = H
    std::vector<float> q, k, v;          // (L, R, C) each; k and v per query head h (a copy of K/V head
                                         // h / (H / K)) so views index every head alike
    std::vector<float> k_adopted, v_adopted;  // (L, A, C) the adopted positions' rows, as the cache holds them

    // Encoder-decoder models: the encoder's output and cross-attention cache this step read (shared by
    // every step of one source), whether this step ran the encoder, and the cross-attention queries.
    std::shared_ptr<const EncoderOutput> encoder;
    bool ran_encoder = false;
    std::vector<float> cross_q;          // (L, R, C), empty unless recorded
    std::vector<float> residual;         // (L + 1, R, C): the residual stream entering each layer, then
                                         // leaving the last (before the final norm); the logit lens reads it
};

// The prediction made at the end of the step (absent for a prefill chunk that is not the last).
struct Prediction {
    std::vector<float> logits;           // (V) of the last row
    std::optional<TokenId> chosen;
    std::vector<TokenProbability> top;   // (n_top) most likely tokens, descending
    double entropy = 0;                  // nats, of the distribution the choice was made from
    bool forced = false;                 // `chosen` was given (SessionOptions::forced_tokens), not sampled
};

// A key that left (or, by hand, came back to) the cache of one layer and K/V head after the step's
// queries attended: it counts from the next step on (eviction.h).
struct EvictionEvent {
    int32_t layer = 0, kv_head = 0;
    int64_t position = 0;
    float score = 0;                     // what decided it: the policy's score of this key (eviction.h)
    bool restored = false;               // true: put back rather than evicted
};

struct StepEvictions {
    std::string policy;                  // eviction_policy_name(); "" = no policy
    std::vector<EvictionEvent> events;   // in (layer, K/V head, position) order
};

// The rule a query follows in one layer (StepRecord::mask_rule): causal, narrowed by the session's window
// and sinks and by the layer's own sliding window. The Mask panel and a step's meta.json state it per layer.
struct MaskRule {
    int64_t cache_window = 0;  // the session's window (StepId::window), 0 = none
    int64_t sinks = 0;         // first positions kept beside the session's window, 0 = none
    int64_t layer_window = 0;  // the model's own sliding window for the layer, 0 = full attention
    // the narrower window, 0 = causal: a query at q sees q-W+1 .. q (and the sinks)
    int64_t window() const {
        return cache_window > 0 && layer_window > 0 ? std::min(cache_window, layer_window)
                                                    : std::max(cache_window, layer_window);
    }
    bool own_window() const { return layer_window > 0 && (cache_window == 0 || layer_window < cache_window); }
    // "causal", "window 4", "window 5 with sinks 0..0"
    std::string name() const;
    // k <= q and ...: the rule as a formula over query position q and key position k
    std::string formula() const;
};

struct StepRecord {
    StepId id;
    StepCost cost;
    RecordedRows rows;
    KvCacheView cache;                   // the cache after the step (KvCache::view)
    Prediction prediction;
    StepEvictions eviction;              // what the step evicted after its queries attended
    std::vector<CacheEditRecord> edits;  // edits by hand between the previous step and this one, in order
                                         // (cache_edit.h); this step attended to the edited cache

    bool recorded() const { return !rows.q.empty(); }
    int64_t last_position() const { return id.first_position + int64_t(id.tokens.size()) - 1; }
    int64_t visible_from(int64_t query_position) const;  // lowest key position of the query's window
    KeyRange visible_keys(int64_t query_position) const; // every key the query sees (attention.h)
    // what it sees in layer il: narrowed to the layer's own sliding window (Mistral, Qwen2, Gemma 3)
    KeyRange visible_keys(int64_t query_position, int64_t il) const;
    MaskRule mask_rule(int64_t il) const;  // the rule visible_keys(q, il) applies, for the views to state
};

// For a chunk of n tokens at positions p..p+n-1 with window W (see StepId::shift_cache_hidden_pairs).
int64_t shift_cache_hidden_pairs(int64_t p, int64_t n, int64_t window);

class Trace {
public:
    void append(std::shared_ptr<const StepRecord> step);
    void truncate(size_t n_steps);      // keep the first n_steps
    void clear() { truncate(0); }
    size_t size() const { return steps_.size(); }
    bool empty() const { return steps_.empty(); }
    const StepRecord& operator[](size_t i) const { return *steps_[i]; }
    const StepRecord& back() const { return *steps_.back(); }
    std::shared_ptr<const StepRecord> share(size_t i) const { return steps_[i]; }

    // (D) row of position p's key/value in layer il, head h, from the newest recorded step at or before
    // `as_of` that computed it; nullptr when no recorded step did.
    const float* key_row(size_t as_of, int64_t il, int64_t h, int64_t position) const;
    const float* value_row(size_t as_of, int64_t il, int64_t h, int64_t position) const;
    int64_t memory_bytes() const;       // bytes held by records

private:
    const float* row(bool key, size_t as_of, int64_t il, int64_t h, int64_t position) const;
    std::vector<std::shared_ptr<const StepRecord>> steps_;
};

// (P) 1 where the key of layer il, query head h's K/V head was evicted when step `step` attended, for the
// positions first .. first + P - 1: the events of the steps before it and the evict / restore edits up to
// it, in the order they happened. Empty when there are none.
std::vector<uint8_t> evicted_before(const Trace& trace, size_t step, int64_t il, int64_t h, int64_t first, int64_t P);
// The evictions of layer il, K/V head kv in effect in the cache `step` left behind (its own included):
// the event that evicted each position, ascending by position; restored positions left out.
std::vector<EvictionEvent> evicted_after(const Trace& trace, size_t step, int64_t il, int64_t kv);

// Attention of one step, layer and head: rows = the step's computed queries, columns = every key
// position any of them could see (key_positions[0] .. last query position; with sinks from 0, the
// evicted positions between sinks and window shown masked).
struct AttentionMap {
    int64_t step = 0, layer = 0, head = 0;
    int64_t n_query = 0, n_key = 0;      // R, P
    std::vector<int64_t> query_positions;// (R)
    std::vector<int64_t> key_positions;  // (P) ascending
    std::vector<float> scores;           // (R, P) q·k/sqrt(D) before masking
    std::vector<uint8_t> visible;        // (R, P) 1 = the mask lets the query see this key
    std::vector<float> weights;          // (R, P) softmax over visible keys; 0 where masked
    std::vector<float> output;           // (R, D) Σ weights·v, the head's output
};

// Position of the map's first column: the first query's window start, or 0 with sinks.
int64_t first_key_position(const StepRecord& r);

// Throws UsageError when the step was not recorded or an index is out of range.
AttentionMap attention_map(const Trace& trace, size_t step, int64_t layer, int64_t head);

// attention_map's rows one at a time, bit for bit: an 8192-token prefill's (R, P) map of one head is
// 576 MB of scores, weights and mask, while a row is P values. Holds pointers into the trace's records:
// keep the trace (or a copy of it) alive. row() is const and allocates its own scratch, so several
// threads may read one AttentionRows.
class AttentionRows {
public:
    AttentionRows(const Trace& trace, size_t step, int64_t layer, int64_t head);  // throws like attention_map
    int64_t n_query() const { return n_query_; }          // R
    int64_t n_key() const { return n_key_; }              // P
    int64_t first_query() const { return first_query_; }  // position of row 0
    int64_t first_key() const { return first_key_; }      // position of column 0
    // Row i (0 <= i < R): visible (P) always; scores (P), weights (P) and output (D) when not null.
    void row(int64_t i, float* scores, uint8_t* visible, float* weights, float* output) const;

private:
    const StepRecord* r_ = nullptr;
    int64_t layer_ = 0, head_ = 0;
    int64_t n_query_ = 0, n_key_ = 0, first_query_ = 0, first_key_ = 0;
    std::vector<const float*> keys_, values_;  // (P) this head's rows
    std::vector<uint8_t> evicted_;       // (P) 1 = evicted before this step (earlier steps' events); empty: none
};

// Cross-attention of one step (encoder-decoder models): rows = the step's computed decoder queries,
// columns = every source position (no mask). Throws UsageError like attention_map, or for a
// decoder-only step.
AttentionMap cross_attention_map(const Trace& trace, size_t step, int64_t layer, int64_t head);
// The encoder's own attention (encoder-decoder models; the encoder ran with recording). Throws UsageError
// when the rows were not recorded or layer/head do not exist.
AttentionMap encoder_attention_map(const EncoderOutput& enc, int64_t layer, int64_t head);

}  // namespace kvscope
