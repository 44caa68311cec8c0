#pragma once
// A pool of fixed-size KV blocks shared by the paged caches of several sequences (kv_cache.h).
//
// A block holds B consecutive positions of one sequence: K and V of every layer and head, (2, L, H, B, D)
// float32, or bfloat16 when the pool is made for a bfloat16 cache. Sequences map their positions to blocks through a block table; a block used by several tables
// has a reference count above one and is copied before anyone writes into it (copy-on-write). Storage is
// reserved up front but pages are touched only when a block is first used, so memory follows use.
//
// Prefix index: every block in use is findable by (hash of all tokens before it, the tokens it holds),
// so a new sequence whose prompt starts with the same tokens maps those positions to the same blocks
// instead of computing them again. Tokens enter a block's content only once their K/V are written.
//
//   BlockPool(L, H, D, B, n_blocks, bf16)
//   grow(n_blocks)             more blocks, the existing ones (ids, rows, references) unchanged
//   allocate(chain, seq)       a free block, reference count 1, registered under `chain`; -1 if none
//   share(b, seq)              sequence seq maps block b another sequence filled (reference + 1)
//   acquire(b) / release(b)    reference counting; a block whose count reaches 0 is free again
//   copy_for_write(b, seq)     a private copy of shared block b (same chain and content), b released
//   key(b, il, h, i) / value   (D) row of slot i of block b (key16 / value16: a bfloat16 pool's)
//   content(b) / set_content   the tokens whose K/V the block holds, slot order
//   best_match(chain, tokens)  the block under `chain` whose content shares the longest prefix with
//                              tokens, and that length
//   Stats                      blocks in use, peak, allocations, copies on write, adoptions
//   log_events(on)             keep a PoolEvent for every allocation, share, copy and return
//   take_events()              the events since the last call, oldest first (the log is emptied)
//   view()                     a PoolView of every block: references, chain, tokens held
//
// `seq` names the sequence acting (PagedStorage::set_sequence, from the paged KvCache's constructor); -1 = none,
// e.g. an undo checkpoint letting go.
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/huge_pages.h"
#include "text/tokenizer.h"

namespace kvscope {

// Something that happened to a block, as it happened.
struct PoolEvent {
    enum class Kind : uint8_t { Allocated, Shared, CopiedOnWrite, Returned };
    Kind kind = Kind::Allocated;
    int32_t block = -1;          // the block allocated, shared, written (the copy) or returned
    int32_t sequence = -1;       // who did it; -1 = no sequence (an undo checkpoint released its hold)
    int32_t source = -1;         // CopiedOnWrite: the shared block it was copied from
    bool operator==(const PoolEvent&) const = default;
};

// The pool as it stands: one entry per block. SessionGroup (session_group.h) adds who maps what.
struct PoolView {
    struct Block {
        int32_t refs = 0;                // block tables + undo checkpoints holding it; 0 = free
        uint64_t chain = 0;              // hash of every token before the block (equal for a copy and its source)
        std::vector<TokenId> tokens;     // tokens whose K/V it holds, slot order
        int64_t logical = -1;            // logical block index in the tables that map it (positions logical*B..)
        std::vector<int32_t> seqs;       // sequences whose table maps it, ascending
    };
    int64_t block_size = 0;              // B
    int64_t bytes_per_block = 0;
    int64_t n_free = 0;                  // blocks on the free list
    int64_t copies_on_write = 0, positions_adopted = 0;  // totals so far
    std::vector<Block> blocks;           // (n_blocks)
    // Filled by a SessionGroup: the step this view follows and what it did.
    int64_t group_step = -1;             // -1: before the first step
    std::vector<std::vector<int32_t>> tables;  // (N) logical block -> pool block, -1 = evicted
    std::vector<size_t> n_steps;         // (N) each sequence's trace length after this group step
    std::vector<int64_t> adopted;        // (N) prompt positions the sequence mapped from others' blocks so far
    std::vector<PoolEvent> events;       // (E) what the step did to blocks, in order

    int64_t n_mapped() const;            // distinct blocks some table maps
    int64_t n_unshared() const;          // blocks the sequences would take each on their own (table entries)
    bool happened(int32_t block, PoolEvent::Kind k) const;  // an event of kind k names the block
    int32_t copied_from(int32_t block) const;                // the source of its CopiedOnWrite, or -1
    enum Change : uint8_t { Allocated = 1, Shared = 2, Copied = 4, Freed = 8 };
    uint8_t change(int32_t block) const;                     // Change bits: what the step did to the block
};

class BlockPool {
public:
    struct Stats {
        int64_t in_use = 0;          // blocks with a reference count above zero
        int64_t peak_in_use = 0;
        int64_t allocations = 0;     // blocks handed out fresh (including copies)
        int64_t copies_on_write = 0;
        int64_t adoptions = 0;       // times a sequence mapped an existing block instead of computing it
        int64_t positions_adopted = 0;
    };

