// Prompt cache files: the reader checks sizes against the file's real size before allocating, reads the
// payload straight into the result while hashing it, and compares the model only after the checksum
// holds (so a damaged file is called damaged, not "another model").
#include "run/prompt_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "io/ownership.h"
#include "io/read_file.h"

namespace kvscope {

static_assert(std::endian::native == std::endian::little, "the prompt cache file is written in host order");

namespace {

constexpr const char (&kMagic)[8] = prompt_cache_magic;
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxConfigBytes = 65536;
constexpr uint32_t kMaxNameBytes = 16;
constexpr int64_t kMaxDim = int64_t(1) << 24;  // per L, H, D, N: far above any real model
const char* const kRebuildHint = "delete the file to have it made again, or pass another {prompt_cache}";

constexpr uint64_t kK1 = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio
constexpr uint64_t kK2 = 0xBF58476D1CE4E5B9ull;  // splitmix64's multipliers
constexpr uint64_t kK3 = 0x94D049BB133111EBull;

uint64_t load64(const unsigned char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
}
uint64_t finalise(uint64_t z) {
    z = (z ^ (z >> 30)) * kK2;
    z = (z ^ (z >> 27)) * kK3;
    return z ^ (z >> 31);
}
void round4(uint64_t* lane, const unsigned char* p) {
    for (int i = 0; i < 4; ++i) lane[i] = std::rotl(lane[i] + load64(p + 8 * i) * kK1, 29) * kK2;
}

std::string hex(uint64_t x) {
    char s[19];
    std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(x));
    return s;
}

// The first line where two canonical config.json texts differ, as `"key": a` vs `b`.
std::string config_difference(const std::string& file, const std::string& here) {
    auto lines = [](const std::string& s) {
        std::vector<std::string> out;
        size_t start = 0;
        while (start < s.size()) {
            size_t end = s.find('\n', start);
            if (end == std::string::npos) end = s.size();
            std::string l = s.substr(start, end - start);
            l.erase(0, l.find_first_not_of(' '));
            if (!l.empty() && l.back() == ',') l.pop_back();
            out.push_back(l);
            start = end + 1;
        }
        return out;
    };
    const auto a = lines(file), b = lines(here);
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        const std::string x = i < a.size() ? a[i] : "(nothing)", y = i < b.size() ? b[i] : "(nothing)";
        if (x != y) return "config.json differs: " + x.substr(0, 80) + " in the file, " + y.substr(0, 80) + " here";
    }
    return "config.json differs";
}

// Reads exactly the bytes the header promised, hashing them on the way.
class Reader {
public:
    Reader(const std::string& path, int fd, uint64_t size) : path_(path), fd_(fd), size_(size) {}
    uint64_t offset() const { return offset_; }
    uint64_t remaining() const { return size_ - offset_; }

    void bytes(void* out, uint64_t n, const char* what) {
        if (n > remaining())
            throw LoadError(path_, "is truncated: ends at byte " + std::to_string(size_) + ", inside the " + what,
                            kRebuildHint);
        char* p = static_cast<char*>(out);
        uint64_t left = n;
        while (left > 0) {
            const ssize_t r = ::read(fd_, p, size_t(std::min<uint64_t>(left, 1u << 26)));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) throw LoadError(path_, std::string("cannot read: ") + std::strerror(errno));
            if (r == 0) throw LoadError(path_, "is truncated: it shrank while being read", kRebuildHint);
            p += r;
            left -= uint64_t(r);
        }
        hash_.update(out, size_t(n));
        offset_ += n;
    }
    template <class T>
    T number(const char* what) {
        T x;
        bytes(&x, sizeof x, what);
        return x;
    }
    std::string text(uint32_t max_bytes, const char* what) {
        const uint32_t n = number<uint32_t>(what);
        if (n > max_bytes)
            throw LoadError(path_, std::string("is damaged: its ") + what + " claims " + std::to_string(n) +
                                       " bytes (at most " + std::to_string(max_bytes) + ")",
                            kRebuildHint);
        std::string s(n, '\0');
        bytes(s.data(), n, what);
        return s;
    }
    uint64_t digest() const { return hash_.digest(); }

private:
    const std::string& path_;
    int fd_;
    uint64_t size_;
    uint64_t offset_ = 0;
    Hash64 hash_;
};

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

