// safetensors: validation follows Hugging Face's loader (exact entry keys, offsets relative to the
// byte after the header, the data section covered exactly once with no holes or trailing bytes),
// with messages that name the tensor and suggest a cause.
#include "model/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/json_write.h"
#include "io/mapped_file.h"

namespace kvscope {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // Hugging Face's limit
const char* const kTruncatedHint = "was the download interrupted? download the file again";

struct DtypeName {
    Dtype dtype;
    const char* name;
    size_t size;
};
constexpr DtypeName kDtypes[] = {
    {Dtype::F32, "F32", 4},  {Dtype::F16, "F16", 2},  {Dtype::BF16, "BF16", 2}, {Dtype::F64, "F64", 8},
    {Dtype::I64, "I64", 8},  {Dtype::I32, "I32", 4},  {Dtype::I16, "I16", 2},   {Dtype::I8, "I8", 1},
    {Dtype::U64, "U64", 8},  {Dtype::U32, "U32", 4},  {Dtype::U16, "U16", 2},   {Dtype::U8, "U8", 1},
    {Dtype::BOOL, "BOOL", 1}, {Dtype::F8_E5M2, "F8_E5M2", 1}, {Dtype::F8_E4M3, "F8_E4M3", 1},
};

[[noreturn]] void fail_load(const std::string& path, const std::string& what, const std::string& hint = "") {
    throw LoadError(path, what, hint);
}

}  // namespace

std::optional<BlockFormat> block_format(Dtype d) {
    if (int(d) < int(Dtype::Q4_0)) return std::nullopt;
    return BlockFormat(int(d) - int(Dtype::Q4_0));
}

Dtype block_dtype(BlockFormat f) { return Dtype(int(Dtype::Q4_0) + int(f)); }
static_assert(int(Dtype::Q6_K) - int(Dtype::Q4_0) == int(BlockFormat::Q6_K), "the block dtypes follow BlockFormat's order");

const char* to_string(Dtype d) {
    if (const std::optional<BlockFormat> f = block_format(d)) return block_layout(*f).name;
    for (const DtypeName& n : kDtypes)
        if (n.dtype == d) return n.name;
    return "?";
}

std::string shape_text(const std::vector<int64_t>& shape, const char* sep) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? sep : "") + std::to_string(shape[i]);
    return s + "]";
}

size_t dtype_size(Dtype d) {
    if (block_format(d)) return 0;
    for (const DtypeName& n : kDtypes)
        if (n.dtype == d) return n.size;
    return 1;
}

bool is_float_dtype(Dtype d) { return d == Dtype::F32 || d == Dtype::F16 || d == Dtype::BF16; }

int64_t TensorView::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

namespace {

// A tensor's bytes in the data section, [begin, end), and its index in the header's order.
struct Span {
    size_t begin, end;
    size_t index;
};

// pass 1: the header length, with a guess at what the file really is when it is wrong
uint64_t read_header_length(const std::string& path, const unsigned char* bytes, size_t size) {
    uint64_t header_len = 0;
    for (int k = 7; k >= 0; --k) header_len = (header_len << 8) | bytes[k];
    if (header_len > kMaxHeaderBytes || header_len > size - 8) {
        std::string hint;
        if (bytes[0] == 'P' && bytes[1] == 'K')
            hint = "this looks like a zip file, e.g. a PyTorch .bin checkpoint; kvscope reads .safetensors";
        else if (bytes[0] == 0x80)
            hint = "this looks like a Python pickle; kvscope reads .safetensors";
        else if (bytes[0] == '{' || bytes[0] == '<')
            hint = "this looks like a text file, perhaps an error page saved by the download";
        else if (header_len <= kMaxHeaderBytes)
            hint = kTruncatedHint;
        else
            hint = "is this a safetensors file?";
        if (header_len > kMaxHeaderBytes)
            fail_load(path, "header length " + std::to_string(header_len) + " is implausibly large (limit " +
                     std::to_string(kMaxHeaderBytes) + " bytes)",
                 hint);
        fail_load(path, "file is truncated: the header alone needs " + std::to_string(8 + header_len) +
                 " bytes, found " + std::to_string(size),
             hint);
    }
    if (header_len == 0 || bytes[8] != '{')
        fail_load(path, "header is not a JSON object (it must start with '{')", "is this a safetensors file?");
    return header_len;
}

// pass 2: the header JSON, an object
Json parse_header(const std::string& path, const unsigned char* bytes, uint64_t header_len) {
    Json header;
    try {
        header = Json::parse(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len));
    } catch (const JsonError& e) {
        std::string what = e.what();
        size_t colon = what.find(": ");
        fail_load(path, "header is not valid JSON at byte " + std::to_string(8 + e.offset) + " of the file: " +
             (colon == std::string::npos ? what : what.substr(colon + 2)));
    }
    if (!header.is_object()) fail_load(path, std::string("header is a JSON ") + header.kind_name() + ", expected an object");
    return header;
}