    BlockPool(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t block_size, int64_t n_blocks, bool bf16 = false);

    int64_t n_layer() const { return n_layer_; }
    int64_t n_head() const { return n_head_; }
    int64_t head_dim() const { return head_dim_; }
    int64_t block_size() const { return block_size_; }          // B
    int64_t n_blocks() const { return n_blocks_; }
    int64_t n_free() const { return int64_t(free_.size()); }
    int64_t ref_count(int32_t b) const { return refs_[size_t(b)]; }
    bool bf16() const { return bf16_; }
    int64_t bytes_per_block() const { return block_elems_ * (bf16_ ? 2 : 4); }
    const Stats& stats() const { return stats_; }

    void grow(int64_t n_blocks);
    int32_t allocate(uint64_t chain, int32_t seq = -1);
    void share(int32_t b, int32_t seq);
    void acquire(int32_t b);
    void release(int32_t b, int32_t seq = -1);
    int32_t copy_for_write(int32_t b, int32_t seq = -1);  // -1 if no block is free (b is then unchanged)
    void note_adoption(int64_t n_positions);
    void log_events(bool on) { log_events_ = on; }
    std::vector<PoolEvent> take_events() { return std::exchange(events_, {}); }
    PoolView view() const;

    float* key(int32_t b, int64_t il, int64_t h, int64_t i) const { return f32_.get() + row(b, 0, il, h, i); }
    float* value(int32_t b, int64_t il, int64_t h, int64_t i) const { return f32_.get() + row(b, 1, il, h, i); }
    uint16_t* key16(int32_t b, int64_t il, int64_t h, int64_t i) const { return bf16_data_.get() + row(b, 0, il, h, i); }
    uint16_t* value16(int32_t b, int64_t il, int64_t h, int64_t i) const { return bf16_data_.get() + row(b, 1, il, h, i); }

    std::span<const TokenId> content(int32_t b) const { return content_[size_t(b)]; }
    void set_content(int32_t b, std::span<const TokenId> tokens);   // at most B tokens
    uint64_t chain(int32_t b) const { return chain_[size_t(b)]; }

    struct Match { int32_t block = -1; int64_t length = 0; };
    Match best_match(uint64_t chain, std::span<const TokenId> tokens) const;

private:
    size_t row(int32_t b, int64_t kv, int64_t il, int64_t h, int64_t i) const {
        return size_t(b) * size_t(block_elems_) +
               size_t((((kv * n_layer_ + il) * n_head_ + h) * block_size_ + i) * head_dim_);
    }
    void unregister(int32_t b);
    int32_t take_free(uint64_t chain);                      // allocate() without its event
    void log(PoolEvent::Kind k, int32_t b, int32_t seq, int32_t source = -1) {
        if (log_events_) events_.push_back({k, b, seq, source});
    }

    int64_t n_layer_, n_head_, head_dim_, block_size_, n_blocks_;
    bool bf16_;
    int64_t block_elems_;                                    // 2 * L * H * B * D
    StreamedArray<float> f32_;                               // (n_blocks, 2, L, H, B, D), not initialised
    StreamedArray<uint16_t> bf16_data_;                      // the same, for a bfloat16 pool (one of the two)
    std::vector<int32_t> refs_;                              // (n_blocks)
    std::vector<int32_t> free_;                              // stack of free block ids
    std::vector<uint64_t> chain_;                            // (n_blocks) hash of every token before the block
    std::vector<std::vector<TokenId>> content_;              // (n_blocks) tokens held, reserved B each
    std::unordered_multimap<uint64_t, int32_t> by_chain_;    // blocks in use, by chain
    Stats stats_;
    bool log_events_ = false;
    std::vector<PoolEvent> events_;                          // since the last take_events()
};

// The chain hash of the block after one holding `tokens`, given the chain of that block.
uint64_t extend_chain(uint64_t chain, std::span<const TokenId> tokens);
inline constexpr uint64_t kChainStart = 0x6b76736370652d31ull;  // chain of block 0

}  // namespace kvscope
