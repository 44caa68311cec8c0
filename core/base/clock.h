#pragma once
// Wall-clock seconds from a monotonic clock, for step timings, progress and benchmarks.
#include <chrono>

namespace kvscope {

inline double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kvscope
