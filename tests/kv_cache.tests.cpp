// KvCache: the ring (position p in slot p % S), the window's visibility rule, fits(), checkpoint/restore,
// the byte counts and the rows of one layer and head (rows()). Expectations come from a plain simulation
// written here: an array of S slots that records which position was written last into each, and the rule
// "a query at q sees q-W+1 .. q".
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "base/errors.h"
#include "cache/kv_cache.h"
#include "model/safetensors.h"  // bf16_to_f32, f32_to_bf16

using namespace kvscope;

namespace {

constexpr int64_t L = 2, H = 3, D = 5;

// A value that names its coordinates, so any misplaced row is visible.
float tag(int64_t il, int64_t h, int64_t p, int64_t d, bool value) {
    return float(p * 1000 + il * 100 + h * 10 + d) + (value ? 0.5f : 0.0f);
}

void write_position(KvCache& c, int64_t p) {
    for (int64_t il = 0; il < L; ++il)
        for (int64_t h = 0; h < H; ++h) {
            float k[D], v[D];
            for (int64_t d = 0; d < D; ++d) {
                k[d] = tag(il, h, p, d, false);
                v[d] = tag(il, h, p, d, true);
            }
            c.write(il, h, p, k, v);
        }
}

// Writes a chunk the way forward() does: every row of the chunk, then the pointer moves.
void write_chunk(KvCache& c, int64_t n) {
    std::vector<TokenId> tokens(size_t(n), 1);
    c.prepare(tokens.data(), n);
    for (int64_t p = c.next_position(); p < c.next_position() + n; ++p) write_position(c, p);
    c.advance(n);
}

bool holds(const KvCache& c, int64_t p) {
    if (c.slot_positions()[size_t(p % c.capacity())] != p) return false;
    for (int64_t il = 0; il < L; ++il)
        for (int64_t h = 0; h < H; ++h) {
            const KvRows r = c.rows(il, h);
            for (int64_t d = 0; d < D; ++d)
                if (r.key<float>(p)[d] != tag(il, h, p, d, false) || r.value<float>(p)[d] != tag(il, h, p, d, true))
                    return false;
        }
    return true;
}

// Everything observable, for restore checks.
struct Snapshot {
    int64_t next_position;
    std::vector<int64_t> slots;
    std::vector<float> rows;
    bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const KvCache& c) {
    Snapshot s{c.next_position(), c.slot_positions(), {}};
    for (int64_t slot = 0; slot < c.capacity(); ++slot) {
        if (c.slot_positions()[size_t(slot)] < 0) continue;
        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t p = c.slot_positions()[size_t(slot)];
                const KvRows r = c.rows(il, h);
                s.rows.insert(s.rows.end(), r.key<float>(p), r.key<float>(p) + D);
                s.rows.insert(s.rows.end(), r.value<float>(p), r.value<float>(p) + D);
            }
    }
    return s;
}

}  // namespace

TEST_CASE("a new cache is empty and its sizes are what the shape says", "[kv_cache]") {
    KvCache c(L, H, D, 7, 0);
    CHECK(c.capacity() == 7);
    CHECK(c.visibility().window == 0);
    CHECK(c.next_position() == 0);
    CHECK(c.view().write_slot == 0);
    CHECK(c.used() == 0);
    CHECK(c.slot_positions() == std::vector<int64_t>(7, -1));
    // K and V, float32: 2 * L * H * D * 4 bytes per position.
    CHECK(c.view().bytes_per_position == 2 * L * H * D * 4);
    CHECK(c.view().bytes_capacity == 7 * 2 * L * H * D * 4);
    CHECK(c.view().bytes_used == 0);
}

