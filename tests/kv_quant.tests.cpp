// The quantized K/V formats (kv_quant.h): hand-worked values, then every packed byte and every
// dequantized float against tests/reference/kv_quant_reference.py, numpy written from the README's definitions,
// run on fixed random rows and the edge cases (zeros, -0, one huge value, subnormals, NaN, inf).
#include <catch2/catch.hpp>

#include <cstring>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "base/errors.h"
#include "cache/kv_quant.h"
#include "scratch_dir.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

std::vector<float> quant_dequant(KvQuant f, const std::vector<float>& x) {
    std::vector<uint8_t> packed(size_t(row_bytes(f, int64_t(x.size()))));
    std::vector<float> out(x.size());
    quantize_row(f, x.data(), int64_t(x.size()), packed.data());
    dequantize_row(f, packed.data(), int64_t(x.size()), out.data());
    return out;
}

template <class T>
std::vector<T> read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
}

// The first differing element, printed, and whether all are equal (floats compared as bits).
template <class T>
bool same_bits(const std::vector<T>& ours, const std::vector<T>& ref, const char* what) {
    if (ours.size() != ref.size()) {
        UNSCOPED_INFO(what << ": " << ours.size() << " elements, the reference has " << ref.size());
        return false;
    }
    for (size_t i = 0; i < ours.size(); ++i)
        if (std::memcmp(&ours[i], &ref[i], sizeof(T)) != 0) {
            UNSCOPED_INFO(what << ": first difference at " << i << ": " << +ours[i] << " vs reference " << +ref[i]);
            return false;
        }
    return true;
}

}  // namespace

TEST_CASE("int8 per token: absmax / 127, round half to even, dequantized as code * scale", "[kv_quant]") {
    const std::vector<float> x{127.0f, -63.5f, 0.5f, 1.5f, -2.5f, 0.0f, -0.0f, 126.5f};
    std::vector<uint8_t> b(size_t(row_bytes(KvQuant::Int8, 8)));
    REQUIRE(b.size() == 12);
    quantize_row(KvQuant::Int8, x.data(), 8, b.data());
    const std::vector<int> codes{127, -64, 0, 2, -2, 0, 0, 126};  // scale 1: -63.5 -> -64, 0.5 -> 0, 126.5 -> 126
    for (size_t d = 0; d < 8; ++d) CHECK(int(int8_t(b[d])) == codes[d]);
    float scale;
    std::memcpy(&scale, b.data() + 8, 4);
    CHECK(scale == 1.0f);
    const std::vector<float> y = quant_dequant(KvQuant::Int8, x);
    CHECK(y[1] == -64.0f);
    CHECK(!std::signbit(y[6]));  // -0 comes back as +0
}

TEST_CASE("fp8 e4m3fn: every code round-trips, ties go to the even code, 448 saturates", "[kv_quant]") {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F) {
            CHECK(std::isnan(fp8_e4m3_decode(uint8_t(c))));
            continue;
        }
        CHECK(fp8_e4m3_encode(fp8_e4m3_decode(uint8_t(c))) == c);
    }
    CHECK(fp8_e4m3_decode(0x7E) == 448.0f);
    CHECK(fp8_e4m3_decode(0x01) == std::ldexp(1.0f, -9));
    CHECK(fp8_e4m3_encode(1000.0f) == 0x7E);
    CHECK(fp8_e4m3_encode(-std::numeric_limits<float>::infinity()) == 0xFE);
    CHECK(fp8_e4m3_encode(std::ldexp(1.0f, -10)) == 0x00);   // halfway 0 .. 2^-9: even code 0
    CHECK(fp8_e4m3_encode(1.0625f) == 0x38);                 // halfway 1 .. 1.125: even code 1.0
    CHECK(fp8_e4m3_encode(1.1875f) == 0x3A);                 // halfway 1.125 .. 1.25: even code 1.25
    CHECK(fp8_e4m3_encode(-0.0f) == 0x80);
}

TEST_CASE("int4 KIVI: a constant group decodes exactly, codes span 0..15", "[kv_quant]") {
    const int64_t D = 8, G = 4;
    std::vector<float> v{3, 3, 3, 3, 0, 1, 2, 15};
    std::vector<uint8_t> b(size_t(int4_value_row_bytes(D, G)));
    REQUIRE(b.size() == 4 + 2 * 8);
    quantize_int4_values(v.data(), D, G, b.data());
    std::vector<float> y(static_cast<size_t>(D));
    dequantize_int4_values(b.data(), D, G, y.data());
    for (int64_t d = 0; d < D; ++d) CHECK(y[size_t(d)] == v[size_t(d)]);  // scale 0 and scale 1: exact
    CHECK(b[3] == (0x0F << 4 | 0x02));                                    // channels 6, 7: codes 2, 15
    REQUIRE(int4_key_group_bytes(D, G) == G * D / 2 + D * 8);
}

