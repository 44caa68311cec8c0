#include "output_path.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "errors.h"
#include "prompt_cache.h"

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

}  // namespace

void check_output_file(const std::string& flag, const std::string& path, OutputKind kind) {
    std::error_code ec;
    if (path.empty()) refuse(flag, "''", "the path is empty");
    const fs::file_status st = fs::status(path, ec);
    if (fs::is_directory(st)) refuse(flag, path, "it is a folder, not a file");
    check_parent(flag, path);
    if (!fs::exists(st)) return;
    if (!fs::is_regular_file(st)) refuse(flag, path, "it exists and is not a regular file");
    if (::access(path.c_str(), W_OK) != 0) refuse(flag, path, "the file is not writable");
    if (!holds(path, kind))
        refuse(flag, path, std::string("it exists and is not ") + kind_name(kind) + "; kvscope replaces only its own kind of file");
}

void check_output_folder(const std::string& flag, const std::string& path, const std::string& marker) {
    std::error_code ec;
    if (path.empty()) refuse(flag, "''", "the folder name is empty");
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return check_parent(flag, path);
    if (!fs::is_directory(st)) refuse(flag, path, "a file is in the way (expected a folder)");
    if (::access(path.c_str(), W_OK) != 0) refuse(flag, path, "the folder is not writable");
    if (fs::exists(fs::path(path) / marker, ec)) return;
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
        const std::string name = e.path().filename().string();
        // a step folder of an unfinished export is ours, and so is the window's figures/ (Save figure)
        if ((name.rfind("step_", 0) != 0 && name != "figures") || !e.is_directory(ec))
            refuse(flag, path, "the folder holds other files (" + name + ") and no " + marker +
                                   "; give a new or empty folder");
    }
}

void make_output_folder(const std::string& flag, const std::string& path, const std::string& marker) {
    check_output_folder(flag, path, marker);
    std::error_code ec;
    fs::create_directory(path, ec);
    if (ec) refuse(flag, path, ec.message());
}

}  // namespace kvscope
