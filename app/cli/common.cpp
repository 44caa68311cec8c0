#include "common.h"

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

void add_model_option(CliArgs& args) {
    args.option("--model", "DIR", "model folder: config.json and model.safetensors (or model.safetensors.index.json "
                                  "and its shards); the tokenizer files (tokenizer.json, or vocab.json and merges.txt) "
                                  "are optional (without them, prompts are token ids) (default: assets/default)");
    args.option("--dtype", "f32|bf16", "how weight matrices are kept: float32 (default) or bfloat16, which "
                                       "halves what a decode step reads; arithmetic is float32 either way");
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

CliArgs& add_sampling_options(CliArgs& args, const char* seed_help) {
    return args.option("--temperature", "T", "sample with temperature T > 0 (default: greedy)")
        .option("--top-k", "K", "sample among the K most likely tokens")
        .option("--top-p", "P", "sample from the smallest set with probability >= P, 0 < P <= 1")
        .option("--seed", "S", seed_help);
}

CliArgs& add_kv_quant_options(CliArgs& args) {
    return args.option("--kv-quant", "none|int8|int4|fp8", "store K/V rows quantized (docs/engine.md \"Quantized K/V\"): int8 or "
                                                         "fp8 e4m3 per token with a float32 scale, or int4 KIVI (keys per "
                                                         "channel over G positions, values per token; no --window) "
                                                         "(default none)")
        .option("--kv-group", "G", "int4: positions per key group and channels per value group; must divide head_dim (default 32)")
        .option("--kv-residual", "R", "int4: the most recent R positions stay float32 (default 0)");
}

KvQuantSpec kv_quant_from(const CliArgs& args) {
    KvQuantSpec q;
    if (const auto name = args.text("--kv-quant")) q.format = parse_kv_quant(*name);
    q.group = args.integer("--kv-group", q.group, INT64_MIN, INT64_MAX);
    q.residual = args.integer("--kv-residual", q.residual, INT64_MIN, INT64_MAX);
    validate(q, 2 * q.group);  // the parts that do not need the model: G >= 1, R >= 0
    return q;
}

CliArgs& add_eviction_options(CliArgs& args) {
    return args.option("--evict", "POLICY", "evict K/V per layer and K/V head under --kv-budget (docs/engine.md \"Eviction under a "
                                            "budget\"): oracle-off (keep all), window+sinks, h2o, snapkv, pyramid")
        .option("--kv-budget", "N", "with --evict: positions each layer and K/V head keeps between steps (pyramid: the mean)")
        .option("--evict-sinks", "S", "window+sinks: the first S positions always stay (default 0)")
        .option("--evict-recent", "R", "h2o: the R most recent positions always stay (default N/2)")
        .option("--evict-obs", "W", "snapkv, pyramid: the last W prompt queries score the keys (default 8)")
        .option("--evict-pool", "K", "snapkv, pyramid: pool the scores over K neighbours, K odd (default 7)")
        .option("--evict-pool-kind", "max|avg", "snapkv, pyramid: how the pool combines them (default avg)");
}

EvictionSpec eviction_from(const CliArgs& args) {
    EvictionSpec e;
    const char* parameters[] = {"--kv-budget", "--evict-sinks", "--evict-recent", "--evict-obs", "--evict-pool", "--evict-pool-kind"};
    if (!args.has("--evict")) {
        for (const char* p : parameters)
            if (args.has(p)) throw UsageError(std::string(p) + " is a parameter of an eviction policy: give --evict POLICY too");
        return e;
    }
    e.kind = parse_eviction_policy(*args.text("--evict"));
    if (e.active() && !args.has("--kv-budget"))
        throw UsageError(std::string("--evict ") + eviction_policy_name(e.kind) + " needs --kv-budget N (positions kept per layer and K/V head)");
    e.budget = args.integer("--kv-budget", 0, INT64_MIN, INT64_MAX);
    e.sinks = args.integer("--evict-sinks", e.sinks, INT64_MIN, INT64_MAX);
    e.recent = args.integer("--evict-recent", e.recent, INT64_MIN, INT64_MAX);
    e.obs = args.integer("--evict-obs", e.obs, INT64_MIN, INT64_MAX);
    e.pool = args.integer("--evict-pool", e.pool, INT64_MIN, INT64_MAX);
    if (const auto kind = args.text("--evict-pool-kind")) {
        if (*kind == "max") e.pool_kind = PoolKind::Max;
        else if (*kind != "avg") throw UsageError("--evict-pool-kind must be max or avg, got '" + *kind + "'");
    }
    if (args.has("--evict-recent") && e.recent < 0) throw UsageError("--evict-recent must be >= 0, got " + std::to_string(e.recent));
    validate(e);
    return e;
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

SamplerOptions sampling_from(const CliArgs& args) {
    SamplerOptions s;
    if (args.has("--temperature")) {
        s.temperature = args.real("--temperature", 1.0);
        if (!(s.temperature > 0)) throw UsageError("--temperature must be > 0 (leave it out for greedy decoding)");
    }
    s.top_k = args.integer("--top-k", 0, 1, int64_t(1) << 31);
    s.top_p = args.real("--top-p", 1.0);
    s.seed = uint64_t(args.integer("--seed", 0, 0, INT64_MAX));
    if ((args.has("--top-k") || args.has("--top-p")) && s.temperature == 0)
        s.temperature = 1.0;  // top-k/top-p mean sampling; temperature 1 unless given
    return s;
}

std::shared_ptr<const Model> load_model_from(const CliArgs& args) {
    return Model::load(args.text("--model").value_or(default_model_dir()), weight_format_from(args),
                       weight_placement_from(args));
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
