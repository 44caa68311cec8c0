#pragma once
// The KV cache of one sequence: for every layer and head, the (D) key and value rows of the positions
// the next queries may still see. It composes three parts, each with its own header and tests:
//   storage     where rows live: a ring of S slots (ring_storage.h) or blocks of a shared BlockPool
//               through a block table (paged_storage.h); both give bit-identical results
//   row format  how a row is stored: float32, bfloat16, int8, fp8 or int4 KIVI with its float32
//               residual (row_format.h); int8 / fp8 / int4 need the ring
//   visibility  which keys a query sees: window and sinks, and the eviction flags (visibility.h)
// The cache owns the position pointer and keeps the parts in step: a write goes through the format into
// the storage and clears the slot's flags; a checkpoint saves what each part's next chunk changes.
//
// A chunk of n new tokens at position p needs the keys the chunk's first query sees plus the chunk
// itself alive at once: `fits(n)` checks that before anything is written. Positions stay absolute.
//
//   KvCache(L, H, D, S, W, sinks, bf16, quant) ring; W = 0: no window (every earlier position stays
//                               visible); quant: int8 / fp8 packed rows, int4 KIVI (needs W = 0)
//   KvCache(pool, max_positions, W, sinks)  paged over a shared pool (its dtype is the pool's)
//   visibility() / format() / ring() / pages() / eviction()   the parts, read-only
//   paged() / bf16() / quantized()   which storage and format
//   n_layer() / n_head() / head_dim() / capacity()   capacity: ring slots S; paged: the most positions it may map
//   window() / sinks()          0 = no window; sinks count only with a window
//   set_sink_positions(s)       where the sinks count as sitting (attention.h SinkPositions); rows unchanged
//   next_position()             the position pointer: absolute position the next token gets
//   write_slot()                where the next token's K/V will be written (paged: its position)
//   used()                      positions still visible to the next query (fill level)
//   slot_position(s) / slot_positions()   absolute position in slot s, or -1 if empty or evicted
//   visible_keys(q)             the keys a query at q sees; visible_from(q): lowest of its window part
//   alive(p)                    written, below the pointer, its slot not reused since
//   fits(n) / require_fits(n)   can a chunk of n tokens be processed now (paged: free blocks too)
//   prepare(tokens, n)          before a chunk's writes: map its positions (allocate / copy-on-write)
//   key(il, h, p) / value(...)  (D) row of absolute position p; p must be alive; float32 caches only
//   key16 / value16             the same for bfloat16 caches
//   packed_key / packed_value   the same for int8 / fp8 caches: row_bytes() bytes (int4: values; a
//                               packed_key is p's key group)
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
//   pool() / block_table()      paged: the pool, and logical block -> pool block (-1 = none)
//   row_bytes() / bytes_per_position()   one stored (D) row; K and V of every layer and head
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
//   has_evictions() / n_evicted()   any flag set (attention takes its unmasked path otherwise) / how many
//   evicted_keys(il, h)         the predicate attention reads (EvictedKeys)
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

#include "cache/block_pool.h"
#include "cache/kv_quant.h"
#include "cache/paged_storage.h"
#include "cache/ring_storage.h"
#include "cache/row_format.h"
#include "cache/visibility.h"
#include "kernels/attention.h"
#include "text/tokenizer.h"

namespace kvscope {

// What the next chunk changes, per part.
struct KvCacheCheckpoint {
    int64_t next_position = 0;
    RingCheckpoint ring;                  // ring: the slots the chunk overwrites
    PagedCheckpoint paged;                // paged: the block table, its blocks held
    Int4Checkpoint int4;                  // int4: the residual rows the chunk packs
    std::vector<uint8_t> slot_evicted;    // eviction: the flags of ring.slots, (slots, L, H); empty while none
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
    KvCache(KvCache&& other) noexcept = default;
    KvCache& operator=(KvCache&& other) noexcept = default;
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    const CacheWindow& visibility() const { return window_; }
    const RowFormat& format() const { return format_; }
    const RingStorage& ring() const { return ring_; }
    const PagedStorage& pages() const { return paged_; }
    const EvictionFlags& eviction() const { return flags_; }

