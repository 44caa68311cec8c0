// The KV cache with quantized rows (int8, fp8: kv_quant.h): it stores exactly the packed bytes the
// formats define, reads back their dequantization, undoes and grows exactly; a quantized session keeps
// every determinism claim of session.tests.cpp (cached = uncached = chunked, step_back replays bit for
// bit) and stays within a small distance of the float32 run. That the packed bytes are right is
// kv_quant.tests.cpp's job (numpy reference); bytes per token are counted from the stored rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "base/errors.h"
#include "cache/kv_cache.h"
#include "cache/kv_quant.h"
#include "forward/model.h"
#include "run/session.h"
#include "run/session_group.h"
#include "session_runs.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

std::vector<float> random_row(std::mt19937& rng, int64_t D) {
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> r(static_cast<size_t>(D));
    for (float& x : r) x = normal(rng);
    return r;
}

// Every live position's packed K and V rows, (slot, L, H, 2, row_bytes).
std::vector<uint8_t> packed_rows(const KvCache& c) {
    std::vector<uint8_t> out;
    const size_t B = size_t(c.format().row_bytes());
    for (int64_t slot = 0; slot < c.capacity(); ++slot) {
        const int64_t p = c.slot_positions()[size_t(slot)];
        if (p < 0) continue;
        for (int64_t il = 0; il < c.shape().n_layer; ++il)
            for (int64_t h = 0; h < c.shape().n_head; ++h) {
                const KvRows r = c.rows(il, h);
                out.insert(out.end(), r.key<uint8_t>(p), r.key<uint8_t>(p) + B);
                out.insert(out.end(), r.value<uint8_t>(p), r.value<uint8_t>(p) + B);
            }
    }
    return out;
}

// V = 97, D = 8 (test_models.h small_fixture)
constexpr int64_t kVocab = 97;
std::shared_ptr<const Model> model() {
    static std::shared_ptr<const Model> m = Model::load(small_fixture("quantized_cache", 2024).dir.string());
    return m;
}

SessionOptions options(KvQuant q, int64_t window, int64_t chunk, int64_t n_new, bool cached = true) {
    SessionOptions o;
    o.window = window;
    o.prefill_chunk = chunk;
    o.max_new_tokens = n_new;
    o.use_cache = cached;
    o.kv_quant.format = q;
    return o;
}

Run run(const SessionOptions& o, const std::vector<int32_t>& prompt) { return run_to_end(model(), o, prompt); }

}  // namespace

TEST_CASE("a quantized cache stores the packed rows and reads back their dequantization", "[quantized_cache]") {
    const KvQuant q = GENERATE(KvQuant::Int8, KvQuant::Fp8);
    INFO(to_string(q));
    const int64_t L = 2, H = 3, D = 8, S = 6;
    KvCache c(L, H, D, S, 0, 0, false, KvQuantSpec{q});
    REQUIRE(c.format().quantized());
    CHECK(c.format().row_bytes() == D + 4);
    CHECK(c.view().bytes_per_position == 2 * L * H * (D + 4));
    std::mt19937 rng(3);
    for (int64_t p = 0; p < 4; ++p) {
        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < H; ++h) {
                const std::vector<float> k = random_row(rng, D), v = random_row(rng, D);
                c.write(il, h, p, k.data(), v.data());
                std::vector<uint8_t> want(size_t(D + 4));
                std::vector<float> got(static_cast<size_t>(D)), want_k(static_cast<size_t>(D));
                quantize_row(q, k.data(), D, want.data());
                CHECK(std::memcmp(c.rows(il, h).key<uint8_t>(p), want.data(), want.size()) == 0);
                dequantize_row(q, want.data(), D, want_k.data());
                c.rows(il, h).copy_key(p, got.data());
                CHECK(first_mismatch(got, want_k).empty());
                quantize_row(q, v.data(), D, want.data());
                CHECK(std::memcmp(c.rows(il, h).value<uint8_t>(p), want.data(), want.size()) == 0);
            }
        c.advance(1);
    }
    CHECK(c.view().bytes_used == c.used() * c.view().bytes_per_position);
}

