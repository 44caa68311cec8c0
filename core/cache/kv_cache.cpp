#include "cache/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/errors.h"
#include "model/safetensors.h"

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

namespace {
// Storage elements of one row: D floats (or bfloat16s), or the packed bytes (int4: a value row).
int64_t stored_row_elems(const KvQuantSpec& quant, int64_t head_dim) {
    validate(quant, head_dim);
    if (quant.format == KvQuant::Int4) return int4_value_row_bytes(head_dim, quant.group);
    return quant.quantized() ? row_bytes(quant.format, head_dim) : head_dim;
}
}  // namespace

KvCache::KvCache(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, int64_t window, int64_t sinks,
                 bool bf16, KvQuantSpec quant)
    : n_layer_(n_layer), n_head_(n_head), head_dim_(head_dim), capacity_(capacity), window_(window),
      sinks_(window > 0 ? sinks : 0), bf16_(bf16 && !quant.quantized()), quant_(quant),
      row_elems_(stored_row_elems(quant, head_dim)), slot_positions_(size_t(capacity), -1) {
    if (int4() && window > 0)
        throw UsageError("--kv-quant int4 groups keys of consecutive positions and keeps them all: leave out --window");
    const size_t n = size_t(n_layer * n_head * capacity * row_elems_);
    if (int4()) {
        const int64_t G = quant.group;
        kq_.resize(size_t(n_layer * n_head * ((capacity + G - 1) / G) * int4_key_group_bytes(head_dim, G)));
        vq_.resize(n);
        ensure_residual(quant.residual + G);  // what decoding needs; a longer chunk grows it in prepare()
    } else if (quant_.quantized()) {
        kq_.resize(n);
        vq_.resize(n);
    } else if (bf16) {
        k16_.resize(n);
        v16_.resize(n);
    } else {
        k_.resize(n);
        v_.resize(n);
    }
}

KvCache::KvCache(std::shared_ptr<BlockPool> pool, int64_t max_positions, int64_t window, int64_t sinks)
    : n_layer_(pool->n_layer()), n_head_(pool->n_head()), head_dim_(pool->head_dim()), capacity_(max_positions),
      window_(window), sinks_(window > 0 ? sinks : 0), bf16_(pool->bf16()), row_elems_(pool->head_dim()),
      slot_positions_(size_t(max_positions), -1),
      pool_(std::move(pool)) {
    // Reserved once so that mapping a new block during decode does not allocate here.
    const size_t max_blocks = size_t((max_positions + pool_->block_size() - 1) / pool_->block_size());
    table_.reserve(max_blocks);
    chains_.reserve(max_blocks);
    tokens_.reserve(size_t(max_positions));
}

KvCache::KvCache(KvCache&& other) noexcept { *this = std::move(other); }

KvCache& KvCache::operator=(KvCache&& o) noexcept {
    if (this == &o) return *this;
    if (pool_) reset();  // return this cache's blocks before taking the other's
    n_layer_ = o.n_layer_, n_head_ = o.n_head_, head_dim_ = o.head_dim_, capacity_ = o.capacity_;
    window_ = o.window_, sinks_ = o.sinks_, sink_positions_ = o.sink_positions_, bf16_ = o.bf16_, next_position_ = o.next_position_;
    quant_ = o.quant_, row_elems_ = o.row_elems_;
    slot_positions_ = std::move(o.slot_positions_);
    tokens_ = std::move(o.tokens_);
    k_ = std::move(o.k_), v_ = std::move(o.v_), k16_ = std::move(o.k16_), v16_ = std::move(o.v16_);
    kq_ = std::move(o.kq_), vq_ = std::move(o.vq_);
    kr_ = std::move(o.kr_), vr_ = std::move(o.vr_), residual_slots_ = o.residual_slots_, n_quantized_ = o.n_quantized_;
    pool_ = std::move(o.pool_);
    table_ = std::move(o.table_);
    chains_ = std::move(o.chains_);
    sequence_ = o.sequence_;
    evicted_ = std::move(o.evicted_), n_evicted_ = o.n_evicted_;
    o.n_evicted_ = 0;
    o.pool_.reset();
    o.table_.clear();
    return *this;
}

KvCache::~KvCache() {
    if (pool_) reset();
}

