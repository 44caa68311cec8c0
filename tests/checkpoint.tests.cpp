// Checkpoints (core/model/checkpoint.h) and the engine's step API on a Llama-family GQA folder.
//
// How the expectations are made: a Llama folder is written here (config.json text + seeded tensors with
// Hugging Face names through write_safetensors), once as model.safetensors and once split over shards
// with an index written here. The sharded folder must give the single file's logits bit for bit (two
// different loading paths); each broken index or shard set must fail with a LoadError naming the fault.
// Step back is checked as an invariant between paths: stepping back and stepping again replays the
// first run's logits bit for bit. The prompt-cache fingerprint must change with every config key the
// Llama forward pass reads (each compared with a base config parsed from text).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <random>
#include <unistd.h>

#include "base/errors.h"
#include "forward/model.h"
#include "io/mapped_file.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "run/session.h"
#include "scratch_dir.h"
#include "session_runs.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

// V = 61, C = 32, H = 4, K = 2, D = 8, F = 48, L = 2, P = 48; untied.
const char* const kLlamaConfig = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 61, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 48,
  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu"})";

std::vector<TensorToWrite> llama_tensors(uint64_t seed) {
    const int64_t V = 61, C = 32, H = 4, K = 2, D = 8, F = 48, L = 2;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<TensorToWrite> out;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> values(static_cast<size_t>(n));  // (shape)
        for (float& v : values) v = offset + scale * normal(rng);
        TensorToWrite t{name, Dtype::F32, shape, std::vector<std::byte>(size_t(n) * 4)};
        std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
        out.push_back(std::move(t));
    };
    add("model.embed_tokens.weight", {V, C}, 0.5f);
    for (int64_t il = 0; il < L; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        add(p + "input_layernorm.weight", {C}, 0.2f, 1.0f);
        add(p + "self_attn.q_proj.weight", {H * D, C}, 0.3f);
        add(p + "self_attn.k_proj.weight", {K * D, C}, 0.3f);
        add(p + "self_attn.v_proj.weight", {K * D, C}, 0.3f);
        add(p + "self_attn.o_proj.weight", {C, H * D}, 0.3f);
        add(p + "post_attention_layernorm.weight", {C}, 0.2f, 1.0f);
        add(p + "mlp.gate_proj.weight", {F, C}, 0.3f);
        add(p + "mlp.up_proj.weight", {F, C}, 0.3f);
        add(p + "mlp.down_proj.weight", {C, F}, 0.3f);
    }
    add("model.norm.weight", {C}, 0.2f, 1.0f);
    add("lm_head.weight", {V, C}, 0.3f);
    return out;
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::string shard_name(size_t i, size_t n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    return buf;
}

// A folder with config.json and the tensors split in order over n_shards (1: model.safetensors).
// Returns weight_map (tensor -> shard) so tests can break it.
std::map<std::string, std::string> write_llama(const fs::path& dir, size_t n_shards, uint64_t seed = 5) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_text(dir / "config.json", kLlamaConfig);
    std::vector<TensorToWrite> tensors = llama_tensors(seed);
    std::map<std::string, std::string> weight_map;
    if (n_shards == 1) {
        write_safetensors((dir / "model.safetensors").string(), tensors);
        return weight_map;
    }
    const size_t n = tensors.size();
    for (size_t s = 0; s < n_shards; ++s) {
        std::vector<TensorToWrite> part(tensors.begin() + long(n * s / n_shards), tensors.begin() + long(n * (s + 1) / n_shards));
        for (const auto& t : part) weight_map[t.name] = shard_name(s, n_shards);
        write_safetensors((dir / shard_name(s, n_shards)).string(), part);
    }
    return weight_map;
}

void write_index(const fs::path& dir, const std::map<std::string, std::string>& weight_map) {
    std::string text = R"({"metadata": {"total_size": 0}, "weight_map": {)";
    bool first = true;
    for (const auto& [name, shard] : weight_map) {
        text += std::string(first ? "" : ", ") + "\"" + name + "\": \"" + shard + "\"";
        first = false;
    }
    write_text(dir / "model.safetensors.index.json", text + "}}");
}

