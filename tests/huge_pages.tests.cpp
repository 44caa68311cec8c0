// The 2 MiB-page arena the weight matrices live in: every piece aligned, pieces never overlap, memory
// stays readable and writable for the arena's life, and blocks larger than the default still work.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/huge_pages.h"

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

TEST_CASE("streamed arrays of 2 MiB or more start on a 2 MiB boundary, smaller ones on 64 bytes", "[huge_pages]") {
    const size_t n = GENERATE(size_t(1), size_t(1000), (size_t(2) << 20) / 4 - 1, (size_t(2) << 20) / 4, size_t(3) << 20);
    INFO(n << " floats");
    const uintptr_t align = n * sizeof(float) >= (size_t(2) << 20) ? uintptr_t(HugePageBlock::kPageBytes) : 64;
    HugePageVector<float> v(n);
    CHECK(reinterpret_cast<uintptr_t>(v.data()) % align == 0);
    for (size_t i = 0; i < n; i += 4093) CHECK(v[i] == 0.0f);
    v.back() = 2.5f;
    HugePageVector<float> copy = v;
    CHECK(copy.back() == 2.5f);
    CHECK(copy.data() != v.data());
    StreamedArray<uint16_t> raw = make_streamed_array<uint16_t>(2 * n);
    CHECK(reinterpret_cast<uintptr_t>(raw.get()) % align == 0);
    raw[2 * n - 1] = 9;  // the whole array is writable
    CHECK(raw[2 * n - 1] == 9);
}
