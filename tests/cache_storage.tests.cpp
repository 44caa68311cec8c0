// RingStorage and PagedStorage (cache/ring_storage.h, cache/paged_storage.h): where positions land and
// what a checkpoint of each keeps. The ring's expectations come from the slot rule written out here
// ("p < sinks: slot p; later: sinks + (p - sinks) % (S - sinks)"), the pool's from its reference counts.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "cache/paged_storage.h"
#include "cache/ring_storage.h"

using namespace kvscope;

namespace {

int64_t expected_slot(int64_t p, int64_t S, int64_t sinks) { return p < sinks ? p : sinks + (p - sinks) % (S - sinks); }

void write(RingStorage& r, int64_t L, int64_t H, int64_t p) {
    for (int64_t il = 0; il < L; ++il)
        for (int64_t h = 0; h < H; ++h)
            for (int kv = 0; kv < 2; ++kv) std::memset(r.row(kv, il, h, p), int(p * 7 + il * 3 + h + kv) & 0xFF, 4);
    r.note_written(p);
}

}  // namespace

TEST_CASE("ring: positions wrap over the slots after the sinks", "[cache_storage][ring]") {
    const int64_t S = 6, sinks = GENERATE(0, 2);
    RingStorage r(1, 1, S, sinks, 4, 4);
    for (int64_t p = 0; p < 20; ++p) {
        CHECK(r.slot_of(p) == expected_slot(p, S, sinks));
        write(r, 1, 1, p);
        CHECK(r.slot_positions()[size_t(expected_slot(p, S, sinks))] == p);
    }
    // The chunk's first query needs positions from `oldest` on: with sinks they take their own slots.
    CHECK(r.fits(20, 1, 20 - (S - sinks) + 1));
    CHECK_FALSE(r.fits(20, 1, 20 - (S - sinks)));
    CHECK(r.slots_needed(20, 1, 20 - (S - sinks)) == S + 1);
}

TEST_CASE("ring: a checkpoint keeps the rows a chunk overwrites, restore puts them back", "[cache_storage][ring]") {
    constexpr int64_t L = 2, H = 2, S = 4;
    RingStorage r(L, H, S, 0, 4, 4);
    for (int64_t p = 0; p < 4; ++p) write(r, L, H, p);
    RingCheckpoint c;
    r.save(4, 2, c);  // positions 4, 5 overwrite slots 0, 1 (positions 0, 1)
    CHECK(c.slots == std::vector<int64_t>{0, 1});
    CHECK(c.slot_positions == std::vector<int64_t>{0, 1});
    CHECK(c.rows.size() == size_t(2 * L * 2 * H * 4));
    write(r, L, H, 4);
    write(r, L, H, 5);
    r.forget_from(4, 6);
    std::vector<int64_t> told;
    r.restore(c, [&](size_t i, int64_t slot) { told.push_back(int64_t(i) * 10 + slot); });
    CHECK(told == std::vector<int64_t>{0, 11});
    CHECK(r.slot_positions() == std::vector<int64_t>{0, 1, 2, 3});
    CHECK(r.row(1, 1, 1, 1)[0] == ((1 * 7 + 3 + 1 + 1) & 0xFF));
}

TEST_CASE("ring: growing moves every live position to its slot in the larger ring", "[cache_storage][ring]") {
    constexpr int64_t S = 5, sinks = 1;
    RingStorage r(1, 2, S, sinks, 4, 4);
    for (int64_t p = 0; p < 9; ++p) write(r, 1, 2, p);  // wrapped: slots hold 0, 5, 6, 7, 8
    r.grow(11);
    for (int64_t p : {0, 5, 6, 7, 8}) {
        CHECK(r.slot_positions()[size_t(expected_slot(p, 11, sinks))] == p);
        CHECK(r.row(0, 0, 1, p)[0] == ((p * 7 + 1) & 0xFF));
    }
    CHECK(r.capacity() == 11);
}

TEST_CASE("paged: chunks map blocks, a checkpoint holds them, restore returns the chunk's", "[cache_storage][paged]") {
    constexpr int64_t B = 4;
    auto pool = std::make_shared<BlockPool>(1, 1, 2, B, 4);
    {
        PagedStorage s(pool, 16);
        const std::vector<TokenId> t{1, 2, 3, 4, 5, 6};
        CHECK(s.blocks_needed(0, 6) == 2);
        CHECK(s.fits(0, 6));
        CHECK_FALSE(s.fits(0, 17));
        s.prepare(0, t.data(), 6);
        for (int64_t p = 0; p < 6; ++p) s.note_written(p);
        s.commit(0, 6);
        CHECK(pool->n_free() == 2);
        CHECK(s.bytes_used() == 2 * pool->bytes_per_block());
        PagedCheckpoint c;
        s.save(6, 0, 0, c);  // block 1 (positions 4, 5) is the private write block: not held
        CHECK(pool->ref_count(s.table()[0]) == 2);
        CHECK(pool->ref_count(s.table()[1]) == 1);
        const std::vector<TokenId> more{7, 8, 9};
        s.prepare(6, more.data(), 3);
        for (int64_t p = 6; p < 9; ++p) s.note_written(p);
        s.commit(6, 3);
        CHECK(s.table().size() == 3);
        CHECK(pool->n_free() == 1);
        s.restore(6, c);
        CHECK(s.table().size() == 2);
        CHECK(pool->n_free() == 2);
        CHECK(pool->ref_count(s.table()[0]) == 1);
        CHECK(s.slot_positions()[5] == 5);
        CHECK(s.slot_positions()[6] == -1);
        // Below position 8 past 0 sinks: block 0 leaves; a sink in it would keep it.
        s.drop_blocks_below(8, 1);
        CHECK(s.table()[0] >= 0);
        s.drop_blocks_below(8, 0);
        CHECK(s.table()[0] == -1);
        CHECK(s.slot_positions()[0] == -1);
    }
    CHECK(pool->n_free() == 4);  // destroying the storage returns its blocks
}

TEST_CASE("paged: a second sequence adopts the blocks holding the same tokens", "[cache_storage][paged]") {
    constexpr int64_t B = 2;
    auto pool = std::make_shared<BlockPool>(1, 1, 2, B, 6);
    PagedStorage a(pool, 8), b(pool, 8);
    const std::vector<TokenId> t{3, 1, 4, 1, 5};
    a.prepare(0, t.data(), 5);
    a.commit(0, 5);
    CHECK(b.adopt_prefix(t, 4) == 4);
    CHECK(b.table() == std::vector<int32_t>(a.table().begin(), a.table().begin() + 2));
    CHECK(pool->ref_count(a.table()[0]) == 2);
    CHECK(b.blocks_needed(4, 1) == 1);  // block 2 is new for b
    PagedStorage moved = std::move(b);
    CHECK(moved.table().size() == 2);
    CHECK(b.table().empty());
}