int64_t KvCache::oldest_needed(int64_t position) const {
    return std::max(sinks_, visible_from(position));
}

int64_t KvCache::used() const {
    const KeyRange k = visible_keys(next_position_);
    return std::min(k.count() - 1, capacity_);  // every visible key but the query's own position
}

int64_t KvCache::blocks_needed(int64_t n_new) const {
    if (!pool_ || n_new <= 0) return 0;
    const int64_t B = pool_->block_size();
    int64_t needed = 0;
    for (int64_t k = next_position_ / B; k <= (next_position_ + n_new - 1) / B; ++k) {
        if (k >= int64_t(table_.size()) || table_[size_t(k)] < 0) ++needed;
        else if (pool_->ref_count(table_[size_t(k)]) > 1) ++needed;  // shared: copied before the write
    }
    return needed;
}

bool KvCache::fits(int64_t n_new) const {
    if (next_position_ + n_new <= capacity_) return !pool_ || blocks_needed(n_new) <= pool_->n_free();
    if (pool_) return false;
    // The ring wraps: the positions the chunk's first query needs (past the sinks) plus the chunk must
    // fit in the slots after the sinks.
    return next_position_ + n_new - oldest_needed(next_position_) <= capacity_ - sinks_;
}

void KvCache::require_fits(int64_t n_new) const {
    if (fits(n_new)) return;
    const std::string chunk = "a chunk of " + std::to_string(n_new) + " tokens at position " + std::to_string(next_position_);
    if (pool_ && next_position_ + n_new <= capacity_)
        throw UsageError(chunk + " needs " + std::to_string(blocks_needed(n_new)) + " free blocks, the pool has " +
                         std::to_string(pool_->n_free()) + " of " + std::to_string(pool_->n_blocks()));
    if (pool_)
        throw UsageError(chunk + " goes past the " + std::to_string(capacity_) + " positions this sequence may map");
    throw UsageError(chunk + " needs " + std::to_string(sinks_ + next_position_ + n_new - oldest_needed(next_position_)) +
                     " cache slots, the cache has " + std::to_string(capacity_));
}

uint64_t KvCache::chain_of(int64_t block) const {
    if (block == 0) return kChainStart;
    const int64_t B = pool_->block_size();
    return extend_chain(chains_[size_t(block - 1)],
                        std::span<const TokenId>(tokens_).subspan(size_t((block - 1) * B), size_t(B)));
}

void KvCache::prepare(const TokenId* tokens, int64_t n_new) {
    require_fits(n_new);
    if (int4()) ensure_residual(next_position_ + n_new - n_quantized_);
    if (!pool_) return;
    tokens_.resize(size_t(next_position_));
    tokens_.insert(tokens_.end(), tokens, tokens + n_new);
    const int64_t B = pool_->block_size();
    for (int64_t k = next_position_ / B; k <= (next_position_ + n_new - 1) / B; ++k) {
        if (k == int64_t(table_.size())) {
            chains_.push_back(chain_of(k));
            table_.push_back(pool_->allocate(chains_.back(), sequence_));
        } else if (pool_->ref_count(table_[size_t(k)]) > 1) {
            table_[size_t(k)] = pool_->copy_for_write(table_[size_t(k)], sequence_);
        }
        // The block now holds only the committed positions before the chunk; advance() adds the chunk's.
        const int64_t kept = std::clamp<int64_t>(next_position_ - k * B, 0, B);
        pool_->set_content(table_[size_t(k)], std::span<const TokenId>(tokens_).subspan(size_t(k * B), size_t(kept)));
    }
}

namespace {
void widen(const uint16_t* row, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = uint32_t(row[i]) << 16;
        std::memcpy(out + i, &bits, sizeof(float));
    }
}
}  // namespace

int64_t KvCache::row_bytes() const {
    if (quant_.quantized()) return row_elems_;
    return head_dim_ * (bf16_ ? 2 : 4);
}

unsigned char* KvCache::raw_row(int kv, int64_t il, int64_t h, int64_t position) const {
    if (quant_.quantized()) return row<uint8_t>(kv, il, h, position);
    if (bf16_) return reinterpret_cast<unsigned char*>(bf16_row(kv, il, h, position));
    return reinterpret_cast<unsigned char*>(f32_row(kv, il, h, position));
}

