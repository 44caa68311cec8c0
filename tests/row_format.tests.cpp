// RowFormat and Int4Rows (cache/row_format.h): what one stored row is, for every format. Expectations
// come from kv_quant.h's pure functions and from the bfloat16 rule written out here (round to nearest
// even on the upper 16 bits), not from the cache.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "base/errors.h"
#include "cache/row_format.h"

using namespace kvscope;

namespace {

std::vector<float> random_row(uint32_t seed, int64_t D) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> r(static_cast<size_t>(D));
    for (float& x : r) x = normal(rng);
    return r;
}

// bfloat16 as the upper half of the float32 bits, rounded to nearest even (written out independently).
float bf16_round_trip(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    bits &= 0xFFFF0000u;
    float y;
    std::memcpy(&y, &bits, sizeof y);
    return y;
}

}  // namespace

TEST_CASE("row bytes per format", "[row_format]") {
    constexpr int64_t D = 8;
    CHECK(RowFormat(D, false, {}).row_bytes() == 4 * D);
    CHECK(RowFormat(D, true, {}).row_bytes() == 2 * D);
    CHECK(RowFormat(D, false, {KvQuant::Int8}).row_bytes() == D + 4);
    CHECK(RowFormat(D, true, {KvQuant::Fp8}).row_bytes() == D + 4);  // quant wins over bf16
    CHECK_FALSE(RowFormat(D, true, {KvQuant::Fp8}).bf16());
    const RowFormat int4(D, false, {KvQuant::Int4, 4, 2});
    CHECK(int4.row_bytes() == int4_value_row_bytes(D, 4));
    CHECK(int4.key_row_bytes() == 0);  // keys live in Int4Rows' groups
    CHECK_THROWS_AS(RowFormat(D, false, {KvQuant::Int4, 3, 0}), UsageError);
}

TEST_CASE("encode then decode: float32 exact, bfloat16 rounded, int8 / fp8 as kv_quant.h", "[row_format]") {
    constexpr int64_t D = 16;
    const std::vector<float> x = random_row(7, D);
    std::vector<float> out(static_cast<size_t>(D));
    SECTION("float32") {
        const RowFormat f(D, false, {});
        std::vector<unsigned char> row(size_t(f.row_bytes()));
        f.encode(x.data(), row.data());
        f.decode(row.data(), out.data());
        CHECK(out == x);
    }
    SECTION("bfloat16") {
        const RowFormat f(D, true, {});
        std::vector<unsigned char> row(size_t(f.row_bytes()));
        f.encode(x.data(), row.data());
        f.decode(row.data(), out.data());
        for (int64_t d = 0; d < D; ++d) CHECK(out[size_t(d)] == bf16_round_trip(x[size_t(d)]));
    }
    SECTION("int8 and fp8") {
        const KvQuant q = GENERATE(KvQuant::Int8, KvQuant::Fp8);
        const RowFormat f(D, false, {q});
        std::vector<unsigned char> row(size_t(f.row_bytes())), want(row.size());
        f.encode(x.data(), row.data());
        quantize_row(q, x.data(), D, want.data());
        CHECK(row == want);
        std::vector<float> want_out(static_cast<size_t>(D));
        dequantize_row(q, want.data(), D, want_out.data());
        f.decode(row.data(), out.data());
        CHECK(out == want_out);
    }
}

