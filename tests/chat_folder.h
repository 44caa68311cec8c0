#pragma once
// A chat model folder for tests: assets/llama-gqa with four of its last merged tokens (ids 763..766)
// renamed to Llama 3's special tokens (<|eot_id|> = 765) and a tokenizer_config.json holding the Llama 3
// template, as tests/cli/check_chat.py builds it.
//
//   llama3_chat_folder(area)   writes the folder under the test process's scratch_root()/area/llama3-chat;
//                              returns its path
//   chatml_chat_folder(area, name, template_text)   the same with <|im_start|> = 763, <|im_end|> = 764 (765, 766
//                              stay plain tokens no merge reaches) and the given template, eos_token <|im_end|>,
//                              under scratch_root()/area/name
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/json_write.h"
#include "test_models.h"
#include "text/chat_template.h"

namespace kvtest {

inline std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary);
    out << text;
}

// assets/llama-gqa in dir, ids 763..766 renamed to specials[0..3] ("" keeps the name); returns dir
inline std::filesystem::path special_tokens_folder(const std::filesystem::path& dir, const std::vector<std::string>& specials) {
    namespace fs = std::filesystem;
    using kvscope::JsonOut;
    const fs::path assets = fs::path(KVSCOPE_TEST_DATA) / ".." / ".." / "assets" / "llama-gqa";
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* name : {"config.json", "model.safetensors"}) fs::create_symlink(fs::absolute(assets / name), dir / name);
    const JsonOut vocab = JsonOut::parse(read_text(assets / "vocab.json"));
    JsonOut renamed = JsonOut::object();
    for (const auto& [key, value] : vocab.items()) {
        const int id = value.get<int>();
        renamed[id >= 763 && id <= 766 && !specials[size_t(id - 763)].empty() ? specials[size_t(id - 763)] : key] = id;
    }
    write_text(dir / "vocab.json", kvscope::json_text(renamed));
    // The merges that made ids 763..766 go: nothing merges into the special tokens' names.
    std::istringstream merges(read_text(assets / "merges.txt"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(merges, line);) lines.push_back(line);
    lines.resize(lines.size() - 4);
    std::string kept;
    for (const std::string& line : lines) kept += line + "\n";
    write_text(dir / "merges.txt", kept);
    return dir;
}

inline std::string chatml_chat_folder(const std::string& area, const std::string& name, const std::string& template_text) {
    const std::filesystem::path dir =
        special_tokens_folder(kvscope::test::fresh_dir(area, name), {"<|im_start|>", "<|im_end|>", "", ""});
    const kvscope::JsonOut config = {{"chat_template", template_text}, {"bos_token", "<|im_start|>"}, {"eos_token", "<|im_end|>"}};
    write_text(dir / "tokenizer_config.json", kvscope::json_text(config));
    return dir.string();
}

inline std::string llama3_chat_folder(const std::string& area) {
    const std::filesystem::path dir = special_tokens_folder(kvscope::test::fresh_dir(area, "llama3-chat"),
                                                            {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|begin_of_text|>"});
    const kvscope::JsonOut config = {{"chat_template", std::string(kvscope::chat_template_text(kvscope::ChatFamily::Llama3))},
                            {"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
    write_text(dir / "tokenizer_config.json", kvscope::json_text(config));
    return dir.string();
}

}  // namespace kvtest