void KvCache::ensure_residual(int64_t slots) {
    if (slots <= residual_slots_) return;
    std::vector<float> k(size_t(n_layer_ * n_head_ * slots * head_dim_)), v(k.size());  // (L, H, Rb', D)
    for (int64_t il = 0; il < n_layer_; ++il)
        for (int64_t h = 0; h < n_head_; ++h)
            for (int64_t p = n_quantized_; p < next_position_; ++p) {
                const size_t to = size_t(((il * n_head_ + h) * slots + p % slots) * head_dim_);
                std::copy_n(residual_row(0, il, h, p), head_dim_, k.begin() + to);
                std::copy_n(residual_row(1, il, h, p), head_dim_, v.begin() + to);
            }
    kr_ = std::move(k), vr_ = std::move(v), residual_slots_ = slots;
}

void KvCache::quantize_below(int64_t boundary) {
    const int64_t G = quant_.group, D = head_dim_;
    std::vector<float> keys(size_t(G * D));  // (G, D) one key group; only while a group completes
    for (int64_t p0 = n_quantized_; p0 + G <= boundary; p0 += G)
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int64_t h = 0; h < n_head_; ++h) {
                for (int64_t i = 0; i < G; ++i) {
                    std::copy_n(residual_row(0, il, h, p0 + i), D, keys.begin() + i * D);
                    quantize_int4_values(residual_row(1, il, h, p0 + i), D, G, row<uint8_t>(1, il, h, p0 + i));
                }
                quantize_int4_keys(keys.data(), G, D, key_group(il, h, p0 / G));
            }
    n_quantized_ = std::max(n_quantized_, boundary);
}

void KvCache::copy_key(int64_t il, int64_t h, int64_t position, float* out) const {
    if (int4() && position >= n_quantized_) std::memcpy(out, residual_row(0, il, h, position), size_t(head_dim_) * sizeof(float));
    else if (int4()) dequantize_int4_key_row(key_group(il, h, position / quant_.group), quant_.group, head_dim_,
                                             position % quant_.group, out);
    else if (quant_.quantized()) dequantize_row(quant_.format, packed_key(il, h, position), head_dim_, out);
    else if (bf16_) widen(key16(il, h, position), head_dim_, out);
    else std::memcpy(out, key(il, h, position), size_t(head_dim_) * sizeof(float));
}

void KvCache::copy_value(int64_t il, int64_t h, int64_t position, float* out) const {
    if (int4() && position >= n_quantized_) std::memcpy(out, residual_row(1, il, h, position), size_t(head_dim_) * sizeof(float));
    else if (int4()) dequantize_int4_values(packed_value(il, h, position), head_dim_, quant_.group, out);
    else if (quant_.quantized()) dequantize_row(quant_.format, packed_value(il, h, position), head_dim_, out);
    else if (bf16_) widen(value16(il, h, position), head_dim_, out);
    else std::memcpy(out, value(il, h, position), size_t(head_dim_) * sizeof(float));
}

void KvCache::write(int64_t il, int64_t h, int64_t position, const float* k, const float* v) {
    if (int4()) {  // float32 until advance() packs its group
        std::memcpy(residual_row(0, il, h, position), k, size_t(head_dim_) * sizeof(float));
        std::memcpy(residual_row(1, il, h, position), v, size_t(head_dim_) * sizeof(float));
    } else if (quant_.quantized()) {
        quantize_row(quant_.format, k, head_dim_, row<uint8_t>(0, il, h, position));
        quantize_row(quant_.format, v, head_dim_, row<uint8_t>(1, il, h, position));
    } else if (bf16_) {
        uint16_t* k_row = bf16_row(0, il, h, position);
        uint16_t* v_row = bf16_row(1, il, h, position);
        for (int64_t d = 0; d < head_dim_; ++d) {
            k_row[d] = f32_to_bf16(k[d]);
            v_row[d] = f32_to_bf16(v[d]);
        }
    } else {
        std::memcpy(f32_row(0, il, h, position), k, size_t(head_dim_) * sizeof(float));
        std::memcpy(f32_row(1, il, h, position), v, size_t(head_dim_) * sizeof(float));
    }
    if (il == 0 && h == 0) slot_positions_[size_t(slot_of(position))] = position;
    if (n_evicted_ > 0) {  // a new position in the slot: the old one's flag goes with it
        uint8_t& flag = evicted_[flag_index(il, h, position)];
        n_evicted_ -= flag;
        flag = 0;
    }
}

