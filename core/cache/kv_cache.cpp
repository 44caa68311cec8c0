#include "cache/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/errors.h"

namespace kvscope {

KvCache::KvCache(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, int64_t window, int64_t sinks,
                 bool bf16, KvQuantSpec quant, SlidingLayers sliding)
    : shape_{n_layer, n_head, head_dim}, window_(window, sinks), format_(head_dim, bf16, quant),
      flags_(n_layer * n_head, capacity) {
    if (format_.int4() && window > 0)
        throw UsageError("{kv_quant} int4 groups keys of consecutive positions and keeps them all: {-window}");
    ring_ = RingStorage(n_layer, n_head, capacity, window_.sinks, format_.key_row_bytes(), format_.row_bytes());
    if (format_.int4()) int4_ = Int4Rows(n_layer, n_head, head_dim, capacity, quant);
    store_windows(std::move(sliding));
}

KvCache::KvCache(std::shared_ptr<BlockPool> pool, int64_t max_positions, int64_t window, int64_t sinks,
                 int32_t sequence, bool model_slides)
    : shape_{pool->n_layer(), pool->n_head(), pool->head_dim()}, window_(window, sinks),
      format_(pool->head_dim(), pool->bf16(), {}), paged_(std::move(pool), max_positions),
      flags_(shape_.n_layer * shape_.n_head, max_positions) {
    paged_.set_sequence(sequence);
    if (model_slides)
        sliding_kept_whole_ = "one block table serves every layer: a block holds all layers' rows of its positions, so it "
                              "stays while a full layer needs it";
}

void KvCache::store_windows(SlidingLayers sliding) {
    // Stored apart only where the ring alone decides what a layer keeps: not int4, no session window or
    // sinks on top (a session refuses those with a model's own windows).
    bool any = false;
    for (int64_t w : sliding.window) any |= w > 0;
    if (any && format_.int4())
        sliding_kept_whole_ = "int4 KIVI packs each key group from consecutive positions and keeps every group";
    if (!any || format_.int4() || window_.window > 0 || window_.sinks > 0 || int64_t(sliding.window.size()) != shape_.n_layer)
        return;
    layer_window_ = std::move(sliding.window);
    chunk_ = std::max<int64_t>(1, sliding.chunk);
    ring_.set_layer_limits(layer_limits());
}

std::vector<int64_t> KvCache::layer_limits() const {
    std::vector<int64_t> limits(layer_window_.size(), 0);
    for (size_t il = 0; il < limits.size(); ++il)
        if (layer_window_[il] > 0) limits[il] = layer_window_[il] - 1 + chunk_;
    return limits;
}

bool KvCache::fits(int64_t n_new) const {
    if (paged()) return paged_.fits(next_position_, n_new);
    return ring_.fits(next_position_, n_new, window_.oldest_needed(next_position_));
}

void require_fits(const KvCache& cache, int64_t n_new) {
    if (cache.fits(n_new)) return;
    const int64_t next = cache.next_position();
    const std::string chunk = "a chunk of " + std::to_string(n_new) + " tokens at position " + std::to_string(next);
    const PagedStorage& pages = cache.pages();
    if (pages.active() && next + n_new <= cache.capacity())
        throw UsageError(chunk + " needs " + std::to_string(pages.blocks_needed(next, n_new)) +
                         " free blocks, the pool has " + std::to_string(pages.pool()->n_free()) + " of " +
                         std::to_string(pages.pool()->n_blocks()));
    if (pages.active())
        throw UsageError(chunk + " goes past the " + std::to_string(cache.capacity()) +
                         " positions this sequence may map");
    throw UsageError(chunk + " needs " +
                     std::to_string(cache.ring().slots_needed(next, n_new, cache.visibility().oldest_needed(next))) +
                     " cache slots, the cache has " + std::to_string(cache.capacity()));
}

void KvCache::prepare(const TokenId* tokens, int64_t n_new) {
    require_fits(*this, n_new);
    if (!layer_window_.empty() && n_new > 0 && n_new != chunk_) {  // the sliding layers keep W - 1 + n slots
        chunk_ = n_new;  // a smaller chunk gives back the slots of positions no query reads again
        ring_.set_layer_limits(layer_limits());
    }
    if (format_.int4()) int4_.ensure(next_position_ + n_new - int4_.n_quantized(), next_position_);
    if (paged()) paged_.prepare(next_position_, tokens, n_new);
}

unsigned char* KvCache::stored_row(int kv, int64_t il, int64_t h, int64_t position) const {
    if (paged()) return format_.bf16() ? reinterpret_cast<unsigned char*>(row<uint16_t>(kv, il, h, position))
                               : reinterpret_cast<unsigned char*>(row<float>(kv, il, h, position));
    return ring_.row(kv, il, h, position);
}

void KvCache::copy_row(int kv, int64_t il, int64_t h, int64_t position, float* out) const {
    if (format_.int4() && kv == 0) int4_.copy_key(il, h, position, out);
    else if (format_.int4() && position >= int4_.n_quantized())
        std::memcpy(out, int4_.residual(1, il, h, position), size_t(shape_.head_dim) * sizeof(float));
    else format_.decode(stored_row(kv, il, h, position), out);
}

void KvCache::mark_written(int64_t il, int64_t position) {
    if (paged()) paged_.note_written(position);
    else ring_.note_written(il, position);
}

void KvCache::write(int64_t il, int64_t h, int64_t position, const float* k, const float* v) {
    if (format_.int4()) {  // float32 until advance() packs its group
        std::memcpy(int4_.residual(0, il, h, position), k, size_t(shape_.head_dim) * sizeof(float));
        std::memcpy(int4_.residual(1, il, h, position), v, size_t(shape_.head_dim) * sizeof(float));
    } else {
        format_.encode(k, stored_row(0, il, h, position));
        format_.encode(v, stored_row(1, il, h, position));
    }
    if (h == 0 && (il == 0 || !paged())) mark_written(il, position);
    flags_.overwrite(flag_row(il, h), slot_of(position));  // a new position in the slot: the old one's flag goes
}

bool KvCache::set_evicted(int64_t il, int64_t h, int64_t position, bool on) {
    if (on) return alive(position) && flags_.set(flag_row(il, h), slot_of(position));
    return flags_.any() && alive(position) && flags_.clear(flag_row(il, h), slot_of(position));
}

int64_t KvCache::kept(int64_t il, int64_t h) const {
    // What the next query sees besides itself, minus the evicted keys.
    const KeyRange k = window_.visible_keys(next_position_);
    int64_t n = 0;
    for (int64_t j = 0; j < k.count(); ++j) {
        const int64_t p = k.position(j);
        if (p < next_position_ && stores(*this, il, p) && !flags_.test(flag_row(il, h), slot_of(p))) ++n;
    }
    return n;
}

int64_t KvCache::return_evicted_blocks(int64_t keep) {
    if (!paged() || !flags_.any()) return 0;
    const int64_t B = paged_.block_size();
    int64_t n = 0;
    const std::vector<int32_t>& table = paged_.table();
    for (int64_t k = 0; k < int64_t(table.size()) && (k + 1) * B <= next_position_; ++k) {
        if (table[size_t(k)] < 0 || k == keep) continue;
        bool all = true;
        for (int64_t lh = 0; lh < shape_.n_layer * shape_.n_head && all; ++lh)
            all = flags_.all_set(lh, k * B, (k + 1) * B);
        if (!all) continue;
        paged_.drop_block(k);
        ++n;
    }
    return n;
}

void KvCache::advance(int64_t n_new) {
    if (paged()) paged_.commit(next_position_, n_new);
    next_position_ += n_new;
    if (paged()) drop_invisible_blocks();
    if (format_.int4())
        int4_.pack_below(int4_residual_boundary(next_position_, format_.quant()),
                         [&](int64_t il, int64_t h, int64_t p) { return ring_.row(1, il, h, p); });
}

void KvCache::drop_invisible_blocks() {
    if (window_.window > 0) paged_.drop_blocks_below(window_.oldest_needed(next_position_), window_.sinks);
}

int64_t KvCache::adopt_prefix(std::span<const TokenId> tokens, int64_t max_positions) {
    if (!paged() || next_position_ != 0) return 0;
    const int64_t n = paged_.adopt_prefix(tokens, max_positions);
    if (n == 0) return 0;
    next_position_ = n;
    drop_invisible_blocks();
    return n;
}

void KvCache::reset() {
    next_position_ = 0;
    flags_.reset();
    int4_.reset();
    ring_.reset();
    paged_.reset();
}

void KvCache::grow(int64_t capacity) {
    if (capacity <= this->capacity()) return;
    // Flags are laid out per slot of the old capacity: note the evicted (layer·head, position), set them again.
    const std::vector<int64_t> entries = flags_.entries([&](int64_t s) { return slot_positions()[size_t(s)]; });
    if (paged()) {
        paged_.grow(capacity);
    } else {
        ring_.grow(capacity);
        if (format_.int4()) int4_.grow(capacity);
    }
    flags_.regrid(capacity, entries, [&](int64_t p) { return alive(p) ? slot_of(p) : -1; });
}

KvCacheCheckpoint KvCache::checkpoint(int64_t n_new) const {
    KvCacheCheckpoint c;
    c.next_position = next_position_;
    if (paged()) {
        const int64_t drop_lo = window_.window > 0 ? window_.oldest_needed(next_position_ + n_new) : 0;
        paged_.save(next_position_, drop_lo, window_.sinks, c.paged);
        return c;
    }
    ring_.save(next_position_, n_new, c.ring);
    if (!layer_window_.empty() && n_new > 0 && n_new < chunk_) {
        // prepare() shrinks the sliding layers' rings: keep every row they hold (a superset of what the
        // shrink drops and the chunk overwrites), put back after regrowing them on restore
        c.chunk = chunk_;
        ring_.save_layers(layer_limits(), next_position_, c.ring);
    }
    for (int64_t slot : c.ring.slots) flags_.save_slot(slot, c.slot_evicted);
    if (format_.int4()) int4_.save(next_position_, n_new, c.int4);  // the float32 rows the chunk's advance() packs
    return c;
}

void KvCache::restore(KvCacheCheckpoint& c) {
    if (paged()) {
        paged_.restore(c.next_position, c.paged);
        next_position_ = c.next_position;
        flags_.drop_dead([&](int64_t s) { return slot_positions()[size_t(s)] >= 0 && slot_positions()[size_t(s)] < next_position_; });
        return;
    }
    if (c.chunk > 0 && c.chunk != chunk_) {  // the sliding layers' rings as they were sized before the chunk
        chunk_ = c.chunk;
        ring_.set_layer_limits(layer_limits());
    }
    // Slots written after the checkpoint that held nothing before become empty again.
    ring_.forget_from(c.next_position, next_position_);
    const size_t LH = size_t(shape_.n_layer * shape_.n_head);
    ring_.restore(c.ring, [&](size_t i, int64_t slot) {
        flags_.load_slot(slot, c.slot_evicted.empty() ? nullptr : c.slot_evicted.data() + i * LH);
    });
    next_position_ = c.next_position;
    flags_.drop_dead([&](int64_t s) { return slot_positions()[size_t(s)] >= 0 && slot_positions()[size_t(s)] < next_position_; });
    if (format_.int4()) int4_.restore(next_position_, c.int4);
}

int64_t KvCache::bytes_used() const {
    if (format_.int4()) return int4_.bytes_used(next_position_, format_.row_bytes());
    if (!paged() && !layer_window_.empty()) {  // what each layer stores: a sliding layer at most its slots
        int64_t positions = 0;
        for (int64_t il = 0; il < shape_.n_layer; ++il) positions += ring_.held(il, next_position_);
        return positions * layer_bytes_per_position();
    }
    if (!paged()) return used() * bytes_per_position();
    return paged_.bytes_used();
}

int64_t KvCache::bytes_capacity() const {
    if (format_.int4()) return int4_.bytes_capacity(capacity(), format_.row_bytes());
    if (!paged() && !layer_window_.empty()) {
        int64_t slots = 0;
        for (int64_t il = 0; il < shape_.n_layer; ++il) slots += ring_.layer_capacity(il);
        return slots * layer_bytes_per_position();
    }
    if (!paged()) return capacity() * bytes_per_position();
    return paged_.bytes_capacity();
}

KvCacheView KvCache::view(KvCacheView out) const {
    out.capacity = capacity();
    out.used = used();
    out.write_slot = slot_of(next_position_);
    out.next_position = next_position_;
    out.bytes_per_position = bytes_per_position();
    out.bytes_used = bytes_used();
    out.bytes_capacity = bytes_capacity();
    out.slot_positions.assign(slot_positions().begin(), slot_positions().end());
    out.layer_window.assign(layer_window_.begin(), layer_window_.end());
    out.sliding_kept_whole = sliding_kept_whole_;
    out.layer_held.resize(size_t(shape_.n_layer));
    out.layer_capacity.resize(size_t(shape_.n_layer));
    for (int64_t il = 0; il < shape_.n_layer; ++il) {
        const bool apart = !paged() && !layer_window_.empty();
        out.layer_held[size_t(il)] = apart ? ring_.held(il, next_position_) : out.used;
        out.layer_capacity[size_t(il)] = apart ? ring_.layer_capacity(il) : out.capacity;
    }
    const std::vector<int32_t>& table = paged_.table();
    const BlockPool* pool = paged_.pool();
    out.block_table.assign(table.begin(), table.end());
    out.block_refs.resize(table.size());
    for (size_t k = 0; k < table.size(); ++k) out.block_refs[k] = table[k] >= 0 ? int32_t(pool->ref_count(table[k])) : 0;
    out.block_size = paged_.block_size();
    out.pool_blocks = pool ? pool->n_blocks() : 0;
    out.pool_free = pool ? pool->n_free() : 0;
    out.pool_copies_on_write = pool ? pool->stats().copies_on_write : 0;
    out.pool_positions_adopted = pool ? pool->stats().positions_adopted : 0;
    out.n_evicted = flags_.count();
    if (!flags_.any()) {
        out.kept.clear();
        out.bytes_kept = out.bytes_used;
        return out;
    }
    out.kept.resize(size_t(shape_.n_layer * shape_.n_head));
    int64_t rows = 0;
    for (int64_t il = 0; il < shape_.n_layer; ++il)
        for (int64_t h = 0; h < shape_.n_head; ++h) rows += out.kept[size_t(flag_row(il, h))] = int32_t(kept(il, h));
    out.bytes_kept = 2 * rows * format_.row_bytes();
    return out;
}

}  // namespace kvscope
