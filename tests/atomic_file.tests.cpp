// write_file_atomic: the target is replaced whole, and every way a write can fail (no folder, the
// target is a folder, the data does not fit, the caller's fill throws) leaves the old file byte for
// byte, no temporary file, and an error naming the path. Permission bits cannot stand in for a failing
// disk here: tests may run as root, which ignores them.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include <sys/resource.h>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "scratch_dir.h"

using namespace kvscope;
using namespace kvscope::test;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("atomic_file", name); }

// Files in dir other than the ones the test made: temporaries the writer left behind.
int n_other_files(const fs::path& dir, const fs::path& keep) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path() != keep;
    return n;
}

// The message of the LoadError that f throws, or "" when it throws none.
template <class F>
std::string load_error_of(F&& f) {
    try {
        f();
    } catch (const LoadError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("write_file_atomic replaces the target whole") {
    const fs::path dir = fresh_dir("replace");
    const fs::path path = dir / "out.bin";
    write_file_atomic(path.string(), std::string(10'000, 'a'));
    CHECK(read_bytes(path) == std::string(10'000, 'a'));
    const std::string shorter("b\0c\n", 4);  // binary bytes, shorter than before: no old tail remains
    write_file_atomic(path.string(), shorter);
    CHECK(read_bytes(path) == shorter);
    write_file_atomic(path.string(), [](std::FILE* f) {
        for (int i = 0; i < 3; ++i) std::fputs("line\n", f);
    });
    CHECK(read_bytes(path) == "line\nline\nline\n");
    write_file_atomic(path.string(), std::string());
    CHECK(fs::file_size(path) == 0);
    CHECK(n_other_files(dir, path) == 0);
}

TEST_CASE("a failed write_file_atomic leaves the old file as it was and no temporary file") {
    const fs::path dir = fresh_dir("failures");
    const fs::path path = dir / "keep.json";
    const std::string before = "{\"old\": true}\n";
    write_file_atomic(path.string(), before);

    SECTION("fill throws: its exception passes through") {
        CHECK_THROWS_WITH(write_file_atomic(path.string(),
                                            [](std::FILE* f) {
                                                std::fputs("half", f);
                                                throw std::runtime_error("fill failed");
                                            }),
                          "fill failed");
    }
    SECTION("the data does not fit (RLIMIT_FSIZE, as a full disk would)") {
        rlimit old{};
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
        rlimit small = old;
        small.rlim_cur = 4096;
        auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
        const std::string error = load_error_of([&] { write_file_atomic(path.string(), std::string(100'000, 'x')); });
        ::setrlimit(RLIMIT_FSIZE, &old);
        std::signal(SIGXFSZ, old_handler);
        CHECK_THAT(error, Contains(path.string() + ": cannot write: "));
    }
    SECTION("the target is a folder: the rename fails after the data was written") {
        const fs::path folder = dir / "a_folder";
        fs::create_directories(folder / "inside");
        const std::string error = load_error_of([&] { write_file_atomic(folder.string(), std::string("data")); });
        CHECK_THAT(error, Contains(folder.string() + ": cannot write: "));
        CHECK(fs::is_directory(folder / "inside"));
        fs::remove_all(folder);
    }
    CHECK(read_bytes(path) == before);
    CHECK(n_other_files(dir, path) == 0);
}

TEST_CASE("write_file_atomic into a missing folder names the path and creates nothing") {
    const fs::path dir = fresh_dir("missing");
    const fs::path path = dir / "no_such_folder" / "x.npy";
    const std::string error = load_error_of([&] { write_file_atomic(path.string(), std::string("x")); });
    CHECK_THAT(error, Contains(path.string() + ": cannot write: No such file or directory"));
    CHECK(fs::is_empty(dir));
}

TEST_CASE("ensure_writable refuses what write_file_atomic could not write") {
    const fs::path dir = fresh_dir("ensure");
    CHECK_NOTHROW(ensure_writable((dir / "new.png").string()));
    CHECK_THROWS_AS(ensure_writable(dir.string()), UsageError);
    CHECK_THROWS_AS(ensure_writable((dir / "missing" / "x.png").string()), UsageError);
    CHECK_THROWS_AS(ensure_writable(""), UsageError);
}