std::string load_error(const fs::path& dir) {
    try {
        Model::load(dir.string());
    } catch (const LoadError& e) {
        return e.what();
    }
    FAIL("expected a LoadError for " << dir);
    return "";
}

Run greedy_run(std::shared_ptr<const Model> model, const std::vector<int32_t>& prompt, int64_t n_new) {
    SessionOptions o;
    o.max_new_tokens = n_new;
    Session s(std::move(model), o);
    s.set_prompt(prompt);
    while (s.next() != Session::Next::Done) s.step();
    return collect(s);
}

}  // namespace

TEST_CASE("a sharded Llama folder gives the single file's logits bit for bit", "[checkpoint]") {
    const fs::path single = work_dir("checkpoint") / "single", sharded = work_dir("checkpoint") / "sharded";
    write_llama(single, 1);
    write_index(sharded, write_llama(sharded, 3));
    const auto a = Model::load(single.string()), b = Model::load(sharded.string());
    CHECK_FALSE(a->weights().checkpoint->sharded());
    REQUIRE(b->weights().checkpoint->sharded());
    CHECK(b->weights().checkpoint->files().size() == 3);
    CHECK(b->weights().tensors.size() == a->weights().tensors.size());
    CHECK(b->weights().converted_bytes == 0);  // F32 shards are used in place, as a single file is
    int64_t shard_bytes = 0;
    for (size_t s = 0; s < 3; ++s) shard_bytes += int64_t(fs::file_size(sharded / shard_name(s, 3)));
    CHECK(b->weights().file_bytes == shard_bytes);
    const std::vector<int32_t> prompt = random_tokens(3, 9, 61);
    require_identical(greedy_run(b, prompt, 6), greedy_run(a, prompt, 6));
}

TEST_CASE("model.safetensors wins over an index beside it, as in transformers", "[checkpoint]") {
    const fs::path dir = work_dir("checkpoint") / "both";
    auto map = write_llama(dir, 2);
    write_index(dir, map);
    write_safetensors((dir / "model.safetensors").string(), llama_tensors(5));
    fs::remove(dir / shard_name(0, 2));  // the index is now broken, but never read
    const auto m = Model::load(dir.string());
    CHECK_FALSE(m->weights().checkpoint->sharded());
    CHECK(m->weights().checkpoint->path() == (dir / "model.safetensors").string());
}

TEST_CASE("broken sharded folders fail naming the fault", "[checkpoint][errors]") {
    const fs::path dir = work_dir("checkpoint") / "broken";
    struct Case {
        const char* name;
        std::function<void(std::map<std::string, std::string>&)> edit;  // of the weight_map before writing the index
        std::function<void()> after;                                      // on the folder after
        const char* expect;
    };
    const std::string s1 = shard_name(0, 3), s2 = shard_name(1, 3), s3 = shard_name(2, 3);
    const std::vector<Case> cases = {
        {"missing shard", {}, [&] { fs::remove(dir / s2); }, "is missing; model.safetensors.index.json lists"},
        {"not listed", [](auto& m) { m.erase("model.norm.weight"); }, {}, "holds tensor \"model.norm.weight\", which model.safetensors.index.json does not list"},
        {"listed elsewhere", [&](auto& m) { m["model.norm.weight"] = s1; }, {}, "which the index puts in"},
        {"listed, absent", [&](auto& m) { m["model.extra.weight"] = s1; }, {}, "does not hold tensor \"model.extra.weight\""},
        {"parent folder", [&](auto& m) { m["model.norm.weight"] = "../" + s3; }, {}, "is not a file name in the model folder"},
        {"absolute", [&](auto& m) { m["model.norm.weight"] = "/dev/null"; }, {}, "is not a file name in the model folder"},
        {"empty map", [](auto& m) { m.clear(); }, {}, "weight_map lists no tensors"},
        {"in two shards", {}, [&] {
             // model.norm.weight (in the last shard) stored again in the first one; the index keeps the last.
             std::vector<TensorToWrite> tensors = llama_tensors(5), first;
             const size_t n = tensors.size();
             first.assign(tensors.begin(), tensors.begin() + long(n / 3));
             for (const auto& t : tensors)
                 if (t.name == "model.norm.weight") first.push_back(t);
             write_safetensors((dir / s1).string(), first);
         }, "tensor \"model.norm.weight\" is in two shards"},
    };
    for (const Case& c : cases) {
        INFO(c.name);
        auto map = write_llama(dir, 3);
        if (c.edit) c.edit(map);
        write_index(dir, map);
        if (c.after) c.after();
        CHECK_THAT(load_error(dir), Catch::Contains(c.expect));
    }
    SECTION("an index that is not JSON, or has no weight_map") {
        write_llama(dir, 3);
        write_text(dir / "model.safetensors.index.json", "{\"weight_map\": [");
        CHECK_THAT(load_error(dir), Catch::Contains("model.safetensors.index.json: is not valid JSON"));
        write_text(dir / "model.safetensors.index.json", "{\"metadata\": {}}");
        CHECK_THAT(load_error(dir), Catch::Contains("has no \"weight_map\" object"));
    }
}

