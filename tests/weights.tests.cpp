// The GPT-2 name map: fixture files written by tests/test_models.h (names and shapes listed there from
// the model format), loaded back and compared value for value with what was written; every
// kind of mismatch between config.json and model.safetensors must be a LoadError that names the tensor.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "base/errors.h"
#include "forward/model.h"
#include "model/weights.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;
using Catch::Matchers::Contains;

namespace {

fs::path dir_for(const std::string& name) { return work_dir("weights") / name; }

// Compares the loaded (n) floats with the fixture's values for `name`, bit for bit.
void check_values(const float* loaded, const FixtureModel& fm, const std::string& name) {
    INFO(name);
    REQUIRE(loaded != nullptr);
    const std::vector<float>& want = fm.tensors.at(name).values;
    const std::vector<float> got(loaded, loaded + want.size());
    CHECK(first_mismatch(got, want) == "");
}

void check_all_values(const Weights& w, const FixtureModel& fm) {
    const ModelConfig& c = fm.config;
    check_values(w.token_embedding.f32, fm, "wte.weight");
    if (c.position_embedding == PositionEmbedding::Learned) check_values(w.position_embedding, fm, "wpe.weight");
    REQUIRE(int64_t(w.layers.size()) == c.n_layer);
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const LayerWeights& l = w.layers[size_t(il)];
        const std::string h = "h." + std::to_string(il) + ".";
        check_values(l.ln_1_weight, fm, h + "ln_1.weight");
        check_values(l.ln_1_bias, fm, h + "ln_1.bias");
        check_values(l.attn_weight.f32, fm, h + "attn.c_attn.weight");
        if (c.qkv_bias) check_values(l.attn_bias, fm, h + "attn.c_attn.bias");
        else CHECK(l.attn_bias == nullptr);
        check_values(l.attn_proj_weight.f32, fm, h + "attn.c_proj.weight");
        check_values(l.attn_proj_bias, fm, h + "attn.c_proj.bias");
        check_values(l.ln_2_weight, fm, h + "ln_2.weight");
        check_values(l.ln_2_bias, fm, h + "ln_2.bias");
        check_values(l.fc_weight.f32, fm, h + "mlp.c_fc.weight");
        check_values(l.fc_bias, fm, h + "mlp.c_fc.bias");
        check_values(l.fc_proj_weight.f32, fm, h + "mlp.c_proj.weight");
        check_values(l.fc_proj_bias, fm, h + "mlp.c_proj.bias");
    }
    if (c.final_layer_norm) {
        check_values(w.ln_f_weight, fm, "ln_f.weight");
        check_values(w.ln_f_bias, fm, "ln_f.bias");
    } else {
        CHECK(w.ln_f_weight == nullptr);
    }
    if (c.tie_word_embeddings) CHECK(w.lm_head_weight.f32 == w.token_embedding.f32);
    else check_values(w.lm_head_weight.f32, fm, "lm_head.weight");
    if (c.lm_head_bias) check_values(w.lm_head_bias, fm, "lm_head.bias");
    else CHECK(w.lm_head_bias == nullptr);
}

std::string load_error(const FixtureSpec& spec, const std::string& name) {
    const FixtureModel fm = write_fixture(dir_for(name), spec);
    const std::string path = (fm.dir / "model.safetensors").string();
    try {
        load_weights(spec.config, path);
    } catch (const LoadError& e) {
        CHECK(e.path == path);
        return e.what();
    }
    FAIL("expected a LoadError");
    return "";
}

}  // namespace

