#pragma once
// What this machine can do, measured, so benchmarks can print bounds instead of guesses.
//
//   measure_read_bandwidth(bytes, threads)   GB/s reading a fresh buffer of `bytes` with all threads
//                                            (best of several passes over it; a buffer smaller than the
//                                            last-level cache is partly served from there, as a model of
//                                            that size would be)
//   measure_fma_peak(threads)                GFLOP/s of independent fused multiply-adds in registers
//                                            (2 flops each), all threads busy
#include <cstdint>

namespace kvscope {

double measure_read_bandwidth(int64_t bytes, int threads);
double measure_fma_peak(int threads);

}  // namespace kvscope
