#pragma once
// Repeated measurements as min / median / max, shared by the benchmarks (cli_bench, cli_bench_sharing) and
// their printers (bench_report, bench_sharing_report).
//
//   stats_of(values)                   min / median / max of measurements taken elsewhere
//   repeat(n, measure)                 run measure() n times, keep min / median / max
//   JsonOut j = s;                     {"min": .., "median": .., "max": ..} (to_json below)
//   stats_text(s, fmt, scale)          "min / median / max", each printed with fmt after * scale
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "io/json_write.h"

namespace kvscope {

struct Stats {
    double min = 0, median = 0, max = 0;
};

inline Stats stats_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v.front(), v[v.size() / 2], v.back()};
}

template <class F>
Stats repeat(int64_t n, F&& measure) {
    std::vector<double> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(measure());
    return stats_of(std::move(v));
}

inline void to_json(JsonOut& j, const Stats& s) { j = {{"min", s.min}, {"median", s.median}, {"max", s.max}}; }

inline std::string stats_text(const Stats& s, const char* fmt = "%.1f", double scale = 1.0) {
    char a[32], b[32], c[32];
    std::snprintf(a, sizeof a, fmt, s.min * scale);
    std::snprintf(b, sizeof b, fmt, s.median * scale);
    std::snprintf(c, sizeof c, fmt, s.max * scale);
    return std::string(a) + " / " + b + " / " + c;
}

}  // namespace kvscope
