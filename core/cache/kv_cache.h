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
// What one part answers alone is read from that part: cache.format().bf16(), .quantized(), .row_bytes();
// cache.visibility().window, .sinks, .visible_keys(q), .visible_from(q); cache.pages().active() (paged),
// .pool(), .table(); cache.eviction().any(), .count(). The cache itself answers what needs several.
//
// A chunk of n new tokens at position p needs the keys the chunk's first query sees plus the chunk
// itself alive at once: `fits(n)` checks that before anything is written. Positions stay absolute.
//
// A model's sliding layers store only their window (SlidingLayers): layer il with window W_l keeps
// W_l - 1 + C slots, C = the chunk being written (Hugging Face's DynamicSlidingWindowLayer: W - 1 positions
// between steps, plus the chunk attention reads them with): prepare() resizes the ring to each chunk, so
// after a prefill of P tokens the first decode step gives back P - 1 slots; full layers every position. The
// whole-sequence record (slot_positions, alive, the eviction flags) is unchanged; stores(cache, il, p) says
// what a layer still has. int4 KIVI, a session window and paged caches keep every position in every layer
// (key groups span consecutive positions; the session window's ring is sized for it; one block table
// serves all layers): their sliding layers narrow only the mask, as llama.cpp's --swa-full keeps them, and
// view().sliding_kept_whole says why.
//
// L = layers, H = K/V heads, D = head dim, S = capacity (ring: slots; paged: the most positions it may map)
//   KvCache(L, H, D, S, W, sinks, bf16, quant, sliding)   ring; W = 0: no window (every earlier position
//                               stays visible); quant: int8 / fp8 packed rows, int4 KIVI (needs W = 0);
//                               sliding: the model's own window per layer and the chunk expected (below)
//   KvCache(pool, max_positions, W, sinks, sequence, model_slides)   paged over a shared pool (its dtype is
//                               the pool's); sequence: the id the pool's events name for this cache (-1: none);
//                               model_slides: the model has sliding layers (kept whole here)
//   A cache moves (a paged one's block references go with it) and is never copied.
//   visibility() / format() / ring() / pages() / eviction()   the parts, read-only
//   shape()                     (L, H, D) as .n_layer, .n_head, .head_dim
//   capacity()                  S
//   next_position()             the position pointer: absolute position the next token gets
//   used()                      positions still visible to the next query (fill level)
//   slot_positions()            (S) absolute position in each slot, -1 if empty or dropped (paged: slot p holds p)
//   alive(p)                    written, below the pointer, its slot not reused since
//   set_sink_positions(s)       where the sinks count as sitting (attention.h SinkPositions); rows unchanged
//   fits(n)                     can a chunk of n tokens be processed now (paged: free blocks too);
//                               require_fits(cache, n) throws UsageError with the numbers when not
//   prepare(tokens, n)          before a chunk's writes: require_fits, then map its positions (allocate /
//                               copy-on-write)
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
//   rows(il, h)                 the rows and eviction flags of layer il, K/V head h (KvRows, below)
//   view(reuse)                 a KvCacheView snapshot: fill, write slot, bytes (per position, used,
//                               capacity), each layer's fill and slots, block table, what eviction keeps; view(std::move(v))
//                               reuses v's vectors (allocates nothing once they have grown)
//
// KvRows, the rows of one (layer, K/V head), for an alive position p:
//   key<T>(p) / value<T>(p)     (D) row as stored: T = float (float32 cache), uint16_t (bfloat16) or
//                               uint8_t (int8 / fp8: format().row_bytes() packed bytes; int4: a value row,
//                               and key<uint8_t>(p) is p's key group)
//   copy_key(p, out) / copy_value(p, out)   (D) the row as float32 whatever the format
//   evicted(p)                  is p's key evicted
//   evicted_keys()              the same as the predicate attention reads (EvictedKeys), while
//                               eviction().any()
//
// Eviction (eviction.h policies; later by hand): one flag per (layer, K/V head, position) that attention
// honours. An evicted key gets score -inf and weight exactly 0 (attention.h attend_group), so it adds
// nothing to the softmax sum or the output; the row stays in place (ring) until its slot is reused.
// A new write to a slot clears its flags; checkpoint/restore save and put back the flags a chunk's
// writes overwrite. Evicting nothing leaves every number as it was, bit for bit.
//   set_evicted(il, h, p, on)   set (on) / clear the flag of alive position p; returns whether it changed
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
    int64_t chunk = 0;                    // sliding layers sized for a larger chunk before it (their rows in
                                          // ring, to regrow and refill on restore); 0: no resize
};

