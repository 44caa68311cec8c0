#pragma once
// NumPy .npy files (format 1.0, little-endian, C order), readable by numpy.load.
//
//   write_npy_f32(path, shape, data)   float32 array; written by write_file_atomic (atomic_file.h)
//   write_npy_u8(path, shape, data)    uint8 array (masks)
//   write_npy_i64(path, shape, data)   int64 array (positions, token ids)
//   npy_bytes_*(...)                   the same bytes in memory
#include <cstdint>
#include <string>
#include <vector>

#include "io/atomic_file.h"  // write_file_atomic, ensure_writable: also used by the npy writers' callers

namespace kvscope {

std::string npy_bytes_f32(const std::vector<int64_t>& shape, const float* data);
std::string npy_bytes_u8(const std::vector<int64_t>& shape, const uint8_t* data);
std::string npy_bytes_i64(const std::vector<int64_t>& shape, const int64_t* data);
void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
void write_npy_u8(const std::string& path, const std::vector<int64_t>& shape, const uint8_t* data);
void write_npy_i64(const std::string& path, const std::vector<int64_t>& shape, const int64_t* data);

}  // namespace kvscope
