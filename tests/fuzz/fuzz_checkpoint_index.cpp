// Fuzzes the sharded checkpoint reader (core/model/checkpoint.h): each input is written as
// model.safetensors.index.json into a folder that also holds two valid shards, a.safetensors (tensor
// "x") and b.safetensors (tensor "y"), and the folder is opened. Any bytes must give a checkpoint or a
// LoadError, never a crash or sanitizer report; an accepted checkpoint holds only the shards' tensors,
// each once, and reads no file but those two.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/errors.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace {

std::string make_folder() {
    char tmpl[] = "/tmp/fuzz_checkpoint_XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    const std::string dir = tmpl;
    auto shard = [&](const char* file, const char* tensor) {
        kvscope::TensorToWrite t{tensor, kvscope::Dtype::F32, {2}, std::vector<std::byte>(8)};
        kvscope::write_safetensors(dir + "/" + file, {t});
    };
    shard("a.safetensors", "x");
    shard("b.safetensors", "y");
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string dir = make_folder();
    {
        std::ofstream out(dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
        if (!out) std::abort();
    }
    try {
        auto c = kvscope::Checkpoint::open_folder(dir);
        if (c->tensors().size() > 2 || c->files().size() > 2) std::abort();
        for (const auto& f : c->files()) {
            const std::string name = std::filesystem::path(f->path()).filename().string();
            if (name != "a.safetensors" && name != "b.safetensors") std::abort();
            if (std::filesystem::path(f->path()).parent_path() != dir) std::abort();
        }
        for (const kvscope::TensorView* t : c->tensors())
            if (c->find(t->name) != t) std::abort();
    } catch (const kvscope::LoadError&) {
    }
    return 0;
}