TEST_CASE("positions go to slot p % S and stay readable until overwritten", "[kv_cache]") {
    const int64_t S = GENERATE(1, 4, 7);
    const int64_t W = GENERATE(0, 1, 3, 4);
    if (W > S) return;  // such a cache cannot take even one token once full (fits() below)
    INFO("S " << S << ", W " << W);
    KvCache c(L, H, D, S, W);
    std::vector<int64_t> sim(size_t(S), -1);  // the simulation: last position written per slot
    for (int64_t p = 0; p < 3 * S + 2; ++p) {
        INFO("position " << p);
        if (W == 0 && p >= S) {
            CHECK_FALSE(c.fits(1));  // without a window every position must stay: a full cache is full
            break;
        }
        REQUIRE(c.fits(1));
        CHECK(c.view().write_slot == p % S);
        write_chunk(c, 1);
        sim[size_t(p % S)] = p;
        CHECK(c.next_position() == p + 1);
        CHECK(c.view().write_slot == (p + 1) % S);
        CHECK(c.slot_positions() == sim);
        for (int64_t q = std::max<int64_t>(0, p + 1 - S); q <= p; ++q) CHECK(holds(c, q));
        // used(): positions the next query (at p + 1) can see that are already in the cache.
        const int64_t visible = W > 0 ? std::min(p + 1, W - 1) : p + 1;
        CHECK(c.used() == std::min(visible, S));
        CHECK(c.view().bytes_used == c.used() * c.view().bytes_per_position);
    }
}

TEST_CASE("visible_from: a query at q sees q-W+1 .. q", "[kv_cache]") {
    KvCache none(L, H, D, 10, 0), w4(L, H, D, 10, 4), w1(L, H, D, 10, 1);
    for (int64_t q : {0, 1, 2, 3, 4, 9, 100}) {
        CHECK(none.visibility().visible_from(q) == 0);
        CHECK(w4.visibility().visible_from(q) == std::max<int64_t>(0, q - 3));
        CHECK(w1.visibility().visible_from(q) == q);
    }
}

TEST_CASE("fits(n) is true exactly when every query of the chunk still finds all its keys", "[kv_cache]") {
    // Brute force: simulate the ring up to `start`, write the chunk, then check every query's keys.
    for (int64_t S = 1; S <= 9; ++S)
        for (int64_t W = 0; W <= 9; ++W)
            for (int64_t start = 0; start <= 12; ++start)
                for (int64_t n = 1; n <= 10; ++n) {
                    std::vector<int64_t> ring(size_t(S), -1);
                    for (int64_t p = 0; p < start + n; ++p) ring[size_t(p % S)] = p;
                    bool ok = true;
                    for (int64_t q = start; q < start + n; ++q)
                        for (int64_t k = W > 0 ? std::max<int64_t>(0, q - W + 1) : 0; k <= q; ++k)
                            ok = ok && ring[size_t(k % S)] == k;
                    KvCache c(1, 1, 1, S, W);
                    for (int64_t p = 0; p < start; ++p) {  // reach `start` one position at a time where possible
                        float x = 0;
                        c.write(0, 0, p, &x, &x);
                        c.advance(1);
                    }
                    INFO("S " << S << ", W " << W << ", start " << start << ", n " << n);
                    CHECK(c.fits(n) == ok);
                    if (ok) {
                        CHECK_NOTHROW(require_fits(c, n));
                    } else {
                        CHECK_THROWS_AS(require_fits(c, n), UsageError);
                    }
                }
}

TEST_CASE("the chunk-size rule: a chunk of n needs W - 1 + n slots", "[kv_cache]") {
    KvCache c(L, H, D, 6, 4);
    write_chunk(c, 3);
    write_chunk(c, 3);        // positions 0..5, keys needed from 0: 6 slots
    CHECK(c.fits(3));         // 6..8 needs 3..8
    CHECK_FALSE(c.fits(4));   // 6..9 needs 3..9 = 7 slots
    try {
        require_fits(c, 4);
        FAIL("expected a UsageError");
    } catch (const UsageError& e) {
        CHECK_THAT(e.what(), Catch::Matchers::Contains("7") && Catch::Matchers::Contains("6"));
    }
}