// One past the last position whose query sees every earlier position under the cache's policy: with a
// window W and S sinks a query at q sees 0..S-1 and q-W+1..q, which is all of 0..q while q <= S+W-1.
int64_t full_view_end(const KvCache& cache) {
    const CacheWindow& w = cache.visibility();
    return w.window > 0 ? w.window + w.sinks : INT64_MAX;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Hash64

Hash64::Hash64() : lane_{kK1, kK2, kK3, kK1 ^ kK2} {}

void Hash64::update(const void* data, size_t n_bytes) {
    if (n_bytes == 0) return;  // data may be null then (an empty tensor), and memcpy must not see it
    const unsigned char* p = static_cast<const unsigned char*>(data);
    n_total_ += n_bytes;
    if (n_pending_ > 0) {
        const size_t take = std::min(n_bytes, 32 - n_pending_);
        std::memcpy(pending_ + n_pending_, p, take);
        n_pending_ += take;
        p += take;
        n_bytes -= take;
        if (n_pending_ < 32) return;
        round4(lane_, pending_);
        n_pending_ = 0;
    }
    for (; n_bytes >= 32; p += 32, n_bytes -= 32) round4(lane_, p);
    std::memcpy(pending_, p, n_bytes);
    n_pending_ = n_bytes;
}

uint64_t Hash64::digest() const {
    // pass 1: fold the lanes (rotated apart so equal lanes do not cancel), pass 2: the tail words and
    // bytes, pass 3: the length, so inputs that differ only by trailing zeros differ.
    uint64_t h = 0;
    for (int i = 0; i < 4; ++i) h = finalise(h ^ std::rotl(lane_[i], 16 * i));
    size_t i = 0;
    for (; i + 8 <= n_pending_; i += 8) h = finalise(h ^ load64(pending_ + i)) * kK1;
    for (; i < n_pending_; ++i) h = finalise(h ^ pending_[i]) * kK1;
    return finalise(h ^ finalise(n_total_ + kK3));
}

uint64_t Hash64::of(const void* data, size_t n_bytes) {
    Hash64 h;
    h.update(data, n_bytes);
    return h.digest();
}

// ---------------------------------------------------------------------------------------------------
// Fingerprint

const char* kernels_name() {
#if defined(__AVX512F__)
    return "avx512";
#else
    return "portable";
#endif
}

ModelFingerprint model_fingerprint(const Model& model, bool bf16_cache) {
    ModelFingerprint fp;
    fp.config = model.config();
    fp.config_json = config_to_json(model.config());
    fp.weight_format = to_string(model.weights().bf16 ? WeightFormat::BF16 : WeightFormat::F32);
    fp.kernels = kernels_name();
    fp.kv_format = bf16_cache ? "bf16" : "f32";
    const Checkpoint* checkpoint = model.weights().checkpoint.get();
    if (!checkpoint) throw UsageError("model_fingerprint: the model has no weights file to identify it by");
    Hash64 h;
    for (const TensorView* tensor : checkpoint->tensors()) {
        const TensorView& t = *tensor;
        // Names and shapes are length-prefixed so no two tensor lists hash the same bytes.
        const uint64_t n_name = t.name.size(), n_dims = t.shape.size(), n_bytes = t.n_bytes;
        const uint32_t dtype = uint32_t(t.dtype);
        h.update(&n_name, 8);
        h.update(t.name.data(), t.name.size());
        h.update(&dtype, 4);
        h.update(&n_dims, 8);
        h.update(t.shape.data(), t.shape.size() * sizeof(int64_t));
        h.update(&n_bytes, 8);
        // Hashing pages the whole file in. Where the weights keep their own copy of the matrices
        // (weights.h), each span is dropped again once hashed, or a prompt cache would double the
        // process's memory.
        constexpr size_t kSpan = size_t(64) << 20;
        for (size_t at = 0; at < t.n_bytes; at += kSpan) {
            const size_t n = std::min(kSpan, t.n_bytes - at);
            h.update(t.data + at, n);
            if (!model.weights().mapped) checkpoint->release(t.data + at, n);
        }
    }
    fp.weights_hash = h.digest();
    return fp;
}

// ---------------------------------------------------------------------------------------------------
// Reading

PromptCache read_prompt_cache(const std::string& path, const ModelFingerprint& fp) {
    const RegularFile file = open_regular_file(path, k_prompt_cache_file);
    Fd f;
    f.fd = file.fd;
    const uint64_t size = file.size;
    Reader in(path, f.fd, size);

    // pass 1: magic and version, before anything else is interpreted
    if (size == 0) throw LoadError(path, "is empty", kRebuildHint);
    char magic[8] = {};
    const uint64_t n_magic = std::min<uint64_t>(size, sizeof magic);
    in.bytes(magic, n_magic, "magic");
    if (std::memcmp(magic, kMagic, n_magic) != 0)
        throw LoadError(path, "is not a kvscope prompt cache (no KVPROMPT magic)",
                        "is {prompt_cache} naming the right file? it is left alone");
    if (n_magic < sizeof magic) in.bytes(magic, sizeof magic - n_magic, "magic");  // throws: truncated
    const uint32_t version = in.number<uint32_t>("version");
    if (version != kVersion)
        throw LoadError(path,
                        "has prompt cache format version " + std::to_string(version) + ", this kvscope reads version " +
                            std::to_string(kVersion),
                        kRebuildHint);

    // pass 2: the header, and the sizes it implies against the real file size
    const std::string config_json = in.text(kMaxConfigBytes, "config text");
    const std::string weight_format = in.text(kMaxNameBytes, "weight format");
    const std::string kernels = in.text(kMaxNameBytes, "kernels name");
    const std::string kv_format = in.text(kMaxNameBytes, "KV format");
    const uint64_t weights_hash = in.number<uint64_t>("weights hash");
    int64_t dims[4];  // L, H, D, N
    in.bytes(dims, sizeof dims, "dimensions");
    for (int64_t d : dims)
        if (d < 1 || d > kMaxDim)
            throw LoadError(path,
                            "is damaged: dimensions L=" + std::to_string(dims[0]) + " H=" + std::to_string(dims[1]) +
                                " D=" + std::to_string(dims[2]) + " N=" + std::to_string(dims[3]) + " are impossible",
                            kRebuildHint);
    const int64_t L = dims[0], H = dims[1], D = dims[2], N = dims[3];
    const unsigned __int128 n_rows = (unsigned __int128)(L) * uint64_t(H) * uint64_t(N) * uint64_t(D);
    const unsigned __int128 expected = (unsigned __int128)(in.offset()) + uint64_t(N) * 4 + 2 * n_rows * 4 + 8;
    if (expected != size) {
        const std::string promised = expected > UINT64_MAX ? "more than 2^64" : std::to_string(uint64_t(expected));
        throw LoadError(path,
                        expected > size ? "is truncated: " + std::to_string(size) + " bytes, its header promises " + promised
                                        : "has " + std::to_string(size - uint64_t(expected)) +
                                              " bytes after its end (header promises " + promised + ")",
                        kRebuildHint);
    }

    // pass 3: the payload (bounded by the file's real size now), then the checksum over all of it
    PromptCache pc;
    pc.n_layer = L;
    pc.n_head = H;
    pc.head_dim = D;
    pc.kv_format = kv_format;
    pc.tokens.resize(size_t(N));
    pc.k.resize(size_t(n_rows));
    pc.v.resize(size_t(n_rows));
    in.bytes(pc.tokens.data(), uint64_t(N) * 4, "token ids");
    in.bytes(pc.k.data(), uint64_t(n_rows) * 4, "K rows");
    in.bytes(pc.v.data(), uint64_t(n_rows) * 4, "V rows");
    const uint64_t computed = in.digest();
    const uint64_t stored = in.number<uint64_t>("checksum");
    if (stored != computed)
        throw LoadError(path, "is damaged: checksum " + hex(stored) + " does not match its contents (" + hex(computed) + ")",
                        kRebuildHint);

    // pass 4: is it this model's, and does it fit it
    const std::string other = "was made by another model: ";
    if (config_json != fp.config_json) throw LoadError(path, other + config_difference(config_json, fp.config_json), kRebuildHint);
    if (weights_hash != fp.weights_hash)
        throw LoadError(path,
                        other + "the weights differ (weights hash " + hex(weights_hash) + " in the file, " +
                            hex(fp.weights_hash) + " here)",
                        kRebuildHint);
    if (weight_format != fp.weight_format)
        throw LoadError(path, "was made with " + weight_format + " weights, this run uses " + fp.weight_format,
                        "use {dtype} " + weight_format + ", or " + kRebuildHint);
    if (kernels != fp.kernels)
        throw LoadError(path,
                        "was made by a kvscope build with " + kernels + " kernels, this one computes with " + fp.kernels +
                            " (their K/V differ in the last bits)",
                        kRebuildHint);
    if (kv_format != fp.kv_format)
        throw LoadError(path, "was made with a " + kv_format + " KV cache, this run's stores " + fp.kv_format + " rows",
                        kRebuildHint);
    const ModelConfig& c = fp.config;
    if (L != c.n_layer || H != c.kv_heads() || D != c.head_dim())
        throw LoadError(path,
                        other + "it holds L=" + std::to_string(L) + " H=" + std::to_string(H) + " D=" + std::to_string(D) +
                            ", the model has L=" + std::to_string(c.n_layer) + " H=" + std::to_string(c.kv_heads()) +
                            " D=" + std::to_string(c.head_dim()),
                        kRebuildHint);
    if (N > c.n_ctx)
        throw LoadError(path,
                        "holds " + std::to_string(N) + " positions, the model has only " + std::to_string(c.n_ctx),
                        kRebuildHint);
    for (size_t i = 0; i < pc.tokens.size(); ++i)
        if (pc.tokens[i] < 0 || pc.tokens[i] >= c.n_vocab)
            throw LoadError(path,
                            "token " + std::to_string(i) + " has id " + std::to_string(pc.tokens[i]) +
                                ", outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")",
                            kRebuildHint);
    return pc;
}

