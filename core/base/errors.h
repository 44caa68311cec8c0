#pragma once
// Errors that cross the core/ boundary. User input never reaches an assert: it ends in one of these,
// and main (CLI) or the app catches it once and shows one line.
#include <stdexcept>
#include <string>

namespace kvscope {

// Exit codes of the kvscope command line, the same for every command (app/main.cpp maps errors to them):
//   0  done
//   1  the work failed: a file could not be read or written (a missing or broken model folder, a full
//      disk), out of memory, a window that could not open — LoadError and anything unexpected
//   2  the request cannot be carried out as asked, found before any work: an unknown option, a value out
//      of range, an output path the rules refuse (output_path.h), a token id outside the vocabulary,
//      prompt text for a model without tokenizer files — UsageError
enum ExitCode : int { exit_ok = 0, exit_failure = 1, exit_usage = 2 };

// A file that cannot be used: which file, what is wrong, and what the user may do about it.
struct LoadError : std::runtime_error {
    std::string path;  // the file or folder at fault ("" when none)
    std::string what_is_wrong;
    std::string hint;  // "" when there is nothing useful to add
    LoadError(std::string path_, std::string what_, std::string hint_ = "")
        : std::runtime_error(compose(path_, what_, hint_)),
          path(std::move(path_)), what_is_wrong(std::move(what_)), hint(std::move(hint_)) {}

    static std::string compose(const std::string& p, const std::string& w, const std::string& h) {
        std::string s = p.empty() ? w : p + ": " + w;
        if (!h.empty()) s += " (" + h + ")";
        return s;
    }
};

// A request that cannot be carried out as asked (bad flag value, prompt too long, unknown token id).
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace kvscope