TEST_CASE("checkpoint(n) and restore undo exactly what n writes did", "[kv_cache]") {
    const int64_t S = GENERATE(3, 5, 8);
    const int64_t W = GENERATE(0, 2, 3);
    INFO("S " << S << ", W " << W);
    KvCache c(L, H, D, S, W);
    std::mt19937 rng(uint32_t(S * 10 + W));
    std::vector<std::pair<KvCacheCheckpoint, Snapshot>> stack;
    // Grow with random chunk sizes while they fit, keeping every checkpoint.
    for (int step = 0; step < 40; ++step) {
        const int64_t n = 1 + int64_t(rng() % 3);
        if (!c.fits(n)) {
            if (!c.fits(1)) break;
            continue;
        }
        stack.push_back({c.checkpoint(n), snapshot(c)});
        write_chunk(c, n);
    }
    REQUIRE(stack.size() >= 2);
    // Undo in reverse order; after each restore the cache is exactly as it was.
    while (!stack.empty()) {
        INFO("undo to position " << stack.back().second.next_position);
        c.restore(stack.back().first);
        REQUIRE(snapshot(c) == stack.back().second);
        CHECK(c.view().write_slot == c.next_position() % S);
        stack.pop_back();
    }
    CHECK(c.next_position() == 0);
    CHECK(c.used() == 0);
    CHECK(c.slot_positions() == std::vector<int64_t>(size_t(S), -1));
}

TEST_CASE("restore then rewrite reaches the same state as never undoing", "[kv_cache]") {
    KvCache a(L, H, D, 4, 3), b(L, H, D, 4, 3);
    for (int i = 0; i < 5; ++i) {
        write_chunk(a, 1);
        write_chunk(b, 1);
    }
    KvCacheCheckpoint cp = b.checkpoint(2);
    write_chunk(b, 2);
    b.restore(cp);
    write_chunk(b, 2);
    write_chunk(a, 2);
    CHECK(snapshot(a) == snapshot(b));
}

TEST_CASE("reset empties the cache", "[kv_cache]") {
    KvCache c(L, H, D, 5, 0);
    write_chunk(c, 4);
    c.reset();
    CHECK(c.next_position() == 0);
    CHECK(c.used() == 0);
    CHECK(c.view().bytes_used == 0);
    CHECK(c.view().write_slot == 0);
    CHECK(c.slot_positions() == std::vector<int64_t>(5, -1));
    CHECK(c.fits(5));
    CHECK_FALSE(c.fits(6));
}

TEST_CASE("rows(il, h): the stored row, its float32 copy and the evicted flag of one layer and head", "[kv_cache]") {
    for (const bool bf16 : {false, true}) {
        INFO((bf16 ? "bfloat16" : "float32"));
        KvCache c(L, H, D, 4, 0, 0, bf16);
        write_chunk(c, 3);
        std::vector<float> k(static_cast<size_t>(D)), v(k.size());
        auto stored = [&](float x) { return bf16 ? bf16_to_f32(f32_to_bf16(x)) : x; };  // as the format keeps it
        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t p = 0; p < 3; ++p) {
                    const KvRows r = c.rows(il, h);
                    r.copy_key(p, k.data());
                    r.copy_value(p, v.data());
                    for (int64_t d = 0; d < D; ++d) {
                        const float want_k = stored(tag(il, h, p, d, false)), want_v = stored(tag(il, h, p, d, true));
                        CHECK(k[size_t(d)] == want_k);
                        CHECK(v[size_t(d)] == want_v);
                        CHECK((bf16 ? bf16_to_f32(r.key<uint16_t>(p)[d]) : r.key<float>(p)[d]) == want_k);
                        CHECK((bf16 ? bf16_to_f32(r.value<uint16_t>(p)[d]) : r.value<float>(p)[d]) == want_v);
                    }
                    CHECK_FALSE(r.evicted(p));
                }
        CHECK(c.set_evicted(1, 2, 1, true));
        CHECK(c.rows(1, 2).evicted(1));
        CHECK(c.rows(1, 2).evicted_keys()(1));
        CHECK_FALSE(c.rows(1, 1).evicted(1));
        CHECK_FALSE(c.rows(1, 1).evicted_keys()(1));
        CHECK_FALSE(c.rows(1, 2).evicted_keys()(2));
    }
}

TEST_CASE("view(reuse) fills the vectors it is handed: a step's snapshot allocates nothing", "[kv_cache]") {
    KvCache c(L, H, D, 6, 0);
    write_chunk(c, 4);
    KvCacheView v = c.view();
    const int64_t* slots = v.slot_positions.data();
    write_chunk(c, 1);
    v = c.view(std::move(v));
    CHECK(v.slot_positions.data() == slots);
    CHECK(v.slot_positions == c.slot_positions());
    CHECK(v.next_position == 5);
    CHECK(v.used == 5);
    CHECK(v.bytes_used == 5 * v.bytes_per_position);
}

