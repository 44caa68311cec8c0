#pragma once
// A small fork-join pool for the numeric kernels. The calling thread works too; idle workers spin
// briefly before sleeping, because a decode step forks ~6 times per layer and a sleep/wake per fork
// would cost more than the work.
//
//   ThreadPool::global()              the process-wide pool (size: set_threads, default = all cores)
//   set_threads(n)                    resize; n >= 1
//   TaskRef                           a non-owning reference to a callable (no allocation, unlike
//                                     std::function: the decode path must not allocate)
//   parallel_for(n_tasks, fn)         fn(task) for task in [0, n_tasks), spread over the threads; returns
//                                     when all are done. Which thread runs a task never changes results:
//                                     kernels split work by output element, never inside a sum.
//   parallel_ranges(n, chunk, fn)     fn(begin, end) over [0, n). Each thread walks one contiguous range
//                                     front to back (in pieces of half what is left, at least `chunk`),
//                                     then takes pieces of at most `chunk` from the back of ranges not yet
//                                     done: every thread reads one long stream, and none waits long for
//                                     a slower one. Every item once.
//
// Threads: who may call what (checked; a violation throws std::logic_error naming the rule)
//   parallel_for    (and parallel_ranges, the same rules) one caller at a time per pool. In the app that is the thread that steps sessions:
//                   the CLI's main thread, or the GUI Controller's worker thread. A second thread calling
//                   while a call is running is a programmer error: the pool has one fork state (fn, task
//                   cursor, done count), so two forks would run each other's tasks.
//                   From inside a task (nested) it is allowed and runs the inner tasks inline on the task's
//                   thread, one after the other: the same results, no extra parallelism. No code does
//                   that today; the rule keeps a kernel called from a task correct.
//                   fn must not throw (a task on a worker thread has nowhere to report it).
//   set_threads     only when no parallel_for is running on this pool, and never from inside a task.
//   n_threads       any thread.
// The check is one uncontended atomic exchange per call (decode forks ~6 times per layer per step).
// An exception rather than an abort, so a test can show a violation is caught without forking a
// process, and the call already running is left untouched. Nothing catches std::logic_error on its own:
// the CLI's main and the GUI Controller report it like any failed command, with this sentence.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <mutex>
#include <thread>
#include <vector>

namespace kvscope {

template <class... Args>
class CallRef {
public:
    template <class F>
    CallRef(F&& f)  // NOLINT: implicit, so a lambda can be passed directly; it outlives the call
        : object_(const_cast<void*>(static_cast<const void*>(&f))),
          call_([](void* o, Args... args) { (*static_cast<std::remove_reference_t<F>*>(o))(args...); }) {}
    void operator()(Args... args) const { call_(object_, args...); }

private:
    void* object_;
    void (*call_)(void*, Args...);
};
using TaskRef = CallRef<int64_t>;            // fn(task)
using RangeRef = CallRef<int64_t, int64_t>;  // fn(begin, end)

class ThreadPool {
public:
    static ThreadPool& global();
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    void set_threads(int n_threads);
    int n_threads() const { return n_threads_; }
    void parallel_for(int64_t n_tasks, TaskRef fn);
    void parallel_ranges(int64_t n_items, int64_t chunk, RangeRef fn);

private:
    struct alignas(64) Range {           // front (low 32 bits) and back (high 32) of what is left
        std::atomic<uint64_t> front_back{0};
    };
    void fork(int64_t n_tasks, TaskRef fn, const CallRef<>* before_fork);
    void start(int n_threads);
    void stop();
    void worker_loop(uint32_t seen);
    void run_tasks();

    void claim(const char* who);         // take in_use_, or throw the rule `who` broke
    void release() { in_use_.store(false, std::memory_order_release); }

    // Which cache line a field sits on is part of the design: a worker spins reading generation_, and
    // the caller's own writes (in_use_, the mutex) on that line made it bounce between the cores at every
    // fork. The caller's fields come first; then one line the caller publishes per fork and the workers
    // read, then the claimed cursor and the done count, each on its own line.
    int n_threads_ = 1;
    std::atomic<bool> in_use_{false};    // a parallel_for or set_threads is running (the one-caller rule)
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<int> sleepers_{0};       // workers waiting on wake_, or about to (the fork wakes them only then)
    uint32_t fork_ = 0;
    alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per fork, by the caller (or stop)
    std::atomic<bool> quit_{false};
    const TaskRef* fn_ = nullptr;
    std::unique_ptr<Range[]> ranges_;     // parallel_ranges' state, one per thread
    alignas(64) std::atomic<uint64_t> cursor_{0};  // fork id | n_tasks | next task (thread_pool.cpp)
    alignas(64) std::atomic<int64_t> done_{0};     // tasks finished in the current fork
};

int default_thread_count();  // hardware threads, at least 1

}  // namespace kvscope
