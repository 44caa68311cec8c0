// GGUF: a cursor over the mapped bytes that checks every read against what is left of the file, so a count
// or length can never allocate more than the file could hold.
#include "model/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "base/errors.h"
#include "io/mapped_file.h"

namespace kvscope {

namespace {

constexpr uint32_t kMaxDims = 4;                 // ggml's GGML_MAX_DIMS
constexpr uint64_t kMaxNameBytes = 64;           // ggml's GGML_MAX_NAME, terminator included
const char* const kTruncatedHint = "was the download interrupted? download the file again";

class Cursor {
public:
    Cursor(const unsigned char* bytes, size_t size, const std::string& path) : p_(bytes), size_(size), path_(path) {}
    size_t at() const { return at_; }
    size_t left() const { return size_ - at_; }

    template <class T>
    T scalar(const std::string& what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, p_ + at_, sizeof(T));
        at_ += sizeof(T);
        return v;
    }
    std::string text(const std::string& what) {
        const uint64_t n = scalar<uint64_t>(what + "'s length");
        need(n, what);
        std::string s(reinterpret_cast<const char*>(p_ + at_), size_t(n));
        at_ += size_t(n);
        return s;
    }
    // A count of items of at least `item_bytes` each: no more than the rest of the file could hold.
    uint64_t count(const std::string& what, uint64_t item_bytes) {
        const uint64_t n = scalar<uint64_t>(what);
        if (item_bytes && n > left() / item_bytes)
            fail(what + " is " + std::to_string(n) + ", more than the " + std::to_string(left()) +
                     " bytes left in the file could hold",
                 kTruncatedHint);
        return n;
    }
    [[noreturn]] void fail(const std::string& what, const std::string& hint = "") const {
        throw LoadError(path_, what, hint);
    }

private:
    void need(uint64_t n, const std::string& what) const {
        if (n > left())
            fail("file is truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " +
                     std::to_string(at_) + ", " + std::to_string(left()) + " left",
                 kTruncatedHint);
    }
    const unsigned char* p_;
    size_t size_;
    size_t at_ = 0;
    const std::string& path_;
};

size_t scalar_bytes(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::Bool: return 1;
        case GgufValueType::U16: case GgufValueType::I16: return 2;
        case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
        case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
        case GgufValueType::String: return 8;  // at least its length
        case GgufValueType::Array: return 12;  // at least its item type and count
    }
    return 0;
}

GgufValueType value_type(Cursor& c, const std::string& key) {
    const uint32_t t = c.scalar<uint32_t>(key + "'s value type");
    if (t > uint32_t(GgufValueType::F64)) c.fail("metadata " + key + " has unknown value type " + std::to_string(t));
    return GgufValueType(t);
}

// One scalar of type t into (integer, real, text); a u64 past int64's range is refused.
void read_scalar(Cursor& c, GgufValueType t, const std::string& key, int64_t& integer, double& real, std::string& text) {
    switch (t) {
        case GgufValueType::U8: integer = c.scalar<uint8_t>(key); return;
        case GgufValueType::I8: integer = c.scalar<int8_t>(key); return;
        case GgufValueType::U16: integer = c.scalar<uint16_t>(key); return;
        case GgufValueType::I16: integer = c.scalar<int16_t>(key); return;
        case GgufValueType::U32: integer = c.scalar<uint32_t>(key); return;
        case GgufValueType::I32: integer = c.scalar<int32_t>(key); return;
        case GgufValueType::I64: integer = c.scalar<int64_t>(key); return;
        case GgufValueType::U64: {
            const uint64_t v = c.scalar<uint64_t>(key);
            if (v > uint64_t(std::numeric_limits<int64_t>::max()))
                c.fail("metadata " + key + " holds " + std::to_string(v) + ", beyond what kvscope reads (2^63 - 1)");
            integer = int64_t(v);
            return;
        }
        case GgufValueType::Bool: {
            const uint8_t v = c.scalar<uint8_t>(key);
            if (v > 1) c.fail("metadata " + key + " is a bool holding " + std::to_string(v) + " (0 or 1 expected)");
            integer = v;
            return;
        }
        case GgufValueType::F32: real = c.scalar<float>(key); return;
        case GgufValueType::F64: real = c.scalar<double>(key); return;
        case GgufValueType::String: text = c.text(key); return;
        case GgufValueType::Array: break;
    }
}