TEST_CASE("Int4Rows: groups below the boundary are packed, the residual keeps float32, undo restores it",
          "[row_format][int4]") {
    constexpr int64_t L = 1, H = 2, D = 8, S = 16, G = 4;
    const KvQuantSpec spec{KvQuant::Int4, G, 1};
    Int4Rows r(L, H, D, S, spec);
    CHECK(r.residual_slots() == spec.residual + G);
    std::vector<std::vector<float>> keys;
    std::vector<unsigned char> values(size_t(L * H * S * int4_value_row_bytes(D, G)));
    auto value_row = [&](int64_t il, int64_t h, int64_t p) {
        return values.data() + ((il * H + h) * S + p) * int4_value_row_bytes(D, G);
    };
    auto write = [&](int64_t p) {
        keys.push_back(random_row(uint32_t(100 + p), D));
        for (int64_t h = 0; h < H; ++h) {
            std::memcpy(r.residual(0, 0, h, p), keys.back().data(), D * sizeof(float));
            std::memcpy(r.residual(1, 0, h, p), keys.back().data(), D * sizeof(float));
        }
    };
    int64_t next = 0;
    for (; next < 5; ++next) write(next);
    r.pack_below(int4_residual_boundary(next, spec), value_row);  // ⌊(5 - 1) / 4⌋·4 = 4
    CHECK(r.n_quantized() == 4);
    // A packed key reads back as kv_quant.h's dequantization of its group; a residual key as written.
    std::vector<float> group(static_cast<size_t>(G * D)), want(size_t(G * D)), got(static_cast<size_t>(D));
    std::vector<uint8_t> packed(static_cast<size_t>(int4_key_group_bytes(D, G)));
    for (int64_t i = 0; i < G; ++i) std::memcpy(group.data() + i * D, keys[size_t(i)].data(), D * sizeof(float));
    quantize_int4_keys(group.data(), G, D, packed.data());
    dequantize_int4_keys(packed.data(), G, D, want.data());
    for (int64_t p = 0; p < 5; ++p) {
        r.copy_key(0, 1, p, got.data());
        const std::vector<float> expected =
            p < 4 ? std::vector<float>(want.begin() + p * D, want.begin() + (p + 1) * D) : keys[size_t(p)];
        CHECK(got == expected);
    }
    // A chunk of 4 more packs positions 4..7: its checkpoint keeps position 4's float32 rows.
    Int4Checkpoint c;
    r.ensure(next + 4 - r.n_quantized(), next);
    r.save(next, 4, c);
    CHECK(c.residual_from == 4);
    CHECK(c.rows.size() == size_t(1 * L * 2 * H * D));
    for (int64_t i = 0; i < 4; ++i) write(next + i);
    r.pack_below(int4_residual_boundary(next + 4, spec), value_row);
    CHECK(r.n_quantized() == 8);
    r.restore(next, c);
    CHECK(r.n_quantized() == 4);
    r.copy_key(0, 0, 4, got.data());
    CHECK(got == keys[4]);
}

TEST_CASE("Int4Rows: a larger residual keeps the live rows, growing keeps the packed groups", "[row_format][int4]") {
    constexpr int64_t D = 4, G = 2;
    Int4Rows r(1, 1, D, 4, {KvQuant::Int4, G, 0});
    for (int64_t p = 0; p < 2; ++p)
        for (int kv = 0; kv < 2; ++kv)
            for (int64_t d = 0; d < D; ++d) r.residual(kv, 0, 0, p)[d] = float(10 * p + d + kv);
    r.ensure(7, 2);
    CHECK(r.residual_slots() == 7);
    for (int64_t p = 0; p < 2; ++p) CHECK(r.residual(1, 0, 0, p)[3] == float(10 * p + 4));
    std::vector<unsigned char> values(size_t(4 * int4_value_row_bytes(D, G)));
    r.pack_below(2, [&](int64_t, int64_t, int64_t p) { return values.data() + p * int4_value_row_bytes(D, G); });
    std::vector<uint8_t> before(r.key_group(0, 0, 0), r.key_group(0, 0, 0) + int4_key_group_bytes(D, G));
    r.grow(12);
    CHECK(std::vector<uint8_t>(r.key_group(0, 0, 0), r.key_group(0, 0, 0) + int4_key_group_bytes(D, G)) == before);
    CHECK(r.bytes_capacity(12, int4_value_row_bytes(D, G)) == 2 * (12 * int4_value_row_bytes(D, G) + 7 * D * 4));
}
