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
//   allocate(chain)            a free block, reference count 1, registered under `chain`; -1 if none
//   acquire(b) / release(b)    reference counting; a block whose count reaches 0 is free again
//   copy_for_write(b)          a private copy of shared block b (same chain and content), b released
//   key(b, il, h, i) / value   (D) row of slot i of block b (key16 / value16: a bfloat16 pool's)
//   content(b) / set_content   the tokens whose K/V the block holds, slot order
//   best_match(chain, tokens)  the block under `chain` whose content shares the longest prefix with
//                              tokens, and that length
//   Stats                      blocks in use, peak, allocations, copies on write, adoptions
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "tokenizer.h"

namespace kvscope {

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

    int32_t allocate(uint64_t chain);
    void acquire(int32_t b);
    void release(int32_t b);
    int32_t copy_for_write(int32_t b);  // -1 if no block is free (b is then unchanged)
    void note_adoption(int64_t n_positions);

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

    int64_t n_layer_, n_head_, head_dim_, block_size_, n_blocks_;
    bool bf16_;
    int64_t block_elems_;                                    // 2 * L * H * B * D
    std::unique_ptr<float[]> f32_;                           // (n_blocks, 2, L, H, B, D), not initialised
    std::unique_ptr<uint16_t[]> bf16_data_;                  // the same, for a bfloat16 pool (one of the two)
    std::vector<int32_t> refs_;                              // (n_blocks)
    std::vector<int32_t> free_;                              // stack of free block ids
    std::vector<uint64_t> chain_;                            // (n_blocks) hash of every token before the block
    std::vector<std::vector<TokenId>> content_;              // (n_blocks) tokens held, reserved B each
    std::unordered_multimap<uint64_t, int32_t> by_chain_;    // blocks in use, by chain
    Stats stats_;
};

// The chain hash of the block after one holding `tokens`, given the chain of that block.
uint64_t extend_chain(uint64_t chain, std::span<const TokenId> tokens);
inline constexpr uint64_t kChainStart = 0x6b76736370652d31ull;  // chain of block 0

}  // namespace kvscope
