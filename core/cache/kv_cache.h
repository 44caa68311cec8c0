#pragma once
// The KV cache of one sequence: for every layer and head, the (D) key and value rows of the positions
// the next queries may still see. Two storages behind one interface, giving bit-identical results:
//
// Rows are float32, or bfloat16 (`bf16`: rounded to nearest even when written, widened exactly when
// read, so attention computes in float32 on the stored values and a row costs half the bytes), or
// quantized (`quant`, ring only: int8 or fp8 per token, kv_quant.h): the packed bytes are what the
// cache stores; copy_key / copy_value dequantize, and attention reads those float32 rows.
// int4 (KIVI, no window): positions below int4_residual_boundary(next_position) are packed, keys by
// groups of G positions, values per row; the later ones (and a chunk being written) are float32 rows
// in a residual ring of Rb slots (position p in slot p % Rb; Rb grows in prepare() when a chunk needs
// it). advance() quantizes the groups that fall below the boundary; a checkpoint keeps the float32
// rows of the positions its chunk quantizes, so restore puts them back exactly.
//
// Ring (contiguous): per layer, K and V preallocated as (H, S, D), S = capacity slots. Position p
// lives in slot p % S (sinks: p < S_sink in slot p, later positions in a ring over the remaining slots),
// so nothing is ever shifted or reallocated.
// Paged: positions map through a block table to fixed-size blocks of a BlockPool (block_pool.h) that
// several sequences may share; a block referenced elsewhere is copied before this cache writes into it.
//
// Visibility (attention.h visible_keys): causal; with a window W a query at q sees q-W+1 .. q, plus
// with `sinks` S the first S positions (StreamingLLM's attention sinks). A chunk of n new tokens at
// position p needs the keys the chunk's first query sees plus the chunk itself alive at once:
// `fits(n)` checks that before anything is written. Positions stay absolute.
//
//   KvCache(L, H, D, S, W, sinks, bf16, quant) ring; W = 0: no window (every earlier position stays
//                               visible); quant: int8 / fp8 packed rows, int4 KIVI (needs W = 0)
//   KvCache(pool, max_positions, W, sinks)  paged over a shared pool (its dtype is the pool's)
//   next_position()             the position pointer: absolute position the next token gets
//   write_slot()                where the next token's K/V will be written (paged: its position)
//   used()                      positions still visible to the next query (fill level)
//   slot_position(s)            absolute position in slot s, or -1 if empty or evicted
//   visible_keys(q)             the keys a query at q sees; visible_from(q): lowest of its window part
//   set_sink_positions(s)       where the sinks count as sitting (attention.h SinkPositions); rows unchanged
//   fits(n) / require_fits(n)   can a chunk of n tokens be processed now (paged: free blocks too)
//   blocks_needed(n)            paged: blocks a chunk of n would take from the pool (new + copies)
//   prepare(tokens, n)          before a chunk's writes: map its positions (allocate / copy-on-write)
//   key(il, h, p) / value(...)  (D) row of absolute position p; p must be alive; float32 caches only
//   key16 / value16             the same for bfloat16 caches
//   packed_key / packed_value   the same for int8 / fp8 caches: row_bytes() bytes (int4: values only)
//   copy_key / copy_value       the row as float32 whatever the storage
//   write(il, h, p, k, v)       store one position's (D) rows; called by the model for each new token
//   advance(n)                  after all layers wrote the chunk: move the pointer, evict what no query
//                               can see any more (paged: blocks return to the pool)
//   adopt_prefix(tokens, max)   paged, empty cache: map the longest run of positions whose K/V another
//                               sequence already holds for the same tokens; returns how many
//   checkpoint(n) / restore(c)  save what the next chunk of n changes; undo it later, exactly
//   reset()                     empty (paged: every block released)
//   grow(capacity)              more room, every live position's K/V and every checkpoint still valid:
//                               ring: S slots -> capacity, rows moved to their slot in the larger ring;
//                               paged: may map up to `capacity` positions (the pool is not grown here)
//   set_sequence(id)            paged: the sequence this cache belongs to, named in the pool's events
//   bytes_used() / bytes_capacity()   this sequence's view (a shared block counts for each sharer)
//   view() / view_into(v)       a KvCacheView snapshot; view_into reuses v's vectors (allocates nothing
//                               once they have grown)
//
// Eviction (eviction.h policies; later by hand): one flag per (layer, K/V head, position) that attention
// honours. An evicted key gets score -inf and weight exactly 0 (attention.h attend_group), so it adds
// nothing to the softmax sum or the output; the row stays in place (ring) until its slot is reused.
// A new write to a slot clears its flags; checkpoint/restore save and put back the flags a chunk's
// writes overwrite. Evicting nothing leaves every number as it was, bit for bit.
//   evict(il, h, p) / unevict(il, h, p)   set / clear the flag of alive position p (returns whether it changed)
//   evicted(il, h, p)           is the key of p in layer il, K/V head h evicted
//   has_evictions()             any flag set (attention takes its unmasked path otherwise)
//   evicted_keys(il, h)         the predicate attention reads (EvictedKeys)
//   kept(il, h)                 alive positions of (il, h) not evicted
//   return_evicted_blocks(keep) paged: full blocks whose every position is evicted in every layer and head
//                               leave the block table (back to the pool once no checkpoint holds them);
//                               keep: a logical block to leave mapped (the one a step began writing into,
//                               which its checkpoint does not hold); returns how many
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "base/huge_pages.h"
#include "cache/block_pool.h"
#include "cache/kv_quant.h"
#include "kernels/attention.h"
#include "text/tokenizer.h"

