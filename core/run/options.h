#pragma once
// Every session option, declared once: its name, type, range, default, help, and the words each front
// end uses for it (the command-line flag, the window's label, the script key, the cache lab's key), with
// how it is read from and written into SessionOptions / GroupOptions. One check of every combination
// (problems) speaks in option names; each front end renders them in its own words.
//
//   RunOptions                      SessionOptions + GroupOptions: what one run is set up with
//   OptionSpec                      one option: names, kind, range, default, help, get/set, applies
//   option_table()                  every option, in the order `generate --help` lists them
//   option_named(name)              by name ("window", "kv_group", ...); null when none
//   option_by_script_key(key)       by script key ("window", "max-new", ...); null when none
//   option_by_flag(flag)            by command-line flag ("--window"); null when none
//   option_by_lab_key(key)          by cache lab spec key ("window", "g", ...); null when none
//   input_named(name)               an option, or an input a message names that is no option: model, source
//                                   (either source flag), encoder_source, dtype, lab_config; null when none
//   cli_options(command, section)   the options a subcommand takes in one section of its --help
//   set_option(values, spec, text, words)  parse text as the option's value and store it; UsageError
//                                   in `words` ("window wants a whole number, got 'x'")
//   problems(values, given)         every refused combination, as messages naming options "{name}"; given:
//                                   options the user set explicitly (a flag given, a script key typed),
//                                   which must apply to the rest of the setup (int4's group without int4)
//   render(message, words, drop)    the message with each {name} replaced by words(spec) and each {-name}
//                                   (the request to leave the option out) by drop(spec); no drop: "leave out "
//                                   + words(spec)
//   cli_words / label_words / neutral_words
//                                   the flag, the window's label, the name
//   label_leave_out(spec)           the window's request to leave an option out: "untick KV cache off",
//                                   "set window to 0", "empty the model path box"
//   render_labels(message)          render(message, label_words, label_leave_out): the window's words
//   check(values, given, words)     throws UsageError with the first problem rendered; nothing when none
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "run/session_group.h"

namespace kvscope {

struct RunOptions {
    SessionOptions session;
    GroupOptions group;
};

enum class OptionKind { Int, Real, Switch, Choice, Text };

// Where a command's --help lists an option: each section is one run of lines, in table order.
enum class OptionSection { Run, PromptCache, Sampling, KvFormat, Eviction, Batch };

// The commands that take an option (bits of OptionSpec::commands).
enum CliCommand : unsigned { kCliGenerate = 1, kCliChat = 2 };

struct OptionSpec {
    const char* name;                 // neutral name: "window", "kv_group"; messages say {window}
    OptionSection section = OptionSection::Run;
    OptionKind kind = OptionKind::Int;
    int64_t min = 0, max = 0;         // Int, when given (the default may lie outside: 0 = off)
    const char* choices = "";         // Choice: "none|int8|int4|fp8"; the script also takes the index
    const char* help = "";            // one line: what it does (the command line's help text)
    const char* flag = "";            // command-line flag, "" = none
    const char* metavar = "";         // command-line value name ("W"); "" for a switch
    const char* label = "";           // the window's name for it (Controls' widget), "" = not in the window
    const char* script_key = "";      // `options key=value` in a window script, "" = none
    const char* lab_key = "";         // cache lab spec key (cache_lab.h), "" = none
    unsigned commands = 0;            // CliCommand bits: the subcommands that take the flag
    std::string (*get)(const RunOptions&) = nullptr;        // the value as text (a choice's name)
    void (*set)(RunOptions&, std::string_view) = nullptr;   // the text already checked by set_option
    bool (*applies)(const RunOptions&) = nullptr;           // null = always; false: the value changes nothing
    std::string (*needs)(const RunOptions&) = nullptr;  // when it does not apply: what it needs, in
                                      // option words ("places attention sinks: give {window} and {sinks} too")
    const char* tip = "";             // the window's tooltip, when it says more than `help`
};

std::span<const OptionSpec> option_table();
const OptionSpec* option_named(std::string_view name);
const OptionSpec* option_by_script_key(std::string_view key);
const OptionSpec* option_by_flag(std::string_view flag);
const OptionSpec* option_by_lab_key(std::string_view key);
const OptionSpec* input_named(std::string_view name);
std::vector<const OptionSpec*> cli_options(unsigned command, OptionSection section);
std::vector<std::string> choices_of(const OptionSpec& spec);  // a Choice's names, in index order
std::string default_text(const OptionSpec& spec);             // get() of a default RunOptions

using OptionWords = std::function<std::string(const OptionSpec&)>;
std::string neutral_words(const OptionSpec& spec);
void set_option(RunOptions& values, const OptionSpec& spec, std::string_view text,
                const OptionWords& words = neutral_words);
std::vector<std::string> problems(const RunOptions& values, const std::vector<const OptionSpec*>& given = {});
std::string render(const std::string& message, const OptionWords& words, const OptionWords& drop = {});
std::string cli_words(const OptionSpec& spec);
std::string label_words(const OptionSpec& spec);
std::string label_leave_out(const OptionSpec& spec);
std::string render_labels(const std::string& message);
void check(const RunOptions& values, const std::vector<const OptionSpec*>& given, const OptionWords& words);

}  // namespace kvscope
