#include "io/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errors.h"
#include "io/output_path.h"
#include "io/ownership.h"

namespace kvscope {
namespace fs = std::filesystem;

namespace {

std::string folder_of(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    return parent.empty() ? "." : parent.string();
}

[[noreturn]] void fail(const std::string& path, int err, const char* when = "cannot write: ") {
    throw LoadError(path, when + std::string(err ? std::strerror(err) : "write error"));
}

// The last line of defence behind output_path.h's checks: an existing file kvscope cannot prove it
// wrote is never replaced, even when a caller forgot to check first.
void refuse_foreign(const std::string& path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return;  // nothing there
    if (S_ISDIR(st.st_mode)) return;             // rename fails on it below, with the system's reason
    if (!kvscope_wrote(path))
        throw LoadError(path, "cannot write: a file is there that kvscope did not write (or it changed since)",
                        "kvscope replaces only files it wrote: remove it or choose another name");
}

void write_atomic(const std::string& path, const std::function<void(std::FILE*)>& fill, std::optional<FileProof> proof) {
    refuse_foreign(path);
    static std::atomic<int> counter = 0;  // two writers in one process never share a temp name
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) fail(path, errno);
    std::FILE* f = ::fdopen(fd, "wb");
    if (!f) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail(path, err);
    }
    // pass 1: the bytes, flushed and synced
    int err = 0;
    try {
        fill(f);
    } catch (...) {
        std::fclose(f);
        ::unlink(tmp.c_str());
        throw;
    }
    if (std::ferror(f)) err = errno ? errno : EIO;  // a write inside fill failed (disk full, file too large)
    else if (std::fflush(f) != 0) err = errno;
    if (!err && ::fsync(fd) != 0) err = errno;
    if (std::fclose(f) != 0 && !err) err = errno;
    // pass 2: the rename makes the new file visible in one step
    if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err) {
        ::unlink(tmp.c_str());
        fail(path, err);
    }
    // pass 3: the folder's entry is on disk too, so the rename survives a power loss
    const int dir = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) fail(path, errno, "written, but its folder could not be synced: ");
    const bool synced = ::fsync(dir) == 0;
    err = errno;
    ::close(dir);
    if (!synced && err != EINVAL) fail(path, err, "written, but its folder could not be synced: ");  // EINVAL: no fsync on folders here
    record_written(path, proof);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& fill) {
    write_atomic(path, fill, std::nullopt);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
    write_atomic(path, [&](std::FILE* f) { std::fwrite(bytes.data(), 1, bytes.size(), f); },
                 proof_of_bytes(bytes.data(), bytes.size()));
}

void ensure_writable(const std::string& path) { check_output_file("", path, OutputKind::Any); }

}  // namespace kvscope
