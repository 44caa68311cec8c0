#include "io/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/errors.h"

namespace kvscope {

MappedFile::MappedFile(const std::string& path, const ReadLimit& limit, const std::string& missing_hint)
    : path_(path) {
    const RegularFile file = open_regular_file(path, limit, missing_hint);
    size_ = size_t(file.size);
    // mmap refuses a length of 0: an empty file maps to nothing, and its reader says what is missing
    if (size_ > 0) {
        void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
        const int e = errno;
        if (m == MAP_FAILED) {
            ::close(file.fd);
            throw LoadError(path_, std::string("cannot map into memory: ") + std::strerror(e));
        }
        mapping_ = m;
    }
    ::close(file.fd);  // the mapping keeps the file's pages
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), mapping_(std::exchange(other.mapping_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        unmap();
        path_ = std::move(other.path_);
        mapping_ = std::exchange(other.mapping_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void MappedFile::unmap() {
    if (mapping_) ::munmap(mapping_, size_);
    mapping_ = nullptr;
}

}  // namespace kvscope
