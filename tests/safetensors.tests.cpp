// safetensors: reading hand-built files (bytes laid out here from the format description, not by
// the writer), the writer's exact output, every kind of broken file, and the f16/bf16 conversions
// against hand-computed bit patterns and an independent nearest-value search.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/errors.h"
#include "model/safetensors.h"
#include "scratch_dir.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

fs::path work_dir() {
    fs::path dir = kvscope::test::scratch_root() / "safetensors";
    fs::create_directories(dir);
    return dir;
}

std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t x) {
    std::string s(8, '\0');
    for (int k = 0; k < 8; ++k) s[k] = char((x >> (8 * k)) & 0xFF);
    return s;
}

// A file made by hand: length prefix, header text as given (no padding), then data bytes.
std::string raw_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

std::string f32_bytes(std::initializer_list<uint32_t> bits) {
    std::string s;
    for (uint32_t b : bits)
        for (int k = 0; k < 4; ++k) s += char((b >> (8 * k)) & 0xFF);
    return s;
}

std::string load_error(const std::string& file_bytes, const std::string& name = "bad.safetensors") {
    fs::path p = work_dir() / name;
    write_bytes(p, file_bytes);
    try {
        SafetensorsFile f(p.string());
    } catch (const LoadError& e) {
        CHECK(e.path == p.string());
        return e.what();
    }
    FAIL("expected a LoadError");
    return "";
}

std::vector<std::byte> as_bytes(const std::string& s) {
    std::vector<std::byte> v(s.size());
    std::memcpy(v.data(), s.data(), s.size());
    return v;
}

std::vector<std::byte> u16_bytes(std::initializer_list<uint16_t> values) {
    std::vector<std::byte> v;
    for (uint16_t x : values) {
        v.push_back(std::byte(x & 0xFF));
        v.push_back(std::byte(x >> 8));
    }
    return v;
}

uint32_t bits_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

float float_of(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

// Two tensors by hand: "a" F32 [2] = {1.0, -2.0} at [0, 8), "b" F32 [] = {0.5} at [8, 12).
const std::string kTwoHeader =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[],"data_offsets":[8,12]}})";
const std::string kTwoData = f32_bytes({0x3F800000, 0xC0000000, 0x3F000000});

}  // namespace

TEST_CASE("a hand-built file reads back with views into the data section") {
    fs::path p = work_dir() / "two.safetensors";
    // Metadata first, and tensors listed in the header out of offset order.
    const std::string header =
        R"({"b":{"dtype":"F32","shape":[],"data_offsets":[8,12]}, "__metadata__":{"format":"pt"},)"
        R"( "a":{"shape":[2],"data_offsets":[0,8],"dtype":"F32"}}   )";
    write_bytes(p, raw_file(header, kTwoData));
    SafetensorsFile f(p.string());
    CHECK(f.file_size() == 8 + header.size() + 12);
    REQUIRE(f.tensors().size() == 2);
    CHECK(f.tensors()[0].name == "a");  // offset order
    CHECK(f.tensors()[1].name == "b");
    const TensorView* a = f.find("a");
    REQUIRE(a);
    CHECK(a->dtype == Dtype::F32);
    CHECK(a->shape == std::vector<int64_t>{2});
    CHECK(a->n_elements() == 2);
    CHECK(a->n_bytes == 8);
    float values[2];
    std::memcpy(values, a->data, 8);
    CHECK(values[0] == 1.0f);
    CHECK(values[1] == -2.0f);
    const TensorView* b = f.find("b");
    REQUIRE(b);
    CHECK(b->shape.empty());
    CHECK(b->n_elements() == 1);
    float half;
    std::memcpy(&half, b->data, 4);
    CHECK(half == 0.5f);
    CHECK(b->data == a->data + 8);
    CHECK(f.find("c") == nullptr);
    CHECK(f.metadata().at("format") == "pt");
}

TEST_CASE("empty and zero-sized tensors are valid") {
    fs::path p = work_dir() / "empty.safetensors";
    write_bytes(p, raw_file("{}", ""));
    CHECK(SafetensorsFile(p.string()).tensors().empty());
    write_bytes(p, raw_file(R"({"z":{"dtype":"F16","shape":[0,5],"data_offsets":[0,0]},)"
                            R"("x":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}})",
                            "\x80\x3F"));
    SafetensorsFile f(p.string());
    REQUIRE(f.tensors().size() == 2);
    CHECK(f.find("z")->n_elements() == 0);
    CHECK(f.find("z")->n_bytes == 0);
    CHECK(f.find("x")->n_bytes == 2);
}