// What a cache holds at one moment, as plain values (llama.cpp's llama_kv_cache_view): a StepRecord
// keeps the one its step left behind. The paged fields stay 0 / empty for a ring.
struct KvCacheView {
    int64_t capacity = 0;                // S
    int64_t used = 0;                    // slots still visible to the next query
    int64_t write_slot = 0;              // where the next position will be written
    int64_t next_position = 0;           // the position pointer
    int64_t bytes_per_position = 0;      // K and V rows of every layer and head: 2 L H row bytes
    // what is stored: sum over layers of the positions each layer holds (capacity: its slots) x 2 H row
    // bytes; a shared block counts for each sharer
    int64_t bytes_used = 0, bytes_capacity = 0;
    std::vector<int64_t> layer_window;   // (L) the model's own window per layer, 0 = full; empty: none stored apart
    std::vector<int64_t> layer_held;     // (L) positions each layer stores now (a sliding layer: at most its slots)
    std::vector<int64_t> layer_capacity; // (L) slots each layer has (S for a full layer)
    const char* sliding_kept_whole = nullptr;  // why the model's sliding layers keep every position here
                                         // (paged, int4); nullptr: they store only their window, or none slides
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

// A model's own windows, for a ring cache whose sliding layers store only them (the top of this file).
struct SlidingLayers {
    std::vector<int64_t> window;         // (L) 0 = full attention; empty: no sliding layer
    int64_t chunk = 1;                   // the first chunk expected; prepare() resizes to each chunk
};

// (L, H, D) of a cache: layers, K/V heads, head dim.
struct KvShape {
    int64_t n_layer = 0, n_head = 0, head_dim = 0;
};

class KvCache;
// The evicted flags of one (layer, K/V head), as attention asks for them: by absolute position.
struct EvictedKeys {
    const uint8_t* flags = nullptr;      // (S) per slot
    const KvCache* cache = nullptr;
    bool operator()(int64_t position) const;
};

// The rows of one (layer, K/V head) and their eviction flags (the list at the top). Made by
// KvCache::rows(il, h); it reads that cache, which must outlive it, and holds nothing else.
class KvRows {
public:
    template <class T>
    const T* key(int64_t position) const;
    template <class T>
    const T* value(int64_t position) const;
    void copy_key(int64_t position, float* out) const;    // (D)
    void copy_value(int64_t position, float* out) const;  // (D)
    bool evicted(int64_t position) const;
    EvictedKeys evicted_keys() const;

private:
    friend class KvCache;
    KvRows(const KvCache& cache, int64_t il, int64_t h) : cache_(&cache), il_(il), h_(h) {}
    const KvCache* cache_;
    int64_t il_, h_;
};

class KvCache {
public:
    KvCache() = default;
    KvCache(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, int64_t window, int64_t sinks = 0,
            bool bf16 = false, KvQuantSpec quant = {}, SlidingLayers sliding = {});
    KvCache(std::shared_ptr<BlockPool> pool, int64_t max_positions, int64_t window, int64_t sinks = 0,
            int32_t sequence = -1, bool model_slides = false);

    const CacheWindow& visibility() const { return window_; }
    const RowFormat& format() const { return format_; }
    const RingStorage& ring() const { return ring_; }
    const PagedStorage& pages() const { return paged_; }
    const EvictionFlags& eviction() const { return flags_; }

    const KvShape& shape() const { return shape_; }
    int64_t capacity() const { return paged() ? paged_.capacity() : ring_.capacity(); }
    int64_t next_position() const { return next_position_; }
    int64_t used() const { return window_.used(next_position_, capacity()); }
    const std::vector<int64_t>& slot_positions() const { return paged() ? paged_.slot_positions() : ring_.slot_positions(); }
    bool alive(int64_t position) const {
        return position >= 0 && position < next_position_ && slot_positions()[size_t(slot_of(position))] == position;
    }
    void set_sink_positions(SinkPositions s) { window_.sink_positions = s; }

    bool fits(int64_t n_new) const;
    void prepare(const TokenId* tokens, int64_t n_new);
    void write(int64_t il, int64_t h, int64_t position, const float* k, const float* v);
    void advance(int64_t n_new);
    int64_t adopt_prefix(std::span<const TokenId> tokens, int64_t max_positions);
    KvCacheCheckpoint checkpoint(int64_t n_new) const;
    void restore(KvCacheCheckpoint& c);  // consumes c's holds
    void reset();
    void grow(int64_t capacity);

    KvRows rows(int64_t il, int64_t h) const { return KvRows(*this, il, h); }
    KvCacheView view(KvCacheView reuse = {}) const;

