#include "cache/block_pool.h"

#include <algorithm>
#include <cstring>

#include "base/errors.h"

namespace kvscope {

BlockPool::BlockPool(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t block_size, int64_t n_blocks, bool bf16)
    : n_layer_(n_layer), n_head_(n_head), head_dim_(head_dim), block_size_(block_size), n_blocks_(n_blocks),
      bf16_(bf16), block_elems_(2 * n_layer * n_head * block_size * head_dim),
      // Left uninitialised, the memory stays untouched: the OS maps pages when a block is first written.
      f32_(bf16 ? nullptr : make_streamed_array<float>(size_t(n_blocks * block_elems_))),
      bf16_data_(bf16 ? make_streamed_array<uint16_t>(size_t(n_blocks * block_elems_)) : nullptr),
      refs_(size_t(n_blocks), 0), chain_(size_t(n_blocks), 0), content_(size_t(n_blocks)) {
    if (block_size < 1 || n_blocks < 1) throw UsageError("a block pool needs block size >= 1 and at least one block");
    free_.reserve(size_t(n_blocks));
    for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 is handed out first
    for (auto& c : content_) c.reserve(size_t(block_size));
    by_chain_.reserve(size_t(n_blocks));
}

void BlockPool::grow(int64_t n_blocks) {
    if (n_blocks <= n_blocks_) return;
    // Blocks in use are copied one by one: the free ones may never have been written (pages untouched).
    const size_t elems = size_t(n_blocks * block_elems_);
    StreamedArray<float> f32(bf16_ ? nullptr : make_streamed_array<float>(elems));
    StreamedArray<uint16_t> b16(bf16_ ? make_streamed_array<uint16_t>(elems) : nullptr);
    for (int64_t b = 0; b < n_blocks_; ++b) {
        if (refs_[size_t(b)] == 0) continue;
        const size_t at = size_t(b * block_elems_), n = size_t(block_elems_);
        if (bf16_) std::copy(bf16_data_.get() + at, bf16_data_.get() + at + n, b16.get() + at);
        else std::copy(f32_.get() + at, f32_.get() + at + n, f32.get() + at);
    }
    f32_ = std::move(f32);
    bf16_data_ = std::move(b16);
    refs_.resize(size_t(n_blocks), 0);
    chain_.resize(size_t(n_blocks), 0);
    content_.resize(size_t(n_blocks));
    for (size_t b = size_t(n_blocks_); b < size_t(n_blocks); ++b) content_[b].reserve(size_t(block_size_));
    // The new blocks go under the free ones already there: those are still handed out first.
    std::vector<int32_t> added;
    for (int64_t b = n_blocks - 1; b >= n_blocks_; --b) added.push_back(int32_t(b));
    free_.insert(free_.begin(), added.begin(), added.end());
    n_blocks_ = n_blocks;
    by_chain_.reserve(size_t(n_blocks));
}

int32_t BlockPool::take_free(uint64_t chain) {
    if (free_.empty()) return -1;
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[size_t(b)] = 1;
    chain_[size_t(b)] = chain;
    content_[size_t(b)].clear();
    by_chain_.emplace(chain, b);
    ++stats_.allocations;
    stats_.peak_in_use = std::max(stats_.peak_in_use, ++stats_.in_use);
    return b;
}

int32_t BlockPool::allocate(uint64_t chain, int32_t seq) {
    const int32_t b = take_free(chain);
    if (b >= 0) log(PoolEvent::Kind::Allocated, b, seq);
    return b;
}

void BlockPool::share(int32_t b, int32_t seq) {
    ++refs_[size_t(b)];
    log(PoolEvent::Kind::Shared, b, seq);
}

void BlockPool::acquire(int32_t b) { ++refs_[size_t(b)]; }

void BlockPool::release(int32_t b, int32_t seq) {
    if (--refs_[size_t(b)] > 0) return;
    unregister(b);
    content_[size_t(b)].clear();
    free_.push_back(b);
    --stats_.in_use;
    log(PoolEvent::Kind::Returned, b, seq);
}

void BlockPool::unregister(int32_t b) {
    auto [first, last] = by_chain_.equal_range(chain_[size_t(b)]);
    for (auto it = first; it != last; ++it)
        if (it->second == b) {
            by_chain_.erase(it);
            return;
        }
}

int32_t BlockPool::copy_for_write(int32_t b, int32_t seq) {
    const int32_t copy = take_free(chain_[size_t(b)]);
    if (copy < 0) return -1;
    log(PoolEvent::Kind::CopiedOnWrite, copy, seq, b);
    const size_t n = size_t(block_elems_);
    if (bf16_) std::memcpy(bf16_data_.get() + size_t(copy) * n, bf16_data_.get() + size_t(b) * n, n * sizeof(uint16_t));
    else std::memcpy(f32_.get() + size_t(copy) * n, f32_.get() + size_t(b) * n, n * sizeof(float));
    content_[size_t(copy)] = content_[size_t(b)];
    ++stats_.copies_on_write;
    release(b, seq);
    return copy;
}

PoolView BlockPool::view() const {
    PoolView v;
    v.block_size = block_size_;
    v.bytes_per_block = bytes_per_block();
    v.n_free = n_free();
    v.copies_on_write = stats_.copies_on_write;
    v.positions_adopted = stats_.positions_adopted;
    v.blocks.resize(size_t(n_blocks_));
    for (size_t b = 0; b < v.blocks.size(); ++b) {
        PoolView::Block& k = v.blocks[b];
        k.refs = refs_[b];
        if (k.refs == 0) continue;
        k.chain = chain_[b];
        k.tokens = content_[b];
    }
    return v;
}

int64_t PoolView::n_mapped() const {
    return std::count_if(blocks.begin(), blocks.end(), [](const Block& b) { return !b.seqs.empty(); });
}

int64_t PoolView::n_unshared() const {
    int64_t n = 0;
    for (const auto& t : tables) n += std::count_if(t.begin(), t.end(), [](int32_t b) { return b >= 0; });
    return n;
}

bool PoolView::happened(int32_t block, PoolEvent::Kind k) const {
    return std::any_of(events.begin(), events.end(), [&](const PoolEvent& e) { return e.block == block && e.kind == k; });
}

uint8_t PoolView::change(int32_t block) const {
    using K = PoolEvent::Kind;
    uint8_t c = 0;
    if (happened(block, K::Allocated)) c |= Allocated;
    if (happened(block, K::Shared)) c |= Shared;
    if (happened(block, K::CopiedOnWrite)) c |= Copied;
    if (happened(block, K::Returned) && blocks[size_t(block)].refs == 0) c |= Freed;  // not taken again since
    return c;
}

int32_t PoolView::copied_from(int32_t block) const {
    for (const PoolEvent& e : events)
        if (e.block == block && e.kind == PoolEvent::Kind::CopiedOnWrite) return e.source;
    return -1;
}

void BlockPool::note_adoption(int64_t n_positions) {
    ++stats_.adoptions;
    stats_.positions_adopted += n_positions;
}

void BlockPool::set_content(int32_t b, std::span<const TokenId> tokens) {
    content_[size_t(b)].assign(tokens.begin(), tokens.end());
}

BlockPool::Match BlockPool::best_match(uint64_t chain, std::span<const TokenId> tokens) const {
    Match best;
    auto [first, last] = by_chain_.equal_range(chain);
    for (auto it = first; it != last; ++it) {
        const std::vector<TokenId>& held = content_[size_t(it->second)];
        const size_t n = std::min(held.size(), tokens.size());
        const int64_t len = std::mismatch(held.begin(), held.begin() + ptrdiff_t(n), tokens.begin()).first - held.begin();
        // Equal lengths: the lowest block id, so the choice does not depend on hash-map order.
        if (len > best.length || (len == best.length && len > 0 && it->second < best.block)) best = {it->second, len};
    }
    return best;
}

uint64_t extend_chain(uint64_t chain, std::span<const TokenId> tokens) {
    // A 64-bit multiply-xorshift mix per token (splitmix64's finaliser): order-sensitive, and a chain
    // differs for every different token prefix with overwhelming probability (collisions ~2^-64).
    uint64_t h = chain;
    for (TokenId t : tokens) {
        h ^= uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return h;
}

}  // namespace kvscope
