#include "io/ownership.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errors.h"

namespace kvscope {
namespace fs = std::filesystem;
namespace {

constexpr const char* kHeader = "# kvscope manifest 1: the files kvscope wrote here (hash, size, path); it replaces or removes only these\n";
constexpr uint64_t kUserLedgerLimit = 4ull << 20;     // bytes; then the older half of the proofs is dropped
constexpr uint64_t kFolderLedgerLimit = 8ull << 20;   // bytes; then superseded lines are dropped
constexpr uint64_t kLedgerReadLimit = 64ull << 20;    // a larger "ledger" is not one kvscope wrote

// ---- content hash: four independent 64-bit lanes over 32-byte stripes, chained over 1 MiB chunks so a
// file read in pieces and the same bytes in memory hash alike.
constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull;
constexpr size_t kChunk = size_t(1) << 20;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t lane_step(uint64_t acc, uint64_t w) { return rotl(acc + w * P2, 31) * P1; }
uint64_t load64(const unsigned char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
}

uint64_t chunk_hash(const unsigned char* p, size_t n) {
    uint64_t a = P1 + P2, b = P2, c = 0, d = 0 - P1;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a = lane_step(a, load64(p + i));
        b = lane_step(b, load64(p + i + 8));
        c = lane_step(c, load64(p + i + 16));
        d = lane_step(d, load64(p + i + 24));
    }
    uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + n;
    for (; i < n; ++i) h = rotl(h ^ (p[i] * P3), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    return h;
}

struct Hasher {
    uint64_t h = P3;
    uint64_t size = 0;
    void chunk(const unsigned char* p, size_t n) {  // every chunk but the last is kChunk bytes
        h = lane_step(h ^ chunk_hash(p, n), size + n);
        size += n;
    }
};

// ---- ledgers
struct Entry {
    FileProof proof;
    bool removed = false;
    uint64_t seq = 0;  // line order: the user's ledger keeps the newest proofs
};

struct Ledger {
    std::string file;  // the ledger's own path
    std::string base;  // folder that relative keys start from ("" for the user's ledger: absolute keys)
};

struct Parsed {
    uint64_t file_size = 0;
    int64_t mtime_ns = 0;
    std::map<std::string, Entry> entries;
    uint64_t next_seq = 0;
};

std::mutex g_mutex;                        // guards g_cache and every append, within this process
std::map<std::string, Parsed> g_cache;     // ledger file -> what it held at (size, mtime)

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec; }

std::string hex64(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
    return buf;
}

void parse_line(const std::string& line, Parsed& p) {
    const size_t t1 = line.find('\t');
    if (t1 == std::string::npos) return;
    const size_t t2 = line.find('\t', t1 + 1);
    if (t2 == std::string::npos || t2 + 1 >= line.size()) return;
    const std::string key = line.substr(t2 + 1);
    Entry e;
    e.seq = p.next_seq++;
    if (line.compare(0, t1, "-") == 0) {
        e.removed = true;
    } else {
        char* end = nullptr;
        e.proof.hash = std::strtoull(line.c_str(), &end, 16);
        if (end != line.c_str() + t1 || t1 != 16) return;
        e.proof.size = std::strtoull(line.c_str() + t1 + 1, &end, 10);
        if (end != line.c_str() + t2) return;
    }
    p.entries[key] = e;
}

// The ledger's contents, re-read only when its size or time changed since this process last saw it.
// Caller holds g_mutex. nullptr: not a kvscope ledger.
const Parsed* load_locked(const std::string& file) {
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > kLedgerReadLimit) {
        g_cache.erase(file);
        return nullptr;
    }
    auto it = g_cache.find(file);
    if (it != g_cache.end() && it->second.file_size == uint64_t(st.st_size) && it->second.mtime_ns == mtime_ns(st))
        return &it->second;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return nullptr;
    std::string text(size_t(st.st_size), '\0');
    size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n <= 0) break;
        got += size_t(n);
    }
    ::close(fd);
    text.resize(got);
    if (text.rfind(kHeader, 0) != 0) {
        g_cache.erase(file);
        return nullptr;
    }
    Parsed p;
    p.file_size = uint64_t(st.st_size);
    p.mtime_ns = mtime_ns(st);
    size_t pos = std::strlen(kHeader);
    while (pos < text.size()) {
        const size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) break;  // a line cut short by a crash: not a proof
        parse_line(text.substr(pos, nl - pos), p);
        pos = nl + 1;
    }
    return &(g_cache[file] = std::move(p));
}

std::optional<std::string> user_ledger_file() {
    const char* state = std::getenv("XDG_STATE_HOME");
    std::string dir;
    if (state && state[0] == '/') dir = state;
    else if (const char* home = std::getenv("HOME"); home && home[0] == '/') dir = std::string(home) + "/.local/state";
    else return std::nullopt;
    return dir + "/kvscope/written-files.tsv";
}

