#pragma once
// Reading an input file whole, within a stated size limit. Every file kvscope reads goes through here
// (or through open_regular_file when it maps or streams the file itself), so a FIFO never blocks, a
// device never streams without end, and no input costs more memory than its limit.
//
//   ReadLimit                          {bytes, what}: "16 MiB" for "a config file"
//   k_config_file                      16 MiB: config.json, model.safetensors.index.json
//   k_tokenizer_file                   256 MiB: tokenizer.json, tokenizer_config.json, vocab.json, merges.txt
//                                      (a 256k-token vocabulary's tokenizer.json is ~30 MB)
//   k_text_file                        256 MiB: tokenize --file/--jsonl, lab --text, chat --turns (stdin too)
//   k_script_file                      16 MiB: the window's --script files
//   k_shader_file                      1 MiB: the window's shader sources
//   k_safetensors_file                 1 TiB: model.safetensors and shards (mapped, not read; the header
//                                      within it has Hugging Face's 100 MB limit, safetensors.cpp)
//   k_gguf_file                        1 TiB: GGUF model files (mapped; every count inside is checked against
//                                      the bytes left before anything is allocated, gguf.cpp)
//   k_prompt_cache_file                64 GiB: --prompt-cache files (streamed, each part checked against
//                                      the file's real size before it is allocated)
//   read_file_bounded(path, lim, h)    the whole file; throws LoadError for a missing file (with hint h),
//                                      a folder, FIFO or device, a file over the limit, a failed read
//   read_input_bounded(path, lim, h)   the same, "-" = stdin read in chunks up to the limit
//   read_line_bounded(in, n, lim, used, line)  std::getline that counts: the next line of `in` (named n)
//                                      without '\n'; false at the end; `used` adds up every byte read, and
//                                      passing the limit throws LoadError (stdin read as a person types)
//   open_regular_file(path, lim)       an fd opened without blocking (O_NONBLOCK), checked to be a regular
//                                      file within the limit; for readers that map or stream the file
//   size_text(bytes)                   "3.2 GiB", "512 bytes": sizes in the errors
//
// Errors read "config.json: 3.2 GiB is more than the 16 MiB a config file may have", "stdin: holds more
// than the 256 MiB a text input may have", "model.safetensors: is a FIFO, not a regular file". All are
// LoadError (exit 1: a file that cannot be read), whichever caller asked.
#include <cstdint>
#include <iosfwd>
#include <string>

namespace kvscope {

struct ReadLimit {
    uint64_t bytes;
    const char* what;  // "a config file": completes "... the 16 MiB <what> may have"
};

inline constexpr ReadLimit k_config_file{uint64_t(16) << 20, "a config file"};
inline constexpr ReadLimit k_tokenizer_file{uint64_t(256) << 20, "a tokenizer file"};
inline constexpr ReadLimit k_text_file{uint64_t(256) << 20, "a text input"};
inline constexpr ReadLimit k_script_file{uint64_t(16) << 20, "a script file"};
inline constexpr ReadLimit k_shader_file{uint64_t(1) << 20, "a shader file"};
inline constexpr ReadLimit k_safetensors_file{uint64_t(1) << 40, "a safetensors file"};
inline constexpr ReadLimit k_gguf_file{uint64_t(1) << 40, "a GGUF file"};
inline constexpr ReadLimit k_prompt_cache_file{uint64_t(64) << 30, "a prompt cache file"};

std::string read_file_bounded(const std::string& path, const ReadLimit& limit, const std::string& missing_hint = "");
std::string read_input_bounded(const std::string& path, const ReadLimit& limit, const std::string& missing_hint = "");

bool read_line_bounded(std::istream& in, const std::string& name, const ReadLimit& limit, uint64_t& used, std::string& line);

struct RegularFile {
    int fd = -1;        // blocking again (O_NONBLOCK cleared); the caller owns it
    uint64_t size = 0;  // st_size
};
RegularFile open_regular_file(const std::string& path, const ReadLimit& limit, const std::string& missing_hint = "");

std::string size_text(uint64_t bytes);

}  // namespace kvscope