    bool paged() const { return paged_.active(); }
    bool bf16() const { return format_.bf16(); }
    bool quantized() const { return format_.quantized(); }
    int64_t n_layer() const { return n_layer_; }
    int64_t n_head() const { return n_head_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t capacity() const { return paged() ? paged_.capacity() : ring_.capacity(); }
    int64_t window() const { return window_.window; }
    int64_t sinks() const { return window_.sinks; }
    void set_sink_positions(SinkPositions s) { window_.sink_positions = s; }
    int64_t next_position() const { return next_position_; }
    int64_t write_slot() const { return slot_of(next_position_); }
    int64_t used() const { return window_.used(next_position_, capacity()); }
    int64_t slot_position(int64_t slot) const { return slot_positions()[size_t(slot)]; }
    const std::vector<int64_t>& slot_positions() const { return paged() ? paged_.slot_positions() : ring_.slot_positions(); }
    KeyRange visible_keys(int64_t query_position) const { return window_.visible_keys(query_position); }
    int64_t visible_from(int64_t query_position) const { return window_.visible_from(query_position); }
    bool alive(int64_t position) const {
        return position >= 0 && position < next_position_ && slot_positions()[size_t(slot_of(position))] == position;
    }
    bool fits(int64_t n_new) const;
    void require_fits(int64_t n_new) const;  // throws UsageError with the numbers

    void prepare(const TokenId* tokens, int64_t n_new);
    const float* key(int64_t il, int64_t h, int64_t position) const { return row<float>(0, il, h, position); }
    const float* value(int64_t il, int64_t h, int64_t position) const { return row<float>(1, il, h, position); }
    const uint16_t* key16(int64_t il, int64_t h, int64_t position) const { return row<uint16_t>(0, il, h, position); }
    const uint16_t* value16(int64_t il, int64_t h, int64_t position) const { return row<uint16_t>(1, il, h, position); }
    const uint8_t* packed_key(int64_t il, int64_t h, int64_t position) const;
    const uint8_t* packed_value(int64_t il, int64_t h, int64_t position) const { return ring_.row(1, il, h, position); }
    void copy_key(int64_t il, int64_t h, int64_t position, float* out) const;    // (D)
    void copy_value(int64_t il, int64_t h, int64_t position, float* out) const;  // (D)
    void write(int64_t il, int64_t h, int64_t position, const float* k, const float* v);
    void advance(int64_t n_new);
    int64_t adopt_prefix(std::span<const TokenId> tokens, int64_t max_positions);
    void reset();
    void grow(int64_t capacity);

    KvCacheCheckpoint checkpoint(int64_t n_new) const;
    void restore(KvCacheCheckpoint& c);  // consumes c's holds

    void set_sequence(int32_t id) { paged_.set_sequence(id); }
    const BlockPool* pool() const { return paged_.pool(); }
    const std::vector<int32_t>& block_table() const { return paged_.table(); }

    int64_t row_bytes() const { return format_.row_bytes(); }
    int64_t bytes_per_position() const { return 2 * n_layer_ * n_head_ * row_bytes(); }
    int64_t bytes_used() const;
    int64_t bytes_capacity() const;
    KvCacheView view() const;
    void view_into(KvCacheView& out) const;

    bool evict(int64_t il, int64_t h, int64_t position);
    bool unevict(int64_t il, int64_t h, int64_t position);
    bool evicted(int64_t il, int64_t h, int64_t position) const {
        return flags_.test(il * n_head_ + h, slot_of(position));
    }
    bool has_evictions() const { return flags_.any(); }
    int64_t n_evicted() const { return flags_.count(); }
    EvictedKeys evicted_keys(int64_t il, int64_t h) const { return EvictedKeys{flags_.row(il * n_head_ + h), this}; }
    int64_t return_evicted_blocks(int64_t keep = -1);

private:
    friend struct EvictedKeys;
    int64_t slot_of(int64_t position) const { return paged() ? position : ring_.slot_of(position); }
    template <class T>  // float (float32 storage) or uint16_t (bfloat16); kv: 0 = K, 1 = V
    T* row(int kv, int64_t il, int64_t h, int64_t position) const {
        if (paged()) return paged_.row<T>(kv, il, h, position);
        return reinterpret_cast<T*>(ring_.row(kv, il, h, position));
    }
    unsigned char* stored_row(int kv, int64_t il, int64_t h, int64_t position) const;  // row_bytes() bytes
    int64_t kept(int64_t il, int64_t h) const;     // alive positions of (il, h) the next query sees, not evicted
    void mark_written(int64_t position);
    void drop_invisible_blocks();

    int64_t n_layer_ = 0, n_head_ = 0, head_dim_ = 0;
    int64_t next_position_ = 0;
    CacheWindow window_;
    RowFormat format_;
    RingStorage ring_;                    // used unless paged_ is active
    PagedStorage paged_;
    Int4Rows int4_;                       // int4 only: key groups and the float32 residual
    EvictionFlags flags_;                 // (L·H, S)
};

inline bool EvictedKeys::operator()(int64_t position) const {
    return flags[size_t(cache->slot_of(position))] != 0;
}

}  // namespace kvscope
