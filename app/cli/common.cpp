#include "common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "base/clock.h"
#include "base/errors.h"
#include "base/thread_pool.h"
#include "io/json_write.h"
#include "io/output_path.h"
#include "io/ownership.h"
#include "model/random_model.h"

namespace kvscope {

std::string default_model_dir() {
    if (const char* env = std::getenv("KVSCOPE_DEFAULT_MODEL"); env && *env) return env;
    return std::string(KVSCOPE_ASSETS_DIR) + "/default";
}

std::string chat_model_dir() {
    if (const char* env = std::getenv("KVSCOPE_CHAT_MODEL"); env && *env) return env;
    return std::string(KVSCOPE_ASSETS_DIR) + "/chat";
}

void add_model_option(CliArgs& args, const std::string& model_help) {
    args.option("--model", "DIR", !model_help.empty() ? model_help :
                                  "model folder: config.json and model.safetensors (or model.safetensors.index.json "
                                  "and its shards); the tokenizer files (tokenizer.json, or vocab.json and merges.txt) "
                                  "are optional (without them, prompts are token ids); or a GGUF file of llama, qwen2 or qwen3 "
                                  "(docs/models.md) (default: assets/default)");
    args.option("--dtype", "f32|bf16", "how weight matrices are kept: float32 (default) or bfloat16, which "
                                       "halves what a decode step reads (widened exactly; the arithmetic is float32). "
                                       "Under f32 a GGUF file's quantized matrices stay in its blocks, read as they are, "
                                       "all but Q4_1 and Q5_1 dotted in integers (docs/models.md)");
    args.flag("--map-weights", "use weight matrices in place from the file's mapping instead of copying them "
                               "into 2 MiB pages at load (faster load, slower decode)");
}

WeightPlacement weight_placement_from(const CliArgs& args) {
    return args.has("--map-weights") ? WeightPlacement::Mapped : WeightPlacement::HugePages;
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

CliArgs& add_options(CliArgs& args, unsigned command, OptionSection section, const HelpOverrides& help) {
    for (const OptionSpec* o : cli_options(command, section)) {
        std::string text = o->help;
        for (const auto& [name, h] : help)
            if (name == o->name) text = h;
        add_option(args, o->name, text);
    }
    return args;
}

CliArgs& add_option(CliArgs& args, const char* name, const std::string& help) {
    const OptionSpec& o = *option_named(name);
    return o.kind == OptionKind::Switch ? args.flag(o.flag, help) : args.option(o.flag, o.metavar, help);
}

int64_t option_integer(const CliArgs& args, const char* name, int64_t fallback) {
    const OptionSpec& o = *option_named(name);
    return args.integer(o.flag, fallback, o.min, o.max);
}

std::vector<const OptionSpec*> read_options(const CliArgs& args, unsigned command, RunOptions& values) {
    std::vector<const OptionSpec*> given;
    for (const OptionSpec& o : option_table()) {
        if (!(o.commands & command) || !args.has(o.flag)) continue;
        given.push_back(&o);
        const std::string text = o.kind == OptionKind::Switch ? "1" : *args.text(o.flag);
        if (o.kind == OptionKind::Int) {
            o.set(values, std::to_string(args.integer(o.flag, 0, o.min, o.max)));
            continue;
        }
        if (o.kind == OptionKind::Real) args.real(o.flag, 0);  // a number, or UsageError
        if (o.kind == OptionKind::Choice) {
            const std::vector<std::string> names = choices_of(o);
            if (std::find(names.begin(), names.end(), text) == names.end()) {
                o.set(values, text);  // --kv-quant and --evict name their choices themselves
                std::string list;
                for (size_t i = 0; i < names.size(); ++i) list += (i ? i + 1 == names.size() ? " or " : ", " : "") + names[i];
                throw UsageError(std::string(o.flag) + " must be " + list + ", got '" + text + "'");
            }
        }
        o.set(values, text);
    }
    SessionOptions& s = values.session;
    if (args.has("--temperature") && !(s.sampling.temperature > 0))
        throw UsageError("--temperature must be > 0 (leave it out for greedy decoding)");
    if ((args.has("--top-k") || args.has("--top-p")) && s.sampling.temperature == 0)
        s.sampling.temperature = 1.0;  // top-k/top-p mean sampling; temperature 1 unless given
    validate(s.kv_quant, 2 * s.kv_quant.group);  // the parts that do not need the model: G >= 1, R >= 0
    if (s.eviction.active() && !args.has("--kv-budget"))
        throw UsageError(std::string("--evict ") + eviction_policy_name(s.eviction.kind) +
                         " needs --kv-budget N (positions kept per layer and K/V head)");
    if (args.has("--evict-recent") && s.eviction.recent < 0)
        throw UsageError("--evict-recent must be >= 0, got " + std::to_string(s.eviction.recent));
    return given;
}

void check_options(const RunOptions& values, const std::vector<const OptionSpec*>& given) {
    check(values, given, [&](const OptionSpec& o) {
        if (std::string_view(o.name) == "prompt_cache" && values.group.prompt_cache_read_only) return std::string("--prompt-cache-ro");
        return cli_words(o);
    });
}

CliArgs& add_plot_options(CliArgs& args, bool folder) {
    if (folder) args.option("--format", "png|svg", "the heatmaps' file format (default png; svg: vector, for papers)");
    return args.option("--scale", "N", "PNG pixels per plot pixel, 1..8 (default 1; SVG ignores it)");
}

PlotOutput plot_output_from(const CliArgs& args, const std::string& file) {
    PlotOutput out;
    if (!file.empty()) out.format = plot_format_of(file);  // chart commands have no --format
    else if (const auto format = args.text("--format")) out.format = parse_plot_format("--format", *format);
    out.scale = int(args.integer("--scale", 1, 1, plot_max_scale));
    if (out.format == PlotFormat::Svg && args.has("--scale"))
        throw UsageError("--scale multiplies a PNG's pixels; an SVG has none (leave out --scale)");
    return out;
}

PlotOutput check_chart_output(const CliArgs& args, const std::string& flag, const std::string& path,
                              OutputSet* outputs) {
    const PlotOutput out = plot_output_from(args, path);
    if (outputs) outputs->add_file(flag, path, plot_output_kind(out.format));
    else check_output_file(flag, path, plot_output_kind(out.format));
    return out;
}

std::shared_ptr<const Model> load_model_from(const CliArgs& args) {
    return Model::load(args.text("--model").value_or(default_model_dir()), weight_format_from(args),
                       weight_placement_from(args));
}

void apply_threads(const CliArgs& args) {
    ThreadPool::global().set_threads(int(args.integer("--threads", default_thread_count(), 1, 256)));
}

CliArgs& add_prompt_options(CliArgs& args) {
    return args.option("--prompt", "TEXT", "prompt text (needs the model's tokenizer files)", true)
        .option("--prompt-ids", "1,2,3", "prompt as token ids", true);
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

void add_bench_model_options(CliArgs& args) {
    std::string names;
    for (const std::string& n : bench_shape_names()) names += (names.empty() ? "" : "|") + n;
    add_model_option(args);
    args.option("--shape", names.c_str(), "instead of --model: random weights of that model's shape (written once to --work)")
        .flag("--gpt2-shape", "the same as --shape gpt2")
        .option("--work", "DIR", "folder for --shape's weights (default: kvscope-bench-SHAPE)");
}

std::string bench_model_dir(const CliArgs& args, OutputSet& outputs) {
    std::optional<std::string> shape = args.text("--shape");
    if (args.has("--gpt2-shape")) {
        if (shape && *shape != "gpt2") throw UsageError("--gpt2-shape and --shape " + *shape + " ask for different models");
        shape = "gpt2";
    }
    if (!shape) {
        if (args.has("--work")) throw UsageError("--work is the folder of --shape's random weights: give --shape too");
        return args.text("--model").value_or(default_model_dir());
    }
    if (args.has("--model")) throw UsageError("--model and --shape both choose the model: give one of them");
    const std::optional<ModelConfig> config = bench_shape_config(*shape);
    if (!config) {
        std::string names;
        for (const std::string& n : bench_shape_names()) names += (names.empty() ? "" : ", ") + n;
        throw UsageError("--shape must be one of " + names + ", got '" + *shape + "'");
    }
    const std::string dir = args.text("--work").value_or("kvscope-bench-" + *shape);
    outputs.add_folder("--work", dir);  // a folder holding files kvscope did not write is refused here
    if (has_manifest(dir) && std::filesystem::exists(dir + "/model.safetensors")) {
        // Weights kvscope wrote earlier are reused, so they must be this shape's: never bench another model by its name.
        if (config_to_json(load_config(dir + "/config.json")) != config_to_json(*config))
            throw UsageError("--work " + dir + " holds another model's weights, not " + *shape +
                             "'s: give another --work folder");
        return dir;
    }
    make_output_folder("--work", dir);  // a folder of files kvscope did not write is refused
    std::fprintf(stderr, "writing %s-shaped random weights to %s ...\n", shape->c_str(), dir.c_str());
    write_random_model(dir, *config, 124);
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