TEST_CASE("integer, boolean and F64 tensors open: the format allows them, the model decides") {
    // Checkpoints may carry buffers kvscope never reads (attention-mask biases stored as U8 or BOOL).
    fs::path p = work_dir() / "others.safetensors";
    write_bytes(p, raw_file(R"({"m":{"dtype":"BOOL","shape":[2,2],"data_offsets":[0,4]},)"
                            R"("i":{"dtype":"I64","shape":[1],"data_offsets":[4,12]},)"
                            R"("d":{"dtype":"F64","shape":[],"data_offsets":[12,20]},)"
                            R"("u":{"dtype":"U8","shape":[4],"data_offsets":[20,24]}})",
                            std::string(24, '\x01')));
    SafetensorsFile f(p.string());
    REQUIRE(f.tensors().size() == 4);
    CHECK(f.find("m")->dtype == Dtype::BOOL);
    CHECK(f.find("i")->dtype == Dtype::I64);
    CHECK(f.find("i")->n_bytes == 8);
    CHECK(f.find("d")->dtype == Dtype::F64);
    CHECK(std::string(to_string(f.find("u")->dtype)) == "U8");
    CHECK_FALSE(is_float_dtype(Dtype::U8));
    CHECK(is_float_dtype(Dtype::BF16));
}

TEST_CASE("the writer lays out header, padding and data as the format says") {
    fs::path p = work_dir() / "written.safetensors";
    // F32 1.0 = 0x3F800000; BF16 1.0 = 0x3F80; F16 1.0 = 0x3C00, -2.0 = 0xC000 (IEEE 754 by hand).
    std::vector<TensorToWrite> tensors = {
        {"w", Dtype::F32, {2}, as_bytes(f32_bytes({0x3F800000, 0x40490FDB}))},
        {"h", Dtype::F16, {1, 2}, u16_bytes({0x3C00, 0xC000})},
        {"b", Dtype::BF16, {1}, u16_bytes({0x3F80})},
    };
    write_safetensors(p.string(), tensors, {{"format", "pt"}});
    const std::string expected_header =
        R"({"__metadata__":{"format":"pt"},)"
        R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("h":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]},)"
        R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]}})";
    const size_t padded = (expected_header.size() + 7) / 8 * 8;
    const std::string expected = le64(padded) + expected_header + std::string(padded - expected_header.size(), ' ') +
                                 f32_bytes({0x3F800000, 0x40490FDB}) + std::string("\x00\x3C\x00\xC0\x80\x3F", 6);
    CHECK(read_bytes(p) == expected);
    CHECK((8 + padded) % 8 == 0);
    CHECK_FALSE(fs::exists(p.string() + ".tmp-" + std::to_string(::getpid())));

    SafetensorsFile f(p.string());
    REQUIRE(f.tensors().size() == 3);
    CHECK(f.tensors()[0].name == "w");
    CHECK(f.tensors()[1].name == "h");
    CHECK(f.tensors()[2].name == "b");
    CHECK(f.find("h")->dtype == Dtype::F16);
    CHECK(f.find("h")->shape == std::vector<int64_t>{1, 2});
    CHECK(f.find("b")->dtype == Dtype::BF16);
    uint16_t h[2], b;
    std::memcpy(h, f.find("h")->data, 4);
    std::memcpy(&b, f.find("b")->data, 2);
    CHECK(f16_to_f32(h[0]) == 1.0f);
    CHECK(f16_to_f32(h[1]) == -2.0f);
    CHECK(bf16_to_f32(b) == 1.0f);
    // Data starts 8-byte aligned in the file, so F32 views are 4-byte aligned in the mapping.
    CHECK(reinterpret_cast<uintptr_t>(f.find("w")->data) % 8 == 0);
    CHECK(f.metadata().size() == 1);

    // Writing again replaces the file.
    write_safetensors(p.string(), {{"only", Dtype::F32, {}, as_bytes(f32_bytes({0}))}});
    CHECK(SafetensorsFile(p.string()).tensors().size() == 1);
}

