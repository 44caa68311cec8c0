#include "cli_common.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "clock.h"
#include "errors.h"
#include "json_write.h"
#include "output_path.h"
#include "random_model.h"
#include "thread_pool.h"

namespace kvscope {

std::string default_model_dir() {
    if (const char* env = std::getenv("KVSCOPE_DEFAULT_MODEL"); env && *env) return env;
    return std::string(KVSCOPE_ASSETS_DIR) + "/default";
}

void add_model_option(CliArgs& args) {
    args.option("--model", "DIR", "model folder: config.json and model.safetensors (or model.safetensors.index.json "
                                  "and its shards); vocab.json and merges.txt are "
                                  "optional (without them, prompts are token ids) (default: assets/default)");
    args.option("--dtype", "f32|bf16", "how weight matrices are kept: float32 (default) or bfloat16, which "
                                       "halves what a decode step reads; arithmetic is float32 either way");
}

WeightFormat weight_format_from(const CliArgs& args) {
    const std::string d = args.text("--dtype").value_or("f32");
    if (d == "f32" || d == "fp32" || d == "float32") return WeightFormat::F32;
    if (d == "bf16" || d == "bfloat16") return WeightFormat::BF16;
    throw UsageError("--dtype must be f32 or bf16, got '" + d + "'");
}

void add_threads_option(CliArgs& args) {
    args.option("--threads", "N", "worker threads (default: all cores)");
}

std::shared_ptr<const Model> load_model_from(const CliArgs& args) {
    return Model::load(args.text("--model").value_or(default_model_dir()), weight_format_from(args));
}

void apply_threads(const CliArgs& args) {
    ThreadPool::global().set_threads(int(args.integer("--threads", default_thread_count(), 1, 256)));
}

std::vector<std::vector<TokenId>> prompts_from(const CliArgs& args, const Model& model, bool allow_special,
                                               bool starts_text) {
    std::vector<std::vector<TokenId>> prompts;
    for (const auto& [name, value] : args.in_order()) {
        if (name == "--prompt") {
            prompts.push_back(encode_text(model, value, "--prompt", allow_special, starts_text));
        } else if (name == "--prompt-ids") {
            prompts.push_back(ids_from(value, "--prompt-ids", model));
        }
    }
    if (prompts.empty()) throw UsageError("give a prompt: --prompt TEXT or --prompt-ids 1,2,3");
    return prompts;
}

std::string bench_model_dir(const CliArgs& args) {
    if (!args.has("--gpt2-shape")) return args.text("--model").value_or(default_model_dir());
    const std::string dir = args.text("--work").value_or("kvscope-bench-model");
    if (!std::filesystem::exists(dir + "/model.safetensors")) {
        make_output_folder("--work", dir, "config.json");
        std::fprintf(stderr, "writing GPT-2 124M-shaped random weights to %s ...\n", dir.c_str());
        write_random_model(dir, gpt2_small_config(), 124);
    }
    return dir;
}

std::vector<TokenId> ids_from(const std::string& list, const char* flag, const Model& model) {
    std::vector<TokenId> ids;
    for (int64_t id : parse_id_list(list, flag)) {
        if (id < 0 || id >= model.config().n_vocab)
            throw UsageError(std::string(flag) + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(model.config().n_vocab) + ")");
        ids.push_back(TokenId(id));
    }
    return ids;
}

std::vector<TokenId> encode_text(const Model& model, const std::string& text, const char* flag, bool allow_special,
                                 bool starts_text) {
    if (!model.tokenizer())  // the model is fine; the request needs files it does not have: a usage error
        throw UsageError(std::string(flag) + " TEXT needs the tokenizer (tokenizer.json, or vocab.json and merges.txt), which " +
                         model.dir() + " does not have: give token ids (--prompt-ids), or add the tokenizer files");
    std::vector<TokenId> ids = starts_text ? model.tokenizer()->encode(text, allow_special)
                                           : model.tokenizer()->encode_continuation(text, allow_special);
    if (ids.empty()) throw UsageError(std::string(flag) + " is empty");
    return ids;
}

std::string count_of(int64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
}

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), active_(::isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { finish(); }

void Progress::finish() {
    if (active_ && last_draw_ > 0) {
        std::fputs("\r\033[K", stderr);
        std::fflush(stderr);
    }
    last_draw_ = 0;
}

void Progress::update(int64_t done, const std::string& doing) {
    if (!active_) return;
    const double now = seconds_now();
    // A new activity is drawn at once: it may be a long step that gives no news until it ends.
    if (now - last_draw_ < 0.1 && done < total_ && doing == last_doing_) return;
    last_draw_ = now;
    last_doing_ = doing;
    const int width = 30, filled = total_ > 0 ? int(width * done / total_) : width;
    std::fprintf(stderr, "\r\033[K%s [%.*s%*s] %lld/%lld%s%s", label_.c_str(), filled, "##############################",
                 width - filled, "", (long long)done, (long long)total_, doing.empty() ? "" : "  ", doing.c_str());
    std::fflush(stderr);
}


}  // namespace kvscope