// Sliding layers (issue 43): layer 0 slides a window of W, layer 1 is full. The expectations are the rule
// written out here: a sliding layer stores the last W - 1 + C positions (C = the largest chunk so far), a
// full layer every one; bytes = sum over layers of positions stored x 2 H D x 4.
namespace {

int64_t stored_positions(int64_t n, int64_t window, int64_t chunk) {
    return window > 0 ? std::min(n, window - 1 + chunk) : n;
}

// What layer il's rows say for position p, checked against the tags write_position wrote.
bool layer_holds_rows(const KvCache& c, int64_t il, int64_t p) {
    for (int64_t h = 0; h < H; ++h) {
        const KvRows r = c.rows(il, h);
        for (int64_t d = 0; d < D; ++d)
            if (r.key<float>(p)[d] != tag(il, h, p, d, false) || r.value<float>(p)[d] != tag(il, h, p, d, true))
                return false;
    }
    return true;
}

}  // namespace

TEST_CASE("sliding layers store only their window plus the chunk; full layers every position", "[kv_cache][sliding]") {
    constexpr int64_t S = 40, W = 4;
    const int64_t chunk = GENERATE(1, 3);
    INFO("chunk " << chunk);
    KvCache c(L, H, D, S, 0, 0, false, {}, SlidingLayers{{W, 0}, chunk});
    const int64_t slots = W - 1 + chunk;
    CHECK(c.view().bytes_capacity == (slots + S) * 2 * H * D * 4);
    std::vector<KvCacheCheckpoint> undo;
    for (int64_t n = 0; n + chunk <= 30;) {
        undo.push_back(c.checkpoint(chunk));
        write_chunk(c, chunk);
        n += chunk;
        const KvCacheView v = c.view();
        INFO("after " << n << " positions");
        CHECK(v.layer_held == std::vector<int64_t>{stored_positions(n, W, chunk), n});
        CHECK(v.layer_capacity == std::vector<int64_t>{slots, S});
        CHECK(v.bytes_used == (stored_positions(n, W, chunk) + n) * 2 * H * D * 4);
        // The sliding layer still has every key its next query sees (and the last chunk's), the full one all.
        for (int64_t p = 0; p < n; ++p) {
            CHECK(stores(c, 0, p) == (p >= n - slots));
            if (p >= n - slots) CHECK(layer_holds_rows(c, 0, p));
            CHECK(stores(c, 1, p));
            CHECK(layer_holds_rows(c, 1, p));
        }
    }
    // Step back to the start: every position the ring overwrote comes back from the checkpoints.
    while (!undo.empty()) {
        c.restore(undo.back());
        undo.pop_back();
        const int64_t n = c.next_position();
        INFO("stepped back to " << n);
        for (int64_t p = std::max<int64_t>(0, n - slots); p < n; ++p) {
            CHECK(stores(c, 0, p));
            CHECK(layer_holds_rows(c, 0, p));
        }
        CHECK(c.view().layer_held == std::vector<int64_t>{stored_positions(n, W, chunk), n});
    }
}

TEST_CASE("a larger chunk than expected grows the sliding layer's slots, keeping what it held", "[kv_cache][sliding]") {
    constexpr int64_t S = 30, W = 3;
    KvCache c(L, H, D, S, 0, 0, false, {}, SlidingLayers{{W, 0}, 1});
    for (int i = 0; i < 9; ++i) write_chunk(c, 1);  // layer 0 holds 6, 7, 8 in 3 slots
    KvCacheCheckpoint cp = c.checkpoint(5);
    write_chunk(c, 5);  // needs W - 1 + 5 = 7 slots: positions 7 .. 13 stored
    CHECK(c.view().layer_capacity[0] == 7);
    for (int64_t p = 7; p < 14; ++p) CHECK(layer_holds_rows(c, 0, p));
    CHECK_FALSE(stores(c, 0, 6));
    c.restore(cp);  // back to position 9: 6, 7, 8 again
    for (int64_t p = 6; p < 9; ++p) CHECK(layer_holds_rows(c, 0, p));
    CHECK(c.view().layer_held == std::vector<int64_t>{3, 9});
}