TEST_CASE("weights load back exactly as written, in every dtype and naming", "[weights]") {
    struct Case {
        const char* name;
        Dtype dtype;
        bool mixed, prefix, buffers, tied, qkv_bias, lm_head_bias, final_ln;
        PositionEmbedding pos;
    };
    const Case c = GENERATE(Case{"f32", Dtype::F32, false, false, false, true, true, false, true, PositionEmbedding::Learned},
                            Case{"f16", Dtype::F16, false, true, true, false, true, true, true, PositionEmbedding::Learned},
                            Case{"bf16", Dtype::BF16, false, false, true, true, false, false, false, PositionEmbedding::Sinusoidal},
                            Case{"mixed", Dtype::F32, true, true, false, false, false, true, true, PositionEmbedding::Sinusoidal});
    INFO(c.name);
    FixtureSpec spec;
    spec.dtype = c.dtype;
    spec.mixed_dtypes = c.mixed;
    spec.prefix = c.prefix;
    spec.extra_buffers = c.buffers;
    spec.config.tie_word_embeddings = c.tied;
    spec.config.qkv_bias = c.qkv_bias;
    spec.config.lm_head_bias = c.lm_head_bias;
    spec.config.final_layer_norm = c.final_ln;
    spec.config.position_embedding = c.pos;
    spec.config.n_inner = 40;
    const FixtureModel fm = write_fixture(dir_for(c.name), spec);
    const Weights w = load_weights(spec.config, (fm.dir / "model.safetensors").string());
    check_all_values(w, fm);

    // The tensors used: exactly the config's list, with the file's names; buffers are not among them.
    const auto expected = expected_tensors(spec.config);
    REQUIRE(w.tensors.size() == expected.size());
    int64_t n_parameters = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
        const std::string full = (c.prefix && !never_prefixed(expected[i].first) ? "transformer." : "") + expected[i].first;
        CHECK(w.tensors[i].name == full);
        CHECK(w.tensors[i].shape == expected[i].second);
        if (!c.mixed) CHECK(w.tensors[i].dtype == c.dtype);
        n_parameters += n_elements(expected[i].second);
    }
    CHECK(w.n_parameters == n_parameters);
    CHECK(w.file_bytes == int64_t(fs::file_size(fm.dir / "model.safetensors")));
    // F32 needs no conversion (the writer aligns data to 8 bytes); F16/BF16 are converted.
    if (c.dtype == Dtype::F32 && !c.mixed) CHECK(w.converted_bytes == 0);
    if (c.dtype != Dtype::F32) CHECK(w.converted_bytes == 4 * n_parameters);
    if (c.mixed) CHECK(w.converted_bytes > 0);

    if (c.pos == PositionEmbedding::Sinusoidal) {
        // Interleaved: PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(same angle).
        const int64_t C = spec.config.n_embd;
        for (int64_t t = 0; t < spec.config.n_ctx; ++t)
            for (int64_t i = 0; i < C; ++i) {
                const double angle = double(t) / std::pow(10000.0, double(i - i % 2) / double(C));
                const double want = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
                INFO("t " << t << ", i " << i);
                REQUIRE(std::abs(w.position_embedding[t * C + i] - want) < 1e-6);
            }
    }
}

TEST_CASE("matrices are copied into 2 MiB pages, or used from the mapping with WeightPlacement::Mapped",
          "[weights]") {
    FixtureSpec spec;
    spec.config.n_inner = 40;
    const FixtureModel fm = write_fixture(dir_for("placement"), spec);
    const std::string path = (fm.dir / "model.safetensors").string();
    const Weights copied = load_weights(spec.config, path);
    const Weights mapped = load_weights(spec.config, path, WeightFormat::F32, WeightPlacement::Mapped);
    check_all_values(copied, fm);
    check_all_values(mapped, fm);
    CHECK(!copied.mapped);
    CHECK(mapped.mapped);

    const std::vector<std::pair<std::string, const float*>> matrices = {
        {"wte.weight", copied.token_embedding.f32},
        {"h.0.attn.c_attn.weight", copied.layers[0].attn_weight.f32},
        {"h.0.attn.c_proj.weight", copied.layers[0].attn_proj_weight.f32},
        {"h.1.mlp.c_fc.weight", copied.layers[1].fc_weight.f32},
        {"h.1.mlp.c_proj.weight", copied.layers[1].fc_proj_weight.f32}};
    int64_t matrix_bytes = 0;  // each piece rounded up to 64 bytes
    for (const auto& [name, c] : matrices) {
        INFO(name);
        const TensorView* t = copied.checkpoint->find(name);
        REQUIRE(t != nullptr);
        CHECK(static_cast<const void*>(c) != static_cast<const void*>(t->data));
        CHECK(reinterpret_cast<uintptr_t>(c) % 64 == 0);
        matrix_bytes += (t->n_elements() * 4 + 63) / 64 * 64;
    }
    CHECK(mapped.token_embedding.f32 == reinterpret_cast<const float*>(mapped.checkpoint->find("wte.weight")->data));
    CHECK(mapped.layers[1].fc_weight.f32 ==
          reinterpret_cast<const float*>(mapped.checkpoint->find("h.1.mlp.c_fc.weight")->data));
    CHECK(mapped.matrices->used() == 0);
    // Every matrix of the 2-layer fixture is in the arena; vectors stay in the mapping either way.
    int64_t all_matrices = 0;
    for (const auto& [name, shape] : expected_tensors(spec.config))
        if (shape.size() == 2 && name != "wpe.weight") all_matrices += (n_elements(shape) * 4 + 63) / 64 * 64;
    CHECK(matrix_bytes <= all_matrices);
    CHECK(copied.matrices->used() == all_matrices);
    CHECK(copied.converted_bytes == 0);
    CHECK(copied.layers[0].ln_1_weight == reinterpret_cast<const float*>(copied.checkpoint->find("h.0.ln_1.weight")->data));
}