TEST_CASE("the writer refuses inconsistent tensors") {
    fs::path p = work_dir() / "refused.safetensors";
    CHECK_THROWS_AS(write_safetensors(p.string(), {{"a", Dtype::F32, {3}, as_bytes("12345678")}}), UsageError);
    CHECK_THROWS_AS(write_safetensors(p.string(), {{"a", Dtype::F16, {1}, u16_bytes({1})},
                                                   {"a", Dtype::F16, {1}, u16_bytes({1})}}),
                    UsageError);
    CHECK_THROWS_AS(write_safetensors(p.string(), {{"__metadata__", Dtype::F16, {1}, u16_bytes({1})}}), UsageError);
    CHECK_THROWS_AS(write_safetensors(p.string(), {{"a", Dtype::F16, {-1}, {}}}), UsageError);
    CHECK_FALSE(fs::exists(p));
    CHECK_THROWS_AS(write_safetensors((work_dir() / "no_such_dir" / "x.safetensors").string(), {}), LoadError);
}

TEST_CASE("every truncation of a valid file is a LoadError") {
    const std::string whole = raw_file(kTwoHeader, kTwoData);
    for (size_t n = 0; n < whole.size(); ++n) {
        INFO("truncated to " << n << " of " << whole.size() << " bytes");
        std::string msg = load_error(whole.substr(0, n), "truncated.safetensors");
        if (n >= 8 + kTwoHeader.size())
            CHECK(msg.find("file is truncated: expected " + std::to_string(whole.size()) + " bytes, found " +
                           std::to_string(n)) != std::string::npos);
        else
            CHECK(msg.find("was the download interrupted?") != std::string::npos);
    }
    CHECK_THAT(load_error(whole + "x"), Catch::Contains("1 bytes after the last tensor belong to no tensor"));
}