GgufValue read_value(Cursor& c, const std::string& key) {
    GgufValue v;
    v.type = value_type(c, key);
    if (v.type != GgufValueType::Array) {
        read_scalar(c, v.type, key, v.integer, v.real, v.text);
        return v;
    }
    v.item_type = value_type(c, key + "'s items");
    if (v.item_type == GgufValueType::Array) c.fail("metadata " + key + " is an array of arrays, which kvscope does not read");
    const uint64_t n = c.count("metadata " + key + "'s item count", scalar_bytes(v.item_type));
    int64_t integer = 0;
    double real = 0;
    std::string text;
    for (uint64_t i = 0; i < n; ++i) {
        read_scalar(c, v.item_type, key, integer, real, text);
        if (v.item_type == GgufValueType::String) v.texts.push_back(std::move(text));
        else if (v.item_type == GgufValueType::F32 || v.item_type == GgufValueType::F64) v.reals.push_back(real);
        else v.integers.push_back(integer);
    }
    return v;
}

}  // namespace

const char* to_string(GgufValueType t) {
    static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
                                        "u64", "i64", "f64"};
    return uint32_t(t) <= uint32_t(GgufValueType::F64) ? names[uint32_t(t)] : "?";
}

bool GgufValue::is_integer() const {
    return type != GgufValueType::F32 && type != GgufValueType::F64 && type != GgufValueType::String &&
           type != GgufValueType::Array;
}

int64_t GgufValue::count() const {
    if (type != GgufValueType::Array) return 1;
    return int64_t(std::max({integers.size(), reals.size(), texts.size()}));
}

int64_t GgufTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

GgufFile::GgufFile(const std::string& path) : path_(path), file_(path, k_gguf_file) {
    if (file_.size() < 24)
        throw LoadError(path_, "file is only " + std::to_string(file_.size()) +
                                   " bytes; a GGUF file starts with a 24-byte header", kTruncatedHint);
    parse();
}

