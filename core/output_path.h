#pragma once
// Where kvscope writes: one rule for every output a command or the window is given, checked before any
// work starts, so a typo costs nothing.
//
//   1. The output itself (FILE or DIR) is created when missing; the folder it goes in must already
//      exist. kvscope never creates the folders above an output.
//   2. An existing file is replaced only when it is the kind of file kvscope writes there (a .npy file
//      for --dump-logits, a PNG or SVG for a chart or screenshot, a JSON document for a dump, a prompt cache
//      file for --prompt-cache); any other file is refused and left as it is.
//   3. An existing folder is written into only when it is empty or already holds what kvscope writes
//      there (a trace: trace.json and step_NNNN folders; a model: config.json). A folder `figures`
//      (the window's Save figure writes into the Export folder's figures/) is kvscope's too.
//
// A broken rule throws UsageError naming the option and the path: exit code 2 (errors.h).
//
//   OutputKind                               what a file output holds, for rule 2
//   check_output_file(flag, path, kind)      rules 1 and 2 for a file, and that it could be written
//   check_output_folder(flag, path, marker)  rules 1 and 3 for a folder: marker is the file that shows
//                                            kvscope wrote it ("trace.json", "config.json")
//   make_output_folder(flag, path, marker)   the same check, then the folder is created if missing
#include <string>

namespace kvscope {

enum class OutputKind { Npy, Png, Json, PromptCache, Any, Svg };

void check_output_file(const std::string& flag, const std::string& path, OutputKind kind);
void check_output_folder(const std::string& flag, const std::string& path, const std::string& marker);
void make_output_folder(const std::string& flag, const std::string& path, const std::string& marker);

}  // namespace kvscope
