// ThreadPool: every task runs exactly once, and the calling contract in thread_pool.h is checked: a
// second thread calling parallel_for (or set_threads) while a call is running throws std::logic_error
// and leaves the running call intact; a nested parallel_for from inside a task runs inline.
//
// The contract check throws instead of aborting so these tests run in-process: Catch2 2.13 has no death
// tests, and fork() from a process with running pool threads gives a child without those threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "base/thread_pool.h"

using namespace kvscope;

namespace {

// Runs parallel_for on `pool` from a second thread with tasks that wait until release() is called, so
// the test knows a call is in progress while it acts. Each task counts itself once.
class HeldFork {
public:
    HeldFork(ThreadPool& pool, int64_t n_tasks) : counts_(size_t(n_tasks)) {
        for (auto& c : counts_) c = 0;
        thread_ = std::thread([this, &pool, n_tasks] {
            pool.parallel_for(n_tasks, [&](int64_t t) {
                entered_.store(true, std::memory_order_release);
                while (!go_.load(std::memory_order_acquire)) std::this_thread::yield();
                counts_[size_t(t)].fetch_add(1, std::memory_order_relaxed);
            });
        });
        while (!entered_.load(std::memory_order_acquire)) std::this_thread::yield();
    }
    // Lets the tasks finish and returns how many ran exactly once.
    int64_t release() {
        go_.store(true, std::memory_order_release);
        thread_.join();
        int64_t once = 0;
        for (auto& c : counts_) once += c.load() == 1 ? 1 : 0;
        return once;
    }

private:
    std::vector<std::atomic<int>> counts_;
    std::atomic<bool> entered_{false}, go_{false};
    std::thread thread_;
};

}  // namespace

TEST_CASE("parallel_for runs every task exactly once") {
    const int n_threads = GENERATE(1, 2, 4);
    const int64_t n_tasks = GENERATE(int64_t(1), int64_t(3), int64_t(1000));
    ThreadPool pool(n_threads);
    for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> counts(static_cast<size_t>(n_tasks));
        for (auto& c : counts) c = 0;
        pool.parallel_for(n_tasks, [&](int64_t t) { counts[size_t(t)].fetch_add(1, std::memory_order_relaxed); });
        for (int64_t t = 0; t < n_tasks; ++t) REQUIRE(counts[size_t(t)].load() == 1);
    }
}

TEST_CASE("a second thread calling parallel_for during a call is refused; the running call completes") {
    const int n_threads = GENERATE(1, 2);  // also on the serial path: the rule does not depend on the size
    ThreadPool pool(n_threads);
    HeldFork held(pool, 4);
    int64_t ran_by_second = 0;
    try {
        pool.parallel_for(4, [&](int64_t) { ++ran_by_second; });
        FAIL("the second parallel_for was not refused");
    } catch (const std::logic_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("one caller at a time"));
    }
    CHECK(ran_by_second == 0);
    CHECK(held.release() == 4);
    // The pool is free again: the refused call left nothing behind.
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, [&](int64_t t) { sum.fetch_add(t); });
    CHECK(sum.load() == 99 * 100 / 2);
}

TEST_CASE("set_threads during a parallel_for is refused, and from inside a task too") {
    ThreadPool pool(2);
    {
        HeldFork held(pool, 2);
        CHECK_THROWS_AS(pool.set_threads(3), std::logic_error);
        CHECK_THROWS_AS(pool.set_threads(2), std::logic_error);  // even a no-op resize: the rule is about when
        CHECK(held.release() == 2);
    }
    std::atomic<int> refused{0};
    pool.parallel_for(2, [&](int64_t) {
        try {
            pool.set_threads(1);
        } catch (const std::logic_error&) {
            refused.fetch_add(1);
        }
    });
    CHECK(refused.load() == 2);
    CHECK(pool.n_threads() == 2);
    pool.set_threads(3);  // allowed once nothing runs
    CHECK(pool.n_threads() == 3);
}

TEST_CASE("a nested parallel_for from inside a task runs its tasks inline") {
    ThreadPool pool(GENERATE(1, 3));
    constexpr int64_t kOuter = 8, kInner = 5;
    std::vector<std::atomic<int>> counts(size_t(kOuter * kInner));
    for (auto& c : counts) c = 0;
    std::atomic<int> moved{0};  // inner tasks that ran on another thread than their outer task (Catch2's
                                // CHECK is not thread-safe, so tasks only count)
    pool.parallel_for(kOuter, [&](int64_t o) {
        const std::thread::id outer_thread = std::this_thread::get_id();
        pool.parallel_for(kInner, [&](int64_t i) {
            if (std::this_thread::get_id() != outer_thread) moved.fetch_add(1);
            counts[size_t(o * kInner + i)].fetch_add(1, std::memory_order_relaxed);
        });
    });
    CHECK(moved.load() == 0);
    for (auto& c : counts) CHECK(c.load() == 1);
}

TEST_CASE("two pools are independent: each has its own caller") {
    ThreadPool a(2), b(2);
    HeldFork held(a, 2);
    std::atomic<int64_t> n{0};
    b.parallel_for(10, [&](int64_t) { n.fetch_add(1); });  // a different pool: no conflict
    CHECK(n.load() == 10);
    CHECK(held.release() == 2);
}

TEST_CASE("parallel_ranges runs every item exactly once, in non-empty pieces") {
    const int n_threads = GENERATE(1, 2, 4);
    const int64_t n_items = GENERATE(int64_t(1), int64_t(7), int64_t(1000));
    const int64_t chunk = GENERATE(int64_t(1), int64_t(3), int64_t(64), int64_t(5000));
    ThreadPool pool(n_threads);
    for (int round = 0; round < 20; ++round) {
        std::vector<std::atomic<int>> counts(static_cast<size_t>(n_items));
        for (auto& c : counts) c = 0;
        std::atomic<int> bad_pieces{0};
        pool.parallel_ranges(n_items, chunk, [&](int64_t begin, int64_t end) {
            if (begin < 0 || end > n_items || end <= begin) bad_pieces.fetch_add(1);
            for (int64_t i = std::max<int64_t>(0, begin); i < std::min(end, n_items); ++i)
                counts[size_t(i)].fetch_add(1, std::memory_order_relaxed);
        });
        REQUIRE(bad_pieces.load() == 0);
        for (int64_t i = 0; i < n_items; ++i) REQUIRE(counts[size_t(i)].load() == 1);
    }
}

TEST_CASE("parallel_ranges on one thread is a single call over everything") {
    ThreadPool pool(1);
    std::vector<std::pair<int64_t, int64_t>> pieces;
    pool.parallel_ranges(1000, 7, [&](int64_t begin, int64_t end) { pieces.emplace_back(begin, end); });
    REQUIRE(pieces.size() == 1);
    CHECK(pieces[0] == std::make_pair(int64_t(0), int64_t(1000)));
}

TEST_CASE("parallel_ranges: a thread done with its own range takes pieces from the end of a slow one") {
    // The first half's pieces are slow. Whichever thread walks it from the front, the other finishes
    // the fast half and then runs the slow half's last pieces.
    ThreadPool pool(2);
    constexpr int64_t kItems = 64;
    std::vector<std::atomic<int>> counts(kItems);
    std::vector<std::thread::id> ran_by(kItems);
    for (auto& c : counts) c = 0;
    pool.parallel_ranges(kItems, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            if (i < kItems / 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            ran_by[size_t(i)] = std::this_thread::get_id();
            counts[size_t(i)].fetch_add(1);
        }
    });
    for (int64_t i = 0; i < kItems; ++i) REQUIRE(counts[size_t(i)].load() == 1);
    CHECK(ran_by[0] != ran_by[kItems / 2 - 1]);  // the slow half's front and back: two threads
}

TEST_CASE("parallel_ranges from inside a task runs inline, and a second caller is refused") {
    ThreadPool pool(2);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(2, [&](int64_t) {
        pool.parallel_ranges(10, 3, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) sum.fetch_add(i);
        });
    });
    CHECK(sum.load() == 2 * 45);
    HeldFork held(pool, 2);
    CHECK_THROWS_WITH(pool.parallel_ranges(10, 3, [](int64_t, int64_t) {}), Catch::Contains("one caller at a time"));
    CHECK(held.release() == 2);
}
