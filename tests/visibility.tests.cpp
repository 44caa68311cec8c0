// CacheWindow and EvictionFlags (cache/visibility.h): which keys a query sees, and the flags attention
// honours. The window rule is written out here ("q sees max(0, q-W+1) .. q, plus the first `sinks`").
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "cache/visibility.h"

using namespace kvscope;

TEST_CASE("window: visible keys, the oldest a query needs, the fill level", "[visibility]") {
    const CacheWindow none(0, 3);
    CHECK(none.sinks == 0);  // sinks count only with a window
    const CacheWindow w(4, 2);
    for (int64_t q = 0; q < 12; ++q) {
        CHECK(none.visible_keys(q).count() == q + 1);
        const int64_t lo = std::max<int64_t>(0, q - 3);
        CHECK(w.visible_from(q) == lo);
        CHECK(w.oldest_needed(q) == std::max<int64_t>(2, lo));
        CHECK(w.visible_keys(q).count() == (q + 1) - lo + std::min<int64_t>(2, lo));
    }
    CHECK(w.used(10, 100) == 5);   // 7, 8, 9 (10 is the query itself) + sinks 0, 1
    CHECK(w.used(10, 4) == 4);     // never more than the capacity
    CHECK(none.used(10, 100) == 10);
}

TEST_CASE("eviction flags: set, clear, count, per-slot save and load", "[visibility][eviction]") {
    EvictionFlags f(3, 5);
    CHECK_FALSE(f.any());
    CHECK_FALSE(f.test(1, 2));
    CHECK_FALSE(f.clear(1, 2));
    CHECK(f.set(1, 2));
    CHECK_FALSE(f.set(1, 2));
    CHECK(f.set(2, 2));
    CHECK(f.count() == 2);
    CHECK(f.row(1)[2] == 1);
    std::vector<uint8_t> saved;
    f.save_slot(2, saved);
    CHECK(saved == std::vector<uint8_t>{0, 1, 1});
    f.overwrite(1, 2);
    CHECK_FALSE(f.test(1, 2));
    CHECK(f.count() == 1);
    f.load_slot(2, saved.data());
    f.drop_dead([](int64_t) { return true; });
    CHECK(f.count() == 2);
    f.drop_dead([](int64_t s) { return s != 2; });  // the slot's position is gone: its flags go
    CHECK_FALSE(f.any());
    CHECK(f.set(0, 1));
    CHECK(f.all_set(0, 1, 2));
    CHECK_FALSE(f.all_set(0, 0, 2));
    f.reset();
    CHECK(f.count() == 0);
}

TEST_CASE("eviction flags: regrid lays the flags out for a new slot count", "[visibility][eviction]") {
    EvictionFlags f(2, 4);
    f.set(0, 1);
    f.set(1, 3);
    const std::vector<int64_t> positions{8, 5, 6, 7};  // slot -> position of a wrapped ring
    const std::vector<int64_t> e = f.entries([&](int64_t s) { return positions[size_t(s)]; });
    CHECK(e == std::vector<int64_t>{0, 5, 1, 7});
    f.regrid(9, e, [](int64_t p) { return p == 7 ? -1 : p; });  // position 7 is gone
    CHECK(f.count() == 1);
    CHECK(f.test(0, 5));
    EvictionFlags never(2, 4);
    never.regrid(9, {}, [](int64_t p) { return p; });
    CHECK_FALSE(never.any());
}
