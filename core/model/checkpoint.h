#pragma once
// A model folder's weights as Hugging Face ships them: one model.safetensors, or
// model.safetensors.index.json naming the shard files that hold each tensor. Every file is
// memory-mapped (safetensors.h); tensors are views into the mappings, so nothing is copied here.
//
//   Checkpoint::open_folder(dir)   model.safetensors when present (transformers' loader prefers it to
//                                  the index too: modeling_utils _get_resolved_checkpoint_files), else
//                                  the index and its shards; throws LoadError
//   Checkpoint::open_file(path)    one .safetensors file
//   Checkpoint::of_tensors(path, views, owner, mapped)   tensors made elsewhere (a GGUF file's, under Hugging
//                                  Face's names: gguf_model.h); `owner` keeps their bytes alive; `mapped`, the
//                                  bytes of a read-only private file mapping among them: release() drops pages
//                                  there only (the others are memory kvscope made, and would be lost)
//   c.find(name)                   one tensor or nullptr
//   c.file_of(t)                   the file holding a tensor found here, for messages
//   c.tensors()                    every tensor: files in name order, each in offset order
//   c.path()                       model.safetensors or the index: what "the checkpoint" is in messages
//   c.in_mapping(data, n)          whether bytes [data, data + n) lie in a file's mapping (not in memory kvscope made)
//   c.release(data, n)             the whole pages inside bytes [data, data + n) of tensors found here leave
//                                  this process's memory (for bytes copied or hashed and not needed again);
//                                  a later read maps them again from the page cache, so views stay valid
//
// The index is validated before and while the shards open, so a broken folder fails naming the fault:
// weight_map is an object of tensor name -> shard file name; a shard name is a plain file name in the
// folder (no "/", no "..", not absolute), so nothing outside the listed files is read; every listed
// shard exists and is a valid safetensors file; each tensor lives in exactly the shard the index
// names (a tensor in two shards, a tensor the index does not list, or a listed tensor its shard does
// not hold are errors). The index's "metadata" (total_size) is not needed and not checked.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/safetensors.h"

namespace kvscope {

class Checkpoint {
public:
    static std::shared_ptr<const Checkpoint> open_folder(const std::string& dir);
    static std::shared_ptr<const Checkpoint> open_file(const std::string& path);
    static std::shared_ptr<const Checkpoint> of_tensors(const std::string& path, std::vector<TensorView> views,
                                                        std::shared_ptr<const void> owner,
                                                        std::span<const std::byte> mapped = {});

    const std::string& path() const { return path_; }
    bool sharded() const { return sharded_; }
    const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
    const std::vector<const TensorView*>& tensors() const { return tensors_; }
    const TensorView* find(const std::string& name) const;
    const std::string& file_of(const TensorView& t) const;
    size_t n_bytes() const;  // all files together
    bool in_mapping(const std::byte* data, size_t n_bytes) const;
    void release(const std::byte* data, size_t n_bytes) const;

private:
    void add(std::shared_ptr<const SafetensorsFile> file);

    std::string path_;
    bool sharded_ = false;
    std::vector<std::shared_ptr<const SafetensorsFile>> files_;
    std::vector<const TensorView*> tensors_;
    std::unordered_map<std::string, std::pair<const TensorView*, size_t>> by_name_;  // -> (tensor, file index)
    std::vector<TensorView> own_views_;        // of_tensors: the views, their bytes held by owner_
    std::shared_ptr<const void> owner_;
    std::span<const std::byte> mapped_;         // of_tensors: the part of owner_'s bytes release() may drop
};

}  // namespace kvscope
