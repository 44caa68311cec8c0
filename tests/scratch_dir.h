#pragma once
// Scratch folders and files for tests that touch the file system.
//   scratch_root()             KVSCOPE_TEST_WORK/pidN: this test process's own, removed when it exits
//   fresh_dir(area, name)      scratch_root()/area/name, emptied and created
//   read_bytes(path)           a file's bytes ("" when it cannot be read)
//   write_bytes(path, bytes)   a file made the way a user (not kvscope) makes one
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include <unistd.h>

namespace kvscope::test {

// ctest runs each case of a test executable as a process of its own, several at once. Under one shared
// folder two cases that wrote the same name raced: one truncated bad.safetensors while the other read it.
// The path is never destroyed, so the exit handler that removes the folder can still read it.
inline const std::filesystem::path& scratch_root() {
    static const std::filesystem::path* const root = [] {
        const auto* dir = new std::filesystem::path(std::filesystem::path(KVSCOPE_TEST_WORK) /
                                                    ("pid" + std::to_string(::getpid())));
        std::filesystem::remove_all(*dir);  // a folder left by an earlier process with this id
        std::filesystem::create_directories(*dir);
        std::atexit([] {
            std::error_code ignored;
            std::filesystem::remove_all(scratch_root(), ignored);
        });
        return dir;
    }();
    return *root;
}

inline std::filesystem::path fresh_dir(const std::string& area, const std::string& name) {
    const std::filesystem::path dir = scratch_root() / area / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

inline std::string read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
}

}  // namespace kvscope::test