TEST_CASE("a quantized ring undoes and grows exactly, across wrap-around", "[quantized_cache]") {
    const int64_t L = 2, H = 2, D = 12, W = 3;
    KvCache c(L, H, D, 5, W, 1, false, KvQuantSpec{KvQuant::Int8});
    std::mt19937 rng(11);
    auto step = [&](int64_t n) {
        require_fits(c, n);
        for (int64_t p = c.next_position(); p < c.next_position() + n; ++p)
            for (int64_t il = 0; il < L; ++il)
                for (int64_t h = 0; h < H; ++h) {
                    const std::vector<float> k = random_row(rng, D), v = random_row(rng, D);
                    c.write(il, h, p, k.data(), v.data());
                }
        c.advance(n);
    };
    step(3);
    for (int i = 0; i < 6; ++i) {
        const std::vector<uint8_t> before = packed_rows(c);
        const std::vector<int64_t> positions = c.slot_positions();
        KvCacheCheckpoint cp = c.checkpoint(1 + i % 2);
        step(1 + i % 2);
        CHECK(packed_rows(c) != before);
        c.restore(cp);
        REQUIRE(c.slot_positions() == positions);
        REQUIRE(packed_rows(c) == before);
        step(1 + i % 2);
    }
    const std::vector<uint8_t> before = packed_rows(c);
    c.grow(9);
    std::vector<uint8_t> after = packed_rows(c);
    std::sort(after.begin(), after.end());  // slots move; the bytes of every live row stay
    std::vector<uint8_t> sorted = before;
    std::sort(sorted.begin(), sorted.end());
    CHECK(after == sorted);
}

TEST_CASE("quantized runs: cached, uncached and chunked give bit-identical logits", "[quantized_cache][session]") {
    const KvQuant q = GENERATE(KvQuant::Int8, KvQuant::Fp8);
    const int64_t window = GENERATE(0, 4);
    INFO(to_string(q) << ", window " << window);
    const std::vector<int32_t> prompt = random_tokens(5, 9, kVocab);
    const Run baseline = run(options(q, window, 0, 12), prompt);
    for (int64_t chunk : {1, 4}) {
        INFO("chunk " << chunk);
        require_identical(run(options(q, window, chunk, 12), prompt), baseline);
        require_identical(run(options(q, window, chunk, 12, false), prompt), baseline);
    }
}

TEST_CASE("quantized runs stay near the float32 run, and differ from it", "[quantized_cache][session]") {
    const std::vector<int32_t> prompt = random_tokens(8, 10, kVocab);
    // The prompt's prediction and every greedy step fed the float32 run's tokens, so that the positions
    // compared hold the same text.
    const Run f32 = run(options(KvQuant::None, 0, 0, 8), prompt);
    std::vector<int32_t> text = prompt;
    text.insert(text.end(), f32.generated.begin(), f32.generated.end() - 1);
    const Run f32_once = run(options(KvQuant::None, 0, 0, 1), text);
    for (auto [q, bound] : {std::pair{KvQuant::Int8, 0.01}, std::pair{KvQuant::Fp8, 0.05}}) {
        INFO(to_string(q));
        const Run quant = run(options(q, 0, 0, 1), text);
        double max_diff = 0, max_logit = 0;
        for (size_t i = 0; i < quant.logits[0].size(); ++i) {
            max_diff = std::max(max_diff, double(std::fabs(quant.logits[0][i] - f32_once.logits[0][i])));
            max_logit = std::max(max_logit, double(std::fabs(f32_once.logits[0][i])));
        }
        INFO("max |logit difference| " << max_diff << ", max |logit| " << max_logit);
        CHECK(max_diff > 0);
        CHECK(max_diff < bound * max_logit);
    }
}

