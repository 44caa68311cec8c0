// Fuzzes the GGUF reader through its real path (open, fstat, mmap, validate), as fuzz_safetensors does: each
// input is written to an in-memory file (memfd) and opened by its /proc path. Any bytes must give a file or a
// LoadError, never a crash or sanitizer report; an accepted file's tensors must lie inside it and a readable
// tensor must dequantize without touching a byte outside its view.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/errors.h"
#include "model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("fuzz.gguf", 0);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();

    try {
        kvscope::GgufFile file(path);
        if (file.file_size() != size) std::abort();
        size_t total = 0;
        std::vector<float> values;
        for (const kvscope::GgufTensor& t : file.tensors()) {
            const kvscope::GgmlTypeInfo& info = kvscope::ggml_type_info(t.type);
            if (t.n_bytes != size_t(t.n_elements() / info.block_elements * info.block_bytes)) std::abort();
            if (info.readable && t.n_elements() <= (int64_t(1) << 20)) {
                values.resize(size_t(t.n_elements()));
                kvscope::dequantize_row(t.type, t.data, t.n_elements(), values.data());
            }
            total += t.n_bytes;
        }
        if (total > size) std::abort();
    } catch (const kvscope::LoadError&) {
    }
    return 0;
}
