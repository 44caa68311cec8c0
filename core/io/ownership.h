#pragma once
// Which files kvscope may replace or remove: only those it can prove it wrote. The proof of a file is
// its size and a 64-bit hash of its bytes, recorded in a ledger right after kvscope wrote it. A file
// whose bytes no longer match (the user edited or replaced it) is no longer kvscope's; a file whose
// name merely looks like kvscope's (trace.json, config.json, step_0001/) never was.
//
// Two kinds of ledger, the same format (a header line, then "hash<TAB>size<TAB>path" lines appended as
// files are written and "-<TAB><TAB>path" when kvscope removes one; the last line of a path counts):
//   a folder's manifest   DIR/kvscope-manifest.tsv, paths relative to DIR. make_output_folder
//                         (output_path.h) starts one in a folder it creates or finds empty; every file
//                         written under DIR (sub-folders too) is recorded there. It travels with the folder.
//   the user's ledger     $XDG_STATE_HOME/kvscope/written-files.tsv (else ~/.local/state/kvscope/...),
//                         absolute paths: the files kvscope wrote outside its folders (a --dump-logits
//                         .npy, a chart, a screenshot). Past 4 MiB its older half is dropped.
// A file's ledger is the manifest of the nearest folder above it that has one, else the user's ledger.
// A ledger that cannot be written (a read-only home) loses proofs, never files: an unproven file is refused.
//
//   FileProof                       size and content hash
//   file_proof(path)                the proof of a regular file as it is now; nullopt for anything else
//                                   (missing, a symlink, a FIFO, a folder) or an unreadable file
//   kvscope_wrote(path)             path's ledger holds a proof that matches the file now
//   record_written(path[, proof])   adds path's proof to its ledger (write_file_atomic calls it)
//   remove_written(path)            removes a file kvscope wrote and records it; false (and nothing
//                                   removed) when the file is not provably kvscope's
//   manifest_name                   "kvscope-manifest.tsv"
//   has_manifest(dir)               DIR holds a kvscope manifest (its header line says so)
//   start_manifest(dir)             gives DIR (existing, empty or adopted) a manifest
//   foreign_entries(dir, max)       up to max paths under DIR (relative) that kvscope cannot prove it
//                                   wrote: files, symlinks, FIFOs. Folders only count by their contents
//   adopt_folder(dir)               --force: start a manifest and record every regular file under DIR as is
//   adopt_file(path)                records an existing file as kvscope's (a file kvscope's own format
//                                   proves, such as a prompt cache with its magic)
//   remove_written_tree(dir)        removes what kvscope wrote under DIR, then the folders left empty;
//                                   returns the paths it left (not kvscope's)
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

struct FileProof {
    uint64_t size = 0;
    uint64_t hash = 0;
    bool operator==(const FileProof& o) const { return size == o.size && hash == o.hash; }
};

inline constexpr const char* manifest_name = "kvscope-manifest.tsv";

FileProof proof_of_bytes(const void* data, uint64_t size);
std::optional<FileProof> file_proof(const std::string& path);
bool kvscope_wrote(const std::string& path);
void record_written(const std::string& path, std::optional<FileProof> proof = std::nullopt);
bool remove_written(const std::string& path);

bool has_manifest(const std::string& dir);
void start_manifest(const std::string& dir);
std::vector<std::string> foreign_entries(const std::string& dir, size_t max = 3);
void adopt_folder(const std::string& dir);
void adopt_file(const std::string& path);
std::vector<std::string> remove_written_tree(const std::string& dir);

}  // namespace kvscope