bool KvCache::alive(int64_t position) const {
    return position >= 0 && position < next_position_ && slot_positions_[size_t(slot_of(position))] == position;
}

bool KvCache::evict(int64_t il, int64_t h, int64_t position) {
    if (!alive(position)) return false;
    if (evicted_.empty()) evicted_.assign(size_t(n_layer_ * n_head_ * capacity_), 0);
    uint8_t& flag = evicted_[flag_index(il, h, position)];
    if (flag) return false;
    flag = 1;
    ++n_evicted_;
    return true;
}

bool KvCache::unevict(int64_t il, int64_t h, int64_t position) {
    if (n_evicted_ == 0 || !alive(position)) return false;
    uint8_t& flag = evicted_[flag_index(il, h, position)];
    if (!flag) return false;
    flag = 0;
    --n_evicted_;
    return true;
}

int64_t KvCache::kept(int64_t il, int64_t h) const {
    // What the next query sees besides itself, minus the evicted keys.
    const KeyRange k = visible_keys(next_position_);
    int64_t n = 0;
    for (int64_t j = 0; j < k.count(); ++j) {
        const int64_t p = k.position(j);
        if (p < next_position_ && alive(p) && !evicted(il, h, p)) ++n;
    }
    return n;
}

int64_t KvCache::return_evicted_blocks(int64_t keep) {
    if (!pool_ || n_evicted_ == 0) return 0;
    const int64_t B = pool_->block_size();
    int64_t n = 0;
    for (int64_t k = 0; k < int64_t(table_.size()) && (k + 1) * B <= next_position_; ++k) {
        if (table_[size_t(k)] < 0 || k == keep) continue;
        bool all = true;
        for (int64_t lh = 0; lh < n_layer_ * n_head_ && all; ++lh)
            for (int64_t p = k * B; p < (k + 1) * B && all; ++p) all = evicted_[size_t(lh * capacity_ + p)] != 0;
        if (!all) continue;
        pool_->release(table_[size_t(k)], sequence_);
        table_[size_t(k)] = -1;
        for (int64_t p = k * B; p < (k + 1) * B; ++p) slot_positions_[size_t(p)] = -1;
        ++n;
    }
    return n;
}

void KvCache::recount_evicted() {
    n_evicted_ = 0;
    for (int64_t il = 0; il < n_layer_ && !evicted_.empty(); ++il)
        for (int64_t h = 0; h < n_head_; ++h)
            for (int64_t s = 0; s < capacity_; ++s) {
                uint8_t& flag = evicted_[size_t((il * n_head_ + h) * capacity_ + s)];
                const int64_t p = slot_positions_[size_t(s)];
                if (flag && !(p >= 0 && p < next_position_)) flag = 0;  // the slot holds no live position
                n_evicted_ += flag;
            }
}

void KvCache::advance(int64_t n_new) {
    if (pool_) {
        const int64_t B = pool_->block_size(), end = next_position_ + n_new;
        for (int64_t k = next_position_ / B; k <= (end - 1) / B; ++k)
            pool_->set_content(table_[size_t(k)], std::span<const TokenId>(tokens_).subspan(
                                                      size_t(k * B), size_t(std::min(end, (k + 1) * B) - k * B)));
    }
    next_position_ += n_new;
    if (pool_) evict_invisible_blocks();
    if (int4()) quantize_below(int4_residual_boundary(next_position_, quant_));
}

void KvCache::evict_invisible_blocks() {
    if (window_ <= 0) return;
    const int64_t B = pool_->block_size(), lo = oldest_needed(next_position_);
    for (int64_t k = 0; k < int64_t(table_.size()) && (k + 1) * B <= lo; ++k) {
        if (table_[size_t(k)] < 0 || k * B < sinks_) continue;  // already gone, or holds a sink
        pool_->release(table_[size_t(k)], sequence_);
        table_[size_t(k)] = -1;
        for (int64_t p = k * B; p < (k + 1) * B; ++p) slot_positions_[size_t(p)] = -1;
    }
}

