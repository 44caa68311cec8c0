#include "kernels/machine_probe.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/clock.h"
#include "base/huge_pages.h"
#include "base/thread_pool.h"

#include "kernels/simd.h"
#if !defined(__AVX512F__) && defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kvscope {
namespace {

// n floats, 1.0 each, in 2 MiB pages (the same memory the engine keeps its weight matrices in).
class HugeBuffer {
public:
    explicit HugeBuffer(int64_t n) : block_(std::max<int64_t>(n, 1) * int64_t(sizeof(float))) {
        float* p = reinterpret_cast<float*>(block_.data());
        std::fill(p, p + n, 1.0f);
    }
    const float* data() const { return reinterpret_cast<const float*>(block_.data()); }

private:
    HugePageBlock block_;
};

// One register of floats as a vector value: 16 with AVX-512, 8 otherwise (GCC keeps wider vector values
// than the registers in memory, which turns these loops into stack traffic). They live inside this file
// only, so the ABI of passing such values (what -Wpsabi warns about) never matters.
#pragma GCC diagnostic ignored "-Wpsabi"
#if defined(__AVX512F__)
constexpr int kVecFloats = 16;
#else
constexpr int kVecFloats = 8;
#endif
using Vec = float __attribute__((vector_size(kVecFloats * sizeof(float))));
inline Vec load_vec(const float* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline float lane_sum(Vec v) {
    float s = 0;
    for (int i = 0; i < kVecFloats; ++i) s += v[i];
    return s;
}

// Threads' parts of n floats, each read as eight interleaved streams of one vector per step.
float read_streams(const float* p, int64_t begin, int64_t end) {
    constexpr int kStreams = 8;
    const int64_t len = (end - begin) / (kStreams * kVecFloats) * kVecFloats;  // floats per stream, whole vectors
    Vec acc[kStreams] = {};
    for (int64_t i = 0; i < len; i += kVecFloats)
        for (int s = 0; s < kStreams; ++s) acc[s] += load_vec(p + begin + s * len + i);
    float sum = 0;
    for (Vec a : acc) sum += lane_sum(a);
    for (int64_t i = begin + kStreams * len; i < end; ++i) sum += p[i];
    return sum;
}

// Rows [r0, r1) of y = W·x for W (rows, K), K a multiple of the vector: four rows at a time.
float gemv_rows(const float* w, const float* x, int64_t K, int64_t r0, int64_t r1) {
    float checksum = 0;
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        Vec a0 = {}, a1 = {}, a2 = {}, a3 = {};
        const float* row = w + r * K;
        for (int64_t k = 0; k < K; k += kVecFloats) {
            const Vec xv = load_vec(x + k);
            a0 += load_vec(row + k) * xv;
            a1 += load_vec(row + K + k) * xv;
            a2 += load_vec(row + 2 * K + k) * xv;
            a3 += load_vec(row + 3 * K + k) * xv;
        }
        checksum += lane_sum(a0 + a1 + a2 + a3);
    }
    for (; r < r1; ++r) {
        Vec a = {};
        for (int64_t k = 0; k < K; k += kVecFloats) a += load_vec(w + r * K + k) * load_vec(x + k);
        checksum += lane_sum(a);
    }
    return checksum;
}

// Each cache sysfs lists for cpu0, as (level, type, bytes).
struct CacheEntry {
    int level = 0;
    std::string type;  // "Data", "Instruction" or "Unified"
    int64_t bytes = 0;
};
std::vector<CacheEntry> cpu0_caches() {
    std::vector<CacheEntry> caches;
    std::error_code ec;
    const std::filesystem::path dir = "/sys/devices/system/cpu/cpu0/cache";
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        CacheEntry cache;
        std::ifstream size(entry.path() / "size"), level(entry.path() / "level"), type(entry.path() / "type");
        std::string unit;
        if (!(size >> cache.bytes)) continue;
        size >> unit;  // "K" or "M" (sysfs writes e.g. 32768K)
        if (!unit.empty() && unit[0] == 'K') cache.bytes <<= 10;
        else if (!unit.empty() && unit[0] == 'M') cache.bytes <<= 20;
        level >> cache.level;
        type >> cache.type;
        caches.push_back(cache);
    }
    return caches;
}

}  // namespace

int64_t last_level_cache_bytes() {
    int64_t largest = 0;
    for (const CacheEntry& cache : cpu0_caches()) largest = std::max(largest, cache.bytes);
    return largest;
}

// Where sysfs lists no caches (an EPYC Zen 5 VM, 2026-12-02), the level-1 data cache is what glibc reads off
// cpuid; not the last level: cpuid gave the whole socket's there (508 MiB), where sysfs on another VM of that
// model listed 32 MiB.
int64_t level1_data_cache_bytes() {
    const std::vector<CacheEntry> caches = cpu0_caches();
    for (const CacheEntry& cache : caches)
        if (cache.level == 1 && cache.type == "Data") return cache.bytes;
    const long from_cpuid = caches.empty() ? sysconf(_SC_LEVEL1_DCACHE_SIZE) : 0;
    return std::max<int64_t>(from_cpuid, 0);
}

