#pragma once
// Helpers shared by the subcommands: where the default model lives, loading with --model, threads,
// turning text or id lists into prompts, and progress on stderr.
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "forward/model.h"
#include "io/output_path.h"
#include "report/plot.h"
#include "run/options.h"

namespace kvscope {

std::string default_model_dir();                       // $KVSCOPE_DEFAULT_MODEL or assets/default
std::string chat_model_dir();                          // $KVSCOPE_CHAT_MODEL or assets/chat: what chat opens
void add_model_option(CliArgs& args,                   // --model DIR, --dtype f32|bf16; model_help: --model's
                      const std::string& model_help = "");  // own help (a command without the default)
WeightFormat weight_format_from(const CliArgs& args);  // --dtype; throws UsageError
WeightPlacement weight_placement_from(const CliArgs& args);  // --map-weights
void add_threads_option(CliArgs& args);                // --threads N
// Session options, declared once in core/run/options.h. add_options registers one section of the options
// `command` takes (kCliGenerate, kCliChat), each with the table's help or the one `help` gives for its name.
// read_options reads every one of them given on the line into `values` (numbers range-checked as the
// table says; --temperature > 0; top-k or top-p alone mean sampling at temperature 1; --evict POLICY needs
// --kv-budget) and returns the options given. check_options refuses a bad combination (core's check(),
// in flags: a read-only prompt cache is --prompt-cache-ro). All throw UsageError.
using HelpOverrides = std::vector<std::pair<std::string, std::string>>;  // {option name, help}
CliArgs& add_options(CliArgs& args, unsigned command, OptionSection section, const HelpOverrides& help = {});
std::vector<const OptionSpec*> read_options(const CliArgs& args, unsigned command, RunOptions& values);
void check_options(const RunOptions& values, const std::vector<const OptionSpec*>& given);
// One table option in a command that reads it alone, with its own default and help (heads' --seed seeds
// probe prompts, bench --sharing's --block-size its paged layouts): the flag, value name and range are the
// table's. option_integer: the option's whole number, range-checked as the table says, or `fallback`.
CliArgs& add_option(CliArgs& args, const char* name, const std::string& help);
int64_t option_integer(const CliArgs& args, const char* name, int64_t fallback);
std::shared_ptr<const Model> load_model_from(const CliArgs& args);
// Figures for papers (core/report/plot.h). A folder of heatmaps (generate --trace) takes --format png|svg; a
// single chart file takes its format from its name (.svg, else PNG). --scale N (1..8) multiplies a PNG's
// pixels. plot_output_from reads them (file: the chart's path, whose name gives the format; empty for a
// folder, whose format is --format); throws UsageError.
CliArgs& add_plot_options(CliArgs& args, bool folder);
PlotOutput plot_output_from(const CliArgs& args, const std::string& file = "");
// A chart file given with `flag`: checked now (output_path.h, a PNG or SVG by its name, and against the
// run's other outputs when given), then its PlotOutput.
PlotOutput check_chart_output(const CliArgs& args, const std::string& flag, const std::string& path,
                              OutputSet* outputs = nullptr);
// The benchmarks' model options: --model DIR and --dtype, or --shape NAME (--gpt2-shape) with --work DIR.
void add_bench_model_options(CliArgs& args);
// The benchmarks' model folder: --model, or with --shape the --work folder, where random weights of that
// shape are written on first use (and checked to be that shape's when reused); the --work folder is one
// of the run's outputs.
std::string bench_model_dir(const CliArgs& args, OutputSet& outputs);
void apply_threads(const CliArgs& args);

// --prompt TEXT and --prompt-ids 1,2,3, both repeatable (generate: a batch; heads: probes averaged).
CliArgs& add_prompt_options(CliArgs& args);
// Every --prompt / --prompt-ids, in command-line order, as token ids (text needs the tokenizer).
// starts_text: the tokenizer's BOS goes first (false for prompts that follow a --system text)
std::vector<std::vector<TokenId>> prompts_from(const CliArgs& args, const Model& model, bool allow_special,
                                               bool starts_text = true);
// "1,2,3" of option `flag` as token ids, each checked against the vocabulary.
std::vector<TokenId> ids_from(const std::string& list, const char* flag, const Model& model);
// Text of option `flag` as token ids; UsageError without tokenizer files or when empty.
std::vector<TokenId> encode_text(const Model& model, const std::string& text, const char* flag, bool allow_special,
                                 bool starts_text = true);

// "1 copy", "3 copies": a count with the word that fits it.
std::string count_of(int64_t n, const char* one, const char* many);

// A one-line progress bar on stderr, drawn only when stderr is a terminal.
//   update(done, doing)   redraw (at most 10 times a second): done of total, and what runs now
//                         ("prefill 824 tokens": a long step shows before it starts)
//   finish()              clear the line now, before results are printed (the destructor does it too)
class Progress {
public:
    Progress(std::string label, int64_t total);
    ~Progress();
    void update(int64_t done, const std::string& doing = "");
    void finish();
private:
    std::string label_;
    int64_t total_;
    bool active_;
    double last_draw_ = 0;
    std::string last_doing_;
};


}  // namespace kvscope
