// Fuzzes the safetensors reader through its real path (open, fstat, mmap, validate): each input is
// written to an in-memory file (memfd) and opened by its /proc path. Any bytes must give a file or
// a LoadError, never a crash or sanitizer report; an accepted file's views must lie inside it.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/errors.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("fuzz.safetensors", 0);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();

    try {
        kvscope::SafetensorsFile file(path);
        if (file.file_size() != size) std::abort();
        size_t total = 0;
        for (const kvscope::TensorView& t : file.tensors()) {
            if (t.n_bytes != size_t(t.n_elements()) * kvscope::dtype_size(t.dtype)) std::abort();
            // Touch every byte: a view that strays past the mapping faults here.
            volatile unsigned char sink = 0;
            for (size_t i = 0; i < t.n_bytes; ++i) sink = sink ^ static_cast<unsigned char>(t.data[i]);
            total += t.n_bytes;
        }
        if (total > size) std::abort();
    } catch (const kvscope::LoadError&) {
    }
    return 0;
}