void GgufFile::parse() {
    const size_t size = file_.size();
    const auto* bytes = reinterpret_cast<const unsigned char*>(file_.data());
    Cursor c(bytes, size, path_);
    if (std::memcmp(bytes, "GGUF", 4) != 0) {
        const bool safetensors_like = bytes[8] == '{';
        c.fail("not a GGUF file (it does not start with \"GGUF\")",
               safetensors_like ? "this looks like a safetensors file: pass its folder as --model" : "");
    }
    c.scalar<uint32_t>("the magic");
    version_ = c.scalar<uint32_t>("the version");
    if (version_ != 2 && version_ != 3)
        c.fail("GGUF version " + std::to_string(version_) + " is not supported (kvscope reads versions 2 and 3)",
               version_ == 1 ? "convert it again with a current llama.cpp" : "");
    // a tensor info takes at least 8 (name) + 4 + 8 + 4 + 8 bytes; a metadata entry 8 + 4 + 1
    const uint64_t n_tensors = c.count("the tensor count", 32);
    const uint64_t n_entries = c.count("the metadata count", 13);

    std::set<std::string> keys;
    metadata_.reserve(size_t(n_entries));
    for (uint64_t i = 0; i < n_entries; ++i) {
        std::string key = c.text("metadata key " + std::to_string(i));
        if (!keys.insert(key).second) c.fail("metadata key " + key + " appears twice");
        GgufValue value = read_value(c, key);
        metadata_.push_back({std::move(key), std::move(value)});
    }
    if (const GgufValue* a = find("general.alignment")) {
        if (a->type != GgufValueType::U32 || a->integer == 0 || (a->integer & (a->integer - 1)) != 0)
            c.fail("general.alignment must be a u32 power of two, found " +
                   (a->is_integer() ? std::to_string(a->integer) : std::string("a ") + to_string(a->type)));
        alignment_ = uint64_t(a->integer);
    }

    std::set<std::string> names;
    tensors_.reserve(size_t(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensor t;
        t.name = c.text("tensor name " + std::to_string(i));
        if (t.name.size() >= kMaxNameBytes)
            c.fail("tensor name " + t.name.substr(0, 80) + " is " + std::to_string(t.name.size()) +
                   " bytes; ggml allows " + std::to_string(kMaxNameBytes - 1));
        if (!names.insert(t.name).second) c.fail("tensor " + t.name + " appears twice");
        const uint32_t n_dims = c.scalar<uint32_t>("tensor " + t.name + "'s dimension count");
        if (n_dims == 0 || n_dims > kMaxDims)
            c.fail("tensor " + t.name + " has " + std::to_string(n_dims) + " dimensions (1 to 4 expected)");
        int64_t elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t n = c.scalar<uint64_t>("tensor " + t.name + "'s dimensions");
            if (n == 0 || n > uint64_t(1) << 40 || uint64_t(elements) > (uint64_t(1) << 50) / n)
                c.fail("tensor " + t.name + " has dimension " + std::to_string(n) + ", which no model file holds");
            t.dims.push_back(int64_t(n));
            elements *= int64_t(n);
        }
        const uint32_t type_id = c.scalar<uint32_t>("tensor " + t.name + "'s type");
        const GgmlTypeInfo* info = ggml_type_info(type_id);
        if (!info) c.fail("tensor " + t.name + " has unknown ggml type " + std::to_string(type_id));
        t.type = info->type;
        if (t.dims[0] % info->block_elements != 0)
            c.fail("tensor " + t.name + " is " + info->name + " (blocks of " + std::to_string(info->block_elements) +
                   ") but its rows hold " + std::to_string(t.dims[0]) + " values");
        t.n_bytes = size_t(elements / info->block_elements * info->block_bytes);
        t.offset = c.scalar<uint64_t>("tensor " + t.name + "'s offset");
        if (t.offset % alignment_ != 0)
            c.fail("tensor " + t.name + " starts at offset " + std::to_string(t.offset) + ", not a multiple of the " +
                   std::to_string(alignment_) + "-byte alignment");
        tensors_.push_back(std::move(t));
    }

    data_offset_ = size_t((uint64_t(c.at()) + alignment_ - 1) / alignment_ * alignment_);
    if (data_offset_ > size && !tensors_.empty())
        c.fail("file is truncated: the data section would start at byte " + std::to_string(data_offset_) + " of " +
                   std::to_string(size),
               kTruncatedHint);
    const uint64_t data_size = size >= data_offset_ ? size - data_offset_ : 0;

    std::vector<const GgufTensor*> by_offset;
    for (GgufTensor& t : tensors_) {
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            c.fail("tensor " + t.name + " (" + std::to_string(t.n_bytes) + " bytes at data offset " +
                       std::to_string(t.offset) + ") ends past the end of the file",
                   kTruncatedHint);
        t.data = file_.data() + data_offset_ + t.offset;
        by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i)
        if (by_offset[i - 1]->offset + by_offset[i - 1]->n_bytes > by_offset[i]->offset)
            c.fail("tensors " + by_offset[i - 1]->name + " and " + by_offset[i]->name + " overlap in the data section");
}

const GgufValue* GgufFile::find(const std::string& key) const {
    for (const GgufEntry& e : metadata_)
        if (e.key == key) return &e.value;
    return nullptr;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
    for (const GgufTensor& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

bool looks_like_gguf(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    char magic[4] = {};
    const bool yes = ::read(fd, magic, 4) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
    ::close(fd);
    return yes;
}

}  // namespace kvscope
