#include "io/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <istream>

#include "base/errors.h"

namespace kvscope {
namespace {

std::string errno_text() { return std::strerror(errno); }

const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

// `size` = "3 GiB is" for a file whose size is known, "holds" for a stream that went past the limit
[[noreturn]] void too_large(const std::string& path, const std::string& size, const ReadLimit& limit) {
    throw LoadError(path, size + " more than the " + size_text(limit.bytes) + " " + limit.what + " may have");
}

// Appends what fd holds until its end; more than limit.bytes is refused as soon as it is seen, so a
// stream without end (stdin from /dev/zero) costs at most the limit.
void read_all(int fd, const std::string& name, const ReadLimit& limit, std::string& out) {
    constexpr size_t k_chunk = size_t(1) << 20;
    for (;;) {
        const size_t at = out.size();
        // within what the caller reserved (a file's size + 1: its last read sees the end without growing
        // the string), else a chunk
        const size_t room = out.capacity() > at ? out.capacity() - at : k_chunk;
        const size_t want = size_t(std::min<uint64_t>(std::min(room, k_chunk), limit.bytes + 1 - at));
        out.resize(at + want);
        const ssize_t r = ::read(fd, out.data() + at, want);
        if (r < 0 && errno == EINTR) {
            out.resize(at);
            continue;
        }
        if (r < 0) throw LoadError(name, "cannot read: " + errno_text());
        out.resize(at + size_t(r));
        if (r == 0) return;
        if (out.size() > limit.bytes) too_large(name, "holds", limit);
    }
}

struct Fd {
    int fd = -1;
    ~Fd() { if (fd >= 0) ::close(fd); }
};

}  // namespace

std::string size_text(uint64_t bytes) {
    if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
    const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = double(bytes) / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) v /= 1024, ++u;
    char buf[32];
    // whole numbers without a fraction: limits read "16 MiB", not "16.0 MiB"
    if (v == double(uint64_t(v))) std::snprintf(buf, sizeof buf, "%llu %s", (unsigned long long)v, units[u]);
    else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

bool read_line_bounded(std::istream& in, const std::string& name, const ReadLimit& limit, uint64_t& used, std::string& line) {
    line.clear();
    std::streambuf* buf = in.rdbuf();
    for (;;) {
        const int c = buf->sbumpc();
        if (c == std::char_traits<char>::eof()) {
            in.setstate(std::ios::eofbit);
            return !line.empty();
        }
        if (++used > limit.bytes) too_large(name, "holds", limit);
        if (c == '\n') return true;
        line += char(c);
    }
}

RegularFile open_regular_file(const std::string& path, const ReadLimit& limit, const std::string& missing_hint) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever
    Fd f;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f.fd < 0) {
        const int e = errno;
        throw LoadError(path, std::string("cannot open: ") + std::strerror(e), e == ENOENT ? missing_hint : "");
    }
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) throw LoadError(path, "cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode)) {
        const std::string kind = kind_of(st.st_mode);
        throw LoadError(path, kind == "not a regular file" ? "is " + kind : "is " + kind + ", not a regular file");
    }
    if (uint64_t(st.st_size) > limit.bytes) too_large(path, size_text(uint64_t(st.st_size)) + " is", limit);
    const int flags = ::fcntl(f.fd, F_GETFL);
    if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) throw LoadError(path, "cannot open: " + errno_text());
    RegularFile out{f.fd, uint64_t(st.st_size)};
    f.fd = -1;
    return out;
}

std::string read_file_bounded(const std::string& path, const ReadLimit& limit, const std::string& missing_hint) {
    const RegularFile file = open_regular_file(path, limit, missing_hint);
    Fd f{file.fd};
    std::string out;
    out.reserve(size_t(file.size) + 1);  // +1: the read that sees the end
    read_all(f.fd, path, limit, out);    // the file may have grown since fstat: still bounded
    return out;
}

std::string read_input_bounded(const std::string& path, const ReadLimit& limit, const std::string& missing_hint) {
    if (path != "-") return read_file_bounded(path, limit, missing_hint);
    std::string out;
    read_all(STDIN_FILENO, "stdin", limit, out);
    return out;
}

}  // namespace kvscope
