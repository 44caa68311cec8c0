// The 2 MiB-page arena the weight matrices live in: every piece aligned, pieces never overlap, memory
// stays readable and writable for the arena's life, and blocks larger than the default still work.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "huge_pages.h"

using namespace kvscope;

TEST_CASE("a huge-page block is zero-filled, 2 MiB aligned and at least as large as asked", "[huge_pages]") {
    const int64_t asked = GENERATE(int64_t(1), int64_t(3) << 20, (int64_t(2) << 20) + 1);
    HugePageBlock b(asked);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % uintptr_t(HugePageBlock::kPageBytes) == 0);
    CHECK(b.size() >= asked);
    CHECK(b.size() % HugePageBlock::kPageBytes == 0);
    for (int64_t i = 0; i < b.size(); i += 4093) CHECK(b.data()[i] == std::byte{0});
    b.data()[b.size() - 1] = std::byte{7};
    HugePageBlock moved(std::move(b));
    CHECK(moved.data()[moved.size() - 1] == std::byte{7});
    CHECK(b.data() == nullptr);
}

TEST_CASE("arena pieces are 64-byte aligned, disjoint and keep what was written", "[huge_pages]") {
    HugePageArena arena;
    CHECK(arena.reserved() == 0);
    // Sizes that cross block boundaries, including one larger than a default block.
    const std::vector<int64_t> sizes = {1, 63, 64, 1000, int64_t(20) << 20, int64_t(20) << 20, int64_t(40) << 20, 5};
    std::vector<std::byte*> pieces;
    int64_t asked = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        std::byte* p = arena.allocate(sizes[i]);
        CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
        std::memset(p, int(i + 1), size_t(sizes[i]));
        pieces.push_back(p);
        asked += sizes[i];
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
        INFO("piece " << i);
        const auto* p = reinterpret_cast<const unsigned char*>(pieces[i]);
        CHECK(p[0] == i + 1);
        CHECK(p[sizes[i] - 1] == i + 1);
        for (size_t j = 0; j < sizes.size(); ++j)  // [p_i, p_i + s_i) and [p_j, p_j + s_j) do not meet
            if (j != i) CHECK((pieces[i] + sizes[i] <= pieces[j] || pieces[j] + sizes[j] <= pieces[i]));
    }
    CHECK(arena.used() >= asked);
    CHECK(arena.used() < asked + 64 * int64_t(sizes.size()));
    CHECK(arena.reserved() >= arena.used());
}
