// Fuzzes what turns an accepted GGUF file into a model, past the container reader fuzz_gguf covers:
// core/model/gguf_model.* ({arch}.* keys -> ModelConfig, tensor names and shapes -> weights, the Q/K row
// un-permutation, Gemma's norm shift, GPT-2's transposes, rope_freqs.weight), gguf_tokenizer.* (tokenizer.*
// keys -> tokenizer.json) and Model::load's checks after them, the way `--model FILE.gguf` loads a file: each
// input is written to an in-memory file (memfd) and loaded by its /proc path. The input's size picks
// --dtype (odd: bf16) and the placement (bit 1: matrices in place from the mapping).
// Any bytes must give a model or a LoadError (never one about JSON: the config.json and tokenizer.json texts
// made of the keys are kvscope's own), never another exception, a crash or a sanitizer report. A model
// that loads runs one forward step of two tokens (the input is at most 64 KiB, so its weights are few) and
// must say its logits are finite or where they stopped being; its tokenizer must encode into its vocabulary;
// summarize_types must count every tensor's weights.
// Seeds: tools/fuzz.sh writes tiny models of every architecture (tests/reference/gguf_reference.py seeds).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/errors.h"
#include "forward/model.h"
#include "model/gguf_model.h"

using namespace kvscope;

namespace {

// The config.json / tokenizer.json text made of the keys is kvscope's own: JSON whatever the keys hold. The
// parsers' messages start so (parse_config's, and the tokenizer.json reader's as gguf_tokenizer words it);
// text from the input (a key or tensor name) never starts a message.
bool own_json_refused(const std::string& what) {
    return what.starts_with("not valid JSON") ||
           what.starts_with("its tokenizer (the tokenizer.* keys, read as tokenizer.json): not valid JSON");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("fuzz.gguf", 0);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();

    std::shared_ptr<const Model> model;
    try {
        model = Model::load(path, size % 2 ? WeightFormat::BF16 : WeightFormat::F32,
                            size & 2 ? WeightPlacement::Mapped : WeightPlacement::HugePages);
    } catch (const LoadError& e) {
        if (own_json_refused(e.what_is_wrong)) std::abort();
        return 0;
    }
    const ModelConfig& c = model->config();

    int64_t weights = 0;
    for (const GgufTensorSummary& t : model->gguf_tensors()) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        weights += n;
    }
    if (summarize_types(model->gguf_tensors()).weights != weights) std::abort();

    // T = 2 new tokens, V = vocabulary
    const std::vector<TokenId> tokens = {0, TokenId(c.n_vocab - 1)};  // (T)
    std::vector<float> logits(size_t(c.n_vocab));                      // (V)
    KvCache cache = model->make_cache(4, 0, 0, {}, 2);
    Workspace ws(c, 2, 1, 4);
    Chunk chunk;
    chunk.cache = &cache;
    chunk.tokens = tokens.data();
    chunk.n_tokens = 2;
    chunk.logits = logits.data();
    forward(*model, std::span<Chunk>(&chunk, 1), ws);
    if (chunk.non_finite_layer < -1 || chunk.non_finite_layer > c.n_layer) std::abort();

    if (const Tokenizer* t = model->tokenizer()) {
        for (TokenId id : t->encode("Hello, wörld 12345 <t> \xe2\x96\x81" "a", true))
            if (id < 0 || id >= c.n_vocab) std::abort();
    }
    return 0;
}
