#pragma once
// What this machine can do, measured, so benchmarks can print bounds instead of guesses; and the caches' sizes, which
// the block kernels fit their requests for the bytes ahead to (read_ahead.h).
//
//   last_level_cache_bytes()                  the largest cache sysfs lists for cpu0 (0: not known). A
//                                             model that fits in it is partly served from there
//   level1_data_cache_bytes()                 cpu0's level-1 data cache as sysfs lists it; where it lists
//                                             none, as cpuid gives it (0: not known)
//   measure_read_bandwidth(bytes, threads, k) GB/s reading a fresh buffer of `bytes` with all threads (best
//                                             of several passes; a buffer smaller than the last-level cache
//                                             is partly served from there, as a model of that size would be)
//                                             with read kernel k:
//                                               Sequential  one stream per thread, summed
//                                               Streams     eight interleaved streams per thread
//                                               Gemv        y = W·x, W (rows, 1024) row-major, rows split
//                                                           between threads, four at a time: a plain
//                                                           OpenMP-style gemv, decode's access pattern
//   probe_read_bandwidth(bytes, threads)      all three kernels; best() is the bandwidth a bound may claim
//   measure_fma_peak(threads)                 GFLOP/s of independent fused multiply-adds in registers
//                                             (2 flops each), all threads busy
#include <algorithm>
#include <cstdint>

namespace kvscope {

enum class ReadKernel { Sequential, Streams, Gemv };

struct ReadProbe {
    double sequential = 0, streams = 0, gemv = 0;  // GB/s
    double best() const { return std::max({sequential, streams, gemv}); }
};

int64_t last_level_cache_bytes();
int64_t level1_data_cache_bytes();
double measure_read_bandwidth(int64_t bytes, int threads, ReadKernel kernel = ReadKernel::Sequential);
ReadProbe probe_read_bandwidth(int64_t bytes, int threads);
double measure_fma_peak(int threads);

}  // namespace kvscope