// Absolute path with the folders above it resolved (a symlinked folder names one place), the last
// component left as it is: a symlink is itself the thing kvscope would replace.
fs::path resolved(const std::string& path) {
    std::error_code ec;
    fs::path abs = fs::absolute(path, ec);
    if (ec) return fs::path(path);
    abs = abs.lexically_normal();
    if (!abs.has_filename()) abs = abs.parent_path();
    const fs::path parent = fs::weakly_canonical(abs.parent_path(), ec);
    return ec ? abs : parent / abs.filename();
}

bool header_ok(const std::string& file) {
    std::lock_guard<std::mutex> lock(g_mutex);
    return load_locked(file) != nullptr;
}

// The ledger that holds path's proof, and path's key in it.
std::optional<std::pair<Ledger, std::string>> locate(const std::string& path) {
    const fs::path abs = resolved(path);
    if (abs.filename() == manifest_name) return std::nullopt;  // a ledger is never a proven output
    for (fs::path d = abs.parent_path();; d = d.parent_path()) {
        const std::string m = (d / manifest_name).string();
        if (header_ok(m)) return std::make_pair(Ledger{m, d.string()}, abs.lexically_relative(d).string());
        if (d == d.root_path() || d.empty()) break;
    }
    const std::optional<std::string> user = user_ledger_file();
    if (!user) return std::nullopt;
    return std::make_pair(Ledger{*user, ""}, abs.string());
}

// Rewrites a ledger with its live entries (the newest `keep_bytes` of them, for the user's ledger).
// Caller holds g_mutex. Failures leave the old ledger: it only grows.
void compact_locked(const Ledger& l, const Parsed& p, uint64_t keep_bytes) {
    std::vector<std::pair<uint64_t, std::string>> lines;
    for (const auto& [key, e] : p.entries)
        if (!e.removed) lines.emplace_back(e.seq, hex64(e.proof.hash) + "\t" + std::to_string(e.proof.size) + "\t" + key + "\n");
    std::sort(lines.begin(), lines.end());
    uint64_t total = 0;
    size_t first = lines.size();
    while (first > 0 && total + lines[first - 1].second.size() <= keep_bytes) total += lines[--first].second.size();
    std::string text = kHeader;
    for (size_t i = first; i < lines.size(); ++i) text += lines[i].second;
    const std::string tmp = l.file + ".tmp-" + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), l.file.c_str()) != 0) ::unlink(tmp.c_str());
    g_cache.erase(l.file);
}

// Appends one line; creates the user's ledger (and its folder) when missing. Best effort: a ledger
// that cannot be written loses this proof and nothing else.
void append(const Ledger& l, const std::string& key, const std::string& line) {
    if (key.find('\n') != std::string::npos || key.find('\t') != std::string::npos) return;  // cannot be keyed
    std::lock_guard<std::mutex> lock(g_mutex);
    if (l.base.empty()) {
        std::error_code ec;
        fs::create_directories(fs::path(l.file).parent_path(), ec);
    }
    const int fd = ::open(l.file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return;
    struct stat before, after;
    if (::fstat(fd, &before) != 0 || !S_ISREG(before.st_mode)) {
        ::close(fd);
        return;
    }
    const std::string text = before.st_size == 0 ? std::string(kHeader) + line : line;
    const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fstat(fd, &after) == 0;
    ::close(fd);
    if (!ok) return;
    // Keep this process's copy current without reading the ledger again (a trace writes thousands of files).
    auto it = g_cache.find(l.file);
    if (it != g_cache.end() && it->second.file_size == uint64_t(before.st_size)) {
        parse_line(line.substr(0, line.size() - 1), it->second);
        it->second.file_size = uint64_t(after.st_size);
        it->second.mtime_ns = mtime_ns(after);
    }
    const Parsed* p = load_locked(l.file);
    if (!p) return;
    if (l.base.empty() && p->file_size > kUserLedgerLimit) compact_locked(l, *p, kUserLedgerLimit / 2);
    // a folder's manifest keeps every live proof: rewritten once most of its lines are superseded
    if (!l.base.empty() && p->file_size > kFolderLedgerLimit && p->next_seq > 2 * p->entries.size())
        compact_locked(l, *p, UINT64_MAX);
}

std::optional<Entry> lookup(const Ledger& l, const std::string& key) {
    std::lock_guard<std::mutex> lock(g_mutex);
    const Parsed* p = load_locked(l.file);
    if (!p) return std::nullopt;
    auto it = p->entries.find(key);
    if (it == p->entries.end() || it->second.removed) return std::nullopt;
    return it->second;
}

bool is_manifest_file(const fs::path& p) { return p.filename() == manifest_name && header_ok(p.string()); }

}  // namespace