// pass 3a: "__metadata__", an object of strings
void read_metadata(const std::string& path, const Json& entry, std::map<std::string, std::string>& metadata) {
    if (!entry.is_object())
        fail_load(path, std::string("__metadata__ must be an object of strings, found ") + entry.kind_name());
    for (const auto& [k, v] : entry.as_object()) {
        if (!v.is_string())
            fail_load(path, "__metadata__ value for " + json_escape(k) + " must be a string, found " +
                 v.kind_name());
        metadata[k] = v.as_string();
    }
}

// pass 3b: one tensor entry's kinds and sizes; its data_offsets go to `span` (index not set)
TensorView read_entry(const std::string& path, const std::string& name, const Json& entry, size_t file_size,
                      Span& span) {
    const std::string tensor = "tensor " + json_escape(name);
    if (!entry.is_object())
        fail_load(path, tensor + " must be an object with dtype, shape and data_offsets, found " + entry.kind_name());
    const Json* dtype = nullptr;
    const Json* shape = nullptr;
    const Json* offsets = nullptr;
    for (const auto& [k, v] : entry.as_object()) {
        if (k == "dtype") dtype = &v;
        else if (k == "shape") shape = &v;
        else if (k == "data_offsets") offsets = &v;
        else fail_load(path, tensor + " has an unexpected key " + json_escape(k) +
                  " (entries have only dtype, shape and data_offsets)");
    }
    if (!dtype) fail_load(path, tensor + " has no dtype");
    if (!shape) fail_load(path, tensor + " has no shape");
    if (!offsets) fail_load(path, tensor + " has no data_offsets");

    TensorView view;
    view.name = name;
    if (!dtype->is_string()) fail_load(path, tensor + ": dtype must be a string, found " + dtype->kind_name());
    const std::string& d = dtype->as_string();
    const DtypeName* known = nullptr;
    for (const DtypeName& n : kDtypes)
        if (d == n.name) known = &n;
    if (!known) fail_load(path, tensor + " has unknown dtype " + json_escape(d));
    view.dtype = known->dtype;

    if (!shape->is_array()) fail_load(path, tensor + ": shape must be an array, found " + shape->kind_name());
    for (const Json& dim : shape->as_array()) {
        if (!dim.is_integer() || dim.as_integer() < 0)
            fail_load(path, tensor + ": shape must hold whole numbers >= 0");
        view.shape.push_back(dim.as_integer());
    }
    // Element counts above the file size are impossible, so the running product stays small.
    uint64_t n_elements = 1;
    if (std::find(view.shape.begin(), view.shape.end(), 0) != view.shape.end()) n_elements = 0;
    for (size_t k = 0; n_elements > 0 && k < view.shape.size(); ++k) {
        uint64_t x = uint64_t(view.shape[k]);
        if (n_elements > uint64_t(file_size) / x)
            fail_load(path, tensor + " has shape " + shape_text(view.shape) +
                                 ", more elements than the file can hold");
        n_elements *= x;
    }
    const uint64_t n_bytes = n_elements * dtype_size(view.dtype);

    if (!offsets->is_array() || offsets->as_array().size() != 2 || !offsets->as_array()[0].is_integer() ||
        !offsets->as_array()[1].is_integer() || offsets->as_array()[0].as_integer() < 0 ||
        offsets->as_array()[1].as_integer() < 0)
        fail_load(path, tensor + ": data_offsets must be [begin, end], two whole numbers >= 0");
    const uint64_t begin = uint64_t(offsets->as_array()[0].as_integer());
    const uint64_t end = uint64_t(offsets->as_array()[1].as_integer());
    if (end < begin)
        fail_load(path, tensor + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
             "] end before they begin");
    if (end - begin != n_bytes)
        fail_load(path, tensor + " has shape " + shape_text(view.shape) + " of " + d + ", which needs " +
             std::to_string(n_bytes) + " bytes, but data_offsets [" + std::to_string(begin) + ", " +
             std::to_string(end) + "] span " + std::to_string(end - begin));
    view.n_bytes = size_t(n_bytes);
    span.begin = size_t(std::min<uint64_t>(begin, SIZE_MAX));
    span.end = size_t(std::min<uint64_t>(end, SIZE_MAX));
    return view;
}

