// Fuzzes a GGUF file's tokenizer (core/model/gguf_tokenizer.*) from its metadata alone, as `tokenize`,
// `chat-template` and `chat` read it: the tokenizer.ggml.* keys -> tokenizer.json and tokenizer_config.json
// -> a Tokenizer, and tokenizer.chat_template -> a ChatTemplate. Each input is written to an in-memory file
// (memfd) and read by its /proc path; no tensor is read.
// Loading must give a tokenizer, none (no tokenizer.ggml.model) or a LoadError (never one about JSON: the
// tokenizer.json text made of the keys is kvscope's own), never another exception, a crash or a sanitizer
// report. A tokenizer that loads must encode a few texts into ids inside its vocabulary and decode them;
// the tokenizer_config.json text made of the keys must parse; a chat template that parses renders a short
// conversation or refuses it with a UsageError, and the rendering encodes inside the vocabulary.
// Seeds: tools/fuzz.sh writes tokenizer-only files of each byte-level pre-tokenizer and of SentencePiece
// (tests/reference/gguf_reference.py seeds).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

using namespace kvscope;

namespace {

// The config.json / tokenizer.json text made of the keys is kvscope's own: JSON whatever the keys hold. The
// parsers' messages start so (parse_config's, and the tokenizer.json reader's as gguf_tokenizer words it);
// text from the input (a key or tensor name) never starts a message.
bool own_json_refused(const std::string& what) {
    return what.starts_with("not valid JSON") ||
           what.starts_with("its tokenizer (the tokenizer.* keys, read as tokenizer.json): not valid JSON");
}

void check_ids(const Tokenizer& t, const std::vector<TokenId>& ids) {
    for (TokenId id : ids)
        if (!t.has(id)) std::abort();
    (void)t.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("fuzz.gguf", 0);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();

    std::optional<GgufTokenizerFiles> files;
    std::optional<Tokenizer> tokenizer;
    try {
        files = gguf_tokenizer_files(GgufFile(path));
        if (!files) return 0;
        tokenizer.emplace(gguf_tokenizer(*files, path));
    } catch (const LoadError& e) {
        if (own_json_refused(e.what_is_wrong)) std::abort();
        return 0;
    }
    const Tokenizer& t = *tokenizer;
    for (const char* text : {"", "Hello, wörld! 12345  ab abc", "\xe2\x96\x81" "a b\n\t<|bos|><t></s>", "caf\xc3\xa9 \xf0\x9f\x98\x80"}) {
        check_ids(t, t.encode(text));
        check_ids(t, t.encode(text, true));
    }

    // The keys' tokenizer_config.json is kvscope's own text: it must parse whatever the keys held.
    if (!parse_tokenizer_config(files->tokenizer_config_json, path).chat_template) return 0;
    try {
        const ChatTemplate chat = ChatTemplate::from_config_json(files->tokenizer_config_json, path);
        const std::string text = chat.render({{"system", "Be brief."}, {"user", "Hi <t> 12"}}, true);
        check_ids(t, encode_chat(t, text));
    } catch (const UsageError&) {
    }
    return 0;
}