TEST_CASE("broken headers are LoadErrors that say what is wrong") {
    auto tensor = [](const std::string& name, const std::string& dtype, const std::string& shape,
                     const std::string& offsets) {
        return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
    };
    const std::string a8 = tensor("a", "F32", "[2]", "[0,8]");
    struct Case {
        const char* name;
        std::string file;
        const char* message;
    };
    const Case cases[] = {
        {"header length past the end", le64(1000) + "{}", "file is truncated: the header alone needs 1008 bytes, found 10"},
        {"absurd header length", le64(uint64_t(1) << 40) + "{}", "is implausibly large"},
        {"zip file", std::string("PK\x03\x04", 4) + std::string(60, '\0'), "looks like a zip file"},
        {"zero header length", le64(0) + "", "header is not a JSON object"},
        {"header not an object", raw_file("[1]     ", ""), "header is not a JSON object"},
        {"header bad JSON", raw_file("{\"a\":}", ""), "header is not valid JSON at byte 13 of the file"},
        {"header with trailing comma", raw_file("{" + a8 + ",}", kTwoData.substr(0, 8)), "header is not valid JSON"},
        {"duplicate names", raw_file("{" + a8 + "," + a8 + "}", kTwoData.substr(0, 8)), "duplicate key \"a\""},
        {"entry not an object", raw_file(R"({"a":[1]})", ""), "tensor \"a\" must be an object"},
        {"extra key", raw_file(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})", kTwoData.substr(0, 4)),
         "tensor \"a\" has an unexpected key \"x\""},
        {"missing dtype", raw_file(R"({"a":{"shape":[],"data_offsets":[0,4]}})", kTwoData.substr(0, 4)),
         "tensor \"a\" has no dtype"},
        {"missing shape", raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", kTwoData.substr(0, 4)),
         "tensor \"a\" has no shape"},
        {"missing offsets", raw_file(R"({"a":{"dtype":"F32","shape":[]}})", kTwoData.substr(0, 4)),
         "tensor \"a\" has no data_offsets"},
        {"I64 size mismatch", raw_file("{" + tensor("h.0.attn.bias", "I64", "[2]", "[0,8]") + "}", kTwoData.substr(0, 8)),
         "tensor \"h.0.attn.bias\" has shape [2] of I64, which needs 16 bytes"},
        {"unknown dtype", raw_file("{" + tensor("x", "f32", "[1]", "[0,4]") + "}", kTwoData.substr(0, 4)),
         "tensor \"x\" has unknown dtype \"f32\""},
        {"dtype not a string", raw_file(R"({"x":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", kTwoData.substr(0, 4)),
         "dtype must be a string"},
        {"negative dim", raw_file("{" + tensor("x", "F32", "[-1]", "[0,4]") + "}", kTwoData.substr(0, 4)),
         "shape must hold whole numbers >= 0"},
        {"fractional dim", raw_file("{" + tensor("x", "F32", "[1.5]", "[0,4]") + "}", kTwoData.substr(0, 4)),
         "shape must hold whole numbers >= 0"},
        {"shape not an array", raw_file("{" + tensor("x", "F32", "4", "[0,4]") + "}", kTwoData.substr(0, 4)),
         "shape must be an array"},
        {"shape overflowing int64", raw_file("{" + tensor("x", "F32", "[4611686018427387904,4]", "[0,4]") + "}",
                                             kTwoData.substr(0, 4)),
         "more elements than the file can hold"},
        {"shape/size mismatch", raw_file("{" + tensor("x", "F32", "[3]", "[0,8]") + "}", kTwoData.substr(0, 8)),
         "tensor \"x\" has shape [3] of F32, which needs 12 bytes, but data_offsets [0, 8] span 8"},
        {"F16 size mismatch", raw_file("{" + tensor("x", "F16", "[2,2]", "[0,4]") + "}", kTwoData.substr(0, 4)),
         "which needs 8 bytes"},
        {"offsets reversed", raw_file("{" + tensor("x", "F32", "[0]", "[4,0]") + "}", kTwoData.substr(0, 4)),
         "end before they begin"},
        {"offsets wrong arity", raw_file("{" + tensor("x", "F32", "[1]", "[0,4,8]") + "}", kTwoData.substr(0, 4)),
         "data_offsets must be [begin, end]"},
        {"offsets negative", raw_file("{" + tensor("x", "F32", "[1]", "[-4,0]") + "}", kTwoData.substr(0, 4)),
         "data_offsets must be [begin, end]"},
        {"offsets not integers", raw_file("{" + tensor("x", "F32", "[1]", "[0.0,4]") + "}", kTwoData.substr(0, 4)),
         "data_offsets must be [begin, end]"},
        {"out-of-bounds offsets", raw_file("{" + tensor("x", "F32", "[1]", "[8,12]") + "}", kTwoData.substr(0, 8)),
         "file is truncated: expected"},
        {"huge offsets", raw_file("{" + tensor("x", "F32", "[1]", "[9223372036854775800,9223372036854775804]") + "}",
                                  kTwoData.substr(0, 4)),
         "file is truncated: expected"},
        {"overlapping tensors",
         raw_file("{" + tensor("a", "F32", "[2]", "[0,8]") + "," + tensor("b", "F32", "[2]", "[4,12]") + "}", kTwoData),
         "tensors \"a\" and \"b\" overlap"},
        {"same offsets twice",
         raw_file("{" + tensor("a", "F32", "[1]", "[0,4]") + "," + tensor("b", "F32", "[1]", "[0,4]") + "}",
                  kTwoData.substr(0, 4)),
         "overlap"},
        {"hole between tensors",
         raw_file("{" + tensor("a", "F32", "[1]", "[0,4]") + "," + tensor("b", "F32", "[1]", "[8,12]") + "}", kTwoData),
         "data bytes [4, 8) belong to no tensor"},
        {"hole at the start", raw_file("{" + tensor("b", "F32", "[1]", "[4,8]") + "}", kTwoData.substr(0, 8)),
         "data bytes [0, 4) belong to no tensor"},
        {"metadata not an object", raw_file(R"({"__metadata__":"pt"})", ""), "__metadata__ must be an object of strings"},
        {"metadata with a number", raw_file(R"({"__metadata__":{"format":"pt","step":3}})", ""),
         "__metadata__ value for \"step\" must be a string, found number"},
        {"metadata with null", raw_file(R"({"__metadata__":{"x":null}})", ""), "must be a string, found null"},
    };
    for (const Case& c : cases) {
        INFO(c.name);
        CHECK_THAT(load_error(c.file), Catch::Contains(c.message));
    }
}

TEST_CASE("missing files and directories are LoadErrors") {
    CHECK_THROWS_AS(SafetensorsFile((work_dir() / "does_not_exist.safetensors").string()), LoadError);
    CHECK_THROWS_AS(SafetensorsFile(work_dir().string()), LoadError);
}