// pass 4: the data section is covered exactly once, in bounds (`spans` sorted by begin, then end)
void check_coverage(const std::string& path, const std::vector<Span>& spans, const std::vector<TensorView>& views,
                    size_t data_start, size_t file_size) {
    const size_t data_size = file_size - data_start;
    const Span* last = nullptr;
    for (const Span& s : spans)
        if (!last || s.end >= last->end) last = &s;
    if (last && last->end > data_size) {
        fail_load(path, "file is truncated: expected " + std::to_string(uint64_t(data_start) + last->end) + " bytes, found " +
                 std::to_string(file_size) + "; tensor " + json_escape(views[last->index].name) +
                 " ends past the end of the file",
             kTruncatedHint);
    }
    size_t covered = 0;
    const Span* previous = nullptr;
    for (const Span& s : spans) {
        if (s.begin < covered)
            fail_load(path, "tensors " + json_escape(views[previous->index].name) + " and " +
                 json_escape(views[s.index].name) + " overlap in the data section");
        if (s.begin > covered)
            fail_load(path, "data bytes [" + std::to_string(covered) + ", " + std::to_string(s.begin) +
                 ") belong to no tensor (the data section must have no holes)",
                 "the file was not written by a safetensors writer, or its header was edited");
        covered = s.end;
        if (s.end > s.begin || !previous) previous = &s;
    }
    if (covered != data_size)
        fail_load(path, std::to_string(data_size - covered) + " bytes after the last tensor belong to no tensor",
             "the file was not written by a safetensors writer, or was appended to");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path)
    // a FIFO or device would block or stream where the format needs a size: refused before mmap
    : path_(path), file_(path, k_safetensors_file) {
    if (file_.size() < 8)
        fail_load(path_, "file is only " + std::to_string(file_.size()) +
                 " bytes; a safetensors file starts with an 8-byte header length",
             kTruncatedHint);
    const auto* bytes = reinterpret_cast<const unsigned char*>(file_.data());
    const uint64_t header_len = read_header_length(path_, bytes, file_.size());
    const size_t data_start = 8 + size_t(header_len);
    const Json header = parse_header(path_, bytes, header_len);

    std::vector<Span> spans;
    std::vector<TensorView> views;
    for (const auto& [name, entry] : header.as_object()) {
        if (name == "__metadata__") {
            read_metadata(path_, entry, metadata_);
            continue;
        }
        Span span{0, 0, views.size()};
        views.push_back(read_entry(path_, name, entry, file_.size(), span));
        spans.push_back(span);
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    check_coverage(path_, spans, views, data_start, file_.size());

    const std::byte* data = file_.data() + data_start;
    tensors_.reserve(spans.size());
    for (const Span& s : spans) {
        TensorView& v = views[s.index];
        v.data = data + s.begin;
        tensors_.push_back(std::move(v));
    }
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
    for (const TensorView& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    // pass 1: header text, checking the caller's tensors are self-consistent
    JsonOut doc = JsonOut::object();
    if (!metadata.empty()) doc["__metadata__"] = metadata;
    std::set<std::string> names;
    uint64_t offset = 0;
    for (const TensorToWrite& t : tensors) {
        if (t.name == "__metadata__") throw UsageError("write_safetensors: \"__metadata__\" is not a tensor name");
        if (!names.insert(t.name).second)
            throw UsageError("write_safetensors: tensor " + json_escape(t.name) + " is given twice");
        unsigned __int128 n = 1;
        for (int64_t d : t.shape) {
            if (d < 0) throw UsageError("write_safetensors: tensor " + json_escape(t.name) + " has a negative dimension");
            n *= uint64_t(d);
            if (n > (unsigned __int128)(UINT64_MAX)) n = (unsigned __int128)(UINT64_MAX);
        }
        if (n * dtype_size(t.dtype) != t.bytes.size())
            throw UsageError("write_safetensors: tensor " + json_escape(t.name) + " has " +
                             std::to_string(t.bytes.size()) + " bytes, but shape " + shape_text(t.shape) + " of " +
                             to_string(t.dtype) + " needs " + std::to_string(uint64_t(n) * dtype_size(t.dtype)));
        doc[t.name] = {{"dtype", to_string(t.dtype)},
                       {"shape", t.shape},
                       {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string header = json_text(doc);
    // Spaces pad the header so tensor data starts 8-byte aligned, as Hugging Face's writer does.
    header.append((8 - header.size() % 8) % 8, ' ');
    unsigned char len[8];
    for (int k = 0; k < 8; ++k) len[k] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * k));

    // pass 2: the file, replaced whole
    write_file_atomic(path, [&](std::FILE* f) {
        std::fwrite(len, 1, 8, f);
        std::fwrite(header.data(), 1, header.size(), f);
        for (const TensorToWrite& t : tensors) std::fwrite(t.bytes.data(), 1, t.bytes.size(), f);
    });
}

// Conversions work on bit patterns so they are exact and independent of the FPU rounding mode.

float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    const uint32_t mant = h & 0x3FF;
    uint32_t bits;
    if (exp == 0) {
        float mag = std::ldexp(float(mant), -24);  // zero or subnormal: mant * 2^-24, exact in f32
        return sign ? -mag : mag;
    } else if (exp == 31) {
        bits = sign | 0x7F800000 | (mant << 13);  // inf, or NaN keeping its payload
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

float bf16_to_f32(uint16_t b) {
    uint32_t bits = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7FFFFFFF) > 0x7F800000) return uint16_t((bits >> 16) | 0x0040);  // NaN stays NaN, quiet
    // Round to nearest even: add just under half an ulp, plus one if the kept part is odd.
    bits += 0x7FFF + ((bits >> 16) & 1);
    return uint16_t(bits >> 16);
}

uint16_t f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000);
    const uint32_t ax = x & 0x7FFFFFFF;
    if (ax > 0x7F800000) return uint16_t(sign | 0x7E00 | ((ax >> 13) & 0x3FF));  // NaN, quiet
    if (ax >= 0x477FF000) return uint16_t(sign | 0x7C00);  // >= 65520 rounds to inf (65504 is the max)
    if (ax >= 0x38800000) {                                // normal in f16 (>= 2^-14)
        uint32_t h = (ax - 0x38000000) >> 13;              // rebias exponent 127 -> 15, drop 13 bits
        const uint32_t rest = ax & 0x1FFF;
        if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
        return uint16_t(sign | h);
    }
    if (ax <= 0x33000000) return sign;  // <= 2^-25: rounds to (signed) zero, ties to even
    // Subnormal in f16: value / 2^-24 = mant * 2^(E - 126) with the implicit bit restored.
    const uint32_t e = ax >> 23;
    const uint32_t mant = (ax & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return uint16_t(sign | h);
}

}  // namespace kvscope
