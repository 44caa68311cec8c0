#include "npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "errors.h"

namespace kvscope {
namespace {

std::string npy_bytes(const char* descr, size_t item, const std::vector<int64_t>& shape, const void* data) {
    std::string dims;
    int64_t n = 1;
    for (int64_t d : shape) {
        dims += std::to_string(d) + ", ";
        n *= d;
    }
    if (shape.size() > 1) dims.resize(dims.size() - 2);  // (3,) for one dim, (2, 3) for more
    std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
    // Magic (6) + version (2) + header length (2) + header, padded with spaces so data starts on 64 bytes.
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    std::string out("\x93NUMPY\x01\x00", 8);
    out += char(header.size() & 0xFF);
    out += char(header.size() >> 8);
    out += header;
    out.append(static_cast<const char*>(data), size_t(n) * item);
    return out;
}

}  // namespace

std::string npy_bytes_f32(const std::vector<int64_t>& shape, const float* data) {
    return npy_bytes("<f4", 4, shape, data);
}
std::string npy_bytes_u8(const std::vector<int64_t>& shape, const uint8_t* data) {
    return npy_bytes("|u1", 1, shape, data);
}
std::string npy_bytes_i64(const std::vector<int64_t>& shape, const int64_t* data) {
    return npy_bytes("<i8", 8, shape, data);
}
void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
    write_file_atomic(path, npy_bytes_f32(shape, data));
}
void write_npy_u8(const std::string& path, const std::vector<int64_t>& shape, const uint8_t* data) {
    write_file_atomic(path, npy_bytes_u8(shape, data));
}
void write_npy_i64(const std::string& path, const std::vector<int64_t>& shape, const int64_t* data) {
    write_file_atomic(path, npy_bytes_i64(shape, data));
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
    const std::string temp = path + ".tmp." + std::to_string(::getpid());
    std::FILE* f = std::fopen(temp.c_str(), "wb");
    if (!f) throw UsageError("cannot write " + path + ": " + std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed || std::rename(temp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(temp.c_str());
        throw UsageError("cannot write " + path + ": " + why);
    }
}

void ensure_writable(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (path.empty()) throw UsageError("an output path is empty");
    if (fs::is_directory(path, ec)) throw UsageError("cannot write " + path + ": it is a folder");
    fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) parent = ".";
    if (!fs::is_directory(parent, ec)) throw UsageError("cannot write " + path + ": no folder " + parent.string());
    if (::access(parent.c_str(), W_OK) != 0)
        throw UsageError("cannot write " + path + ": folder " + parent.string() + " is not writable");
    if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
        throw UsageError("cannot write " + path + ": the file is not writable");
}

}  // namespace kvscope
