#include "io/output_path.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "base/errors.h"
#include "io/ownership.h"

namespace kvscope {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void refuse(const std::string& flag, const std::string& path, const std::string& why) {
    throw UsageError((flag.empty() ? "" : flag + ": ") + "cannot write " + path + ": " + why);
}

std::string folder_of(const std::string& path) {
    const fs::path parent = fs::path(path).lexically_normal().parent_path();
    return parent.empty() ? "." : parent.string();
}

// Rule 1: the folder an output goes in exists and may be written.
void check_parent(const std::string& flag, const std::string& path) {
    std::error_code ec;
    const std::string parent = folder_of(path);
    if (!fs::is_directory(parent, ec))
        refuse(flag, path, "no folder " + parent + " (kvscope creates the output, not the folders above it)");
    if (::access(parent.c_str(), W_OK) != 0) refuse(flag, path, "the folder " + parent + " is not writable");
}

// Rule 2: the first bytes say whether an existing file is the kind kvscope writes there.
bool holds(const std::string& path, OutputKind kind) {
    if (kind == OutputKind::Any) return true;
    std::ifstream in(path, std::ios::binary);
    if (kind == OutputKind::Svg) {  // an XML declaration or the svg element first, and <svg near the top
        std::string top(256, '\0');
        in.read(top.data(), std::streamsize(top.size()));
        top.resize(size_t(in.gcount()));
        return (top.rfind("<?xml", 0) == 0 || top.rfind("<svg", 0) == 0) && top.find("<svg") != std::string::npos;
    }
    char head[8] = {};
    in.read(head, sizeof head);
    const std::streamsize n = in.gcount();
    if (kind == OutputKind::Npy) return n >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0;
    if (kind == OutputKind::Png) return n == 8 && std::memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0;
    if (kind == OutputKind::PromptCache) return n == 8 && std::memcmp(head, prompt_cache_magic, 8) == 0;
    for (std::streamsize i = 0; i < n; ++i)  // Json: the first non-space byte opens an object or array
        if (head[i] != ' ' && head[i] != '\n' && head[i] != '\r' && head[i] != '\t') return head[i] == '{' || head[i] == '[';
    return n == 0;
}

const char* kind_name(OutputKind kind) {
    switch (kind) {
        case OutputKind::Npy: return "a .npy file";
        case OutputKind::Png: return "a PNG image";
        case OutputKind::Json: return "a JSON document";
        case OutputKind::PromptCache: return "a kvscope prompt cache";
        case OutputKind::Svg: return "an SVG image";
        case OutputKind::Any: break;
    }
    return "a file";
}

// A folder kvscope's manifest governs: its own, or that of a folder above it (a batch trace's seqN).
bool governed(const std::string& dir) {
    std::error_code ec;
    fs::path d = fs::weakly_canonical(fs::absolute(dir, ec), ec);
    for (;; d = d.parent_path()) {
        if (has_manifest(d.string())) return true;
        if (d == d.root_path() || d.empty()) return false;
    }
}

std::string listing(const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
}

}  // namespace

void check_output_file(const std::string& flag, const std::string& path, OutputKind kind) {
    std::error_code ec;
    if (path.empty()) refuse(flag, "''", "the path is empty");
    const fs::file_status st = fs::status(path, ec);
    if (fs::is_directory(st)) refuse(flag, path, "it is a folder, not a file");
    check_parent(flag, path);
    const fs::file_status own = fs::symlink_status(path, ec);
    if (!fs::exists(own) && !fs::is_symlink(own)) return;
    if (fs::is_symlink(own)) refuse(flag, path, "it is a symbolic link; kvscope replaces only files it wrote");
    if (!fs::is_regular_file(own)) refuse(flag, path, "it exists and is not a regular file");
    if (::access(path.c_str(), W_OK) != 0) refuse(flag, path, "the file is not writable");
    if (!holds(path, kind))
        refuse(flag, path, std::string("it exists and is not ") + kind_name(kind) + "; kvscope replaces only its own kind of file");
    if (kind == OutputKind::PromptCache) return;  // the magic is kvscope's own mark
    if (!kvscope_wrote(path))
        refuse(flag, path, "it exists and kvscope did not write it (or it changed since); remove it or choose another name");
}

void check_output_folder(const std::string& flag, const std::string& path) {
    std::error_code ec;
    if (path.empty()) refuse(flag, "''", "the folder name is empty");
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return check_parent(flag, path);
    if (!fs::is_directory(st)) refuse(flag, path, "a file is in the way (expected a folder)");
    if (::access(path.c_str(), W_OK) != 0) refuse(flag, path, "the folder is not writable");
    if (fs::is_empty(path, ec) && !ec) return;
    if (!governed(path)) {
        std::vector<std::string> some = foreign_entries(path, 4);  // the files themselves, not their folders
        if (some.empty())  // only empty folders, or files whose proofs sit in the user's ledger
            for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
                if (some.size() == 4) break;
                some.push_back(e.path().filename().string());
            }
        if (some.size() == 4) some.back() = "...";
        refuse(flag, path, "the folder holds files kvscope did not write (" + listing(some) +
                               ") and no kvscope manifest; give a new or empty folder");
    }
    const std::vector<std::string> foreign = foreign_entries(path, 3);
    if (!foreign.empty())
        refuse(flag, path, "the folder holds " + listing(foreign) +
                               ", which kvscope did not write (or which changed since); move it out or give another folder");
}

void make_output_folder(const std::string& flag, const std::string& path) {
    check_output_folder(flag, path);
    std::error_code ec;
    fs::create_directory(path, ec);
    if (ec) refuse(flag, path, ec.message());
    if (!governed(path)) start_manifest(path);
}

void force_output_folder(const std::string& flag, const std::string& path) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return make_output_folder(flag, path);
    if (::access(path.c_str(), W_OK) != 0) refuse(flag, path, "the folder is not writable");
    adopt_folder(path);
}

// The outputs are compared first: "inside --trace" says more than "no folder" for a trace not made yet.
void OutputSet::add_file(const std::string& flag, const std::string& path, OutputKind kind) {
    add({flag, path, "", false});
    check_output_file(flag, path, kind);
}

void OutputSet::add_folder(const std::string& flag, const std::string& path) {
    add({flag, path, "", true});
    check_output_folder(flag, path);
}

void OutputSet::add(Output o) {
    if (o.path.empty()) return;  // refused by its own check, with the reason
    std::error_code ec;
    o.resolved = fs::weakly_canonical(fs::absolute(o.path, ec), ec).lexically_normal().string();
    while (o.resolved.size() > 1 && o.resolved.back() == '/') o.resolved.pop_back();
    for (const Output& other : outputs_) {
        const bool same = other.resolved == o.resolved;
        const Output* outer = nullptr;  // a folder output that holds the other output
        if (other.folder && o.resolved.rfind(other.resolved + "/", 0) == 0) outer = &other;
        if (o.folder && other.resolved.rfind(o.resolved + "/", 0) == 0) outer = &o;
        if (same)
            throw UsageError(other.flag + " and " + o.flag + " would both write " + o.path + ": give each output its own path");
        if (outer) {
            const Output& inner = outer == &o ? other : o;
            throw UsageError(inner.flag + " " + inner.path + " is inside " + outer->flag + " " + outer->path +
                             ", which kvscope writes as a whole: give a path outside it");
        }
    }
    outputs_.push_back(std::move(o));
}

}  // namespace kvscope
