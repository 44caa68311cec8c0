// Issue 41, "nothing lost, nothing silent": a non-finite number never becomes a token. A NaN or infinity
// in the weights is refused at load naming the tensor and the element; config.json values that make the
// maths degenerate are refused by key; a step whose numbers overflow fails naming the step and the
// layer, and leaves the session as before it. Ids a model has beyond its tokenizer (padded vocabularies)
// decode as "<id N>".
//
// The facts compared against are the tests' own: which element of which tensor the fixture poisoned,
// which layer's biases were chosen so that float32 overflows there (3e38 + 3e38 > FLT_MAX ≈ 3.4e38,
// 1.5e38 + 1.5e38 < FLT_MAX), which logit a bias of 1000 makes the largest.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "base/errors.h"
#include "forward/model.h"
#include "model/config.h"
#include "model/finite.h"
#include "run/session.h"
#include "run/session_batch.h"
#include "test_models.h"
#include "text/tokenizer.h"

using namespace kvscope;
using namespace kvtest;
using Catch::Matchers::Contains;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

fs::path dir_for(const std::string& name) { return work_dir("numerics") / name; }

std::string load_error(const fs::path& dir, WeightFormat format = WeightFormat::F32,
                       WeightPlacement placement = WeightPlacement::HugePages) {
    try {
        Model::load(dir.string(), format, placement);
    } catch (const LoadError& e) {
        return e.what();
    }
    return "(loaded)";
}

// A fixture (V = 53, C = 24, L = 2, F = 96) where token 7's embedding holds 1.5e38 in column 0 and
// layer 1's attention and MLP output biases hold 1.5e38 in column 0 (the rest random and finite):
// every token's residual column 0 reaches 1.5e38 + 1.5e38 = 3e38 < FLT_MAX after layer 1, finite;
// token 7's starts at 1.5e38 and overflows to +inf in layer 1 (4.5e38), never before. The norms
// (double statistics) put out finite rows, so nothing else overflows; lm_head is its own matrix, or
// token 7's embedding row would make its logit overflow for every input.
FixtureModel overflow_fixture() {
    FixtureSpec spec;
    spec.seed = 41;
    spec.config.tie_word_embeddings = false;
    spec.set.push_back({"wte.weight", 7 * 24 + 0, 1.5e38f});
    spec.set.push_back({"h.1.attn.c_proj.bias", 0, 1.5e38f});
    spec.set.push_back({"h.1.mlp.c_proj.bias", 0, 1.5e38f});
    return write_fixture(dir_for("overflow-layer1"), spec);
}

std::string step_error(Session& s) {
    try {
        s.step();
    } catch (const LoadError& e) {
        return e.what();
    }
    return "(stepped)";
}

}  // namespace

TEST_CASE("the finite scan finds the first NaN or infinity in every dtype, at any index and alignment", "[numerics]") {
    for (Dtype dtype : {Dtype::F32, Dtype::F16, Dtype::BF16})
        for (float bad : {kNaN, kInf, -kInf})
            for (int64_t at : {int64_t(0), int64_t(5), int64_t(1023), int64_t(1024), int64_t(2999)}) {
                INFO("dtype " << int(dtype) << " value " << bad << " at " << at);
                std::vector<float> values(3000, 1.0f);
                values[size_t(at)] = bad;
                values[2999] = at == 2999 ? bad : kNaN;  // a later one must not be reported
                std::vector<std::byte> bytes = encode(values, dtype);
                bytes.insert(bytes.begin(), std::byte{0});  // misaligned by one byte
                CHECK(first_non_finite(bytes.data() + 1, dtype, 3000) == at);
            }
    std::vector<float> fine = {0.0f, -0.0f, 3.0e38f, -3.0e38f, 1e-45f, 65504.0f};
    CHECK(all_finite(fine.data(), int64_t(fine.size())));
    std::vector<std::byte> f16 = encode(fine, Dtype::F16);  // clamped to ±7.9, all finite
    CHECK(first_non_finite(f16.data(), Dtype::F16, int64_t(fine.size())) == -1);
}

