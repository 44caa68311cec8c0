#pragma once
// The safetensors container format, and nothing about GPT: an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
// raw little-endian tensor bytes. The file is memory-mapped; tensors are views into the mapping.
//
//   SafetensorsFile f(path);            open, mmap, validate everything; throws LoadError
//   f.tensors()                         every tensor, in file (offset) order
//   f.find("wte.weight")                one tensor or nullptr
//   write_safetensors(path, tensors)    writer used by tests and model generators (atomic: write_file_atomic)
//
// Validation follows Hugging Face's loader: each entry has exactly dtype/shape/data_offsets; shape
// times dtype size equals end - begin; offsets count from the byte after the header; the data section
// is covered exactly once (no holes, overlaps or trailing bytes). Only F32/F16/BF16 are read: another
// dtype is a LoadError naming the tensor. The writer throws UsageError for inconsistent tensors and
// LoadError when the file cannot be written.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "kernels/quant_blocks.h"

namespace kvscope {

// Every dtype the format defines. Files holding any of them open and validate; kvscope computes with
// F32, F16 and BF16 only, and weights.cpp refuses a tensor it would use in another dtype. (Checkpoints
// may carry integer or boolean buffers kvscope never reads.) The block dtypes (Q4_0 ... Q6_K) are no
// safetensors dtypes: a GGUF file's quantized matrix (gguf_model.h) is passed on as its blocks
// (kernels/quant_blocks.h), which weights.cpp keeps as they are for matmul_nk; a safetensors header naming
// one is refused like any unknown dtype.
enum class Dtype { F32, F16, BF16, F64, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E5M2, F8_E4M3,
                   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K };
const char* to_string(Dtype d);      // the header's spelling: "F32", "BF16", "BOOL", ...; ggml's "Q4_K"
size_t dtype_size(Dtype d);          // bytes per element (a block dtype: 0, its bytes come per block)
std::optional<BlockFormat> block_format(Dtype d);  // the block dtypes' formats
Dtype block_dtype(BlockFormat f);
std::string shape_text(const std::vector<int64_t>& shape, const char* sep = ", ");  // "[768, 2304]"
bool is_float_dtype(Dtype d);        // F32, F16 or BF16: the dtypes kvscope computes with

struct TensorView {
    std::string name;
    Dtype dtype = Dtype::F32;
    std::vector<int64_t> shape;      // outer to inner, as in the header
    const std::byte* data = nullptr; // into the mapping; may be unaligned for F32 only if the file is
    size_t n_bytes = 0;
    int64_t n_elements() const;
};

class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);  // throws LoadError
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::vector<TensorView>& tensors() const { return tensors_; }
    const TensorView* find(const std::string& name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    size_t file_size() const { return file_.size(); }

private:
    std::string path_;
    MappedFile file_;
    std::vector<TensorView> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Tensor data to write: element bytes already in `dtype`'s little-endian encoding.
struct TensorToWrite {
    std::string name;
    Dtype dtype = Dtype::F32;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Element conversions (exact for F16/BF16 -> F32; F32 -> BF16/F16 round to nearest even).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);
uint16_t f32_to_f16(float f);

}  // namespace kvscope
