#include "base/thread_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvscope {
namespace {

// The fork's whole state in one word, so a worker that wakes late can never run a task of a fork that
// is over: generation (16 bits) | number of tasks (24) | next task to claim (24).
constexpr uint64_t kField = (uint64_t(1) << 24) - 1;

// The pool whose task this thread is running (worker threads: their pool, always; a caller: during
// its parallel_for). A parallel_for on that same pool is then a nested call, run inline.
thread_local const ThreadPool* t_inside = nullptr;

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

void ThreadPool::claim(const char* who) {
    if (!in_use_.exchange(true, std::memory_order_acquire)) return;
    throw std::logic_error(std::string("ThreadPool::") + who +
                           " was called while another thread's parallel_for or set_threads was running on the "
                           "same pool: one caller at a time (the thread that steps sessions), see thread_pool.h");
}

void ThreadPool::set_threads(int n_threads) {
    if (t_inside == this)
        throw std::logic_error("ThreadPool::set_threads was called from inside a parallel_for task of the same "
                               "pool: resize only when no parallel_for is running, see thread_pool.h");
    claim("set_threads");
    if (n_threads != n_threads_) {
        stop();
        start(n_threads);
    }
    release();
}

void ThreadPool::start(int n_threads) {
    n_threads_ = std::max(1, n_threads);
    ranges_ = std::make_unique<Range[]>(size_t(n_threads_));
    quit_ = false;
    // Workers start from the generation current now, so a fork issued before a worker first runs is
    // still seen as new by it.
    const uint32_t current = generation_.load();
    for (int i = 1; i < n_threads_; ++i)
        workers_.emplace_back([this, current] {
            t_inside = this;
            worker_loop(current);
        });
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
            // Counted before the generation is checked again (both sequentially consistent): a fork
            // either sees this sleeper and wakes it, or bumped the generation before the check sees it.
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
            now = generation_.load(std::memory_order_acquire);
        }
        seen = now;
        if (quit_) return;
        run_tasks();
    }
}

void ThreadPool::parallel_for(int64_t n_tasks, TaskRef fn) {
    if (n_tasks <= 0) return;
    if (t_inside == this) {  // nested, from a task of this pool: inline (thread_pool.h)
        for (int64_t t = 0; t < n_tasks; ++t) fn(t);
        return;
    }
    fork(n_tasks, fn, nullptr);
}

namespace {

uint64_t pack_range(uint64_t front, uint64_t back) { return front | back << 32; }

// Takes items from the front of `left` (half of what is left, at least `chunk`) or from its back (up to
// `chunk`); false when nothing is left. The owner halves because every take is a locked instruction,
// which waits for all loads in flight: taking 32 KiB at a time cost a one-thread float32 SmolLM2-shape
// decode 12 %. Halving leaves as much untaken as the owner has in hand, so a thief still finds work.
bool take(std::atomic<uint64_t>& left, int64_t chunk, bool from_front, int64_t& begin, int64_t& end) {
    uint64_t v = left.load(std::memory_order_relaxed);
    for (;;) {
        const int64_t front = int64_t(v & 0xFFFFFFFFu), back = int64_t(v >> 32);
        if (front >= back) return false;
        begin = from_front ? front : std::max(front, back - chunk);
        end = from_front ? std::min(back, front + std::max(chunk, (back - front) / 2)) : back;
        const uint64_t next = from_front ? pack_range(uint64_t(end), uint64_t(back)) : pack_range(uint64_t(front), uint64_t(begin));
        if (left.compare_exchange_weak(v, next, std::memory_order_relaxed)) return true;
    }
}

}  // namespace

void ThreadPool::parallel_ranges(int64_t n_items, int64_t chunk, RangeRef fn) {
    if (n_items <= 0) return;
    chunk = std::max<int64_t>(1, chunk);
    const int64_t n_ranges = std::min<int64_t>(n_threads_, (n_items + chunk - 1) / chunk);
    // One call over everything: nested (inline), past the packed counters, or one range (no takes at all).
    if (t_inside == this || n_items > int64_t(0xFFFFFFFFu) || n_ranges == 1) {
        parallel_for(1, [&](int64_t) { fn(0, n_items); });
        return;
    }
    // Written after the one-caller check and before the fork publishes the tasks.
    auto split_items = [&] {
        for (int64_t r = 0; r < n_ranges; ++r)
            ranges_[size_t(r)].front_back.store(pack_range(uint64_t(n_items * r / n_ranges), uint64_t(n_items * (r + 1) / n_ranges)),
                                                std::memory_order_relaxed);
    };
    const CallRef<> split = split_items;
    fork(n_ranges, [&](int64_t r) {
        int64_t begin = 0, end = 0;
        while (take(ranges_[size_t(r)].front_back, chunk, true, begin, end)) fn(begin, end);
        for (int64_t i = 1; i < n_ranges; ++i) {
            std::atomic<uint64_t>& other = ranges_[size_t((r + i) % n_ranges)].front_back;
            while (take(other, chunk, false, begin, end)) fn(begin, end);
        }
    }, &split);
}

void ThreadPool::fork(int64_t n_tasks, TaskRef fn, const CallRef<>* before_fork) {
    // Checked on the serial path too, so a second caller is caught whatever the thread count.
    claim("parallel_for");
    struct Exit {  // fn throwing on this thread (a contract breach) still frees the pool for the report
        ThreadPool* pool;
        ~Exit() {
            t_inside = nullptr;
            pool->release();
        }
    } exit{this};
    t_inside = this;
    if (before_fork) (*before_fork)();
    if (n_threads_ == 1 || n_tasks == 1 || n_tasks > int64_t(kField)) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(t);
        return;
    }
    fn_ = &fn;
    done_.store(0, std::memory_order_relaxed);
    fork_ = (fork_ + 1) & 0xFFFF;
    cursor_.store((uint64_t(fork_) << 48) | (uint64_t(n_tasks) << 24), std::memory_order_release);
    // The caller is the only writer while it holds in_use_. Spinning workers see the new generation; a
    // sleeping one is woken under the mutex, so one between its count and its wait cannot miss the fork.
    generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        wake_.notify_all();
    }
    // The caller works too, and waits only for tasks, not for workers: a worker the OS has not
    // scheduled yet simply finds nothing left to claim.
    run_tasks();
    while (done_.load(std::memory_order_acquire) != n_tasks) cpu_relax();
}

}  // namespace kvscope