TEST_CASE("the finite scan of Q8_0 blocks: a block's weights are non-finite exactly when its float16 scale is",
          "[numerics]") {
    // 34-byte blocks (float16 d, 32 x int8 q): q · d is NaN or infinite for every q of a block whose d is
    // (0 · inf is NaN), so the first such weight is the block's first.
    for (uint16_t bad : {uint16_t(0x7C00), uint16_t(0xFC00), uint16_t(0x7E00), uint16_t(0x7C01)})
        for (int64_t block : {int64_t(0), int64_t(3), int64_t(40)}) {
            std::vector<std::byte> bytes(41 * 34 + 1);
            for (int64_t b = 0; b < 41; ++b) {
                const uint16_t d = b == block ? bad : b == 40 ? uint16_t(0x7C00) : uint16_t(0x7BFF);  // 65504: finite
                std::memcpy(bytes.data() + 1 + b * 34, &d, 2);
                for (int i = 0; i < 32; ++i) bytes[size_t(1 + b * 34 + 2 + i)] = std::byte(uint8_t(i * 7));
            }
            INFO("scale bits " << bad << " in block " << block);
            CHECK(first_non_finite(bytes.data() + 1, Dtype::Q8_0, 41 * 32) == block * 32);
            CHECK(first_non_finite(bytes.data() + 1, Dtype::Q8_0, 40 * 32) == (block < 40 ? block * 32 : -1));
        }
}

TEST_CASE("a NaN or infinity in any weight, in any dtype, is a LoadError naming the tensor and the element",
          "[numerics][weights]") {
    const Dtype dtype = GENERATE(Dtype::F32, Dtype::F16, Dtype::BF16);
    const float bad = std::array<float, 3>{kNaN, kInf, -kInf}[size_t(GENERATE(0, 1, 2))];  // (Catch 2.13 mangles -inf)
    struct Case { const char* name; int64_t at; const char* where; };
    // c_fc is (C, F) = (24, 96): element 200 is [2, 8]. A matrix, a vector and the position table.
    const Case c = GENERATE(Case{"h.1.mlp.c_fc.weight", 200, "[2, 8] (element 200)"},
                            Case{"h.0.ln_1.bias", 3, "[3] (element 3)"},
                            Case{"wpe.weight", 24 * 31 + 23, "[31, 23] (element 767)"});
    FixtureSpec spec;
    spec.dtype = dtype;
    spec.set.push_back({c.name, c.at, bad});
    const fs::path dir = dir_for(std::string("bad-") + c.name + "-" + std::to_string(int(dtype)) + "-" +
                                 (std::isnan(bad) ? "nan" : bad > 0 ? "inf" : "neginf"));
    write_fixture(dir, spec);
    const std::string shown = std::isnan(bad) ? "NaN" : bad > 0 ? "+inf" : "-inf";
    INFO("dtype " << int(dtype));
    for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16})
        for (WeightPlacement placement : {WeightPlacement::HugePages, WeightPlacement::Mapped}) {
            const std::string e = load_error(dir, format, placement);
            CHECK_THAT(e, Contains("model.safetensors: tensor " + std::string(c.name) + " holds " + shown + " at " + c.where));
            CHECK(e.find('\n') == std::string::npos);
        }
}

TEST_CASE("a finite float32 weight that bfloat16 cannot hold is refused when the matrices are bfloat16",
          "[numerics][weights]") {
    FixtureSpec spec;
    spec.set.push_back({"h.0.attn.c_proj.weight", 10, 3.4e38f});  // rounds up past bf16's largest, 3.39e38
    const fs::path dir = write_fixture(dir_for("bf16-overflow"), spec).dir;
    CHECK_NOTHROW(Model::load(dir.string(), WeightFormat::F32));
    CHECK_THAT(load_error(dir, WeightFormat::BF16),
               Contains("tensor h.0.attn.c_proj.weight element 10 (3.4e+38) overflows bfloat16"));
}