TEST_CASE("quantized step_back replays bit for bit", "[quantized_cache][session]") {
    SessionOptions o = options(KvQuant::Int8, 3, 2, 9);
    o.sampling = {1.0, 10, 1.0, 77};
    Session s(model(), o);
    s.set_prompt(random_tokens(21, 7, kVocab));
    while (s.next() != Session::Next::Done) s.step();
    const Run original = collect(s);
    const std::vector<uint8_t> rows = packed_rows(s.cache());
    for (int i = 0; i < 4; ++i) REQUIRE(s.step_back());
    while (s.next() != Session::Next::Done) s.step();
    require_identical(collect(s), original);
    CHECK(packed_rows(s.cache()) == rows);
}

TEST_CASE("quantized caches refuse what they cannot do, before any work", "[quantized_cache][errors]") {
    SessionOptions o = options(KvQuant::Int8, 0, 0, 4);
    o.block_size = 4;
    CHECK_THROWS_AS(Session(model(), o), UsageError);
    o = options(KvQuant::Int4, 0, 0, 4);
    o.kv_quant.group = 5;  // D = 8
    CHECK_THROWS_WITH(Session(model(), o), Catch::Contains("does not divide head_dim 8"));
    o = options(KvQuant::Int8, 0, 0, 4);
    o.kv_quant.group = 0;
    CHECK_THROWS_AS(Session(model(), o), UsageError);
    // A prompt cache file holds float32 rows: reloading them would quantize a dequantization again.
    GroupOptions g;
    g.prompt_cache = (work_dir("quantized_cache") / "never_written.kvp").string();
    CHECK_THROWS_WITH(SessionGroup(model(), options(KvQuant::Fp8, 0, 0, 4), g), Catch::Contains("leave out kv_quant"));
    CHECK_FALSE(std::filesystem::exists(g.prompt_cache));
}

TEST_CASE("int4 KIVI: groups below the boundary are packed, the residual stays float32, undo is exact",
          "[quantized_cache][int4]") {
    const int64_t L = 2, H = 2, D = 8, G = 4, R = 2;
    const KvQuantSpec spec{KvQuant::Int4, G, R};
    KvCache c(L, H, D, 12, 0, 0, false, spec);
    std::mt19937 rng(5);
    std::vector<std::vector<float>> k_rows, v_rows;  // per (position, layer, head): the rows as computed
    auto chunk = [&](int64_t n) {
        c.prepare(nullptr, n);
        for (int64_t p = c.next_position(); p < c.next_position() + n; ++p)
            for (int64_t il = 0; il < L; ++il)
                for (int64_t h = 0; h < H; ++h) {
                    const std::vector<float> k = random_row(rng, D), v = random_row(rng, D);
                    if (size_t(p * L * H) >= k_rows.size()) k_rows.resize(size_t((p + 1) * L * H)), v_rows.resize(k_rows.size());
                    k_rows[size_t((p * L + il) * H + h)] = k, v_rows[size_t((p * L + il) * H + h)] = v;
                    c.write(il, h, p, k.data(), v.data());
                }
        c.advance(n);
    };
    auto check_rows = [&] {
        const int64_t n = c.next_position(), boundary = int4_residual_boundary(n, spec);
        INFO("next position " << n << ", boundary " << boundary);
        std::vector<float> group(size_t(G * D)), want(size_t(G * D)), got(static_cast<size_t>(D));
        std::vector<uint8_t> packed(size_t(int4_key_group_bytes(D, G)));
        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t p = 0; p < n; ++p) {
                    const std::vector<float>& k = k_rows[size_t((p * L + il) * H + h)];
                    std::vector<float> want_k = k, want_v = v_rows[size_t((p * L + il) * H + h)];
                    if (p < boundary) {
                        const int64_t p0 = p / G * G;
                        for (int64_t i = 0; i < G; ++i)
                            std::copy_n(k_rows[size_t(((p0 + i) * L + il) * H + h)].begin(), D, group.begin() + i * D);
                        quantize_int4_keys(group.data(), G, D, packed.data());
                        dequantize_int4_keys(packed.data(), G, D, want.data());
                        std::copy_n(want.begin() + (p - p0) * D, D, want_k.begin());
                        std::vector<uint8_t> vp(size_t(int4_value_row_bytes(D, G)));
                        quantize_int4_values(want_v.data(), D, G, vp.data());
                        dequantize_int4_values(vp.data(), D, G, want_v.data());
                    }
                    c.rows(il, h).copy_key(p, got.data());
                    REQUIRE(first_mismatch(got, want_k).empty());
                    c.rows(il, h).copy_value(p, got.data());
                    REQUIRE(first_mismatch(got, want_v).empty());
                }
        CHECK(c.view().bytes_used == 2 * L * H * (boundary * (D / 2 + D / G * 8) + (n - boundary) * D * 4));
    };
    chunk(3);  // 3 positions: boundary 0, all float32
    check_rows();
    chunk(4);  // 7: boundary 4
    check_rows();
    for (int i = 0; i < 3; ++i) {
        const int64_t n = c.next_position();
        KvCacheCheckpoint cp = c.checkpoint(2);
        chunk(2);
        check_rows();
        c.restore(cp);
        k_rows.resize(size_t(n * L * H)), v_rows.resize(k_rows.size());
        check_rows();  // the positions the chunk packed are float32 again, bit for bit
        chunk(1);
        check_rows();
    }
    c.grow(20);
    check_rows();
    chunk(5);
    check_rows();
}