TEST_CASE("f16 and bf16 conversions match hand-computed bit patterns") {
    // IEEE 754 binary16: sign | 5-bit exponent (bias 15) | 10-bit fraction. bfloat16 is the top half of f32.
    CHECK(f32_to_f16(1.0f) == 0x3C00);
    CHECK(f32_to_f16(-2.0f) == 0xC000);
    CHECK(f32_to_f16(0.5f) == 0x3800);
    CHECK(f32_to_f16(65504.0f) == 0x7BFF);                  // largest finite
    CHECK(f32_to_f16(65519.0f) == 0x7BFF);                  // below the halfway point to 65536
    CHECK(f32_to_f16(65520.0f) == 0x7C00);                  // halfway: ties to even = inf
    CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);     // smallest normal
    CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);     // smallest subnormal
    CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);     // half of it: ties to even = 0
    CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);     // above half rounds up
    CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 units: tie, to even 2
    CHECK(f32_to_f16(std::ldexp(5.0f, -25)) == 0x0002);     // 2.5 units: tie, to even 2
    CHECK(f32_to_f16(3.14159265f) == 0x4248);               // 3.140625
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie between 0x3C00 and 0x3C01: even
    CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie between 0x3C01 and 0x3C02: even
    CHECK(f32_to_f16(-0.0f) == 0x8000);
    CHECK(f32_to_f16(INFINITY) == 0x7C00);
    CHECK(f32_to_f16(-INFINITY) == 0xFC00);
    CHECK(f32_to_f16(1e10f) == 0x7C00);
    uint16_t nan16 = f32_to_f16(NAN);
    CHECK((nan16 & 0x7C00) == 0x7C00);
    CHECK((nan16 & 0x03FF) != 0);

    CHECK(f16_to_f32(0x3C00) == 1.0f);
    CHECK(f16_to_f32(0xC000) == -2.0f);
    CHECK(f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));
    CHECK(bits_of(f16_to_f32(0x8000)) == 0x80000000u);
    CHECK(std::isinf(f16_to_f32(0x7C00)));
    CHECK(std::isnan(f16_to_f32(0x7E00)));

    CHECK(f32_to_bf16(1.0f) == 0x3F80);
    CHECK(f32_to_bf16(-2.0f) == 0xC000);
    CHECK(f32_to_bf16(3.14159265f) == 0x4049);              // 0x40490FDB: low half < 0x8000, rounds down
    CHECK(f32_to_bf16(float_of(0x3F808000)) == 0x3F80);     // exact tie, even stays
    CHECK(f32_to_bf16(float_of(0x3F818000)) == 0x3F82);     // exact tie, odd rounds up
    CHECK(f32_to_bf16(float_of(0x3F808001)) == 0x3F81);     // just above the tie
    CHECK(f32_to_bf16(float_of(0x7F7FFFFF)) == 0x7F80);     // FLT_MAX rounds to inf
    CHECK(f32_to_bf16(INFINITY) == 0x7F80);
    CHECK(f32_to_bf16(-INFINITY) == 0xFF80);
    CHECK(f32_to_bf16(float_of(0x7F800001)) != 0x7F80);     // a NaN whose payload is in the low half stays NaN
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(float_of(0x7F800001)))));
    CHECK(bf16_to_f32(0x3F80) == 1.0f);
    CHECK(bf16_to_f32(0xC000) == -2.0f);
}

TEST_CASE("f16 and bf16 decode every pattern exactly and re-encode it unchanged") {
    for (uint32_t h = 0; h < 65536; ++h) {
        uint16_t x = uint16_t(h);
        // Reference decode from the definition, in double.
        const int sign = (x >> 15) ? -1 : 1;
        const int exp = (x >> 10) & 0x1F;
        const int frac = x & 0x3FF;
        float got = f16_to_f32(x);
        if (exp == 31) {
            CHECK((frac ? std::isnan(got) : std::isinf(got)));
            continue;
        }
        double want = exp == 0 ? sign * std::ldexp(double(frac), -24) : sign * std::ldexp(1.0 + frac / 1024.0, exp - 15);
        if (double(got) != want) FAIL_CHECK("f16 0x" << std::hex << h << " decoded to " << got << ", want " << want);
        if (f32_to_f16(got) != x) FAIL_CHECK("f16 0x" << std::hex << h << " did not survive a round trip");
        float b = bf16_to_f32(x);
        if (std::isnan(b)) continue;
        if (bits_of(b) != (h << 16)) FAIL_CHECK("bf16 0x" << std::hex << h << " decoded wrongly");
        if (f32_to_bf16(b) != x) FAIL_CHECK("bf16 0x" << std::hex << h << " did not survive a round trip");
    }
}

