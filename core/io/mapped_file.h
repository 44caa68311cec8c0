#pragma once
// A whole file mapped read-only into memory, for the readers that parse a format in place (safetensors,
// GGUF). The file is opened through open_regular_file (read_file.h): a FIFO, device or folder, or a file
// over the reader's limit, is refused before anything is mapped. The descriptor is closed once the
// mapping exists; the mapping lives as long as the MappedFile (RAII, move-only).
//
//   MappedFile(path, limit, hint)   maps the file; throws LoadError naming the path: the errors of
//                                   open_regular_file, or "cannot map into memory: <errno text>"
//   path()                          as given
//   size()                          the file's size in bytes when it was opened
//   data()                          its bytes; nullptr for an empty file (nothing is mapped)
//
// The bytes stay valid after a move (the mapping does not move), so views into them survive moving
// their owner.
#include <cstddef>
#include <string>

#include "io/read_file.h"

namespace kvscope {

class MappedFile {
public:
    MappedFile(const std::string& path, const ReadLimit& limit, const std::string& missing_hint = "");
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return path_; }
    size_t size() const { return size_; }
    const std::byte* data() const { return static_cast<const std::byte*>(mapping_); }

private:
    void unmap();
    std::string path_;
    void* mapping_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvscope
