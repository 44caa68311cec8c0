#include "thread_pool.h"

#include <algorithm>

namespace kvscope {
namespace {

// The fork's whole state in one word, so a worker that wakes late can never run a task of a fork that
// is over: generation (16 bits) | number of tasks (24) | next task to claim (24).
constexpr uint64_t kField = (uint64_t(1) << 24) - 1;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace

int default_thread_count() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool& ThreadPool::global() {
    static ThreadPool pool(default_thread_count());
    return pool;
}

ThreadPool::ThreadPool(int n_threads) { start(n_threads); }
ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::set_threads(int n_threads) {
    if (n_threads == n_threads_) return;
    stop();
    start(n_threads);
}

void ThreadPool::start(int n_threads) {
    n_threads_ = std::max(1, n_threads);
    quit_ = false;
    // Workers start from the generation current now, so a fork issued before a worker first runs is
    // still seen as new by it.
    const uint32_t current = generation_.load();
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, current] { worker_loop(current); });
}

void ThreadPool::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        quit_ = true;
        generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
}

void ThreadPool::run_tasks() {
    uint64_t c = cursor_.load(std::memory_order_acquire);
    for (;;) {
        const uint64_t n = (c >> 24) & kField, next = c & kField;
        if (next >= n) return;
        if (!cursor_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) continue;
        (*fn_)(int64_t(next));
        done_.fetch_add(1, std::memory_order_release);
        c = cursor_.load(std::memory_order_acquire);
    }
}

void ThreadPool::worker_loop(uint32_t seen) {
    for (;;) {
        // Spin a little: the next fork usually comes within microseconds during a forward pass.
        uint32_t now = seen;
        for (int spin = 0; spin < 20000 && (now = generation_.load(std::memory_order_acquire)) == seen; ++spin)
            cpu_relax();
        if (now == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return generation_.load() != seen; });
            now = generation_.load(std::memory_order_acquire);
        }
        seen = now;
        if (quit_) return;
        run_tasks();
    }
}

void ThreadPool::parallel_for(int64_t n_tasks, TaskRef fn) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1 || n_tasks > int64_t(kField)) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(t);
        return;
    }
    fn_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    fork_ = (fork_ + 1) & 0xFFFF;
    cursor_.store((uint64_t(fork_) << 48) | (uint64_t(n_tasks) << 24), std::memory_order_release);
    {
        // Under the mutex, so a worker between its last spin check and its wait cannot miss the fork.
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    // The caller works too, and waits only for tasks, not for workers: a worker the OS has not
    // scheduled yet simply finds nothing left to claim.
    run_tasks();
    while (done_.load(std::memory_order_acquire) != n_tasks) cpu_relax();
}

}  // namespace kvscope
