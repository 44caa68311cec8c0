#pragma once
// NumPy .npy files (format 1.0, little-endian, C order), readable by numpy.load.
//
//   write_npy_f32(path, shape, data)   float32 array; written atomically (temp file + rename)
//   write_npy_u8(path, shape, data)    uint8 array (masks)
//   write_npy_i64(path, shape, data)   int64 array (positions, token ids)
//   npy_bytes_*(...)                   the same bytes in memory
//   ensure_writable(path)              throws UsageError now if `path` could not be written later
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

std::string npy_bytes_f32(const std::vector<int64_t>& shape, const float* data);
std::string npy_bytes_u8(const std::vector<int64_t>& shape, const uint8_t* data);
std::string npy_bytes_i64(const std::vector<int64_t>& shape, const int64_t* data);
void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
void write_npy_u8(const std::string& path, const std::vector<int64_t>& shape, const uint8_t* data);
void write_npy_i64(const std::string& path, const std::vector<int64_t>& shape, const int64_t* data);

// Whole-file writes used by every exporter: temp file in the same folder, then rename.
void write_file_atomic(const std::string& path, const std::string& bytes);
void ensure_writable(const std::string& path);

}  // namespace kvscope
