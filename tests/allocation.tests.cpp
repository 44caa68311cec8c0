// The decode path allocates nothing: every buffer a cached decode step needs (workspace, cache,
// sampler scratch, the reused latest record) exists before the step. A counting global operator new,
// active only inside the measured region, checks it.
#include <catch2/catch.hpp>

// GCC sees malloc/free inside a replaced operator new/delete as a mismatched pair; it is the point here.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "run/session.h"
#include "test_models.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

// AddressSanitizer owns operator new/delete itself; replacing them there mixes its allocator with ours.
// The count is only meaningful (and only taken) in builds without it.
#if defined(__SANITIZE_ADDRESS__)
#define KVSCOPE_COUNT_ALLOCATIONS 0
#else
#define KVSCOPE_COUNT_ALLOCATIONS 1
void* operator new(std::size_t n) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// Over-aligned types (alignas(64) buffers) come through the aligned forms.
void* operator new(std::size_t n, std::align_val_t a) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    const std::size_t align = static_cast<std::size_t>(a);
    if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif

using namespace kvscope;
using namespace kvtest;

TEST_CASE("a cached decode step allocates nothing (history off, recording off)", "[allocation]") {
    if (!KVSCOPE_COUNT_ALLOCATIONS) {
        WARN("allocations are not counted under AddressSanitizer");
        return;
    }
    const int threads = GENERATE(1, 2);
    ThreadPool::global().set_threads(threads);
    FixtureSpec spec;
    const FixtureModel fm = write_fixture(work_dir("allocation") / ("model" + std::to_string(threads)), spec);
    auto model = Model::load(fm.dir.string());
    SessionOptions options;
    options.history = false;
    options.record = false;
    options.max_new_tokens = 12;
    options.window = GENERATE(0, 3);
    options.sampling.temperature = GENERATE(0.0, 0.8);
    options.sampling.top_k = 5;
    // Teacher forcing (the cache lab's mode) for the first 6 tokens: forced and sampled steps are counted.
    if (GENERATE(false, true)) options.forced_tokens = {7, 8, 9, 10, 11, 12};
    Session session(model, options);
    session.set_prompt({1, 2, 3, 4});
    session.step();         // prefill
    session.step(Phase::Decode);  // warm-up: first use of every reused buffer
    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 8; ++i) session.step(Phase::Decode);
    g_counting = false;
    INFO("threads " << threads << ", window " << options.window << ", temperature " << options.sampling.temperature);
    CHECK(g_allocations.load() == 0);
    REQUIRE(latest(session) != nullptr);
    CHECK(latest(session)->prediction.chosen.has_value());
    CHECK(session.parts().generated.size() == 10);
    if (!options.forced_tokens.empty())
        CHECK(std::vector<TokenId>(session.parts().generated.begin(), session.parts().generated.begin() + 6) == options.forced_tokens);

    // The same steps with history on do allocate (a record per step): the counter does see allocations.
    options.history = true;
    Session with_history(model, options);
    with_history.set_prompt({1, 2, 3, 4});
    with_history.step();
    g_allocations = 0;
    g_counting = true;
    with_history.step(Phase::Decode);
    g_counting = false;
    CHECK(g_allocations.load() > 0);
    CHECK(with_history.parts().generated == std::vector<TokenId>(session.parts().generated.begin(), session.parts().generated.begin() + 2));
}

TEST_CASE("decode on K-quant blocks allocates nothing once x's Q8_K buffer exists", "[allocation]") {
    // The K formats quantize x into a per-thread buffer (matmul_nk.cpp's quantized_x) that grows once: a
    // decode after the first allocates nothing, with a Q8_0 matrix in the same fork.
    if (!KVSCOPE_COUNT_ALLOCATIONS) {
        WARN("allocations are not counted under AddressSanitizer");
        return;
    }
    const int threads = GENERATE(1, 2);
    ThreadPool::global().set_threads(threads);
    const int64_t K = 512, N = 64;
    std::vector<std::byte> q4_k(size_t(N * K / 256 * block_layout(BlockFormat::Q4_K).bytes), std::byte{0x11});
    std::vector<std::byte> q8_0(size_t(N * K / 32 * block_layout(BlockFormat::Q8_0).bytes), std::byte{0x01});
    std::vector<float> x(static_cast<size_t>(K), 0.5f), y0(static_cast<size_t>(N)), y1(static_cast<size_t>(N));
    const MatmulTarget targets[2] = {{y0.data(), WeightRef(BlockMatrix{BlockFormat::Q4_K, q4_k.data()}), nullptr, N},
                                     {y1.data(), WeightRef(BlockMatrix{BlockFormat::Q8_0, q8_0.data()}), nullptr, N}};
    matmul_nk_shared(x.data(), 1, K, targets);  // warm-up
    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 5; ++i) matmul_nk_shared(x.data(), 1, K, targets);
    g_counting = false;
    INFO("threads " << threads);
    CHECK(g_allocations.load() == 0);
    CHECK(std::isfinite(y0[0]));
    CHECK(y0[0] != 0.0f);  // 0x11 bytes: d = dmin = float16 0x1111, scales and nibbles nonzero
}