double measure_read_bandwidth(int64_t bytes, int threads, ReadKernel kernel) {
    ThreadPool::global().set_threads(threads);
    constexpr int64_t kGemvColumns = 1024;
    int64_t n = bytes / int64_t(sizeof(float));
    if (kernel == ReadKernel::Gemv) n = std::max<int64_t>(n / kGemvColumns, 1) * kGemvColumns;
    // On 2 MiB pages where the kernel grants them: the page cache maps a model file that way, and on
    // 4 KiB pages this probe read up to 15 % slower than decode streaming that file.
    HugeBuffer buffer(n);
    const std::vector<float> x(size_t(kGemvColumns), 0.5f);
    std::vector<float> sums(size_t(threads) * 16, 0.0f);
    double best = 1e30;
    for (int pass = 0; pass < 5; ++pass) {
        const double t0 = seconds_now();
        if (kernel == ReadKernel::Sequential) {
            ThreadPool::global().parallel_for(threads, [&](int64_t t) {
                const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
                const float* p = buffer.data();
#if defined(__AVX512F__)
                // Four independent accumulators keep several loads in flight.
                __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                int64_t i = begin;
                for (; i + 64 <= end; i += 64) {
                    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
                    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
                    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
                    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
                }
                float s = reduce_add(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
                for (; i < end; ++i) s += p[i];
#elif defined(__AVX2__)
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                int64_t i = begin;
                for (; i + 32 <= end; i += 32) {
                    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
                    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
                    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
                    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
                }
                alignas(32) float lanes[8];
                _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
                float s = 0;
                for (float l : lanes) s += l;
                for (; i < end; ++i) s += p[i];
#else
                float s = 0;
                for (int64_t i = begin; i < end; ++i) s += p[i];
#endif
                sums[size_t(t) * 16] = s;  // keeps the loads from being optimised away
            });
        } else if (kernel == ReadKernel::Streams) {
            ThreadPool::global().parallel_for(threads, [&](int64_t t) {
                sums[size_t(t) * 16] = read_streams(buffer.data(), n * t / threads, n * (t + 1) / threads);
            });
        } else {
            const int64_t rows = n / kGemvColumns;
            ThreadPool::global().parallel_for(threads, [&](int64_t t) {
                sums[size_t(t) * 16] =
                    gemv_rows(buffer.data(), x.data(), kGemvColumns, rows * t / threads, rows * (t + 1) / threads);
            });
        }
        best = std::min(best, seconds_now() - t0);
    }
    return double(n) * sizeof(float) / best / 1e9;
}

ReadProbe probe_read_bandwidth(int64_t bytes, int threads) {
    ReadProbe p;
    p.sequential = measure_read_bandwidth(bytes, threads, ReadKernel::Sequential);
    p.streams = measure_read_bandwidth(bytes, threads, ReadKernel::Streams);
    p.gemv = measure_read_bandwidth(bytes, threads, ReadKernel::Gemv);
    return p;
}

double measure_fma_peak(int threads) {
    ThreadPool::global().set_threads(threads);
    constexpr int64_t kIterations = 20'000'000;
    std::vector<float> out(size_t(threads) * 16, 0.0f);
    double best = 1e30;
    for (int pass = 0; pass < 3; ++pass) {
        const double t0 = seconds_now();
        ThreadPool::global().parallel_for(threads, [&](int64_t t) {
#if defined(__AVX512F__)
            // Twelve independent chains cover the FMA latency on two ports.
            __m512 a[12];
            for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(float(j) * 1e-3f);
            const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
            for (int64_t i = 0; i < kIterations / 12; ++i)
                for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
            __m512 s = a[0];
            for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
            out[size_t(t) * 16] = reduce_add(s);
#elif defined(__AVX2__) && defined(__FMA__)
            __m256 a[12];
            for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(float(j) * 1e-3f);
            const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
            for (int64_t i = 0; i < kIterations / 12; ++i)
                for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
            __m256 s = a[0];
            for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, s);
            out[size_t(t) * 16] = lanes[0] + lanes[7];
#else
            float a[8] = {};
            for (int64_t i = 0; i < kIterations; ++i)
                for (float& x : a) x = x * 0.999999f + 1e-7f;
            out[size_t(t) * 16] = a[0];
#endif
        });
        best = std::min(best, seconds_now() - t0);
    }
#if defined(__AVX512F__)
    const double flops_per_thread = double(kIterations / 12 * 12) * 16 * 2;
#elif defined(__AVX2__) && defined(__FMA__)
    const double flops_per_thread = double(kIterations / 12 * 12) * 8 * 2;
#else
    const double flops_per_thread = double(kIterations) * 8 * 2;
#endif
    return flops_per_thread * threads / best / 1e9;
}

}  // namespace kvscope
