#pragma once
// Command-line options for one subcommand: declared with help text, parsed strictly.
//
//   CliArgs args("generate", "Generate tokens from a prompt.");
//   args.option("--model", "DIR", "model folder (default: the embedded model)");
//   args.option("--prompt", "TEXT", "prompt text; repeat for a batch", /*repeatable=*/true);
//   args.flag("--json", "print one JSON object");
//   if (!args.parse(argc, argv)) return 0;        // false after printing --help
//   args.has("--json"); args.text("--model"); args.integer("--max-new-tokens", 16, 1, 1 << 20);
//
// Every problem (unknown option, missing value, number out of range) throws UsageError with one line.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/id_list.h"

namespace kvscope {

// One help entry: `left` padded to `indent` columns (or on its own line when longer), then `text` wrapped
// at 100 columns with continuation lines indented by `indent`. help_entry("", text, 0) wraps a paragraph.
std::string help_entry(const std::string& left, const std::string& text, size_t indent);

class CliArgs {
public:
    CliArgs(std::string command, std::string summary);

    CliArgs& option(const std::string& name, const std::string& metavar, const std::string& help,
                    bool repeatable = false);
    CliArgs& flag(const std::string& name, const std::string& help);
    CliArgs& epilogue(const std::string& text);  // printed after the options by --help

    bool parse(int argc, char** argv);  // argv[0] is the subcommand name; false when --help was shown

    bool has(const std::string& name) const;                             // flag given / option given
    std::optional<std::string> text(const std::string& name) const;     // last value of an option
    const std::vector<std::string>& all(const std::string& name) const; // every value, in order
    int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
    double real(const std::string& name, double fallback) const;        // finite numbers only
    std::string help() const;
    const std::string& command() const { return command_; }  // "generate", "tokenize", ...
    // Every option value in command-line order: {name, value}.
    const std::vector<std::pair<std::string, std::string>>& in_order() const { return in_order_; }

private:
    struct Spec {
        std::string name, metavar, help;
        bool takes_value = false, repeatable = false;
        std::vector<std::string> values;
        bool seen = false;
    };
    const Spec& spec(const std::string& name) const;
    std::string command_, summary_, epilogue_;
    std::vector<Spec> specs_;
    std::vector<std::pair<std::string, std::string>> in_order_;
};

}  // namespace kvscope
