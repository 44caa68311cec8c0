// kvscope lab: teacher-force a text through the model under several KV cache configurations and print
// what each costs (core/analysis/cache_lab.h computes; this file reads the options and prints a table, JSON and a
// chart).
#include <algorithm>
#include <array>
#include <cstdio>

#include "analysis/cache_lab.h"
#include "base/errors.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "common.h"
#include "io/json_write.h"
#include "io/read_file.h"

namespace kvscope {
namespace {

struct LabText {
    std::vector<TokenId> tokens;
    std::string source;            // "built-in", "file" or "ids"
    int64_t n_before_cut = 0;      // tokens before --max-tokens or n_positions cut them
};

LabText lab_text(const CliArgs& args, const Model& model) {
    LabText t;
    if (args.has("--text") && args.has("--text-ids")) throw UsageError("give --text or --text-ids, not both");
    if (const auto ids = args.text("--text-ids")) {
        t.tokens = ids_from(*ids, "--text-ids", model);
        t.source = "ids";
    } else {
        if (!model.tokenizer())
            throw UsageError(model.dir() + " has no tokenizer files: give the text as token ids (--text-ids 1,2,3)");
        const std::optional<std::string> path = args.text("--text");
        t.tokens = encode_text(model, path ? read_file_bounded(*path, k_text_file) : lab_builtin_text(), path ? "--text" : "the built-in text",
                               args.has("--allow-special"));
        t.source = path ? "file" : "built-in";
    }
    t.n_before_cut = int64_t(t.tokens.size());
    const int64_t n_ctx = model.config().n_ctx;
    const int64_t keep = std::min(args.integer("--max-tokens", n_ctx, 2, 1 << 24), n_ctx);
    if (int64_t(t.tokens.size()) > keep) {
        t.tokens.resize(size_t(keep));
        const std::string why = keep == n_ctx ? "the model's " + std::string(model.config().positions_key()) : "--max-tokens";
        std::fprintf(stderr, "note: the text has %lld tokens; the lab reads the first %lld (%s)\n", (long long)t.n_before_cut,
                     (long long)keep, why.c_str());
    }
    if (t.tokens.size() < 2) throw UsageError("the text has " + count_of(int64_t(t.tokens.size()), "token", "tokens") +
                                              ": the lab needs at least 2 (one to read, one to predict)");
    return t;
}

std::string quant_name(const KvQuantSpec& q) { return q.quantized() ? to_string(q.format) : "f32"; }

void print_table(const LabReport& r, const Model& model, const LabText& text) {
    const ModelConfig& cfg = model.config();
    std::printf("kvscope lab: %s (%s text), %lld positions scored; model %s (%lld layers, %lld K/V heads, head_dim %lld)\n",
                count_of(int64_t(r.tokens.size()), "token", "tokens").c_str(), text.source.c_str(),
                (long long)(r.tokens.size() - 1), model.dir().c_str(), (long long)cfg.n_layer, (long long)cfg.kv_heads(),
                (long long)cfg.head_dim());
    size_t name_w = 6;
    for (const LabRun& run : r.runs) name_w = std::max(name_w, run.config.name.size());
    std::printf("%-*s  %11s  %11s  %7s  %7s  %8s  %7s  %7s\n", int(name_w), "config", "bytes/token", "cache bytes", "loss",
                "dloss", "KL mean", "top-1 %", "ms/step");
    for (const LabRun& run : r.runs) {
        const LabTotals& t = run.totals;
        std::printf("%-*s  %11.1f  %11lld  %7.4f  %+7.4f  %8.5f  %7.1f  %7.3f\n", int(name_w), run.config.name.c_str(),
                    t.bytes_per_token, (long long)t.bytes_total, t.loss_mean, t.loss_delta, t.kl_mean, 100 * t.top1_rate,
                    1e3 * t.seconds_per_step);
    }
    // int4's cache bytes hold float32 rows of the newest positions beside the packed ones (KIVI's residual):
    // said apart, since they can make int4 cost more per token than int8 on a short text.
    for (const LabRun& run : r.runs)
        if (const std::string split = residual_split(run.totals); !split.empty())
            std::printf("%s: %s\n", run.config.name.c_str(), split.c_str());
    std::printf("reference: %s%s. loss = mean -ln p(next text token), nats; dloss = loss - reference's; KL = mean "
                "KL(reference || config), nats; top-1 = same most likely token as the reference; bytes as the cache "
                "holds them after the last position (cache bytes / positions held = bytes/token); ms/step = wall time "
                "of one Session::step (forward pass, cache writes, quantization)\n",
                r.runs[r.reference].config.name.c_str(), r.added_reference ? " (added: no full f32 configuration given)" : "");
}

JsonOut report_json(const LabReport& r, const Model& model, const LabText& text, const CliArgs& args) {
    JsonOut configs = JsonOut::array();
    for (const LabRun& run : r.runs) {
        const LabConfig& c = run.config;
        const LabTotals& t = run.totals;
        std::vector<double> step_ms;
        for (double s : run.step_seconds) step_ms.push_back(1e3 * s);
        configs.push_back({{"name", c.name},
                           {"spec", c.spec},
                           {"policy", c.policy},
                           {"budget", c.budget},
                           {"window", c.options.window},
                           {"sinks", c.options.sinks},
                           {"kv_quant", quant_name(c.options.kv_quant)},
                           {"kv_group", c.options.kv_quant.group},
                           {"kv_residual", c.options.kv_quant.residual},
                           {"bytes_per_token", t.bytes_per_token},
                           {"bytes_total", t.bytes_total},
                           {"bytes_peak", t.bytes_peak},
                           // int4: the float32 residual's rows and bytes within bytes_total (0 otherwise)
                           {"residual_positions", t.residual_positions},
                           {"bytes_residual", t.bytes_residual},
                           {"positions_held", t.positions_held},
                           {"loss_mean", t.loss_mean},
                           {"loss_delta", t.loss_delta},
                           {"kl_mean", t.kl_mean},
                           {"top1_agree_percent", 100 * t.top1_rate},
                           {"ms_per_step", 1e3 * t.seconds_per_step},
                           {"per_position", {{"loss", run.loss},
                                             {"kl", run.kl},
                                             {"top1", run.top1},
                                             {"cache_bytes", run.cache_bytes},
                                             {"positions_held", run.positions_held},
                                             {"step_ms", step_ms}}}});
    }
    JsonOut out;
    out["model"] = model.dir();
    out["dtype"] = model.weights().bf16 ? "bf16" : "f32";
    out["threads"] = ThreadPool::global().n_threads();
    out["text"] = {{"source", text.source},
                   {"path", args.text("--text") ? JsonOut(*args.text("--text")) : JsonOut()},
                   {"n_tokens", r.tokens.size()},
                   {"n_tokens_before_cut", text.n_before_cut},
                   {"tokens", r.tokens}};
    out["n_positions_scored"] = r.tokens.size() - 1;
    out["reference"] = r.reference;
    out["added_reference"] = r.added_reference;
    out["per_position_meaning"] = "entry i: the model has read tokens 0..i and predicts token i+1";
    out["timing"] = "step_ms: wall time of one Session::step (forward pass, cache writes, quantization); not the scoring";
    out["configs"] = configs;
    return out;
}

void write_chart(const LabReport& r, const std::string& path, const PlotOutput& out) {
    static const std::array<uint8_t, 3> palette[] = {{33, 102, 172}, {214, 96, 77},  {27, 158, 119}, {117, 112, 179},
                                                     {230, 171, 2},  {102, 166, 30}, {166, 118, 29}, {231, 41, 138},
                                                     {102, 102, 102}, {0, 0, 0}};
    LineChart loss{"loss - full's loss, cumulative mean", "position", "nats", {}, false};
    LineChart kl{"KL(full || config), last 16 positions", "position", "nats", {}, false};
    LineChart bytes{"KV cache bytes held", "position", "KiB", {}, false};
    bool any_kl = false;
    for (size_t k = 0; k < r.runs.size(); ++k) {
        const LabRun& run = r.runs[k];
        const auto rgb = palette[k % std::size(palette)];
        LineSeries l{run.config.name, rgb, {}, {}}, d{run.config.name, rgb, {}, {}}, b{run.config.name, rgb, {}, {}};
        double sum = 0, window_sum = 0;
        for (size_t i = 0; i < run.loss.size(); ++i) {
            const double x = double(i);
            sum += run.loss[i] - r.runs[r.reference].loss[i];
            window_sum += run.kl[i] - (i >= 16 ? run.kl[i - 16] : 0.0);
            l.xs.push_back(x);
            l.ys.push_back(sum / double(i + 1));
            d.xs.push_back(x);
            d.ys.push_back(window_sum / double(std::min<size_t>(i + 1, 16)));
            b.xs.push_back(x);
            b.ys.push_back(double(run.cache_bytes[i]) / 1024.0);
            any_kl = any_kl || run.kl[i] > 0;
        }
        loss.series.push_back(std::move(l));
        if (k != r.reference) kl.series.push_back(std::move(d));
        bytes.series.push_back(std::move(b));
    }
    kl.log_y = any_kl;  // the reference's zero is left out; a log axis spreads int8's 1e-4 from a window's 0.5
    std::vector<LineChart> charts = {loss, bytes};
    if (!kl.series.empty()) charts.insert(charts.begin() + 1, kl);
    write_line_charts(path, charts, out, 620, 520);
}

}  // namespace

int cli_lab(int argc, char** argv) {
    CliArgs args("lab", "Teacher-force a text through the model under several KV cache configurations and measure what "
                        "each costs: next-token loss, KL to the full cache, top-1 agreement, cache bytes, time per step.");
    add_bench_model_options(args);
    args.option("--config", "SPEC", "a configuration to measure, e.g. full, window=64,sinks=4, int8, int4,g=32,r=32 "
                                    "(grammar below; default: full, window=32, window=32,sinks=4, int8, fp8, int4; a model with its own sliding layers: policy=h2o,budget=32 for the two windows)", true)
        .option("--text", "FILE", "the text to read (default: a built-in text the default model knows)")
        .option("--text-ids", "1,2,3", "the text as token ids (models without tokenizer files)")
        .option("--max-tokens", "N", "read at most the first N tokens (default and limit: the model's n_positions)")
        .flag("--allow-special", "treat <|endoftext|> in the text as the special token")
        .option("--chart", "FILE", "write the per-position curves (loss above full, cumulative; KL to full; cache bytes): PNG, or SVG if "
                                   "FILE ends in .svg")
        .flag("--json", "print one JSON object (the table and every per-position array) instead of the table");
    add_plot_options(args, false);
    add_threads_option(args);
    args.epilogue(std::string("Configuration grammar (--config):\n") + lab_config_grammar() +
                  help_entry("", "The first full f32 configuration is the reference (added in front when none is "
                                 "given). A configuration the engine cannot run is refused before any work.", 0));
    if (!args.parse(argc, argv)) return 0;

    std::vector<LabConfig> configs;
    for (const std::string& spec : args.all("--config")) configs.push_back(parse_lab_config(spec));
    const std::optional<std::string> chart = args.text("--chart");
    if (args.has("--scale") && !chart) throw UsageError("--scale sets the size of the --chart PNG: give --chart FILE");
    OutputSet outputs;
    const PlotOutput chart_out = chart ? check_chart_output(args, "--chart", *chart, &outputs) : PlotOutput{};
    apply_threads(args);

    auto model = Model::load(bench_model_dir(args, outputs), weight_format_from(args), weight_placement_from(args));
    if (configs.empty())
        for (const std::string& spec : lab_default_specs(model->config())) configs.push_back(parse_lab_config(spec));
    const LabText text = lab_text(args, *model);

    Progress progress("lab", int64_t(text.tokens.size()) - 1);
    const LabReport report = run_cache_lab(model, text.tokens, configs,
                                           [&](int64_t done, int64_t) { progress.update(done); });
    progress.finish();
    if (chart) write_chart(report, *chart, chart_out);
    if (args.has("--json")) std::printf("%s\n", json_text(report_json(report, *model, text, args)).c_str());
    else print_table(report, *model, text);
    if (chart) std::fprintf(stderr, "chart: %s\n", chart->c_str());
    return 0;
}

}  // namespace kvscope