int64_t KvCache::adopt_prefix(std::span<const TokenId> tokens, int64_t max_positions) {
    if (!pool_ || next_position_ != 0) return 0;
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
    next_position_ = n;
    evict_invisible_blocks();
    return n;
}

void KvCache::reset() {
    next_position_ = 0;
    std::fill(evicted_.begin(), evicted_.end(), uint8_t(0));
    n_evicted_ = 0;
    n_quantized_ = 0;
    std::fill(slot_positions_.begin(), slot_positions_.end(), -1);
    if (!pool_) return;
    for (int32_t b : table_)
        if (b >= 0) pool_->release(b, sequence_);
    table_.clear();
    chains_.clear();
    tokens_.clear();
}

void KvCache::grow(int64_t capacity) {
    if (capacity <= capacity_) return;
    // Flags are laid out per slot of the old capacity: note the evicted (il, h, position), set them again.
    std::vector<int64_t> evicted_entries;  // (n, 3) il, h, position
    for (int64_t il = 0; il < n_layer_ && n_evicted_ > 0; ++il)
        for (int64_t h = 0; h < n_head_; ++h)
            for (int64_t s = 0; s < capacity_; ++s)
                if (evicted_[size_t((il * n_head_ + h) * capacity_ + s)])
                    evicted_entries.insert(evicted_entries.end(), {il, h, slot_positions_[size_t(s)]});
    struct Reflag {
        KvCache& c;
        std::vector<int64_t>& e;
        ~Reflag() {
            if (c.evicted_.empty()) return;
            c.evicted_.assign(size_t(c.n_layer_ * c.n_head_ * c.capacity_), 0);
            c.n_evicted_ = 0;
            for (size_t i = 0; i < e.size(); i += 3) c.evict(e[i], e[i + 1], e[i + 2]);
        }
    } reflag{*this, evicted_entries};
    if (pool_) {
        capacity_ = capacity;
        slot_positions_.resize(size_t(capacity), -1);
        const size_t max_blocks = size_t((capacity + pool_->block_size() - 1) / pool_->block_size());
        table_.reserve(max_blocks);
        chains_.reserve(max_blocks);
        tokens_.reserve(size_t(capacity));
        return;
    }
    // A ring that wrapped keeps position p in slot sinks + (p - sinks) % (S - sinks): with a new S the
    // slot changes, so each live position's rows are copied to the slot slot_of() gives it afterwards.
    const std::vector<int64_t> old_positions = std::move(slot_positions_);
    const int64_t old_capacity = capacity_;
    const size_t n = size_t(n_layer_ * n_head_ * capacity * row_elems_), E = size_t(row_elems_);
    capacity_ = capacity;
    slot_positions_.assign(size_t(capacity), -1);
    // Whichever storage pair is in use: (L, H, S', E) each, E elements a row.
    auto regrow = [&](auto& old) {
        if (old.empty()) return;
        std::remove_reference_t<decltype(old)> grown(n);
        for (int64_t old_slot = 0; old_slot < old_capacity; ++old_slot) {
            const int64_t p = old_positions[size_t(old_slot)];
            if (p < 0) continue;
            for (int64_t il = 0; il < n_layer_; ++il)
                for (int64_t h = 0; h < n_head_; ++h) {
                    const size_t from = size_t(((il * n_head_ + h) * old_capacity + old_slot) * row_elems_);
                    std::copy_n(old.begin() + from, E, grown.begin() + offset(il, h, slot_of(p)));
                }
        }
        old = std::move(grown);
    };
    for (auto* f32 : {&k_, &v_}) regrow(*f32);
    for (auto* b16 : {&k16_, &v16_}) regrow(*b16);
    regrow(vq_);
    if (!int4()) {
        regrow(kq_);
    } else {  // key groups: (L, H, groups, bytes), more groups per (layer, head)
        const int64_t G = quant_.group, B = int4_key_group_bytes(head_dim_, G);
        const int64_t old_groups = (old_capacity + G - 1) / G, groups = (capacity + G - 1) / G;
        std::vector<uint8_t> kq(size_t(n_layer_ * n_head_ * groups * B));
        for (int64_t lh = 0; lh < n_layer_ * n_head_; ++lh)
            std::copy_n(kq_.begin() + lh * old_groups * B, old_groups * B, kq.begin() + lh * groups * B);
        kq_ = std::move(kq);
    }
    for (int64_t old_slot = 0; old_slot < old_capacity; ++old_slot)
        if (const int64_t p = old_positions[size_t(old_slot)]; p >= 0) slot_positions_[size_t(slot_of(p))] = p;
}