namespace kvscope {

// References a checkpoint keeps on pool blocks so an undo finds them; released with the checkpoint.
class BlockHolds {
public:
    BlockHolds() = default;
    BlockHolds(const BlockHolds&) = delete;
    BlockHolds& operator=(const BlockHolds&) = delete;
    BlockHolds(BlockHolds&& o) noexcept : pool_(std::move(o.pool_)), ids_(std::move(o.ids_)), seq_(o.seq_) { o.ids_.clear(); }
    BlockHolds& operator=(BlockHolds&& o) noexcept;
    ~BlockHolds() { drop(); }
    void hold(std::shared_ptr<BlockPool> pool, int32_t b, int32_t seq);
    bool holds(int32_t b) const;
    void disown() { ids_.clear(); }  // the references now belong to a block table
    void drop();

private:
    std::shared_ptr<BlockPool> pool_;
    std::vector<int32_t> ids_;
    int32_t seq_ = -1;                    // the sequence whose checkpoint this is
};

struct KvCacheCheckpoint {
    int64_t next_position = 0;
    // ring
    std::vector<int64_t> slots;           // slots the chunk overwrote that held live positions
    std::vector<int64_t> slot_positions;  // their positions before the write
    std::vector<unsigned char> rows;      // their K then V rows: (n, L, 2, H, row_bytes) as stored
    // paged
    std::vector<int32_t> table;           // the block table before the chunk
    BlockHolds holds;                     // keeps the blocks of `table` alive (all but a private write block)
    // int4: float32 K then V rows of the positions residual_from.. that the chunk quantizes, (n, L, 2, H, D)
    int64_t residual_from = 0;
    std::vector<float> residual_rows;
    // eviction: the flags of `slots` before the write, (slots, L, H); empty while nothing is evicted
    std::vector<uint8_t> slot_evicted;
};

// What a cache holds at one moment, as plain values (llama.cpp's llama_kv_cache_view): a StepRecord
// keeps the one its step left behind. The paged fields stay 0 / empty for a ring.
struct KvCacheView {
    int64_t capacity = 0;                // S
    int64_t used = 0;                    // slots still visible to the next query
    int64_t write_slot = 0;              // where the next position will be written
    int64_t next_position = 0;           // the position pointer
    int64_t bytes_used = 0, bytes_capacity = 0;
    std::vector<int64_t> slot_positions; // (S) absolute position per slot, -1 = empty
    // paged: this sequence's block table and the pool it draws on
    int64_t block_size = 0;              // B
    std::vector<int32_t> block_table;    // (table) pool block per logical block of B positions, -1 = evicted
    std::vector<int32_t> block_refs;     // (table) reference count of each mapped block, 0 where -1
    int64_t pool_blocks = 0, pool_free = 0, pool_copies_on_write = 0, pool_positions_adopted = 0;
    // eviction: empty / 0 while nothing is evicted
    std::vector<int32_t> kept;           // (L, K) alive positions not evicted per layer and K/V head
    int64_t n_evicted = 0;               // (layer, head, position) entries evicted now
    int64_t bytes_kept = 0;              // kept rows x row bytes, K and V (ring rows stay in place)
};

class KvCache;
// The evicted flags of one (layer, K/V head), as attention asks for them: by absolute position.
struct EvictedKeys {
    const uint8_t* flags = nullptr;      // (S) per slot
    const KvCache* cache = nullptr;
    bool operator()(int64_t position) const;
};

class KvCache {
public:
    KvCache() = default;
    KvCache(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, int64_t window, int64_t sinks = 0,
            bool bf16 = false, KvQuantSpec quant = {});
    KvCache(std::shared_ptr<BlockPool> pool, int64_t max_positions, int64_t window, int64_t sinks = 0);
    // A paged cache owns references to its blocks: moving hands them over, destroying returns them.
    KvCache(KvCache&& other) noexcept;
    KvCache& operator=(KvCache&& other) noexcept;
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;
    ~KvCache();

