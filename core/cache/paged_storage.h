#pragma once
// The paged storage of a KV cache: one of the three parts a KvCache composes (kv_cache.h). Positions
// map through a block table to fixed-size blocks of a BlockPool (block_pool.h) that several sequences
// may share; a block referenced elsewhere is copied before this sequence writes into it. Rows are the
// pool's (float32 or bfloat16). A slot is its position: slot_positions()[p] is p while p is mapped.
//   PagedStorage(pool, max_positions)
//   active()                     made over a pool (a default-made one is not)
//   capacity()                   the most positions it may map; grow(n) raises it (the pool is not grown)
//   slot_positions()             (S) p where position p is mapped and written, -1 elsewhere
//   row<T>(kv, il, h, p)         (D) float or uint16_t row of mapped position p
//   blocks_needed(next, n)       blocks a chunk of n at next takes from the pool (new + copies)
//   fits(next, n)                within capacity, and the pool has the blocks free
//   prepare(next, tokens, n)     map the chunk's positions (allocate / copy-on-write)
//   commit(next, n)              the chunk is written: its tokens become the blocks' content
//   drop_blocks_below(lo, sinks) full blocks below position lo, past the sinks, go back to the pool
//   drop_block(k)                logical block k goes back to the pool
//   adopt_prefix(tokens, max)    empty storage: map the longest run of positions another sequence holds
//   save(next, drop_lo, sinks, c) / restore(next, c)   the block table, holding its blocks for an undo;
//                                drop_lo: what drop_blocks_below will be given after the chunk (0: none)
//   reset()                      every block released
//   set_sequence(id) / sequence()   the sequence named in the pool's events
//   bytes_used() / bytes_capacity()
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "cache/block_pool.h"
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

struct PagedCheckpoint {
    std::vector<int32_t> table;           // the block table before the chunk
    BlockHolds holds;                     // keeps the blocks of `table` alive (all but a private write block)
};

class PagedStorage {
public:
    PagedStorage() = default;
    PagedStorage(std::shared_ptr<BlockPool> pool, int64_t max_positions);
    PagedStorage(PagedStorage&& o) noexcept { *this = std::move(o); }
    PagedStorage& operator=(PagedStorage&& o) noexcept;
    PagedStorage(const PagedStorage&) = delete;
    PagedStorage& operator=(const PagedStorage&) = delete;
    ~PagedStorage() { reset(); }

    bool active() const { return pool_ != nullptr; }
    int64_t capacity() const { return capacity_; }
    const BlockPool* pool() const { return pool_.get(); }
    std::shared_ptr<BlockPool> share_pool() const { return pool_; }
    int64_t block_size() const { return pool_ ? pool_->block_size() : 0; }
    const std::vector<int32_t>& table() const { return table_; }
    const std::vector<TokenId>& tokens() const { return tokens_; }
    void set_sequence(int32_t id) { sequence_ = id; }
    int32_t sequence() const { return sequence_; }
    const std::vector<int64_t>& slot_positions() const { return slot_positions_; }
    void note_written(int64_t position) { slot_positions_[size_t(position)] = position; }
    template <class T>
    T* row(int kv, int64_t il, int64_t h, int64_t position) const {
        const int64_t B = pool_->block_size(), i = position % B;
        const int32_t b = table_[size_t(position / B)];
        if constexpr (std::is_same_v<T, float>) return kv ? pool_->value(b, il, h, i) : pool_->key(b, il, h, i);
        else return kv ? pool_->value16(b, il, h, i) : pool_->key16(b, il, h, i);
    }
    int64_t blocks_needed(int64_t next, int64_t n_new) const;
    bool fits(int64_t next, int64_t n_new) const {
        return next + n_new <= capacity_ && blocks_needed(next, n_new) <= pool_->n_free();
    }
    void prepare(int64_t next, const TokenId* tokens, int64_t n_new);
    void commit(int64_t next, int64_t n_new);
    void drop_blocks_below(int64_t lo, int64_t sinks);
    void drop_block(int64_t k);
    int64_t adopt_prefix(std::span<const TokenId> tokens, int64_t max_positions);
    void save(int64_t next, int64_t drop_lo, int64_t sinks, PagedCheckpoint& c) const;
    void restore(int64_t next, PagedCheckpoint& c);
    void reset();
    void grow(int64_t capacity);
    int64_t bytes_used() const;
    int64_t bytes_capacity() const;

private:
    uint64_t chain_of(int64_t block) const;  // hash of tokens_[0, block * B)

    std::shared_ptr<BlockPool> pool_;
    int64_t capacity_ = 0;
    std::vector<int32_t> table_;          // (blocks mapped so far) pool block per logical block, -1 = evicted
    std::vector<uint64_t> chains_;        // (table_.size()) chain hash of each logical block
    std::vector<TokenId> tokens_;         // tokens of positions 0 .. next_position (+ a prepared chunk)
    std::vector<int64_t> slot_positions_; // (S)
    int32_t sequence_ = -1;
};

}  // namespace kvscope
