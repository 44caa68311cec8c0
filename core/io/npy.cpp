#include "io/npy.h"

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

}  // namespace kvscope