TEST_CASE("after a prefill the first decode step gives the sliding layer's extra slots back; step back regrows them", "[kv_cache][sliding]") {
    // Hugging Face's DynamicSlidingWindowLayer keeps W - 1 positions between steps: a 10-token prefill holds
    // W - 1 + 10 while it is written, a decode step W - 1 + 1 = W.
    constexpr int64_t S = 40, W = 4, P = 10;
    KvCache c(L, H, D, S, 0, 0, false, {}, SlidingLayers{{W, 0}, P});
    KvCacheCheckpoint prefill = c.checkpoint(P);
    write_chunk(c, P);
    CHECK(c.view().layer_capacity == std::vector<int64_t>{W - 1 + P, S});
    CHECK(c.view().layer_held == std::vector<int64_t>{P, P});
    std::vector<KvCacheCheckpoint> decode;
    for (int64_t n = P + 1; n <= P + 3; ++n) {
        decode.push_back(c.checkpoint(1));
        write_chunk(c, 1);
        INFO("after " << n << " positions");
        CHECK(c.view().layer_capacity == std::vector<int64_t>{W, S});
        CHECK(c.view().layer_held == std::vector<int64_t>{W, n});
        CHECK(c.view().bytes_used == (W + n) * 2 * H * D * 4);
        for (int64_t p = n - W; p < n; ++p) CHECK(layer_holds_rows(c, 0, p));
        CHECK_FALSE(stores(c, 0, n - W - 1));
    }
    // Back over the decode steps: the first one regrows the ring and puts back the prefill's rows.
    while (!decode.empty()) {
        c.restore(decode.back());
        decode.pop_back();
    }
    CHECK(c.next_position() == P);
    CHECK(c.view().layer_capacity == std::vector<int64_t>{W - 1 + P, S});
    CHECK(c.view().layer_held == std::vector<int64_t>{P, P});
    for (int64_t p = 0; p < P; ++p) CHECK(layer_holds_rows(c, 0, p));
    // and forward again, exactly as before
    write_chunk(c, 1);
    CHECK(c.view().layer_held == std::vector<int64_t>{W, P + 1});
    for (int64_t p = P + 1 - W; p <= P; ++p) CHECK(layer_holds_rows(c, 0, p));
    c.restore(prefill);  // back before the prefill: nothing held
    CHECK(c.view().layer_held == std::vector<int64_t>{0, 0});
}

TEST_CASE("int4 and a session window keep every position in every layer", "[kv_cache][sliding]") {
    const KvCache windowed(L, H, D, 10, 5, 0, false, {}, SlidingLayers{{3, 0}, 1});
    CHECK(windowed.view().layer_window.empty());
    CHECK(windowed.view().layer_capacity == std::vector<int64_t>{10, 10});
    const KvCache int4(L, H, 8, 10, 0, 0, false, KvQuantSpec{KvQuant::Int4, 4, 4}, SlidingLayers{{3, 0}, 1});
    CHECK(int4.view().layer_window.empty());
    const KvCache full(L, H, D, 10, 0, 0, false, {}, SlidingLayers{{0, 0}, 1});
    CHECK(full.view().layer_window.empty());
    const KvCache sliding(L, H, D, 10, 0, 0, false, {}, SlidingLayers{{3, 0}, 1});
    CHECK(sliding.view().layer_capacity == std::vector<int64_t>{3, 10});
    // The views say why a model's sliding layers are kept whole: int4 and paged do; a ring of float32 does not.
    CHECK(int4.view().sliding_kept_whole != nullptr);
    CHECK(std::string(int4.view().sliding_kept_whole).find("int4") != std::string::npos);
    CHECK(full.view().sliding_kept_whole == nullptr);
    CHECK(sliding.view().sliding_kept_whole == nullptr);
    auto pool = std::make_shared<BlockPool>(L, H, D, 4, 8);
    const KvCache paged_sliding(pool, 16, 0, 0, -1, true), paged_full(pool, 16, 0, 0, -1, false);
    REQUIRE(paged_sliding.view().sliding_kept_whole != nullptr);
    CHECK(std::string(paged_sliding.view().sliding_kept_whole).find("block table") != std::string::npos);
    CHECK(paged_full.view().sliding_kept_whole == nullptr);
}
