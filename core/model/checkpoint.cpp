#include "model/checkpoint.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include "base/errors.h"
#include "io/json.h"
#include "io/read_file.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kMixedHint = "were the index and the shards downloaded together? download the model again";

// weight_map of the index: tensor name -> shard file name, checked for form.
std::map<std::string, std::string> read_weight_map(const std::string& path) {
    const std::string text = read_file_bounded(path, k_config_file);
    Json index;
    try {
        index = Json::parse(text);
    } catch (const JsonError& e) {
        throw LoadError(path, std::string("is not valid JSON: ") + e.what());
    }
    if (!index.is_object()) throw LoadError(path, std::string("is a JSON ") + index.kind_name() + ", expected an object");
    const Json* map = index.find("weight_map");
    if (!map || !map->is_object())
        throw LoadError(path, "has no \"weight_map\" object", "a sharded checkpoint's index maps each tensor name to its shard file");
    std::map<std::string, std::string> out;
    for (const auto& [name, shard] : map->as_object()) {
        if (!shard.is_string())
            throw LoadError(path, "weight_map entry " + json_escape(name) + " is a " + shard.kind_name() +
                                      ", expected a shard file name");
        const std::string& s = shard.as_string();
        // Only plain file names in the folder: no separators, so no "..", no absolute paths, no sub-folders.
        if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || s.find('\\') != std::string::npos ||
            s.find('\0') != std::string::npos)
            throw LoadError(path, "weight_map puts tensor " + json_escape(name) + " in " + json_escape(s) +
                                      ", which is not a file name in the model folder",
                            "shards must sit beside the index; kvscope reads nothing outside the folder");
        out[name] = s;
    }
    if (out.empty()) throw LoadError(path, "weight_map lists no tensors");
    return out;
}

}  // namespace

std::shared_ptr<const Checkpoint> Checkpoint::open_file(const std::string& path) {
    auto c = std::make_shared<Checkpoint>();
    c->path_ = path;
    c->add(std::make_shared<const SafetensorsFile>(path));
    return c;
}

std::shared_ptr<const Checkpoint> Checkpoint::open_folder(const std::string& dir) {
    const std::string single = (fs::path(dir) / kSingleName).string();
    const std::string index_path = (fs::path(dir) / kIndexName).string();
    std::error_code ec;
    if (fs::exists(single, ec) || !fs::exists(index_path, ec)) return open_file(single);

    auto c = std::make_shared<Checkpoint>();
    c->path_ = index_path;
    c->sharded_ = true;
    const std::map<std::string, std::string> weight_map = read_weight_map(index_path);

    // pass 1: every shard the index names, once each, in name order
    std::map<std::string, size_t> n_listed;  // shard -> tensors the index puts there
    for (const auto& [name, shard] : weight_map) ++n_listed[shard];
    std::map<std::string, size_t> file_index;
    for (const auto& [shard, n] : n_listed) {
        const std::string shard_path = (fs::path(dir) / shard).string();
        if (!fs::exists(shard_path, ec))
            throw LoadError(shard_path, "is missing; " + std::string(kIndexName) + " lists " + std::to_string(n) +
                                            (n == 1 ? " tensor" : " tensors") + " in it",
                            "download every shard the index names");
        file_index[shard] = c->files_.size();
        c->add(std::make_shared<const SafetensorsFile>(shard_path));
    }

    // pass 2: each tensor in exactly the shard the index names
    for (const TensorView* t : c->tensors_) {
        const std::string& holder = c->file_of(*t);
        const std::string holder_name = fs::path(holder).filename().string();
        auto listed = weight_map.find(t->name);
        if (listed == weight_map.end())
            throw LoadError(holder, "holds tensor " + json_escape(t->name) + ", which " + kIndexName + " does not list",
                            kMixedHint);
        if (listed->second != holder_name) {
            const SafetensorsFile& other = *c->files_[file_index.at(listed->second)];
            if (other.find(t->name))
                throw LoadError(index_path, "tensor " + json_escape(t->name) + " is in two shards, " + listed->second +
                                                " and " + holder_name,
                                "a tensor must be stored exactly once; " + std::string(kMixedHint));
            throw LoadError(holder, "holds tensor " + json_escape(t->name) + ", which the index puts in " + listed->second,
                            kMixedHint);
        }
    }
    for (const auto& [name, shard] : weight_map)
        if (!c->find(name))
            throw LoadError((fs::path(dir) / shard).string(),
                            "does not hold tensor " + json_escape(name) + ", which " + kIndexName + " puts there",
                            kMixedHint);
    return c;
}

std::shared_ptr<const Checkpoint> Checkpoint::of_tensors(const std::string& path, std::vector<TensorView> views,
                                                         std::shared_ptr<const void> owner,
                                                         std::span<const std::byte> mapped) {
    auto c = std::make_shared<Checkpoint>();
    c->path_ = path;
    c->own_views_ = std::move(views);
    c->owner_ = std::move(owner);
    c->mapped_ = mapped;
    for (const TensorView& t : c->own_views_) {
        c->tensors_.push_back(&t);
        c->by_name_.emplace(t.name, std::make_pair(&t, size_t(0)));
    }
    return c;
}

void Checkpoint::add(std::shared_ptr<const SafetensorsFile> file) {
    const size_t index = files_.size();
    for (const TensorView& t : file->tensors()) {
        tensors_.push_back(&t);
        by_name_.emplace(t.name, std::make_pair(&t, index));  // a name twice across shards: pass 2 reports it
    }
    files_.push_back(std::move(file));
}

const TensorView* Checkpoint::find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second.first;
}

const std::string& Checkpoint::file_of(const TensorView& t) const {
    const std::less<const TensorView*> before;  // a total order, also across the files' arrays
    for (const auto& f : files_) {
        const TensorView* begin = f->tensors().data();
        if (!f->tensors().empty() && !before(&t, begin) && before(&t, begin + f->tensors().size())) return f->path();
    }
    return path_;
}

bool Checkpoint::in_mapping(const std::byte* data, size_t n_bytes) const {
    if (!owner_) return true;  // every tensor is a view into its file's mapping
    const std::less<const std::byte*> before;  // a total order across allocations
    return !before(data, mapped_.data()) && !before(mapped_.data() + mapped_.size(), data + n_bytes);
}

void Checkpoint::release(const std::byte* data, size_t n_bytes) const {
    if (!in_mapping(data, n_bytes)) return;  // memory kvscope made: dropping it would lose it
    // The mappings are read-only and private, so dropping a page loses nothing: the next read refaults it
    // from the file. Only pages wholly inside the bytes, so their neighbours stay mapped.
    const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(data) + uintptr_t(n_bytes)) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

size_t Checkpoint::n_bytes() const {
    size_t n = 0;
    for (const TensorView& t : own_views_) n += t.n_bytes;
    for (const auto& f : files_) n += f->file_size();
    return n;
}

}  // namespace kvscope
