// kvscope chat-template: any Hugging Face chat template rendered by kvscope's Jinja engine
// (core/text/jinja/), byte for byte as transformers' apply_chat_template(tokenize=False) renders it.
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "args.h"
#include "base/errors.h"
#include "commands.h"
#include "io/json.h"
#include "io/json_write.h"
#include "io/read_file.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

namespace kvscope {
namespace {

struct Source {
    std::string text;    // the template
    std::string origin;  // the file it came from, for errors
    std::string bos, eos;
};

bool is_gguf_file(const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec) && looks_like_gguf(path);
}

// A GGUF file: tokenizer.chat_template and the BOS / EOS pieces, read from its keys as tokenizer_config.json
// (gguf_tokenizer.h); the weights are not loaded.
Source from_gguf(const std::string& path) {
    const std::optional<GgufTokenizerFiles> files = gguf_tokenizer_files(GgufFile(path));
    const std::optional<TokenizerConfig> config =
        files ? std::optional<TokenizerConfig>(parse_tokenizer_config(files->tokenizer_config_json, path)) : std::nullopt;
    if (!config || !config->chat_template)
        throw UsageError(path + ": no chat template (the file has no tokenizer.chat_template key)");
    return Source{*config->chat_template, path, config->bos_token.value_or(""), config->eos_token.value_or("")};
}

// transformers reads chat_template.jinja beside tokenizer_config.json in preference to the config's key.
Source from_model(const std::string& dir) {
    namespace fs = std::filesystem;
    if (is_gguf_file(dir)) return from_gguf(dir);
    if (!fs::is_directory(dir)) throw LoadError(dir, "no such folder", "--model wants a model folder with tokenizer_config.json, or a .gguf file");
    Source s;
    const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
    const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
    std::optional<TokenizerConfig> config;
    if (fs::exists(config_path))
        config = parse_tokenizer_config(read_file_bounded(config_path, k_tokenizer_file), config_path);
    if (fs::exists(jinja_path)) {
        s.text = read_file_bounded(jinja_path, k_tokenizer_file);
        s.origin = jinja_path;
    } else if (config && config->chat_template) {
        s.text = *config->chat_template;
        s.origin = config_path;
    } else {
        throw UsageError(dir + ": no chat template (neither chat_template.jinja nor a chat_template in tokenizer_config.json" +
                         std::string(config && !config->chat_template_names.empty() ? " named \"default\")" : ")"));
    }
    if (config) {
        s.bos = config->bos_token.value_or("");
        s.eos = config->eos_token.value_or("");
    }
    return s;
}

}  // namespace

jinja::RenderOptions parse_template_date(const std::optional<std::string>& given, const std::string& command) {
    jinja::RenderOptions o;
    if (!given) {  // apply_chat_template's strftime_now reads the local clock
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        o.year = tm.tm_year + 1900, o.month = tm.tm_mon + 1, o.day = tm.tm_mday;
        return o;
    }
    int y = 0, m = 0, d = 0;
    char tail = 0;
    if (given->size() != 10 || std::sscanf(given->c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || y < 1 ||
        m < 1 || m > 12 || d < 1 || d > 31)
        throw UsageError(command + ": --date wants YYYY-MM-DD, got '" + *given + "'");
    o.year = y, o.month = m, o.day = d;
    return o;
}

int cli_chat_template(int argc, char** argv) {
    CliArgs args("chat-template", "Render a conversation with a Hugging Face chat template, byte for byte as "
                                  "transformers' apply_chat_template(tokenize=False) renders it; prints the text "
                                  "exactly (no newline added).");
    args.option("--model", "DIR", "model folder: chat_template.jinja, else tokenizer_config.json's chat_template; "
                                  "bos_token and eos_token from tokenizer_config.json (a .gguf file: its "
                                  "tokenizer.chat_template and BOS / EOS tokens)");
    args.option("--template", "FILE", "a template file instead of --model");
    args.option("--messages", "FILE", "a JSON array of messages ({\"role\", \"content\", ...}; '-' for stdin)");
    args.option("--tools", "FILE", "a JSON array of tool definitions, passed as `tools` (default: undefined)");
    args.option("--bos-token", "TEXT", "bos_token (overrides the model's)");
    args.option("--eos-token", "TEXT", "eos_token (overrides the model's)");
    args.option("--date", "YYYY-MM-DD", "the date strftime_now() formats (default: today)");
    args.flag("--add-generation-prompt", "end with the template's opening of an assistant turn");
    args.flag("--json", "print {\"text\": ..., \"ids\": [...]} (ids need --model with tokenizer files)");
    args.epilogue("Templates outside the Jinja subset kvscope implements are refused in one line naming the construct "
                  "and its line:column (exit 2), as is a conversation the template refuses (raise_exception).");
    if (!args.parse(argc, argv)) return 0;

    if (args.has("--model") == args.has("--template")) throw UsageError("chat-template: give exactly one of --model, --template");
    if (!args.has("--messages")) throw UsageError("chat-template: --messages FILE is required");
    Source src;
    if (args.has("--model")) {
        src = from_model(*args.text("--model"));
    } else {
        src.origin = *args.text("--template");
        src.text = read_file_bounded(src.origin, k_tokenizer_file);
    }
    if (args.has("--bos-token")) src.bos = *args.text("--bos-token");
    if (args.has("--eos-token")) src.eos = *args.text("--eos-token");
    const jinja::RenderOptions options = parse_template_date(args.text("--date"), "chat-template");
    const bool want_ids = args.has("--json");
    const std::optional<std::string> model_path = args.text("--model");
    const bool gguf = model_path && is_gguf_file(*model_path);
    if (want_ids && !(model_path && (gguf || has_tokenizer_files(*model_path))))
        throw UsageError("chat-template: --json gives token ids, which need --model DIR with tokenizer files (or a .gguf file)");

    const std::string messages_path = *args.text("--messages");
    jinja::Dict vars = jinja::chat_variables(read_input_bounded(messages_path, k_text_file), args.has("--add-generation-prompt"),
                                             src.bos, src.eos);
    if (args.has("--tools")) {
        const std::string path = *args.text("--tools");
        Json tools;
        try {
            tools = Json::parse(read_file_bounded(path, k_text_file));
        } catch (const JsonError& e) {
            throw LoadError(path, std::string("not valid JSON: ") + e.what());
        }
        if (!tools.is_array()) throw UsageError(path + ": --tools wants a JSON array of tool definitions");
        vars.set("tools", jinja::from_json(tools));
    }
    const std::string text = jinja::JinjaTemplate::parse(src.text, src.origin).render(vars, options);
    if (!want_ids) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return 0;
    }
    std::optional<Tokenizer> from_file = gguf ? gguf_file_tokenizer(*model_path) : std::nullopt;
    if (gguf && !from_file) throw UsageError(*model_path + ": --json gives token ids, and the file has no tokenizer.* keys");
    const Tokenizer tokenizer = gguf ? std::move(*from_file) : Tokenizer::load(*model_path);
    const std::string out = json_text(JsonOut{{"text", text}, {"ids", encode_chat(tokenizer, text)}}) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

}  // namespace kvscope
