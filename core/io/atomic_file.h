#pragma once
// Whole-file writes that a crash cannot tear. Every writer that replaces a file uses these.
//
//   write_file_atomic(path, bytes)   PATH becomes exactly `bytes`
//   write_file_atomic(path, fill)    the same, with the bytes written by fill(FILE*) (large or streamed files)
//   ensure_writable(path)            throws UsageError now if PATH could not be written later (output_path.h:
//                                    check_output_file with any kind of file)
//
// Durability: after write_file_atomic returns, the new contents survive a crash or power loss, and
// readers see the old file or the new one, never a mix. How: write PATH.tmp-PID-N in the same folder,
// fsync it, rename it over PATH, fsync the folder.
// On failure the temp file is removed, an old PATH is left as it was, and LoadError{path, "cannot
// write: <reason>"} is thrown; an exception from fill passes through unchanged. The one exception to
// "as it was": if only the final folder fsync fails, the new file is in place (not yet durable) and
// the LoadError says so.
// The new file gets mode 0666 minus the umask, like any newly created file.
// Ownership (ownership.h): an existing PATH that kvscope cannot prove it wrote is never replaced
// (LoadError, nothing written); the new file's proof is recorded in its ledger.
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace kvscope {

void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& fill);
void ensure_writable(const std::string& path);

}  // namespace kvscope
