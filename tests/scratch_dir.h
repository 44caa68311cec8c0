#pragma once
// Scratch folders and files for tests that touch the file system.
//   fresh_dir(area, name)      KVSCOPE_TEST_WORK/area/name, emptied and created
//   read_bytes(path)           a file's bytes ("" when it cannot be read)
//   write_bytes(path, bytes)   a file made the way a user (not kvscope) makes one
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kvscope::test {

inline std::filesystem::path fresh_dir(const std::string& area, const std::string& name) {
    const std::filesystem::path dir = std::filesystem::path(KVSCOPE_TEST_WORK) / area / name;
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