TEST_CASE("a tensor a Llama model does not use is ignored, as GPT-2's buffers are", "[checkpoint]") {
    const fs::path dir = work_dir("checkpoint") / "extra";
    write_llama(dir, 1);
    std::vector<TensorToWrite> tensors = llama_tensors(5);
    TensorToWrite inv{"model.layers.0.self_attn.rotary_emb.inv_freq", Dtype::F32, {4}, std::vector<std::byte>(16)};
    tensors.push_back(inv);
    write_safetensors((dir / "model.safetensors").string(), tensors);
    const auto m = Model::load(dir.string());
    for (const TensorInfo& t : m->weights().tensors) CHECK(t.name.find("rotary_emb") == std::string::npos);
}

TEST_CASE("step back on a GQA model: back and step again replays the same logits", "[checkpoint][step]") {
    const fs::path dir = work_dir("checkpoint") / "step";
    write_llama(dir, 1);
    const auto model = Model::load(dir.string());
    REQUIRE(model->config().kv_heads() == 2);
    const int64_t chunk = GENERATE(0, 2);
    SessionOptions o;
    o.max_new_tokens = 7;
    o.prefill_chunk = chunk;
    o.sampling = {0.9, 0, 1.0, 77};
    Session s(model, o);
    s.set_prompt(random_tokens(8, 6, 61));
    std::vector<int64_t> used{s.cache().used()};
    while (s.next() != Session::Next::Done) {
        s.step();
        used.push_back(s.cache().used());
    }
    const Run original = collect(s);
    const size_t n = original.records.size();
    for (size_t i = n; i-- > 0;) {
        REQUIRE(s.step_back());
        CHECK(s.cache().used() == used[i]);
    }
    CHECK_FALSE(s.step_back());
    while (s.next() != Session::Next::Done) s.step();
    require_identical(collect(s), original);
    for (int k = 0; k < 3; ++k) REQUIRE(s.step_back());
    while (s.next() != Session::Next::Done) s.step();
    require_identical(collect(s), original);
}