KvCacheCheckpoint KvCache::checkpoint(int64_t n_new) const {
    KvCacheCheckpoint c;
    c.next_position = next_position_;
    if (pool_) {
        // Hold every mapped block so an undo finds it, except the private block the chunk writes into at
        // positions past the pointer (holding it would force a needless copy): an undo keeps whatever
        // block then maps it, the same one or its copy, both unchanged below the pointer. Should the
        // chunk evict that block, it is held too.
        const int64_t B = pool_->block_size();
        const int64_t write_block = next_position_ % B ? next_position_ / B : -1;
        const bool evicted_by_chunk = window_ > 0 && write_block >= 0 && (write_block + 1) * B <= oldest_needed(next_position_ + n_new) &&
                                      write_block * B >= sinks_;
        c.table = table_;
        for (int64_t k = 0; k < int64_t(table_.size()); ++k) {
            const int32_t b = table_[size_t(k)];
            if (b < 0) continue;
            if (k == write_block && pool_->ref_count(b) == 1 && !evicted_by_chunk) continue;
            c.holds.hold(pool_, b, sequence_);
        }
        return c;
    }
    const size_t row_bytes = size_t(this->row_bytes());
    for (int64_t p = next_position_; p < next_position_ + n_new && p - next_position_ < capacity_; ++p) {
        const int64_t slot = slot_of(p);
        if (slot_positions_[size_t(slot)] < 0) continue;
        c.slots.push_back(slot);
        c.slot_positions.push_back(slot_positions_[size_t(slot)]);
        if (!evicted_.empty())
            for (int64_t lh = 0; lh < n_layer_ * n_head_; ++lh) c.slot_evicted.push_back(evicted_[size_t(lh * capacity_ + slot)]);
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int kv = 0; kv < 2; ++kv)
                for (int64_t h = 0; h < n_head_; ++h) {
                    const unsigned char* row = raw_row(kv, il, h, p);
                    c.rows.insert(c.rows.end(), row, row + row_bytes);
                }
    }
    if (int4()) {  // the float32 rows the chunk's advance() will pack (those written before the chunk)
        c.residual_from = n_quantized_;
        const int64_t to = std::min(int4_residual_boundary(next_position_ + n_new, quant_), next_position_);
        for (int64_t p = n_quantized_; p < to; ++p)
            for (int64_t il = 0; il < n_layer_; ++il)
                for (int kv = 0; kv < 2; ++kv)
                    for (int64_t h = 0; h < n_head_; ++h) {
                        const float* row = residual_row(kv, il, h, p);
                        c.residual_rows.insert(c.residual_rows.end(), row, row + head_dim_);
                    }
    }
    return c;
}

void KvCache::rebuild_slot_positions() {
    const int64_t B = pool_->block_size();
    for (int64_t p = 0; p < capacity_; ++p)
        slot_positions_[size_t(p)] = p < next_position_ && table_[size_t(p / B)] >= 0 ? p : -1;
}

