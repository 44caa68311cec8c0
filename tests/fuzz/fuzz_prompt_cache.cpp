// Fuzzes the prompt cache reader: any bytes must give a PromptCache or a LoadError, never a crash, hang,
// huge allocation or sanitizer report. Each input is read twice: as given, and with its last 8 bytes
// replaced by the right checksum, so the fuzzer also reaches the checks behind the checksum. Whatever
// reads successfully must survive restore + write unchanged: the writer reproduces the input byte for byte.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "base/errors.h"
#include "run/prompt_cache.h"

namespace {

// A made-up model (L=1, H=2, D=4, V=50, 64 positions); tools/fuzz.sh writes seeds with these names.
kvscope::ModelFingerprint fingerprint() {
    kvscope::ModelFingerprint fp;
    fp.config_json = "fuzz-config";
    fp.weight_format = "f32";
    fp.kernels = "fuzz";
    fp.kv_format = "f32";
    fp.weights_hash = 0x1234;
    fp.config.n_vocab = 50;
    fp.config.n_ctx = 64;
    fp.config.n_embd = 8;
    fp.config.n_layer = 1;
    fp.config.n_head = 2;
    fp.config.n_inner = 32;
    return fp;
}

std::string dir() {
    return (access("/dev/shm", W_OK) == 0 ? "/dev/shm/" : "/tmp/") + std::string("fuzz_prompt_cache.") +
           std::to_string(getpid());
}

void check(const std::string& bytes) {
    static const kvscope::ModelFingerprint fp = fingerprint();
    static const std::string in = dir() + ".in", out = dir() + ".out";
    struct Cleanup {
        ~Cleanup() {
            ::unlink(in.c_str());
            ::unlink(out.c_str());
        }
    } cleanup;
    std::ofstream(in, std::ios::binary | std::ios::trunc) << bytes;
    kvscope::PromptCache pc;
    try {
        pc = kvscope::read_prompt_cache(in, fp);
    } catch (const kvscope::LoadError&) {
        return;
    }
    const int64_t N = int64_t(pc.tokens.size());
    if (N < 1 || N > fp.config.n_ctx || pc.n_layer != 1 || pc.n_head != 2 || pc.head_dim != 4 ||
        pc.k.size() != size_t(8 * N) || pc.v.size() != pc.k.size())
        std::abort();
    for (int32_t t : pc.tokens)
        if (t < 0 || t >= fp.config.n_vocab) std::abort();
    kvscope::KvCache cache(1, 2, 4, fp.config.n_ctx, 0);
    kvscope::restore_prompt_cache(pc, N, cache);
    kvscope::write_prompt_cache(out, fp, pc.tokens, cache);
    std::ifstream f(out, std::ios::binary);
    const std::string again{std::istreambuf_iterator<char>(f), {}};
    if (again != bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string bytes(reinterpret_cast<const char*>(data), size);
    check(bytes);
    if (size >= 8) {
        const uint64_t h = kvscope::Hash64::of(bytes.data(), size - 8);
        std::memcpy(bytes.data() + size - 8, &h, 8);
        check(bytes);
    }
    return 0;
}