TEST_CASE("the prompt-cache fingerprint's config covers every key the Llama forward pass reads", "[checkpoint][prompt_cache]") {
    // config.json members as JSON text; each change replaces or adds one.
    const std::map<std::string, std::string> base = {
        {"model_type", R"("llama")"}, {"vocab_size", "61"}, {"hidden_size", "32"}, {"intermediate_size", "48"},
        {"num_hidden_layers", "2"}, {"num_attention_heads", "4"}, {"num_key_value_heads", "2"},
        {"max_position_embeddings", "48"}, {"rms_norm_eps", "1e-5"}, {"rope_theta", "10000.0"},
        {"tie_word_embeddings", "false"}, {"hidden_act", R"("silu")"},
        {"rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 16})"}};
    auto fingerprint_config = [](const std::map<std::string, std::string>& members) {
        std::string text = "{";
        for (const auto& [k, v] : members) text += (text.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
        return config_to_json(parse_config(text + "}", "config.json"));
    };
    const std::string want = fingerprint_config(base);
    const std::vector<std::pair<std::string, std::string>> changes = {
        {"num_key_value_heads", "1"},
        {"head_dim", "16"},
        {"rope_theta", "500000.0"},
        {"rope_scaling", R"({"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})"},
        {"rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})"},
        {"rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0, "original_max_position_embeddings": 16})"},
        {"rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32})"},
        {"rope_scaling", R"({"rope_type": "linear", "factor": 8.0})"},
        {"rope_scaling", "null"},
        {"attention_bias", "true"},
        {"mlp_bias", "true"},
        {"rms_norm_eps", "1e-6"},
        {"hidden_act", R"("gelu_pytorch_tanh")"},
        {"tie_word_embeddings", "true"},
        {"max_position_embeddings", "64"},
        {"model_type", R"("qwen3")"},  // q_norm / k_norm (and head_dim 128 by default)
        {"model_type", R"("qwen2")"},  // q, k, v biases always
    };
    for (const auto& [key, value] : changes) {
        INFO(key << ": " << value);
        std::map<std::string, std::string> members = base;
        members[key] = value;
        CHECK(fingerprint_config(members) != want);
    }
    // qwen3 with the same head_dim still differs: q_norm / k_norm are part of the computation.
    std::map<std::string, std::string> llama8 = base, qwen8 = base;
    llama8["head_dim"] = qwen8["head_dim"] = "8";
    qwen8["model_type"] = R"("qwen3")";
    CHECK(fingerprint_config(llama8) != fingerprint_config(qwen8));
}

// release() drops pages of a file's mapping, which the next read maps again from the file, and never bytes
// kvscope made (a GGUF file's un-permuted rows): those would come back as zeros.
TEST_CASE("release drops a file mapping's pages only: the views keep their bytes either way", "[checkpoint]") {
    const auto dir = test::fresh_dir("checkpoint", "release");
    const size_t n = 4 * size_t(::sysconf(_SC_PAGESIZE));
    std::string pattern(n, '\0');
    for (size_t i = 0; i < n; ++i) pattern[i] = char(1 + (i * 7919) % 251);  // no zero byte
    test::write_bytes(dir / "bytes.bin", pattern);
    auto file = std::make_shared<MappedFile>((dir / "bytes.bin").string(), ReadLimit{uint64_t(n), "a test file"});
    auto made = std::make_shared<std::vector<std::byte>>(n);
    std::memcpy(made->data(), pattern.data(), n);
    TensorView in_file, in_memory;
    in_file.name = "in_file", in_file.dtype = Dtype::F32, in_file.shape = {int64_t(n / 4)}, in_file.data = file->data(), in_file.n_bytes = n;
    in_memory = in_file;
    in_memory.name = "in_memory", in_memory.data = made->data();
    const auto owner = std::make_shared<std::pair<std::shared_ptr<MappedFile>, std::shared_ptr<std::vector<std::byte>>>>(file, made);
    const auto c = Checkpoint::of_tensors("bytes.bin", {in_file, in_memory}, owner, {file->data(), file->size()});
    CHECK(c->in_mapping(in_file.data, n));
    CHECK(!c->in_mapping(in_memory.data, n));
    CHECK(!c->in_mapping(in_file.data + n / 2, n));  // runs past the mapping's end
    c->release(in_memory.data, n);
    c->release(in_file.data, n);
    CHECK(std::memcmp(in_memory.data, pattern.data(), n) == 0);
    CHECK(std::memcmp(in_file.data, pattern.data(), n) == 0);
}