FileProof proof_of_bytes(const void* data, uint64_t size) {
    Hasher h;
    const auto* p = static_cast<const unsigned char*>(data);
    if (size == 0) h.chunk(p, 0);
    for (uint64_t off = 0; off < size; off += kChunk) h.chunk(p + off, size_t(std::min<uint64_t>(kChunk, size - off)));
    return {size, h.h};
}

std::optional<FileProof> file_proof(const std::string& path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return std::nullopt;
    std::vector<unsigned char> buf(kChunk);
    Hasher h;
    bool ok = true;
    for (;;) {  // whole chunks, as proof_of_bytes cuts them
        size_t got = 0;
        while (got < kChunk) {
            const ssize_t n = ::read(fd, buf.data() + got, kChunk - got);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) ok = false;
            if (n <= 0) break;
            got += size_t(n);
        }
        if (!ok) break;
        if (got > 0 || h.size == 0) h.chunk(buf.data(), got);
        if (got < kChunk) break;
    }
    ::close(fd);
    if (!ok) return std::nullopt;
    return FileProof{h.size, h.h};
}

bool kvscope_wrote(const std::string& path) {
    const auto where = locate(path);
    if (!where) return false;
    const std::optional<Entry> e = lookup(where->first, where->second);
    if (!e) return false;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) != e->proof.size) return false;
    const std::optional<FileProof> now = file_proof(path);
    return now && *now == e->proof;
}

void record_written(const std::string& path, std::optional<FileProof> proof) {
    if (!proof) proof = file_proof(path);
    if (!proof) return;
    const auto where = locate(path);
    if (!where) return;
    append(where->first, where->second, hex64(proof->hash) + "\t" + std::to_string(proof->size) + "\t" + where->second + "\n");
}

bool remove_written(const std::string& path) {
    if (!kvscope_wrote(path)) return false;
    if (::unlink(path.c_str()) != 0) throw LoadError(path, std::string("cannot remove: ") + std::strerror(errno));
    if (const auto where = locate(path)) append(where->first, where->second, "-\t\t" + where->second + "\n");
    return true;
}

bool has_manifest(const std::string& dir) { return header_ok((fs::path(dir) / manifest_name).string()); }

void start_manifest(const std::string& dir) {
    if (has_manifest(dir)) return;
    const std::string file = (fs::path(dir) / manifest_name).string();
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw LoadError(file, std::string("cannot start kvscope's manifest: ") + std::strerror(errno));
    const size_t n = std::strlen(kHeader);
    const bool ok = ::write(fd, kHeader, n) == ssize_t(n) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) {
        ::unlink(file.c_str());
        throw LoadError(file, "cannot start kvscope's manifest: write error");
    }
}

std::vector<std::string> foreign_entries(const std::string& dir, size_t max) {
    std::vector<std::string> out;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    for (; !ec && it != end && out.size() < max; it.increment(ec)) {
        const fs::directory_entry& e = *it;
        const fs::file_status st = e.symlink_status(ec);
        if (fs::is_directory(st)) continue;  // a folder is foreign only by what it holds
        if (fs::is_regular_file(st) && (is_manifest_file(e.path()) || kvscope_wrote(e.path().string()))) continue;
        out.push_back(e.path().lexically_relative(dir).string());
    }
    if (ec && out.size() < max) out.push_back("(a folder that cannot be read: " + ec.message() + ")");
    return out;
}

void adopt_folder(const std::string& dir) {
    start_manifest(dir);
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->symlink_status(ec).type() == fs::file_type::regular && !is_manifest_file(it->path()))
            record_written(it->path().string());
}

void adopt_file(const std::string& path) { record_written(path); }

std::vector<std::string> remove_written_tree(const std::string& dir) {
    std::vector<std::string> left;
    std::error_code ec;
    std::vector<fs::path> entries;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
    std::sort(entries.begin(), entries.end());
    fs::path own_manifest;
    for (const fs::path& p : entries) {
        const fs::file_status st = fs::symlink_status(p, ec);
        if (fs::is_directory(st)) {
            for (std::string& s : remove_written_tree(p.string())) left.push_back(std::move(s));
        } else if (fs::is_regular_file(st) && is_manifest_file(p)) {
            own_manifest = p;  // a manifest of its own: it goes last, when nothing it proves is left
        } else if (!remove_written(p.string())) {
            left.push_back(p.string());
        }
    }
    if (!left.empty()) return left;
    if (!own_manifest.empty()) ::unlink(own_manifest.c_str());
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) left.push_back(dir);
    return left;
}

}  // namespace kvscope
