#pragma once
// Where kvscope writes: one rule for every output a command or the window is given, checked before any
// work starts, so a typo costs nothing and nothing of the user's is lost.
//
//   1. The output itself (FILE or DIR) is created when missing; the folder it goes in must already
//      exist. kvscope never creates the folders above an output.
//   2. An existing file is replaced only when kvscope can prove it wrote it (ownership.h: its ledger
//      holds the file's size and hash as kvscope wrote it) and it is the kind of file kvscope writes
//      there. A prompt cache proves itself by its magic. Anything else is refused and left as it is.
//   3. An existing folder is written into only when it is empty or carries kvscope's manifest
//      (kvscope-manifest.tsv) and holds nothing kvscope cannot prove it wrote. A name such as
//      trace.json, config.json or step_0001/ proves nothing.
//   4. The outputs of one run are checked together: the same path twice, or a file inside a folder
//      output, is refused.
//
// A broken rule throws UsageError naming the option and the path: exit code 2 (errors.h).
//
//   OutputKind                               what a file output holds, for rule 2
//   prompt_cache_magic                       a prompt cache's first 8 bytes
//   check_output_file(flag, path, kind)      rules 1 and 2 for a file, and that it could be written
//   check_output_folder(flag, path)          rules 1 and 3 for a folder
//   make_output_folder(flag, path)           the same check, then the folder is created if missing and
//                                            given a manifest if it has none
//   force_output_folder(flag, path)          --force: an existing folder becomes kvscope's as it is
//                                            (every file in it adopted), so its files may be replaced
//   OutputSet                                rule 4: add() every output of a run, each checked on the way
#include <string>
#include <vector>

namespace kvscope {

enum class OutputKind { Npy, Png, Json, PromptCache, Any, Svg };

// A prompt cache file's first 8 bytes (run/prompt_cache.h writes them): how rule 2 knows the kind.
inline constexpr char prompt_cache_magic[8] = {'K', 'V', 'P', 'R', 'O', 'M', 'P', 'T'};

void check_output_file(const std::string& flag, const std::string& path, OutputKind kind);
void check_output_folder(const std::string& flag, const std::string& path);
void make_output_folder(const std::string& flag, const std::string& path);
void force_output_folder(const std::string& flag, const std::string& path);

class OutputSet {
public:
    void add_file(const std::string& flag, const std::string& path, OutputKind kind);  // check_output_file, then rule 4
    void add_folder(const std::string& flag, const std::string& path);                 // check_output_folder, then rule 4
private:
    struct Output {
        std::string flag, path, resolved;
        bool folder = false;
    };
    void add(Output o);
    std::vector<Output> outputs_;
};

}  // namespace kvscope
