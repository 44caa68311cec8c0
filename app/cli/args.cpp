#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/errors.h"

namespace kvscope {

std::string help_entry(const std::string& left, const std::string& text, size_t indent) {
    constexpr size_t width = 100;
    std::string out = left;
    auto new_line = [&] { out.append(1, '\n').append(indent, ' '); };
    if (out.size() < indent) out.resize(indent, ' ');
    else if (!out.empty()) new_line();
    size_t column = indent;
    for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find(' ', pos);
        if (end == std::string::npos) end = text.size();
        const std::string word = text.substr(pos, end - pos);
        if (column > indent && column + 1 + word.size() > width) {
            new_line();
            column = indent;
        } else if (column > indent) {
            out += ' ';
            ++column;
        }
        out += word;
        column += word.size();
        pos = end + 1;
    }
    return out + "\n";
}

CliArgs::CliArgs(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

CliArgs& CliArgs::option(const std::string& name, const std::string& metavar, const std::string& help,
                         bool repeatable) {
    specs_.push_back({name, metavar, help, true, repeatable, {}, false});
    return *this;
}

CliArgs& CliArgs::flag(const std::string& name, const std::string& help) {
    specs_.push_back({name, "", help, false, false, {}, false});
    return *this;
}

CliArgs& CliArgs::epilogue(const std::string& text) {
    epilogue_ = text;
    return *this;
}

const CliArgs::Spec& CliArgs::spec(const std::string& name) const {
    for (const Spec& s : specs_)
        if (s.name == name) return s;
    throw std::logic_error("CliArgs: option " + name + " was never declared");
}

bool CliArgs::parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string word = argv[i];
        if (word == "--help" || word == "-h") {
            std::fputs(help().c_str(), stdout);
            return false;
        }
        std::string value;
        bool inline_value = false;
        if (auto eq = word.find('='); word.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = word.substr(eq + 1);
            word = word.substr(0, eq);
            inline_value = true;
        }
        Spec* found = nullptr;
        for (Spec& s : specs_)
            if (s.name == word) found = &s;
        if (!found)
            throw UsageError(command_ + ": unknown option '" + word + "' (see kvscope " + command_ + " --help)");
        if (!found->takes_value) {
            if (inline_value) throw UsageError(command_ + ": " + word + " takes no value");
            found->seen = true;
            continue;
        }
        if (!inline_value) {
            if (i + 1 >= argc) throw UsageError(command_ + ": " + word + " needs a value (" + found->metavar + ")");
            value = argv[++i];
        }
        if (found->seen && !found->repeatable)
            throw UsageError(command_ + ": " + word + " given twice");
        found->seen = true;
        found->values.push_back(value);
        in_order_.emplace_back(word, value);
    }
    return true;
}

bool CliArgs::has(const std::string& name) const { return spec(name).seen; }

std::optional<std::string> CliArgs::text(const std::string& name) const {
    const Spec& s = spec(name);
    if (s.values.empty()) return std::nullopt;
    return s.values.back();
}

const std::vector<std::string>& CliArgs::all(const std::string& name) const { return spec(name).values; }

int64_t CliArgs::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
    auto t = text(name);
    if (!t) return fallback;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(t->c_str(), &end, 10);
    if (t->empty() || *end != '\0' || errno == ERANGE)
        throw UsageError(command_ + ": " + name + " wants a whole number, got '" + *t + "'");
    if (v < min || v > max)
        throw UsageError(command_ + ": " + name + " must be between " + std::to_string(min) + " and " +
                         std::to_string(max) + ", got " + *t);
    return v;
}

double CliArgs::real(const std::string& name, double fallback) const {
    auto t = text(name);
    if (!t) return fallback;
    char* end = nullptr;
    double v = std::strtod(t->c_str(), &end);
    if (t->empty() || *end != '\0' || !std::isfinite(v))
        throw UsageError(command_ + ": " + name + " wants a number, got '" + *t + "'");
    return v;
}

std::string CliArgs::help() const {
    std::string out = "usage: kvscope " + command_ + " [options]\n" + help_entry("", summary_, 0) + "\noptions:\n";
    for (const Spec& s : specs_)
        out += help_entry("  " + s.name + (s.takes_value ? " " + s.metavar : ""),
                          s.help + (s.repeatable ? " (repeatable)" : ""), 28);
    out += "  --help                    this text\n";
    if (!epilogue_.empty()) {  // laid out by its command (gui's is a table), only newline-terminated here
        out += "\n" + epilogue_;
        if (out.back() != '\n') out += '\n';
    }
    return out;
}

}  // namespace kvscope