namespace {

// Independent reference: the nearest representable value by comparing distances in double
// (exact here: every f32, f16 and bf16 value and their differences fit a double), ties to an even
// pattern. `to_double` decodes a candidate pattern; `top` is the first pattern past the largest
// finite value, which stands for 2^(emax+1) as IEEE 754's overflow rule says.
template <class Decode>
uint16_t nearest(double x, uint16_t lo, Decode to_double) {
    const uint16_t hi = uint16_t(lo + 1);
    const double dlo = std::fabs(x - to_double(lo));
    const double dhi = std::fabs(x - to_double(hi));
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

double f16_value(uint16_t magnitude) {  // non-negative patterns; 0x7C00 counts as 65536
    if (magnitude >= 0x7C00) return 65536.0;
    const int exp = magnitude >> 10, frac = magnitude & 0x3FF;
    return exp == 0 ? std::ldexp(double(frac), -24) : std::ldexp(1.0 + frac / 1024.0, exp - 15);
}

double bf16_value(uint16_t magnitude) {  // non-negative patterns; 0x7F80 counts as 2^128
    if (magnitude >= 0x7F80) return std::ldexp(1.0, 128);
    return double(float_of(uint32_t(magnitude) << 16));
}

uint16_t reference_f16(float f) {
    const uint16_t sign = (bits_of(f) >> 31) ? 0x8000 : 0;
    const double x = std::fabs(double(f));
    // Largest pattern not above x, by binary search over the ordered non-negative patterns.
    uint16_t lo = 0, hi = 0x7C00;
    while (lo < hi) {
        uint16_t mid = uint16_t((lo + hi + 1) / 2);
        if (f16_value(mid) <= x) lo = mid;
        else hi = uint16_t(mid - 1);
    }
    if (lo == 0x7C00) return sign | 0x7C00;
    return uint16_t(sign | nearest(x, lo, f16_value));
}

uint16_t reference_bf16(float f) {
    const uint16_t sign = (bits_of(f) >> 31) ? 0x8000 : 0;
    const double x = std::fabs(double(f));
    const uint16_t lo = uint16_t((bits_of(f) & 0x7FFFFFFF) >> 16);  // truncation is the value below
    if (lo >= 0x7F80) return sign | 0x7F80;
    return uint16_t(sign | nearest(x, lo, bf16_value));
}

}  // namespace

TEST_CASE("f32 to f16/bf16 rounds to nearest even like an independent nearest-value search") {
    std::vector<float> samples;
    // Every f16 value, the halfway points to its neighbours, and one f32 ulp either side of those.
    for (uint32_t h = 0; h < 0x7C00; ++h) {
        const double v = f16_value(uint16_t(h));
        const double mid = (v + f16_value(uint16_t(h + 1))) / 2;
        for (double d : {v, mid}) {
            const float f = float(d);  // exact: both have at most 12 significant bits
            samples.push_back(f);
            samples.push_back(std::nextafter(f, 0.0f));
            samples.push_back(std::nextafter(f, INFINITY));
        }
    }
    // The same for bf16 ties: patterns with low half exactly 0x8000, and neighbours.
    std::mt19937 rng(12345);
    for (int i = 0; i < 200000; ++i) {
        const uint32_t top = rng() & 0x7F7FFFFF;
        for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, uint32_t(rng() & 0xFFFFu)}) samples.push_back(float_of((top & 0xFFFF0000u) | low));
        samples.push_back(float_of(rng() & 0x7FFFFFFF));  // any finite or inf/NaN magnitude
    }
    size_t checked = 0;
    for (float f : samples) {
        for (float s : {f, -f}) {
            if (std::isnan(s)) continue;
            ++checked;
            const uint16_t want16 = reference_f16(s), got16 = f32_to_f16(s);
            if (got16 != want16)
                FAIL_CHECK("f16 of " << s << " (0x" << std::hex << bits_of(s) << "): got 0x" << got16 << ", want 0x"
                                     << want16);
            const uint16_t wantb = reference_bf16(s), gotb = f32_to_bf16(s);
            if (gotb != wantb)
                FAIL_CHECK("bf16 of " << s << " (0x" << std::hex << bits_of(s) << "): got 0x" << gotb << ", want 0x"
                                      << wantb);
        }
    }
    CHECK(checked > 1'000'000);
}