TEST_CASE("Model::load reads a fixture folder and refuses bad folders", "[weights][model]") {
    const FixtureModel fm = write_fixture(dir_for("folder"), FixtureSpec{});
    const auto model = Model::load(fm.dir.string());
    CHECK(model->config().n_embd == fm.config.n_embd);
    CHECK(model->tokenizer() == nullptr);  // no vocab.json / merges.txt in the fixture
    CHECK_THROWS_AS(model->check_token(-1), UsageError);
    CHECK_THROWS_AS(model->check_token(int32_t(fm.config.n_vocab)), UsageError);
    CHECK_NOTHROW(model->check_token(int32_t(fm.config.n_vocab - 1)));

    CHECK_THROWS_AS(Model::load((dir_for("folder") / "does-not-exist").string()), LoadError);
    CHECK_THROWS_AS(Model::load((fm.dir / "config.json").string()), LoadError);  // a file, not a folder
    const fs::path empty = dir_for("empty-folder");
    fs::create_directories(empty);
    CHECK_THROWS_AS(Model::load(empty.string()), LoadError);
    const fs::path no_weights = dir_for("no-weights");
    fs::create_directories(no_weights);
    fs::copy_file(fm.dir / "config.json", no_weights / "config.json", fs::copy_options::overwrite_existing);
    try {
        Model::load(no_weights.string());
        FAIL("expected a LoadError");
    } catch (const LoadError& e) {
        CHECK_THAT(e.what(), Contains("model.safetensors"));
    }
}

TEST_CASE("a missing tensor is a LoadError naming it", "[weights][errors]") {
    FixtureSpec spec;
    spec.drop = {"h.1.mlp.c_fc.bias"};
    std::string e = load_error(spec, "missing");
    CHECK_THAT(e, Contains("h.1.mlp.c_fc.bias") && Contains("missing") && Contains("[96]"));

    spec.prefix = true;
    e = load_error(spec, "missing-prefixed");
    CHECK_THAT(e, Contains("transformer.h.1.mlp.c_fc.bias") && Contains("missing"));

    FixtureSpec untied;
    untied.config.tie_word_embeddings = false;
    untied.drop = {"lm_head.weight"};
    CHECK_THAT(load_error(untied, "missing-lm-head"), Contains("lm_head.weight"));

    FixtureSpec head_bias;
    head_bias.config.lm_head_bias = true;
    head_bias.drop = {"lm_head.bias"};
    CHECK_THAT(load_error(head_bias, "missing-lm-head-bias"), Contains("lm_head.bias"));

    FixtureSpec wpe;
    wpe.drop = {"wpe.weight"};
    CHECK_THAT(load_error(wpe, "missing-wpe"), Contains("wpe.weight"));
}