    bool set_evicted(int64_t il, int64_t h, int64_t position, bool on);
    int64_t return_evicted_blocks(int64_t keep = -1);

private:
    friend struct EvictedKeys;
    friend class KvRows;
    bool paged() const { return paged_.active(); }
    int64_t slot_of(int64_t position) const { return paged() ? position : ring_.slot_of(position); }
    int64_t flag_row(int64_t il, int64_t h) const { return il * shape_.n_head + h; }  // EvictionFlags row
    template <class T>  // float (float32 storage) or uint16_t (bfloat16); kv: 0 = K, 1 = V
    T* row(int kv, int64_t il, int64_t h, int64_t position) const {
        if (paged()) return paged_.row<T>(kv, il, h, position);
        return reinterpret_cast<T*>(ring_.row(kv, il, h, position));
    }
    const uint8_t* packed_row(int kv, int64_t il, int64_t h, int64_t position) const {  // int8 / fp8 / int4
        if (kv == 0 && format_.int4()) return int4_.key_group(il, h, position / format_.quant().group);
        return ring_.row(kv, il, h, position);
    }
    unsigned char* stored_row(int kv, int64_t il, int64_t h, int64_t position) const;  // row_bytes() bytes
    void copy_row(int kv, int64_t il, int64_t h, int64_t position, float* out) const;  // (D) float32
    int64_t bytes_per_position() const { return 2 * shape_.n_layer * shape_.n_head * format_.row_bytes(); }
    int64_t bytes_used() const;
    int64_t bytes_capacity() const;
    int64_t kept(int64_t il, int64_t h) const;     // alive positions of (il, h) the next query sees, not evicted
    void mark_written(int64_t il, int64_t position);
    void store_windows(SlidingLayers sliding);  // sliding layers keep W_l - 1 + chunk slots (where they may)
    std::vector<int64_t> layer_limits() const;  // (L) W_l - 1 + chunk_, 0 for a full layer
    int64_t layer_bytes_per_position() const { return 2 * shape_.n_head * format_.row_bytes(); }
    void drop_invisible_blocks();

    KvShape shape_;
    int64_t next_position_ = 0;
    CacheWindow window_;
    RowFormat format_;
    RingStorage ring_;                    // used unless paged_ is active
    PagedStorage paged_;
    Int4Rows int4_;                       // int4 only: key groups and the float32 residual
    EvictionFlags flags_;                 // (L·H, S)
    std::vector<int64_t> layer_window_;   // (L) the model's own windows when sliding layers store only them
    int64_t chunk_ = 0;                   // the chunk the sliding layers' slots are sized for: the last one
    const char* sliding_kept_whole_ = nullptr;  // KvCacheView::sliding_kept_whole
};
// The compiler's moves hand a paged cache's block references over (PagedStorage's move: the target's own go
// back to the pool first, the source is left holding none); PagedStorage also makes copying impossible.
static_assert(std::is_nothrow_move_constructible_v<KvCache> && std::is_nothrow_move_assignable_v<KvCache>);
static_assert(!std::is_copy_constructible_v<KvCache> && !std::is_copy_assignable_v<KvCache>);

// Throws UsageError saying what the chunk needs and what the cache has, unless cache.fits(n_new).
void require_fits(const KvCache& cache, int64_t n_new);

// Layer il still stores position p: alive, and in a sliding layer's own ring (the top of this file).
inline bool stores(const KvCache& cache, int64_t il, int64_t position) {
    return cache.alive(position) && (cache.pages().active() || cache.ring().holds(il, position));
}

inline bool EvictedKeys::operator()(int64_t position) const {
    return flags[size_t(cache->slot_of(position))] != 0;
}

template <class T>
const T* KvRows::key(int64_t position) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint16_t> || std::is_same_v<T, uint8_t>);
    if constexpr (std::is_same_v<T, uint8_t>) return cache_->packed_row(0, il_, h_, position);
    else return cache_->row<T>(0, il_, h_, position);
}

template <class T>
const T* KvRows::value(int64_t position) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint16_t> || std::is_same_v<T, uint8_t>);
    if constexpr (std::is_same_v<T, uint8_t>) return cache_->packed_row(1, il_, h_, position);
    else return cache_->row<T>(1, il_, h_, position);
}

inline void KvRows::copy_key(int64_t position, float* out) const { cache_->copy_row(0, il_, h_, position, out); }
inline void KvRows::copy_value(int64_t position, float* out) const { cache_->copy_row(1, il_, h_, position, out); }

inline bool KvRows::evicted(int64_t position) const {
    return cache_->flags_.test(cache_->flag_row(il_, h_), cache_->slot_of(position));
}

inline EvictedKeys KvRows::evicted_keys() const {
    return EvictedKeys{cache_->flags_.row(cache_->flag_row(il_, h_)), cache_};
}

}  // namespace kvscope
