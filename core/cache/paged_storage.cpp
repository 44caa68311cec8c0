#include "cache/paged_storage.h"

#include <algorithm>

namespace kvscope {

BlockHolds& BlockHolds::operator=(BlockHolds&& o) noexcept {
    if (this != &o) {
        drop();
        pool_ = std::move(o.pool_);
        ids_ = std::move(o.ids_);
        seq_ = o.seq_;
        o.ids_.clear();
    }
    return *this;
}

void BlockHolds::hold(std::shared_ptr<BlockPool> pool, int32_t b, int32_t seq) {
    pool_ = std::move(pool);
    seq_ = seq;
    pool_->acquire(b);
    ids_.push_back(b);
}

bool BlockHolds::holds(int32_t b) const { return std::find(ids_.begin(), ids_.end(), b) != ids_.end(); }

void BlockHolds::drop() {
    for (int32_t b : ids_) pool_->release(b, seq_);
    ids_.clear();
}

PagedStorage::PagedStorage(std::shared_ptr<BlockPool> pool, int64_t max_positions)
    : pool_(std::move(pool)), capacity_(max_positions), slot_positions_(size_t(max_positions), -1) {
    // Reserved once so that mapping a new block during decode does not allocate here.
    const size_t max_blocks = size_t((max_positions + pool_->block_size() - 1) / pool_->block_size());
    table_.reserve(max_blocks);
    chains_.reserve(max_blocks);
    tokens_.reserve(size_t(max_positions));
}

PagedStorage& PagedStorage::operator=(PagedStorage&& o) noexcept {
    if (this == &o) return *this;
    reset();  // return this storage's blocks before taking the other's
    pool_ = std::move(o.pool_);
    capacity_ = o.capacity_;
    table_ = std::move(o.table_);
    chains_ = std::move(o.chains_);
    tokens_ = std::move(o.tokens_);
    slot_positions_ = std::move(o.slot_positions_);
    sequence_ = o.sequence_;
    o.pool_.reset();
    o.table_.clear();
    return *this;
}

int64_t PagedStorage::blocks_needed(int64_t next, int64_t n_new) const {
    if (n_new <= 0) return 0;
    const int64_t B = pool_->block_size();
    int64_t needed = 0;
    for (int64_t k = next / B; k <= (next + n_new - 1) / B; ++k) {
        if (k >= int64_t(table_.size()) || table_[size_t(k)] < 0) ++needed;
        else if (pool_->ref_count(table_[size_t(k)]) > 1) ++needed;  // shared: copied before the write
    }
    return needed;
}

uint64_t PagedStorage::chain_of(int64_t block) const {
    if (block == 0) return kChainStart;
    const int64_t B = pool_->block_size();
    return extend_chain(chains_[size_t(block - 1)],
                        std::span<const TokenId>(tokens_).subspan(size_t((block - 1) * B), size_t(B)));
}

void PagedStorage::prepare(int64_t next, const TokenId* tokens, int64_t n_new) {
    tokens_.resize(size_t(next));
    tokens_.insert(tokens_.end(), tokens, tokens + n_new);
    const int64_t B = pool_->block_size();
    for (int64_t k = next / B; k <= (next + n_new - 1) / B; ++k) {
        if (k == int64_t(table_.size())) {
            chains_.push_back(chain_of(k));
            table_.push_back(pool_->allocate(chains_.back(), sequence_));
        } else if (pool_->ref_count(table_[size_t(k)]) > 1) {
            table_[size_t(k)] = pool_->copy_for_write(table_[size_t(k)], sequence_);
        }
        // The block now holds only the committed positions before the chunk; commit() adds the chunk's.
        const int64_t kept = std::clamp<int64_t>(next - k * B, 0, B);
        pool_->set_content(table_[size_t(k)], std::span<const TokenId>(tokens_).subspan(size_t(k * B), size_t(kept)));
    }
}

void PagedStorage::commit(int64_t next, int64_t n_new) {
    const int64_t B = pool_->block_size(), end = next + n_new;
    for (int64_t k = next / B; k <= (end - 1) / B; ++k)
        pool_->set_content(table_[size_t(k)], std::span<const TokenId>(tokens_).subspan(
                                                  size_t(k * B), size_t(std::min(end, (k + 1) * B) - k * B)));
}

void PagedStorage::drop_block(int64_t k) {
    const int64_t B = pool_->block_size();
    pool_->release(table_[size_t(k)], sequence_);
    table_[size_t(k)] = -1;
    for (int64_t p = k * B; p < (k + 1) * B; ++p) slot_positions_[size_t(p)] = -1;
}

void PagedStorage::drop_blocks_below(int64_t lo, int64_t sinks) {
    const int64_t B = pool_->block_size();
    for (int64_t k = 0; k < int64_t(table_.size()) && (k + 1) * B <= lo; ++k)
        if (table_[size_t(k)] >= 0 && k * B >= sinks) drop_block(k);  // not gone already, holds no sink
}

int64_t PagedStorage::adopt_prefix(std::span<const TokenId> tokens, int64_t max_positions) {
    const int64_t B = pool_->block_size();
    const int64_t limit = std::min({max_positions, int64_t(tokens.size()), capacity_});
    int64_t n = 0;
    uint64_t chain = kChainStart;
    while (n < limit) {
        const BlockPool::Match m = pool_->best_match(chain, tokens.subspan(size_t(n), size_t(std::min(B, limit - n))));
        if (m.length == 0) break;
        pool_->share(m.block, sequence_);
        table_.push_back(m.block);
        chains_.push_back(chain);
        n += m.length;
        if (m.length < B) break;
        chain = extend_chain(chain, tokens.subspan(size_t(n - B), size_t(B)));
    }
    if (n == 0) return 0;
    pool_->note_adoption(n);
    tokens_.assign(tokens.begin(), tokens.begin() + n);
    for (int64_t p = 0; p < n; ++p) slot_positions_[size_t(p)] = p;
    return n;
}

void PagedStorage::save(int64_t next, int64_t drop_lo, int64_t sinks, PagedCheckpoint& c) const {
    // Hold every mapped block so an undo finds it, except the private block the chunk writes into at
    // positions past the pointer (holding it would force a needless copy): an undo keeps whatever block
    // then maps it, the same one or its copy, both unchanged below the pointer. Should the chunk drop
    // that block, it is held too.
    const int64_t B = pool_->block_size();
    const int64_t write_block = next % B ? next / B : -1;
    const bool dropped_by_chunk = write_block >= 0 && (write_block + 1) * B <= drop_lo && write_block * B >= sinks;
    c.table = table_;
    for (int64_t k = 0; k < int64_t(table_.size()); ++k) {
        const int32_t b = table_[size_t(k)];
        if (b < 0) continue;
        if (k == write_block && pool_->ref_count(b) == 1 && !dropped_by_chunk) continue;
        c.holds.hold(pool_, b, sequence_);
    }
}

void PagedStorage::restore(int64_t next, PagedCheckpoint& c) {
    std::vector<int32_t> table = c.table;
    for (size_t k = 0; k < table_.size(); ++k) {
        const int32_t now = table_[k];
        if (k < table.size() && table[k] >= 0 && !c.holds.holds(table[k])) {
            table[k] = now;  // the unheld write block: keep the current mapping (same block or its copy)
            continue;
        }
        if (now >= 0) pool_->release(now, sequence_);
    }
    c.holds.disown();  // the held references now belong to the restored table
    table_ = std::move(table);
    chains_.resize(table_.size());
    tokens_.resize(size_t(next));
    const int64_t B = pool_->block_size();
    for (int64_t p = 0; p < capacity_; ++p)
        slot_positions_[size_t(p)] = p < next && table_[size_t(p / B)] >= 0 ? p : -1;
}

void PagedStorage::reset() {
    std::fill(slot_positions_.begin(), slot_positions_.end(), -1);
    if (!pool_) return;
    for (int32_t b : table_)
        if (b >= 0) pool_->release(b, sequence_);
    table_.clear();
    chains_.clear();
    tokens_.clear();
}

void PagedStorage::grow(int64_t capacity) {
    if (capacity <= capacity_) return;
    capacity_ = capacity;
    slot_positions_.resize(size_t(capacity), -1);
    const size_t max_blocks = size_t((capacity + pool_->block_size() - 1) / pool_->block_size());
    table_.reserve(max_blocks);
    chains_.reserve(max_blocks);
    tokens_.reserve(size_t(capacity));
}

int64_t PagedStorage::bytes_used() const {
    return int64_t(std::count_if(table_.begin(), table_.end(), [](int32_t b) { return b >= 0; })) * pool_->bytes_per_block();
}

int64_t PagedStorage::bytes_capacity() const {
    return (capacity_ + pool_->block_size() - 1) / pool_->block_size() * pool_->bytes_per_block();
}

}  // namespace kvscope