    bool paged() const { return pool_ != nullptr; }
    bool bf16() const { return bf16_; }
    const KvQuantSpec& quant() const { return quant_; }
    bool quantized() const { return quant_.quantized(); }
    int64_t n_layer() const { return n_layer_; }
    int64_t n_head() const { return n_head_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t capacity() const { return capacity_; }   // ring: slots S; paged: the most positions it may map
    int64_t window() const { return window_; }       // 0 = no window
    int64_t sinks() const { return sinks_; }
    SinkPositions sink_positions() const { return sink_positions_; }
    void set_sink_positions(SinkPositions s) { sink_positions_ = s; }
    int64_t next_position() const { return next_position_; }
    int64_t write_slot() const { return slot_of(next_position_); }
    int64_t used() const;
    int64_t slot_position(int64_t slot) const { return slot_positions_[size_t(slot)]; }
    const std::vector<int64_t>& slot_positions() const { return slot_positions_; }
    KeyRange visible_keys(int64_t query_position) const {
        return kvscope::visible_keys(query_position, window_, sinks_, sink_positions_);
    }
    int64_t visible_from(int64_t query_position) const { return visible_keys(query_position).lo; }
    bool fits(int64_t n_new) const;
    void require_fits(int64_t n_new) const;  // throws UsageError with the numbers
    int64_t blocks_needed(int64_t n_new) const;

    void prepare(const TokenId* tokens, int64_t n_new);
    const float* key(int64_t il, int64_t h, int64_t position) const;
    const float* value(int64_t il, int64_t h, int64_t position) const;
    const uint16_t* key16(int64_t il, int64_t h, int64_t position) const;
    const uint16_t* value16(int64_t il, int64_t h, int64_t position) const;
    const uint8_t* packed_key(int64_t il, int64_t h, int64_t position) const { return row<uint8_t>(0, il, h, position); }
    const uint8_t* packed_value(int64_t il, int64_t h, int64_t position) const { return row<uint8_t>(1, il, h, position); }
    void copy_key(int64_t il, int64_t h, int64_t position, float* out) const;    // (D)
    void copy_value(int64_t il, int64_t h, int64_t position, float* out) const;  // (D)
    void write(int64_t il, int64_t h, int64_t position, const float* k, const float* v);
    void advance(int64_t n_new);
    int64_t adopt_prefix(std::span<const TokenId> tokens, int64_t max_positions);
    void reset();
    void grow(int64_t capacity);

    KvCacheCheckpoint checkpoint(int64_t n_new) const;
    void restore(KvCacheCheckpoint& c);  // consumes c's holds

    // paged
    const BlockPool* pool() const { return pool_.get(); }
    std::shared_ptr<BlockPool> share_pool() const { return pool_; }
    int64_t block_size() const { return pool_ ? pool_->block_size() : 0; }
    const std::vector<int32_t>& block_table() const { return table_; }  // logical block -> pool block, -1 = none
    const std::vector<TokenId>& tokens() const { return tokens_; }      // (next_position) token per position
    void set_sequence(int32_t id) { sequence_ = id; }
    int32_t sequence() const { return sequence_; }

    int64_t bytes_per_position() const { return 2 * n_layer_ * n_head_ * row_bytes(); }
    int64_t row_bytes() const;  // one stored (D) K or V row: 4D, 2D (bf16) or the packed size
    int64_t bytes_used() const;
    int64_t bytes_capacity() const;

    KvCacheView view() const;
    void view_into(KvCacheView& out) const;

    // eviction
    bool evict(int64_t il, int64_t h, int64_t position);
    bool unevict(int64_t il, int64_t h, int64_t position);
    bool evicted(int64_t il, int64_t h, int64_t position) const {
        return n_evicted_ > 0 && evicted_[flag_index(il, h, position)] != 0;
    }
    bool has_evictions() const { return n_evicted_ > 0; }
    int64_t n_evicted() const { return n_evicted_; }
    EvictedKeys evicted_keys(int64_t il, int64_t h) const {
        return EvictedKeys{evicted_.data() + size_t((il * n_head_ + h) * capacity_), this};
    }
    int64_t kept(int64_t il, int64_t h) const;
    int64_t return_evicted_blocks(int64_t keep = -1);
    bool alive(int64_t position) const;  // written, below the pointer, its slot not reused since
    int64_t slot_of_position(int64_t position) const { return slot_of(position); }

private:
    size_t flag_index(int64_t il, int64_t h, int64_t position) const {
        return size_t((il * n_head_ + h) * capacity_ + slot_of(position));
    }
    std::vector<uint8_t> evicted_;        // (L, H, S) 1 = the key in that slot is evicted; empty until a first evict
    int64_t n_evicted_ = 0;
    void recount_evicted();
    int64_t slot_of(int64_t position) const;
    size_t offset(int64_t il, int64_t h, int64_t slot) const {
        return size_t(((il * n_head_ + h) * capacity_ + slot) * row_elems_);
    }
    int64_t oldest_needed(int64_t position) const;  // lowest non-sink position a query at `position` sees
    uint64_t chain_of(int64_t block) const;          // hash of tokens_[0, block * B)
    void evict_invisible_blocks();
    void rebuild_slot_positions();

    int64_t n_layer_ = 0, n_head_ = 0, head_dim_ = 0, capacity_ = 0, window_ = 0, sinks_ = 0;
    SinkPositions sink_positions_ = SinkPositions::Text;
    bool bf16_ = false;
    KvQuantSpec quant_;
    int64_t row_elems_ = 0;  // storage elements per row: D, or row_bytes(quant, D) packed bytes
    template <class T>  // float (float32 storage), uint16_t (bfloat16) or uint8_t (packed); kv: 0 = K, 1 = V
    T* row(int kv, int64_t il, int64_t h, int64_t position) const;
    float* f32_row(int kv, int64_t il, int64_t h, int64_t position) const { return row<float>(kv, il, h, position); }
    uint16_t* bf16_row(int kv, int64_t il, int64_t h, int64_t position) const {
        return row<uint16_t>(kv, il, h, position);
    }
    unsigned char* raw_row(int kv, int64_t il, int64_t h, int64_t position) const;  // row_bytes() bytes
    int64_t next_position_ = 0;
    std::vector<int64_t> slot_positions_; // (S) ring: position per slot; paged: slot = position; -1 = empty
    std::vector<TokenId> tokens_;         // tokens of positions 0 .. next_position (+ a prepared chunk)
    // ring
    HugePageVector<float> k_, v_;         // (L, H, S, D) each, float32 storage
    HugePageVector<uint16_t> k16_, v16_;  // (L, H, S, D) each, bfloat16 storage (one pair is used)
    std::vector<uint8_t> kq_, vq_;        // (L, H, S, row_bytes) each, packed quantized rows; int4 keys:
                                          // kq_ is (L, H, ceil(S / G), int4_key_group_bytes)
    // int4
    std::vector<float> kr_, vr_;          // (L, H, Rb, D) each: float32 rows at and above the boundary
    int64_t residual_slots_ = 0;          // Rb
    int64_t n_quantized_ = 0;             // positions 0 .. n_quantized - 1 are packed
    bool int4() const { return quant_.format == KvQuant::Int4; }
    float* residual_row(int kv, int64_t il, int64_t h, int64_t position) const {
        const std::vector<float>& r = kv ? vr_ : kr_;
        return const_cast<float*>(r.data()) + ((il * n_head_ + h) * residual_slots_ + position % residual_slots_) * head_dim_;
    }
    uint8_t* key_group(int64_t il, int64_t h, int64_t group) const {
        const int64_t n_groups = (capacity_ + quant_.group - 1) / quant_.group;
        return const_cast<uint8_t*>(kq_.data()) + ((il * n_head_ + h) * n_groups + group) * int4_key_group_bytes(head_dim_, quant_.group);
    }
    void ensure_residual(int64_t slots);  // int4: Rb >= slots, live residual rows kept
    void quantize_below(int64_t boundary); // int4: pack the groups between n_quantized and boundary
    // paged
    std::shared_ptr<BlockPool> pool_;
    std::vector<int32_t> table_;          // (blocks mapped so far) pool block per logical block, -1 = evicted
    std::vector<uint64_t> chains_;        // (table_.size()) chain hash of each logical block
    int32_t sequence_ = -1;               // named in the pool's events
};

// Row lookups are inline: attention asks for one per visible key, so a call each would cost more than
// the lookup.
inline int64_t KvCache::slot_of(int64_t position) const {
    // Until the ring wraps every slot is its position: no division.
    if (pool_ || position < capacity_ || capacity_ <= sinks_) return position;
    return sinks_ + (position - sinks_) % (capacity_ - sinks_);
}

template <class T>
inline T* KvCache::row(int kv, int64_t il, int64_t h, int64_t position) const {
    constexpr bool f32 = std::is_same_v<T, float>, packed = std::is_same_v<T, uint8_t>;
    if constexpr (!packed) {  // a quantized cache is a ring: no pool lookup
        if (pool_) {
            const int64_t B = pool_->block_size(), i = position % B;
            const int32_t b = table_[size_t(position / B)];
            if constexpr (f32) return kv ? pool_->value(b, il, h, i) : pool_->key(b, il, h, i);
            else return kv ? pool_->value16(b, il, h, i) : pool_->key16(b, il, h, i);
        }
    }
    const T* storage;
    if constexpr (f32) storage = (kv ? v_ : k_).data();
    else if constexpr (packed) storage = (kv ? vq_ : kq_).data();
    else storage = (kv ? v16_ : k16_).data();
    return const_cast<T*>(storage) + offset(il, h, slot_of(position));
}

inline bool EvictedKeys::operator()(int64_t position) const {
    return flags[size_t(cache->slot_of_position(position))] != 0;
}

inline const float* KvCache::key(int64_t il, int64_t h, int64_t position) const { return f32_row(0, il, h, position); }
inline const float* KvCache::value(int64_t il, int64_t h, int64_t position) const { return f32_row(1, il, h, position); }
inline const uint16_t* KvCache::key16(int64_t il, int64_t h, int64_t position) const {
    return bf16_row(0, il, h, position);
}
inline const uint16_t* KvCache::value16(int64_t il, int64_t h, int64_t position) const {
    return bf16_row(1, il, h, position);
}

}  // namespace kvscope