TEST_CASE("config.json values that make the maths degenerate are refused by key, with the range", "[numerics][config]") {
    const std::string llama = R"({"model_type": "llama", "vocab_size": 10, "max_position_embeddings": 16,
        "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2)";
    const std::string gemma = R"({"model_type": "gemma3_text", "vocab_size": 10, "max_position_embeddings": 16,
        "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 4)";
    const std::string gpt2 = R"({"vocab_size": 10, "n_positions": 8, "n_embd": 4, "n_layer": 1, "n_head": 1)";
    auto error = [](const std::string& json) {
        try {
            parse_config(json, "dir/config.json");
        } catch (const LoadError& e) {
            return std::string(e.what());
        }
        return std::string("(parsed)");
    };
    struct Case { std::string base, extra, message; };
    for (const Case& c : {
             Case{llama, R"("rope_theta": 1e-300)", "rope_theta must be a finite number greater than 1 and at most 1e+12, found 1e-300"},
             Case{llama, R"("rope_theta": 1)", "rope_theta must be a finite number greater than 1"},
             Case{llama, R"("rope_theta": 1e300)", "rope_theta must be a finite number greater than 1 and at most 1e+12"},
             Case{llama, R"("rope_scaling": {"rope_type": "linear", "factor": 1e-300})",
                  "rope_scaling.factor must be a finite number from 1 to 10000, found 1e-300"},
             Case{llama, R"("rope_scaling": {"rope_type": "linear", "factor": 0.5})", "rope_scaling.factor must be"},
             Case{llama, R"("rope_scaling": {"rope_type": "llama3", "original_max_position_embeddings": 8, "factor": 8,
                                "low_freq_factor": 1e-300, "high_freq_factor": 4})",
                  "rope_scaling.low_freq_factor must be a finite number from 0.001 to 10000"},
             Case{llama, R"("rms_norm_eps": 1e308)", "rms_norm_eps must be a finite number greater than 0 and at most 0.1, found 1e+308"},
             Case{llama, R"("rms_norm_eps": 1e-300)", "(parsed)"},  // float32 0: only an all-zero row divides by 0
             Case{gpt2, R"("layer_norm_epsilon": 1e308)", "layer_norm_epsilon must be a finite number greater than 0 and at most 0.1"},
             Case{gpt2, R"("embedding_scale": 1e300)", "embedding_scale must be a finite number from 0.001 to 1000"},
             Case{gemma, R"("query_pre_attn_scalar": 1e-300)", "query_pre_attn_scalar must be a finite number from 1 to 1e+06"},
             Case{gemma, R"("rope_local_base_freq": 1e-300)", "rope_local_base_freq must be a finite number greater than 1"},
             Case{gemma, R"("final_logit_softcapping": 1e-300)", "final_logit_softcapping must be a finite number from 0.01 to 1e+06"},
         }) {
        const std::string json = c.base + ", " + c.extra + "}";
        INFO(json);
        const std::string e = error(json);
        if (c.message == "(parsed)") {
            CHECK(e == "(parsed)");
            continue;
        }
        CHECK_THAT(e, Contains("dir/config.json: " + c.message));
        CHECK_THAT(e, Contains("real checkpoints use") || Contains("uses"));
    }
    // What released checkpoints write passes: Llama 3 (500000, 1e-5, llama3 factor 8 / 1 / 4),
    // Qwen2.5 (1e6, 1e-6), Gemma 3 (local 10000, global 1e6, query_pre_attn_scalar 256, softcap null).
    CHECK(error(llama + R"(, "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "rope_scaling": {"rope_type": "llama3",
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})") == "(parsed)");
    CHECK(error(llama + R"(, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06})") == "(parsed)");
    CHECK(error(gemma + R"(, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
        "final_logit_softcapping": null, "rms_norm_eps": 1e-06})") == "(parsed)");
}