TEST_CASE("int4 sessions: a residual as long as the run is the float32 run; step_back replays", "[quantized_cache][int4]") {
    const std::vector<int32_t> prompt = random_tokens(31, 9, kVocab);
    SessionOptions o = options(KvQuant::Int4, 0, 0, 12);
    o.kv_quant.group = 4;
    o.kv_quant.residual = 64;  // nothing ever leaves the residual
    require_identical(run(o, prompt), run(options(KvQuant::None, 0, 0, 12), prompt));
    o.kv_quant.residual = 2;
    const Run quant = run(o, prompt), f32 = run(options(KvQuant::None, 0, 0, 12), prompt);
    CHECK(first_mismatch(quant.logits.back(), f32.logits.back()) != "");
    o.sampling = {1.0, 10, 1.0, 9};
    Session s(model(), o);
    s.set_prompt(prompt);
    while (s.next() != Session::Next::Done) s.step();
    const Run original = collect(s);
    for (int i = 0; i < 7; ++i) REQUIRE(s.step_back());
    while (s.next() != Session::Next::Done) s.step();
    require_identical(collect(s), original);
    o.window = 4;
    CHECK_THROWS_WITH(Session(model(), o), Catch::Contains("--window"));
}

TEST_CASE("quantized caches grow for a new turn, and the turn's steps undo and replay bit for bit",
          "[quantized_cache][turns]") {
    const KvQuant q = GENERATE(KvQuant::Int8, KvQuant::Int4);
    INFO(to_string(q));
    SessionOptions o = options(q, 0, 0, 6);
    o.kv_quant.group = 4;
    o.kv_quant.residual = 1;
    Session s(model(), o);
    s.set_prompt(random_tokens(41, 8, kVocab));
    while (s.next() != Session::Next::Done) s.step();
    const int64_t capacity = s.cache().capacity();
    s.append_turn(random_tokens(42, 11, kVocab), 7);
    while (s.next() != Session::Next::Done) s.step();
    CHECK(s.cache().capacity() > capacity);
    const Run whole = collect(s);
    const std::vector<uint8_t> rows = packed_rows(s.cache());
    for (int i = 0; i < 7; ++i) REQUIRE(s.step_back());  // to before the new turn's prefill (an 8th: the turn)
    while (s.next() != Session::Next::Done) s.step();
    require_identical(collect(s), whole);
    CHECK(packed_rows(s.cache()) == rows);
}