void KvCache::restore(KvCacheCheckpoint& c) {
    if (pool_) {
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
        next_position_ = c.next_position;
        tokens_.resize(size_t(next_position_));
        rebuild_slot_positions();
        recount_evicted();
        return;
    }
    // Slots written after the checkpoint that held nothing before become empty again.
    for (int64_t p = c.next_position; p < next_position_; ++p) {
        const int64_t slot = slot_of(p);
        if (slot_positions_[size_t(slot)] == p) slot_positions_[size_t(slot)] = -1;
    }
    const unsigned char* src = c.rows.data();
    const size_t row_bytes = size_t(this->row_bytes());
    for (size_t i = 0; i < c.slots.size(); ++i) {
        // The slot the saved position has now: the one it was saved from, unless grow() ran since.
        const int64_t slot = slot_of(c.slot_positions[i]);
        slot_positions_[size_t(slot)] = c.slot_positions[i];
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int kv = 0; kv < 2; ++kv)
                for (int64_t h = 0; h < n_head_; ++h) {
                    // The saved position's row, whose slot is `slot` (slot_of maps it there).
                    std::memcpy(raw_row(kv, il, h, c.slot_positions[i]), src, row_bytes);
                    src += row_bytes;
                }
        if (!evicted_.empty())
            for (int64_t lh = 0; lh < n_layer_ * n_head_; ++lh)
                evicted_[size_t(lh * capacity_ + slot)] =
                    c.slot_evicted.empty() ? 0 : c.slot_evicted[size_t(i) * size_t(n_layer_ * n_head_) + size_t(lh)];
    }
    next_position_ = c.next_position;
    recount_evicted();
    if (int4()) {  // positions the chunk packed are float32 again; the packed copies above the boundary go stale
        const float* row = c.residual_rows.data();
        const int64_t n = int64_t(c.residual_rows.size()) / (n_layer_ * 2 * n_head_ * head_dim_);
        for (int64_t p = c.residual_from; p < c.residual_from + n; ++p)
            for (int64_t il = 0; il < n_layer_; ++il)
                for (int kv = 0; kv < 2; ++kv)
                    for (int64_t h = 0; h < n_head_; ++h, row += head_dim_)
                        std::memcpy(residual_row(kv, il, h, p), row, size_t(head_dim_) * sizeof(float));
        n_quantized_ = int4_residual_boundary(next_position_, quant_);
    }
}

int64_t KvCache::bytes_used() const {
    if (int4())  // packed below the boundary, float32 rows above it
        return 2 * n_layer_ * n_head_ * (n_quantized_ * row_bytes() + (next_position_ - n_quantized_) * head_dim_ * 4);
    if (!pool_) return used() * bytes_per_position();
    return int64_t(std::count_if(table_.begin(), table_.end(), [](int32_t b) { return b >= 0; })) * pool_->bytes_per_block();
}

int64_t KvCache::bytes_capacity() const {
    if (int4()) return capacity_ * bytes_per_position() + 2 * n_layer_ * n_head_ * residual_slots_ * head_dim_ * 4;
    if (!pool_) return capacity_ * bytes_per_position();
    return (capacity_ + pool_->block_size() - 1) / pool_->block_size() * pool_->bytes_per_block();
}

KvCacheView KvCache::view() const {
    KvCacheView v;
    view_into(v);
    return v;
}

void KvCache::view_into(KvCacheView& out) const {
    out.capacity = capacity();
    out.used = used();
    out.write_slot = write_slot();
    out.next_position = next_position();
    out.bytes_used = bytes_used();
    out.bytes_capacity = bytes_capacity();
    out.slot_positions.assign(slot_positions_.begin(), slot_positions_.end());
    out.block_table.assign(table_.begin(), table_.end());
    out.block_refs.resize(table_.size());
    for (size_t k = 0; k < table_.size(); ++k)
        out.block_refs[k] = table_[k] >= 0 ? int32_t(pool_->ref_count(table_[k])) : 0;
    out.block_size = block_size();
    out.pool_blocks = pool_ ? pool_->n_blocks() : 0;
    out.pool_free = pool_ ? pool_->n_free() : 0;
    out.pool_copies_on_write = pool_ ? pool_->stats().copies_on_write : 0;
    out.pool_positions_adopted = pool_ ? pool_->stats().positions_adopted : 0;
    out.n_evicted = n_evicted_;
    if (n_evicted_ == 0) {
        out.kept.clear();
        out.bytes_kept = out.bytes_used;
        return;
    }
    out.kept.resize(size_t(n_layer_ * n_head_));
    int64_t rows = 0;
    for (int64_t il = 0; il < n_layer_; ++il)
        for (int64_t h = 0; h < n_head_; ++h) rows += out.kept[size_t(il * n_head_ + h)] = int32_t(kept(il, h));
    out.bytes_kept = 2 * rows * row_bytes();
}

}  // namespace kvscope
