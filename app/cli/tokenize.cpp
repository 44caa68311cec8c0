// kvscope tokenize / detokenize: the model folder's tokenizer on its own (only tokenizer.json +
// tokenizer_config.json, or vocab.json + merges.txt, are read, so a folder without weights works too).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/errors.h"
#include "args.h"
#include "commands.h"
#include "common.h"
#include "io/json.h"
#include "io/json_write.h"
#include "io/read_file.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "text/tokenizer.h"

namespace kvscope {
namespace {

Tokenizer load_tokenizer(const CliArgs& args) {
    std::optional<std::string> given = args.text("--model");
    std::string dir = given.value_or(default_model_dir());
    if (std::filesystem::is_regular_file(dir) && looks_like_gguf(dir)) {
        std::optional<Tokenizer> t = gguf_file_tokenizer(dir);
        if (!t) throw UsageError(args.command() + " needs a tokenizer, and " + dir + " holds no tokenizer.ggml.* keys");
        return std::move(*t);
    }
    if (!std::filesystem::is_directory(dir))
        throw LoadError(dir, "no such folder",
                        given ? "--model wants a folder with tokenizer.json, or vocab.json and merges.txt, or a .gguf file"
                              : "the default model is missing; pass --model DIR");
    if (!has_tokenizer_files(dir))  // a folder without a tokenizer is a refused request, as for generate --prompt
        throw UsageError(args.command() + " needs the tokenizer (tokenizer.json, or vocab.json and merges.txt), which " +
                         dir + " does not have");
    return Tokenizer::load(dir);
}

void write_out(std::string_view bytes) {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
}

std::string space_separated(const std::vector<TokenId>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s;
}

}  // namespace

int cli_tokenize(int argc, char** argv) {
    CliArgs args("tokenize", "Turn text into token ids with the model's BPE tokenizer (the tokenizer's BOS first, "
                             "where its tokenizer.json adds one).");
    args.option("--model", "DIR", "folder with tokenizer.json, or vocab.json and merges.txt, or a .gguf file with its tokenizer (default: the embedded model)");
    args.option("--text", "TEXT", "the text to encode; prints the ids space-separated on one line");
    args.option("--file", "FILE", "encode the bytes of FILE ('-' for stdin), same output as --text");
    args.option("--jsonl", "FILE", "one JSON object {\"text\": ...} per line ('-' for stdin); prints one "
                                   "{\"ids\": [...]} line per input line, in order; blank lines are skipped");
    args.flag("--allow-special", "encode special tokens written in the text (<|endoftext|>, <s>, ...) as their own ids");
    if (!args.parse(argc, argv)) return 0;

    int n_inputs = int(args.has("--text")) + int(args.has("--file")) + int(args.has("--jsonl"));
    if (n_inputs != 1) throw UsageError("tokenize: give exactly one of --text, --file, --jsonl");
    const bool allow_special = args.has("--allow-special");
    Tokenizer tokenizer = load_tokenizer(args);

    if (!args.has("--jsonl")) {
        std::string text = args.has("--text") ? *args.text("--text") : read_input_bounded(*args.text("--file"), k_text_file);
        write_out(space_separated(tokenizer.encode(text, allow_special)) + "\n");
        return 0;
    }
    const std::string input = read_input_bounded(*args.text("--jsonl"), k_text_file);
    const std::string path = *args.text("--jsonl") == "-" ? "<stdin>" : *args.text("--jsonl");
    std::string out;
    size_t line_no = 0;
    for (size_t pos = 0; pos < input.size();) {
        size_t eol = input.find('\n', pos);
        if (eol == std::string::npos) eol = input.size();
        std::string_view line(input.data() + pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        const std::string where = "line " + std::to_string(line_no) + ": ";
        Json row;
        try {
            row = Json::parse(line);
        } catch (const JsonError& e) {
            throw LoadError(path, where + "not valid JSON: " + e.what());
        }
        const Json* text = row.is_object() ? row.find("text") : nullptr;
        if (!text || !text->is_string())
            throw LoadError(path, where + "expected an object with a string member \"text\"");
        out += json_text({{"ids", tokenizer.encode(text->as_string(), allow_special)}}) + "\n";
    }
    write_out(out);
    return 0;
}

// "The cat" in the default model's vocabulary (assets/default): the example runs as printed.
constexpr const char* kExampleIds = "51,256,758";

int cli_detokenize(int argc, char** argv) {
    CliArgs args("detokenize", "Turn token ids back into the bytes they stand for (written raw to stdout).");
    args.option("--model", "DIR", "folder with tokenizer.json, or vocab.json and merges.txt, or a .gguf file with its tokenizer (default: the embedded model)");
    args.option("--ids", "LIST", std::string("comma-separated token ids, e.g. ") + kExampleIds + " (\"The cat\" in the default model)");
    args.flag("--hex", "write the bytes as lowercase hex and a newline instead of raw");
    if (!args.parse(argc, argv)) return 0;

    if (!args.has("--ids")) throw UsageError(std::string("detokenize: --ids is required (e.g. --ids ") + kExampleIds + ")");
    std::vector<int64_t> wide = parse_id_list(*args.text("--ids"), "detokenize: --ids");
    Tokenizer tokenizer = load_tokenizer(args);
    // Models pad their embedding beyond the tokenizer (Qwen2.5: 151936 ids, 151665 tokens) and may sample
    // such an id; decode writes it "<id N>", as generate does. The folder's config.json, when it has one,
    // says which ids the model has: beyond those an id is an error. Without it, or when it cannot be read,
    // an id beyond the tokenizer is padding or a mistake, and stderr says so.
    const std::string dir = args.text("--model").value_or(default_model_dir());
    int64_t model_vocab = 0;  // 0: unknown
    if (std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
        try {
            model_vocab = load_config((std::filesystem::path(dir) / "config.json").string()).n_vocab;
        } catch (const LoadError&) {
        }
    }
    std::vector<TokenId> ids;
    std::string beyond;  // ids past the tokenizer, for the note
    int64_t n_beyond = 0;
    for (int64_t id : wide) {
        const int64_t limit = std::max(model_vocab, tokenizer.n_vocab());
        if (id < 0 || (model_vocab > 0 && id >= limit))
            throw UsageError("detokenize: token id " + std::to_string(id) + " is not in the vocabulary (ids 0.." +
                             std::to_string(limit - 1) + (model_vocab > 0 ? " in config.json's vocab_size" : "") + ")");
        if (id >= tokenizer.n_vocab() && n_beyond++ < 20) {
            if (!beyond.empty()) beyond += ',';
            beyond += std::to_string(id);
        }
        ids.push_back(TokenId(id));
    }
    if (n_beyond > 20) beyond += ",...";
    if (n_beyond > 0)
        std::fprintf(stderr, "detokenize: token %s %s %s beyond the tokenizer's %lld tokens: %s; written as <id N>\n",
                     n_beyond == 1 ? "id" : "ids", beyond.c_str(), n_beyond == 1 ? "is" : "are", (long long)tokenizer.n_vocab(),
                     model_vocab > 0 ? ("padding of the model's " + std::to_string(model_vocab) + "-id embedding").c_str()
                                     : "a model's padded vocabulary or out of range (no config.json says which)");
    std::string bytes = tokenizer.decode(ids);
    if (!args.has("--hex")) {
        write_out(bytes);
        return 0;
    }
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned char b : bytes) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    write_out(out + "\n");
    return 0;
}

}  // namespace kvscope