// ---------------------------------------------------------------------------------------------------
// Writing

bool holds_every_position(const KvCache& cache, int64_t n) {
    for (int64_t il = 0; il < cache.shape().n_layer; ++il)
        for (int64_t p = 0; p < n; ++p)
            if (!stores(cache, il, p)) return false;
    return true;
}

void write_prompt_cache(const std::string& path, const ModelFingerprint& fp, std::span<const TokenId> tokens,
                        const KvCache& cache) {
    const ModelConfig& c = fp.config;
    const KvShape& shape = cache.shape();
    const int64_t L = shape.n_layer, H = shape.n_head, D = shape.head_dim, N = int64_t(tokens.size());
    if (L != c.n_layer || H != c.kv_heads() || D != c.head_dim())
        throw UsageError("write_prompt_cache: the cache's shape (L=" + std::to_string(L) + " H=" + std::to_string(H) +
                         " D=" + std::to_string(D) + ") is not the model's");
    if (cache.format().quantized())  // the file holds float32 rows; reloading would quantize their dequantization again
        throw UsageError("write_prompt_cache: the cache stores packed " + std::string(to_string(cache.format().quant().format)) +
                         " rows; prompt cache files hold float32 or bfloat16 rows");
    if (cache.format().bf16() != (fp.kv_format == "bf16"))
        throw UsageError("write_prompt_cache: the cache stores " + std::string(cache.format().bf16() ? "bf16" : "f32") +
                         " rows, the fingerprint says " + fp.kv_format);
    if (N < 1 || N > cache.next_position() || N > c.n_ctx)
        throw UsageError("write_prompt_cache: " + std::to_string(N) + " tokens, the cache holds positions 0.." +
                         std::to_string(cache.next_position() - 1));
    if (!holds_every_position(cache, N))
        throw UsageError("write_prompt_cache: the model's sliding layers store only their window, and positions "
                         "0.." + std::to_string(N - 1) + " are no longer all in them (the prompt went in in parts)");
    // Rows are only usable by any run if every query up to the next one saw all earlier positions: then
    // they equal a window-less run's, and none has been evicted yet.
    const CacheWindow& w = cache.visibility();
    if (cache.next_position() >= full_view_end(cache))
        throw UsageError("a prompt cache stores positions computed with the whole prompt visible; with --window " +
                         std::to_string(w.window) +
                         (w.sinks > 0 ? " and --sinks " + std::to_string(w.sinks) : std::string()) +
                         " that holds for at most " + std::to_string(full_view_end(cache) - 1) +
                         " positions, the cache has " + std::to_string(cache.next_position()));
    for (TokenId t : tokens)
        if (t < 0 || t >= c.n_vocab)
            throw UsageError("write_prompt_cache: token id " + std::to_string(t) + " is outside the vocabulary");

    // An earlier prompt cache proves itself by its magic (output_path.h rule 2): kvscope's to replace.
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {  // never opens a FIFO (it would block)
        std::ifstream old(path, std::ios::binary);
        char head[8] = {};
        if (old.read(head, sizeof head) && std::memcmp(head, prompt_cache_magic, 8) == 0) adopt_file(path);
    }
    // The file is replaced whole by write_file_atomic; the checksum covers every byte before it.
    write_file_atomic(path, [&](std::FILE* f) {
        Hash64 hash;
        auto put = [&](const void* p, size_t n) {
            hash.update(p, n);
            std::fwrite(p, 1, n, f);
        };
        auto put_text = [&](const std::string& s) {
            const uint32_t n = uint32_t(s.size());
            put(&n, 4);
            put(s.data(), s.size());
        };
        put(kMagic, sizeof kMagic);
        put(&kVersion, 4);
        put_text(fp.config_json);
        put_text(fp.weight_format);
        put_text(fp.kernels);
        put_text(fp.kv_format);
        put(&fp.weights_hash, 8);
        const int64_t dims[4] = {L, H, D, N};
        put(dims, sizeof dims);
        put(tokens.data(), tokens.size() * sizeof(TokenId));
        // Rows are gathered a (N, D) block at a time: one write per (layer, head), not per row.
        std::vector<float> block(size_t(N * D));  // (N, D)
        for (int kv = 0; kv < 2; ++kv)
            for (int64_t il = 0; il < L; ++il)
                for (int64_t h = 0; h < H; ++h) {
                    const KvRows rows = cache.rows(il, h);
                    for (int64_t p = 0; p < N; ++p) {  // as float32 whatever the cache stores
                        if (kv == 0) rows.copy_key(p, block.data() + p * D);
                        else rows.copy_value(p, block.data() + p * D);
                    }
                    put(block.data(), block.size() * sizeof(float));
                }
        const uint64_t checksum = hash.digest();
        std::fwrite(&checksum, 1, 8, f);
    });
}

