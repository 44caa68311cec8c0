#pragma once
// The GGUF container (llama.cpp's model file), versions 2 and 3, and nothing about any architecture.
// Little-endian throughout:
//   "GGUF", u32 version, u64 tensor count, u64 metadata count
//   metadata: key (u64 length + bytes), u32 value type, value; an array is u32 item type, u64 count, items
//   tensor infos: name, u32 dimension count (<= 4), u64 dimensions innermost first, u32 ggml type,
//                 u64 offset into the data section (a multiple of the alignment)
//   padding to general.alignment (default 32), then the data section
// The file is memory-mapped; tensors are views into the mapping.
//
//   GgufFile f(path)            open, map, validate everything; throws LoadError naming the file and the
//                               key or tensor at fault
//   f.metadata()                every key, in file order; find(key) one value or null
//   f.tensors() / f.tensor(name)   every tensor in file order / one or null
//   f.mapped()                  the whole mapping (read-only, private: a dropped page is read again from the file)
//
// Validation, before anything is allocated from a count: every count and length fits in what is left of the
// file; keys and tensor names are unique; at most 4 dimensions, none zero, a quantized tensor's innermost
// dimension a multiple of its block; a tensor's bytes lie inside the data section and no two overlap;
// an unknown value type or tensor type is named. Tensor types kvscope cannot read open (so inspect can list
// them); whoever reads the weights refuses them by name (GgmlTypeInfo::readable).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "model/gguf_quants.h"

namespace kvscope {

enum class GgufValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
    U64 = 10, I64 = 11, F64 = 12,
};
const char* to_string(GgufValueType t);  // "u32", "string", "array", ...

// One metadata value. Scalars: integers in `integer` (u64 above 2^63 - 1 is refused at load), floats in
// `real`, bools as 0 / 1 in `integer`, a string in `text`. An array keeps its item type and its items in
// `integers`, `reals` or `texts` (arrays of arrays are refused).
struct GgufValue {
    GgufValueType type = GgufValueType::U32;
    GgufValueType item_type = GgufValueType::U32;  // arrays only
    int64_t integer = 0;
    double real = 0;
    std::string text;
    std::vector<int64_t> integers;
    std::vector<double> reals;
    std::vector<std::string> texts;
    bool is_integer() const;       // any integer type or bool
    bool is_real() const { return type == GgufValueType::F32 || type == GgufValueType::F64; }
    int64_t count() const;         // array items (1 for a scalar)
};

struct GgufEntry {
    std::string key;
    GgufValue value;
};

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> dims;     // innermost first, as the file stores them: a (rows, cols) matrix is {cols, rows}
    uint64_t offset = 0;           // into the data section
    const std::byte* data = nullptr;
    size_t n_bytes = 0;
    int64_t n_elements() const;
    std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }  // outer to inner
};

class GgufFile {
public:
    explicit GgufFile(const std::string& path);  // throws LoadError
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    size_t file_size() const { return file_.size(); }
    std::span<const std::byte> mapped() const { return {file_.data(), file_.size()}; }  // read-only, private
    size_t data_offset() const { return data_offset_; }
    const std::vector<GgufEntry>& metadata() const { return metadata_; }
    const GgufValue* find(const std::string& key) const;
    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* tensor(const std::string& name) const;

private:
    void parse();
    std::string path_;
    MappedFile file_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    size_t data_offset_ = 0;
    std::vector<GgufEntry> metadata_;
    std::vector<GgufTensor> tensors_;
};

// Does the file start with GGUF's magic (a cheap test before choosing a loader)? False when it cannot be read.
bool looks_like_gguf(const std::string& path);

}  // namespace kvscope