TEST_CASE("a mis-shaped tensor is a LoadError naming it and both shapes", "[weights][errors]") {
    FixtureSpec spec;
    spec.reshape["h.0.attn.c_attn.weight"] = {24, 71};
    CHECK_THAT(load_error(spec, "shape-attn"),
               Contains("h.0.attn.c_attn.weight") && Contains("[24, 71]") && Contains("[24, 72]"));
    FixtureSpec transposed;  // a Linear-layout (out, in) weight where Conv1D (in, out) is expected
    transposed.reshape["h.1.mlp.c_fc.weight"] = {96, 24};
    CHECK_THAT(load_error(transposed, "shape-transposed"),
               Contains("h.1.mlp.c_fc.weight") && Contains("[96, 24]") && Contains("[24, 96]"));
    FixtureSpec wte;
    wte.reshape["wte.weight"] = {52, 24};
    CHECK_THAT(load_error(wte, "shape-wte"), Contains("wte.weight") && Contains("[52, 24]") && Contains("[53, 24]"));
    FixtureSpec rank;
    rank.reshape["ln_f.bias"] = {1, 24};
    CHECK_THAT(load_error(rank, "shape-rank"), Contains("ln_f.bias") && Contains("[1, 24]") && Contains("[24]"));
}

TEST_CASE("a tensor the config says must not exist is a LoadError", "[weights][errors]") {
    FixtureSpec qkv;
    qkv.config.qkv_bias = false;
    qkv.add = {{"h.1.attn.c_attn.bias", {72}}};
    CHECK_THAT(load_error(qkv, "forbid-qkv"), Contains("h.1.attn.c_attn.bias") && Contains("qkv_bias"));

    FixtureSpec sin;
    sin.config.position_embedding = PositionEmbedding::Sinusoidal;
    sin.add = {{"wpe.weight", {32, 24}}};
    CHECK_THAT(load_error(sin, "forbid-wpe"), Contains("wpe.weight") && Contains("sinusoidal"));

    FixtureSpec sin_prefixed = sin;
    sin_prefixed.prefix = true;
    sin_prefixed.add = {{"transformer.wpe.weight", {32, 24}}};
    CHECK_THAT(load_error(sin_prefixed, "forbid-wpe-prefixed"), Contains("transformer.wpe.weight"));

    FixtureSpec ln_f;
    ln_f.config.final_layer_norm = false;
    ln_f.add = {{"ln_f.weight", {24}}, {"ln_f.bias", {24}}};
    CHECK_THAT(load_error(ln_f, "forbid-ln-f"), Contains("ln_f"));

    FixtureSpec head_bias;
    head_bias.add = {{"lm_head.bias", {53}}};
    CHECK_THAT(load_error(head_bias, "forbid-lm-head-bias"), Contains("lm_head.bias"));
}

namespace {

// Rewrites a fixture's model.safetensors with some tensors stored in another dtype (same bytes, cut to
// the size that dtype needs): what a checkpoint with integer buffers or a mistyped weight looks like.
void retype(const FixtureModel& fm, const std::map<std::string, Dtype>& dtypes) {
    const std::string path = (fm.dir / "model.safetensors").string();
    std::vector<TensorToWrite> out;
    {
        SafetensorsFile src(path);
        for (const TensorView& t : src.tensors()) {
            TensorToWrite w{t.name, t.dtype, t.shape, {}};
            if (auto it = dtypes.find(t.name); it != dtypes.end()) w.dtype = it->second;
            const size_t n = size_t(t.n_elements()) * dtype_size(w.dtype);
            REQUIRE(n <= t.n_bytes);
            w.bytes.assign(t.data, t.data + n);
            out.push_back(std::move(w));
        }
    }
    write_safetensors(path, out);
}

}  // namespace

TEST_CASE("integer buffers are ignored; a weight in a dtype kvscope does not compute with is refused",
          "[weights][errors]") {
    FixtureSpec spec;
    spec.extra_buffers = true;
    const FixtureModel fm = write_fixture(dir_for("retyped-buffers"), spec);
    retype(fm, {{"h.0.attn.bias", Dtype::U8}, {"h.1.attn.bias", Dtype::BOOL}});
    const std::string path = (fm.dir / "model.safetensors").string();
    CHECK_NOTHROW(load_weights(spec.config, path));

    const FixtureModel bad = write_fixture(dir_for("retyped-weight"), FixtureSpec{});
    retype(bad, {{"ln_f.bias", Dtype::I32}});
    try {
        load_weights(FixtureSpec{}.config, (bad.dir / "model.safetensors").string());
        FAIL("expected a LoadError");
    } catch (const LoadError& e) {
        CHECK_THAT(std::string(e.what()), Contains("ln_f.bias") && Contains("I32"));
    }
}