// ---------------------------------------------------------------------------------------------------
// Using

int64_t matching_prefix(const PromptCache& pc, std::span<const TokenId> prompt, const KvCache& cache) {
    int64_t n = 0;
    const int64_t limit = std::min<int64_t>(int64_t(pc.tokens.size()), int64_t(prompt.size()) - 1);
    while (n < limit && pc.tokens[size_t(n)] == prompt[size_t(n)]) ++n;
    return std::min(n, full_view_end(cache) - 1);
}

void restore_prompt_cache(const PromptCache& pc, int64_t n, KvCache& cache) {
    const int64_t L = pc.n_layer, H = pc.n_head, D = pc.head_dim;
    if (cache.shape().n_layer != L || cache.shape().n_head != H || cache.shape().head_dim != D)
        throw UsageError("restore_prompt_cache: the cache's shape is not the prompt cache's");
    if (cache.format().bf16() != (pc.kv_format == "bf16") || cache.format().quantized())
        throw UsageError("restore_prompt_cache: the cache's row storage is not the prompt cache's");
    if (cache.next_position() != 0) throw UsageError("restore_prompt_cache: the cache is not empty");
    if (n < 0 || n > int64_t(pc.tokens.size()))
        throw UsageError("restore_prompt_cache: " + std::to_string(n) + " positions asked, the file has " +
                         std::to_string(pc.tokens.size()));
    if (n >= full_view_end(cache))
        throw UsageError("restore_prompt_cache: " + std::to_string(n) + " positions are more than the window lets "
                         "every query see (at most " + std::to_string(full_view_end(cache) - 1) + ")");
    if (n == 0) return;
    cache.prepare(pc.tokens.data(), n);  // throws UsageError if the cache cannot hold n positions
    for (int64_t p = 0; p < n; ++p)
        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < H; ++h) cache.write(il, h, p, pc.key(il, h, p), pc.value(il, h, p));
    cache.advance(n);
}

}  // namespace kvscope
