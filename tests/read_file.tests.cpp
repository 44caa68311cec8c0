// read_file_bounded / open_regular_file: what a reader gets is the file's bytes, and every input that
// is not a regular file within its limit (a FIFO, /dev/zero, a folder, a sparse file over the limit) is
// a LoadError naming the path, found before anything is read. A FIFO must not block: if it did, this
// test would hang (ctest's timeout ends it) instead of failing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "base/errors.h"
#include "io/read_file.h"
#include "scratch_dir.h"

using namespace kvscope;
using namespace kvscope::test;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("read_file", name); }

std::string load_error_of(const std::string& path, const ReadLimit& limit) {
    try {
        read_file_bounded(path, limit);
    } catch (const LoadError& e) {
        CHECK(e.path == path);
        return e.what();
    }
    FAIL("no LoadError for " << path);
    return "";
}

}  // namespace

TEST_CASE("a regular file is read whole, up to exactly its limit", "[read_file]") {
    const fs::path dir = fresh_dir("regular");
    std::string bytes;
    for (int i = 0; i < 3 * (1 << 20) + 7; ++i) bytes += char(i * 31 + (i >> 11));  // more than one read chunk
    write_bytes(dir / "a.bin", bytes);
    CHECK(read_file_bounded((dir / "a.bin").string(), k_text_file) == bytes);
    const ReadLimit exact{bytes.size(), "a test file"};
    CHECK(read_file_bounded((dir / "a.bin").string(), exact) == bytes);
    const ReadLimit one_less{bytes.size() - 1, "a test file"};
    CHECK_THAT(load_error_of((dir / "a.bin").string(), one_less),
               Contains("3.0 MiB is more than the " + size_text(bytes.size() - 1) + " a test file may have"));
    write_bytes(dir / "empty", "");
    CHECK(read_file_bounded((dir / "empty").string(), k_config_file).empty());
}

TEST_CASE("a sparse file over the limit is refused by its size, not read", "[read_file]") {
    const fs::path dir = fresh_dir("sparse");
    const fs::path p = dir / "config.json";
    write_bytes(p, "");
    fs::resize_file(p, uint64_t(3) << 30);  // 3 GiB of holes: reading it would take 3 GiB
    CHECK_THAT(load_error_of(p.string(), k_config_file),
               Contains("config.json: 3 GiB is more than the 16 MiB a config file may have"));
}

TEST_CASE("FIFOs, devices and folders are refused without blocking", "[read_file]") {
    const fs::path dir = fresh_dir("kinds");
    const fs::path fifo = dir / "model.safetensors";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THAT(load_error_of(fifo.string(), k_config_file), Contains("is a FIFO, not a regular file"));
    CHECK_THROWS_AS(open_regular_file(fifo.string(), k_config_file), LoadError);
    CHECK_THAT(load_error_of("/dev/zero", k_text_file), Contains("/dev/zero: is a character device, not a regular file"));
    fs::create_symlink("/dev/zero", dir / "config.json");
    CHECK_THAT(load_error_of((dir / "config.json").string(), k_config_file), Contains("is a character device"));
    CHECK_THAT(load_error_of(dir.string(), k_text_file), Contains("is a folder, not a regular file"));
}

TEST_CASE("a missing file says why, with the caller's hint", "[read_file]") {
    const fs::path p = fresh_dir("missing") / "vocab.json";
    try {
        read_file_bounded(p.string(), k_tokenizer_file, "a tokenizer folder needs vocab.json");
        FAIL("no error");
    } catch (const LoadError& e) {
        CHECK(e.what_is_wrong == "cannot open: No such file or directory");
        CHECK(e.hint == "a tokenizer folder needs vocab.json");
    }
}

TEST_CASE("read_line_bounded counts every byte of a stream against the limit", "[read_file]") {
    std::istringstream in("one\n\ntwo\nthree");
    const ReadLimit limit{14, "a test stream"};
    uint64_t used = 0;
    std::string line;
    REQUIRE(read_line_bounded(in, "stdin", limit, used, line));
    CHECK(line == "one");
    REQUIRE(read_line_bounded(in, "stdin", limit, used, line));
    CHECK(line.empty());
    REQUIRE(read_line_bounded(in, "stdin", limit, used, line));
    CHECK(line == "two");
    CHECK(used == 9);
    // "three" would make 14 bytes: exactly the limit, still read; one byte more is refused
    REQUIRE(read_line_bounded(in, "stdin", limit, used, line));
    CHECK(line == "three");
    CHECK(!read_line_bounded(in, "stdin", limit, used, line));
    std::istringstream endless(std::string(15, '\0'));
    used = 0;
    CHECK_THROWS_WITH(read_line_bounded(endless, "stdin", limit, used, line),
                      "stdin: holds more than the 14 bytes a test stream may have");
}

TEST_CASE("size_text", "[read_file]") {
    CHECK(size_text(0) == "0 bytes");
    CHECK(size_text(1) == "1 byte");
    CHECK(size_text(1023) == "1023 bytes");
    CHECK(size_text(1024) == "1 KiB");
    CHECK(size_text(uint64_t(16) << 20) == "16 MiB");
    CHECK(size_text(uint64_t(3435973837)) == "3.2 GiB");
    CHECK(k_tokenizer_file.bytes == uint64_t(256) << 20);
}
