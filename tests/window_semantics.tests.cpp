// The sliding window kvscope implements vs the shift-before-write cache of the GPT-2 walkthrough.
// The walkthrough's cache is simulated here literally, as a list of cached positions: shift out the
// overflow, append the chunk, then mask with offset = cached - new. Counting what each query loses
// against a true window gives the independent answer shift_cache_hidden_pairs() must match.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/rotary.h"
#include "run/trace.h"

namespace {

// Pairs (query, key) with key inside the query's true window that the walkthrough's cache cannot show,
// for a chunk of n at position p, when every earlier chunk was fed through the same cache.
long long hidden_by_walkthrough_cache(const std::vector<int>& chunk_sizes, size_t which, int window) {
    std::vector<long long> cache;  // positions, oldest first; at most `window` entries
    long long next = 0, hidden = 0;
    for (size_t c = 0; c <= which; ++c) {
        const int n = chunk_sizes[c];
        const long long overflow = (long long)cache.size() + n - window;
        if (overflow > 0) cache.erase(cache.begin(), cache.begin() + overflow);
        for (int r = 0; r < n; ++r) cache.push_back(next + r);
        if (c == which) {
            const long long offset = (long long)cache.size() - n;
            for (int r = 0; r < n; ++r) {
                const long long q = next + r;
                for (long long key = std::max(0LL, q - window + 1); key <= q; ++key) {
                    const auto it = std::find(cache.begin(), cache.end(), key);
                    const bool shown = it != cache.end() && (it - cache.begin()) <= r + offset;
                    hidden += shown ? 0 : 1;
                }
            }
        }
        next += n;
    }
    return hidden;
}

}  // namespace

TEST_CASE("shift_cache_hidden_pairs matches a literal simulation of the walkthrough's cache") {
    const int window = GENERATE(1, 2, 3, 5, 8);
    const int chunk = GENERATE(1, 2, 3, 4, 7, 8);
    if (chunk > window) {
        CHECK(kvscope::shift_cache_hidden_pairs(0, chunk, window) == -1);
        return;
    }
    std::vector<int> sizes(12, chunk);
    long long position = 0;
    for (size_t c = 0; c < sizes.size(); ++c) {
        INFO("window " << window << ", chunk " << chunk << ", chunk index " << c << " at position " << position);
        CHECK(kvscope::shift_cache_hidden_pairs(position, chunk, window) ==
              hidden_by_walkthrough_cache(sizes, c, window));
        position += chunk;
    }
}

TEST_CASE("one-token decode steps lose nothing in either cache") {
    for (long long p = 0; p < 40; ++p) CHECK(kvscope::shift_cache_hidden_pairs(p, 1, 4) == 0);
    CHECK(kvscope::shift_cache_hidden_pairs(10, 3, 0) == 0);  // no window: nothing is evicted
}

// A layer's own sliding window (Mistral, Qwen2, Gemma 3) against Hugging Face's mask predicates, written
// out here: causal_mask_function (kv <= q) and sliding_window_overlay (kv > q - W).
TEST_CASE("within_window keeps exactly the keys Hugging Face's sliding-window mask keeps") {
    for (int64_t W = 1; W <= 6; ++W)
        for (int64_t q = 0; q < 12; ++q) {
            const kvscope::KeyRange keys = kvscope::within_window(kvscope::visible_keys(q, 0, 0), q, W);
            int64_t n = 0;
            for (int64_t kv = 0; kv < 14; ++kv) {
                const bool upstream = kv <= q && kv > q - W;
                CHECK(keys.contains(kv) == upstream);
                n += upstream;
            }
            CHECK(keys.count() == n);
            CHECK(keys.count() == std::min(W, q + 1));
        }
    // W = 0: the layer attends to everything the cache shows.
    const kvscope::KeyRange all = kvscope::within_window(kvscope::visible_keys(9, 0, 0), 9, 0);
    CHECK(all.lo == 0);
    CHECK(all.count() == 10);
}

// StreamingLLM's numbering written out as a list: the cache holds sinks 0..S'-1 then the window lo..q,
// and slot i is the position attention uses. The sinks' shift is (query's slot - sink's slot) taken
// from the real distance: q - s - (slot(q) - slot(s)).
TEST_CASE("sink positions: the cache numbering moves the sinks up by the gap the window left", "[window]") {
    for (int64_t window : {1, 3, 4, 8})
        for (int64_t sinks : {1, 2, 4})
            for (int64_t q = 0; q < 40; ++q) {
                const kvscope::KeyRange text = kvscope::visible_keys(q, window, sinks);
                const kvscope::KeyRange cache = kvscope::visible_keys(q, window, sinks, kvscope::SinkPositions::Cache);
                std::vector<int64_t> slots;  // text position of each cache slot, in order
                for (int64_t p = 0; p <= q; ++p)
                    if (p > q - window || p < sinks) slots.push_back(p);
                const int64_t q_slot = int64_t(slots.size()) - 1;
                INFO("window " << window << ", sinks " << sinks << ", query " << q);
                CHECK(text.sink_shift == 0);
                CHECK(cache.count() == int64_t(slots.size()));
                for (int64_t s = 0; s < cache.n_sink; ++s) CHECK((q - s) - (q_slot - s) == cache.sink_shift);
                for (int64_t slot = cache.n_sink; slot <= q_slot; ++slot)  // window keys keep their distance
                    CHECK(q - slots[size_t(slot)] == q_slot - slot);
            }
}

TEST_CASE("turn_back undoes delta positions of rotation: a row rotated at p turned back by d is the row rotated at p - d",
          "[window]") {
    const int64_t D = 16, half = D / 2;
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = float(1.0 / std::pow(10000.0, double(2 * i) / double(D)));
    std::vector<double> raw(static_cast<size_t>(D));
    for (int64_t i = 0; i < D; ++i) raw[size_t(i)] = std::sin(0.7 * double(i) + 0.3);
    auto rotated_at = [&](int64_t p) {  // rotate-half in double: (x1 cos - x2 sin, x2 cos + x1 sin)
        std::vector<double> y(static_cast<size_t>(D));
        for (int64_t i = 0; i < half; ++i) {
            const double a = double(p) * double(inv_freq[size_t(i)]);
            y[size_t(i)] = raw[size_t(i)] * std::cos(a) - raw[size_t(i + half)] * std::sin(a);
            y[size_t(i + half)] = raw[size_t(i + half)] * std::cos(a) + raw[size_t(i)] * std::sin(a);
        }
        return y;
    };
    for (auto [p, d] : {std::pair<int64_t, int64_t>{9, 5}, {100, 97}, {2000, 1500}}) {
        const std::vector<double> at_p = rotated_at(p), want = rotated_at(p - d);
        std::vector<float> in(at_p.begin(), at_p.end()), out(static_cast<size_t>(D));
        kvscope::turn_back(out.data(), in.data(), 1, D, inv_freq.data(), d);
        INFO("p " << p << ", d " << d);
        for (int64_t i = 0; i < D; ++i) CHECK(std::abs(double(out[size_t(i)]) - want[size_t(i)]) < 2e-4);
    }
}
