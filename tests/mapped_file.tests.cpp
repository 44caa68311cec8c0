// MappedFile: the bytes a reader sees are the file's bytes (compared with what the test wrote), an empty
// file maps to nothing, a move hands the mapping over, and a missing file, a folder or a file over the
// limit is a LoadError naming the path.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "base/errors.h"
#include "io/mapped_file.h"
#include "scratch_dir.h"

using namespace kvscope;
using namespace kvscope::test;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("mapped_file", name); }

const ReadLimit k_test_limit{1 << 20, "a test file"};

// The LoadError of mapping `path`: its path member and its one-line text.
std::pair<std::string, std::string> load_error_of(const std::string& path, const ReadLimit& limit = k_test_limit,
                                                  const std::string& hint = "") {
    try {
        MappedFile f(path, limit, hint);
    } catch (const LoadError& e) {
        return {e.path, e.what()};
    }
    FAIL("no LoadError for " << path);
    return {};
}

}  // namespace

TEST_CASE("a mapped file holds the file's bytes, and a move hands them over", "[mapped_file]") {
    const fs::path dir = fresh_dir("contents");
    std::string bytes;
    for (int i = 0; i < 70000; ++i) bytes += char((i * 7919) >> 3);  // more than a page, NULs included
    write_bytes(dir / "model.safetensors", bytes);

    MappedFile f((dir / "model.safetensors").string(), k_test_limit);
    CHECK(f.path() == (dir / "model.safetensors").string());
    REQUIRE(f.size() == bytes.size());
    REQUIRE(f.data() != nullptr);
    CHECK(std::memcmp(f.data(), bytes.data(), bytes.size()) == 0);

    const std::byte* at = f.data();
    MappedFile g(std::move(f));
    CHECK(g.data() == at);  // views into the bytes stay valid
    CHECK(g.size() == bytes.size());
    CHECK(f.data() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from file owns nothing
    CHECK(f.size() == 0);

    write_bytes(dir / "b.gguf", "GGUF");
    MappedFile h((dir / "b.gguf").string(), k_test_limit);
    h = std::move(g);
    CHECK(h.data() == at);
    CHECK(std::memcmp(h.data(), bytes.data(), bytes.size()) == 0);
    CHECK(h.path() == (dir / "model.safetensors").string());
}

TEST_CASE("an empty file maps to nothing, without an error", "[mapped_file]") {
    const fs::path p = fresh_dir("empty") / "model.gguf";
    write_bytes(p, "");
    MappedFile f(p.string(), k_test_limit);
    CHECK(f.size() == 0);
    CHECK(f.data() == nullptr);
}

TEST_CASE("a missing file, a folder or a file over the limit is a LoadError naming the path", "[mapped_file]") {
    const fs::path dir = fresh_dir("errors");
    const std::string missing = (dir / "model.safetensors").string();
    const auto [missing_path, missing_text] = load_error_of(missing, k_test_limit, "download it first");
    CHECK(missing_path == missing);
    CHECK(missing_text == missing + ": cannot open: No such file or directory (download it first)");

    const auto [folder_path, folder_text] = load_error_of(dir.string());
    CHECK(folder_path == dir.string());
    CHECK(folder_text == dir.string() + ": is a folder, not a regular file");

    write_bytes(dir / "big.gguf", std::string(2000, 'x'));
    const auto [big_path, big_text] = load_error_of((dir / "big.gguf").string(), ReadLimit{1024, "a small file"});
    CHECK(big_path == (dir / "big.gguf").string());
    CHECK(big_text == (dir / "big.gguf").string() + ": 2.0 KiB is more than the 1 KiB a small file may have");
}