TEST_CASE("a step whose numbers overflow fails naming the step and the layer, no token, the session as before",
          "[numerics][session]") {
    const FixtureModel fm = overflow_fixture();
    auto model = Model::load(fm.dir.string());
    SessionOptions o;
    o.max_new_tokens = 3;

    SECTION("a prefill holding the token overflows in layer 1") {
        Session s(model, o);
        s.set_prompt({1, 7, 2});
        const std::string e = step_error(s);
        CHECK_THAT(e, Contains("step 0 (prefill, positions 0-2): layer 1 produced NaN or infinity; no token was sampled"));
        CHECK(e.find('\n') == std::string::npos);
        CHECK(s.parts().generated.empty());
        CHECK(s.trace().empty());
        CHECK(s.cache().next_position() == 0);
        CHECK(s.next() == Session::Next::Prefill);
        CHECK(step_error(s) == e);  // the same again: nothing was left half done
    }
    SECTION("a decode feeding the token fails at its position; step back and the earlier steps stay usable") {
        o.forced_tokens = {7};  // the prefill's prediction is replaced by token 7, fed by the next step
        Session s(model, o);
        s.set_prompt({1, 2, 3});
        s.step();  // finite: every token but 7 stays below FLT_MAX
        REQUIRE(s.parts().generated == std::vector<TokenId>{7});
        const std::vector<float> logits = s.parts().logits;
        CHECK(all_finite(logits.data(), int64_t(logits.size())));
        CHECK_THAT(step_error(s), Contains("step 1 (decode, position 3): layer 1 produced NaN or infinity"));
        CHECK(s.parts().generated == std::vector<TokenId>{7});
        CHECK(s.trace().size() == 1);
        CHECK(s.cache().next_position() == 3);
        CHECK(s.parts().logits == logits);
        CHECK(s.next() == Session::Next::Decode);
        REQUIRE(s.step_back());
        CHECK(s.parts().generated.empty());
        CHECK(s.cache().next_position() == 0);
    }
    SECTION("with the cache off, and in chunks") {
        o.use_cache = false;
        o.prefill_chunk = 2;
        Session s(model, o);
        s.set_prompt({1, 2, 7, 3});
        s.step();  // positions 0-1
        CHECK_THAT(step_error(s), Contains("step 1 (prefill, positions 2-3): layer 1"));
        CHECK(s.trace().size() == 1);
        CHECK(s.parts().n_prompt_done == 2);
    }
    SECTION("without history nothing is kept to go back to: the session is reset") {
        o.history = false;
        Session s(model, o);
        s.set_prompt({7});
        CHECK_THAT(step_error(s), Contains("step 0 (prefill, position 0): layer 1"));
        CHECK(s.cache().next_position() == 0);
        CHECK(s.parts().generated.empty());
    }
    SECTION("a batch: one sequence's overflow fails the step, every sequence as before") {
        Session a(model, o), b(model, o);
        a.set_prompt({1, 2});
        b.set_prompt({3, 7});
        Session* both[] = {&a, &b};
        Workspace ws = make_batch_workspace(both);
        std::string e = "(stepped)";
        try {
            step_batch(both, ws);
        } catch (const LoadError& x) {
            e = x.what();
        }
        CHECK_THAT(e, Contains("step 0 (prefill, positions 0-1): layer 1 produced NaN or infinity"));
        for (Session* s : both) {
            CHECK(s->trace().empty());
            CHECK(s->cache().next_position() == 0);
        }
        a.step();  // alone it runs
        CHECK(a.parts().generated.size() == 1);
    }
}

TEST_CASE("logits that overflow in the output layer name it", "[numerics][session]") {
    // lm_head row 5 all 3e38 and the final norm's output all 1 (gain 0, bias 1): logit 5 = 24 · 3e38 = +inf.
    FixtureSpec spec;
    spec.config.tie_word_embeddings = false;
    for (int64_t i = 0; i < 24; ++i) {
        spec.set.push_back({"lm_head.weight", 5 * 24 + i, 3e38f});
        spec.set.push_back({"ln_f.weight", i, 0.0f});
        spec.set.push_back({"ln_f.bias", i, 1.0f});
    }
    auto model = Model::load(write_fixture(dir_for("overflow-output"), spec).dir.string());
    Session s(model, SessionOptions{});
    s.set_prompt({1, 2});
    CHECK_THAT(step_error(s), Contains("step 0 (prefill, positions 0-1): the output layer (final norm and lm_head) produced NaN or infinity"));
    CHECK(s.parts().generated.empty());
}

TEST_CASE("ids a model has beyond its tokenizer decode as <id N>", "[numerics][tokenizer]") {
    Tokenizer t = Tokenizer::load(std::string(KVSCOPE_TEST_DATA) + "/../../assets/default");
    REQUIRE(t.n_vocab() == 768);
    CHECK(t.decode({51, 800, 256}) == t.token_bytes(51) + "<id 800>" + t.token_bytes(256));
    CHECK(t.bytes_or_id(767) == t.token_bytes(767));
    CHECK(t.bytes_or_id(768) == "<id 768>");
    CHECK(!t.has(768));
    CHECK_THROWS_AS(t.token_bytes(768), UsageError);
}