TEST_CASE("the group size must divide head_dim, unknown formats are refused", "[kv_quant]") {
    CHECK_THROWS_AS(parse_kv_quant("int3"), UsageError);
    CHECK(parse_kv_quant("fp8") == KvQuant::Fp8);
    CHECK_THROWS_AS(validate(KvQuantSpec{KvQuant::Int4, 24, 0}, 64), UsageError);
    CHECK_THROWS_AS(validate(KvQuantSpec{KvQuant::Int4, 0, 0}, 64), UsageError);
    CHECK_THROWS_AS(validate(KvQuantSpec{KvQuant::Int8, -1, 0}, 64), UsageError);
    CHECK_THROWS_AS(validate(KvQuantSpec{KvQuant::Int4, 32, -1}, 64), UsageError);
    CHECK_NOTHROW(validate(KvQuantSpec{KvQuant::Int4, 16, 8}, 64));
}

TEST_CASE("packed bytes and dequantized values equal the numpy reference bit for bit", "[kv_quant]") {
    const char* python = "/usr/bin/python3";
    if (std::system((std::string(python) + " -c 'import numpy' 2>/dev/null").c_str()) != 0) {
        WARN("skipped: /usr/bin/python3 with numpy not found (apt install python3-numpy)");
        return;
    }
    const int64_t N = 96, D = 32, G = 16;  // N rows: 6 key groups of G positions
    std::mt19937 rng(17);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(size_t(N * D));
    for (int64_t r = 0; r < N; ++r) {
        const float magnitude = std::ldexp(1.0f, int(r % 11) - 4);  // 2^-4 .. 2^6: scales of every size
        for (int64_t d = 0; d < D; ++d) x[size_t(r * D + d)] = normal(rng) * magnitude;
    }
    auto row = [&](int64_t r) { return x.begin() + r * D; };
    std::fill(row(0), row(1), 0.0f);                                        // all zero
    std::fill(row(1), row(2), -0.0f);                                       // all negative zero
    row(2)[5] = 1e30f;                                                      // one huge value
    row(3)[0] = -3e38f, row(3)[1] = 3e38f;                                  // a range that overflows
    for (int64_t d = 0; d < D; ++d) row(4)[d] = std::ldexp(float(d - 16), -140);  // subnormals
    std::fill(row(5), row(6), 2.5f);                                        // constant
    for (int64_t d = 0; d < D; ++d) row(6)[d] = float(d) - 15.5f;           // ties for int8 after scaling
    row(40)[7] = std::numeric_limits<float>::quiet_NaN();
    row(57)[0] = std::numeric_limits<float>::infinity();
    for (int64_t r = 64; r < 80; ++r) row(r)[3] = -0.0f;                    // a key channel of -0 .. values

    const fs::path work = kvscope::test::scratch_root() / "kv_quant";
    fs::create_directories(work);
    {
        std::ofstream out(work / "rows.f32", std::ios::binary);
        out.write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * sizeof(float)));
    }
    const std::string cmd = std::string(python) + " " + KVSCOPE_SOURCE_DIR "/tests/reference/kv_quant_reference.py " +
                            (work / "rows.f32").string() + " " + std::to_string(N) + " " + std::to_string(D) + " " +
                            std::to_string(G) + " " + (work / "ref").string();
    REQUIRE(std::system(cmd.c_str()) == 0);

    SECTION("int8 and fp8, per token") {
        for (KvQuant f : {KvQuant::Int8, KvQuant::Fp8}) {
            const int64_t B = row_bytes(f, D);
            std::vector<uint8_t> packed(size_t(N * B));
            std::vector<float> deq(size_t(N * D));
            for (int64_t r = 0; r < N; ++r) {
                quantize_row(f, &x[size_t(r * D)], D, &packed[size_t(r * B)]);
                dequantize_row(f, &packed[size_t(r * B)], D, &deq[size_t(r * D)]);
            }
            INFO(to_string(f));
            CHECK(same_bits(packed, read_all<uint8_t>(work / "ref" / (std::string(to_string(f)) + ".bytes")), "bytes"));
            CHECK(same_bits(deq, read_all<float>(work / "ref" / (std::string(to_string(f)) + ".f32")), "values"));
        }
    }
    SECTION("int4 values per token in groups of G channels") {
        const int64_t B = int4_value_row_bytes(D, G);
        std::vector<uint8_t> packed(size_t(N * B));
        std::vector<float> deq(size_t(N * D));
        for (int64_t r = 0; r < N; ++r) {
            quantize_int4_values(&x[size_t(r * D)], D, G, &packed[size_t(r * B)]);
            dequantize_int4_values(&packed[size_t(r * B)], D, G, &deq[size_t(r * D)]);
        }
        CHECK(same_bits(packed, read_all<uint8_t>(work / "ref" / "int4_values.bytes"), "bytes"));
        CHECK(same_bits(deq, read_all<float>(work / "ref" / "int4_values.f32"), "values"));
    }
    SECTION("int4 keys per channel over groups of G positions") {
        const int64_t B = int4_key_group_bytes(D, G);
        std::vector<uint8_t> packed(size_t(N / G * B));
        std::vector<float> deq(size_t(N * D));
        for (int64_t g = 0; g < N / G; ++g) {
            quantize_int4_keys(&x[size_t(g * G * D)], G, D, &packed[size_t(g * B)]);
            dequantize_int4_keys(&packed[size_t(g * B)], G, D, &deq[size_t(g * G * D)]);
        }
        CHECK(same_bits(packed, read_all<uint8_t>(work / "ref" / "int4_keys.bytes"), "bytes"));
        CHECK(same_bits(deq, read_all<float>(work / "ref" / "int4_keys.f32"), "values"));
    }
}
