// config.json: every key, every default, each wrong type and each impossible value. Expected
// defaults are GPT-2's as documented by Hugging Face's GPT2Config (n_inner = 4 * n_embd,
// layer_norm_epsilon = 1e-5, tie_word_embeddings = true) plus kvscope's documented extension defaults.
#include <cmath>
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/errors.h"
#include "model/architecture.h"
#include "model/config.h"
#include "scratch_dir.h"

using namespace kvscope;

namespace {

// The keys of the real gpt2 (124M) config.json, including ones kvscope ignores.
const char* const kGpt2Config = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

const char* const kMinimal =
    R"({"vocab_size": 10, "n_positions": 8, "n_embd": 4, "n_layer": 1, "n_head": 2)";

// kMinimal plus one extra member.
std::string with(const std::string& member) { return std::string(kMinimal) + ", " + member + "}"; }

std::string load_error(const std::string& text) {
    try {
        parse_config(text, "dir/config.json");
    } catch (const LoadError& e) {
        CHECK(e.path == "dir/config.json");
        return e.what();
    }
    FAIL("expected a LoadError for: " << text);
    return "";
}

}  // namespace

TEST_CASE("GPT-2's own config.json reads with GPT-2 defaults") {
    ModelConfig c = parse_config(kGpt2Config, "config.json");
    CHECK(c.n_vocab == 50257);
    CHECK(c.n_ctx == 1024);
    CHECK(c.n_embd == 768);
    CHECK(c.n_layer == 12);
    CHECK(c.n_head == 12);
    CHECK(c.head_dim() == 64);
    CHECK(c.n_inner == 3072);
    CHECK(c.activation == Activation::GeluTanh);
    CHECK(c.layer_norm_epsilon == 1e-5);
    CHECK(c.tie_word_embeddings);
    CHECK(c.qkv_bias);
    CHECK_FALSE(c.lm_head_bias);
    CHECK(c.norm_position == NormPosition::Pre);
    CHECK(c.position_embedding == PositionEmbedding::Learned);
    CHECK(c.embedding_scale == 1.0);
    CHECK(c.final_layer_norm);
}

TEST_CASE("every key is read") {
    ModelConfig c = parse_config(R"({
        "vocab_size": 300, "n_positions": 64, "n_embd": 48, "n_layer": 3, "n_head": 6, "n_inner": 100,
        "activation_function": "relu", "layer_norm_epsilon": 0.001, "tie_word_embeddings": false,
        "qkv_bias": false, "lm_head_bias": true, "norm_position": "post",
        "position_embedding": "sinusoidal", "embedding_scale": 6.928203230275509, "final_layer_norm": false
    })", "config.json");
    CHECK(c.n_vocab == 300);
    CHECK(c.n_ctx == 64);
    CHECK(c.n_embd == 48);
    CHECK(c.n_layer == 3);
    CHECK(c.n_head == 6);
    CHECK(c.head_dim() == 8);
    CHECK(c.n_inner == 100);
    CHECK(c.activation == Activation::Relu);
    CHECK(c.layer_norm_epsilon == 0.001);
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK_FALSE(c.qkv_bias);
    CHECK(c.lm_head_bias);
    CHECK(c.norm_position == NormPosition::Post);
    CHECK(c.position_embedding == PositionEmbedding::Sinusoidal);
    CHECK(c.embedding_scale == 6.928203230275509);
    CHECK_FALSE(c.final_layer_norm);
}

TEST_CASE("activation names map to the right function") {
    CHECK(parse_config(with(R"("activation_function": "gelu_new")"), "c").activation == Activation::GeluTanh);
    CHECK(parse_config(with(R"("activation_function": "gelu_pytorch_tanh")"), "c").activation ==
          Activation::GeluTanh);
    CHECK(parse_config(with(R"("activation_function": "gelu")"), "c").activation == Activation::GeluErf);
    CHECK(parse_config(with(R"("activation_function": "relu")"), "c").activation == Activation::Relu);
}

TEST_CASE("n_inner null or absent means 4 * n_embd") {
    CHECK(parse_config(with(R"("n_inner": null)"), "c").n_inner == 16);
    CHECK(parse_config(std::string(kMinimal) + "}", "c").n_inner == 16);
    CHECK(parse_config(with(R"("n_inner": 7)"), "c").n_inner == 7);
}

TEST_CASE("missing required keys are named") {
    for (const char* key : {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head"}) {
        INFO(key);
        std::string text = R"({"vocab_size": 10, "n_positions": 8, "n_embd": 4, "n_layer": 1, "n_head": 2})";
        // Rename the key so it is absent but the document stays valid.
        size_t at = text.find(std::string("\"") + key + "\"");
        REQUIRE(at != std::string::npos);
        text.insert(at + 1, "x_");
        CHECK_THAT(load_error(text), Catch::Contains(std::string("missing required key ") + key));
    }
}

TEST_CASE("wrong types are errors naming the key") {
    struct Case {
        const char* member;
        const char* key;
    };
    const Case cases[] = {
        {R"("vocab_size": "50257")", "vocab_size"},
        {R"("n_positions": 1024.0)", "n_positions"},
        {R"("n_embd": 7.68e2)", "n_embd"},
        {R"("n_layer": true)", "n_layer"},
        {R"("n_head": [2])", "n_head"},
        {R"("n_inner": "16")", "n_inner"},
        {R"("n_inner": 16.5)", "n_inner"},
        {R"("activation_function": 1)", "activation_function"},
        {R"("activation_function": null)", "activation_function"},
        {R"("layer_norm_epsilon": "1e-5")", "layer_norm_epsilon"},
        {R"("tie_word_embeddings": 1)", "tie_word_embeddings"},
        {R"("tie_word_embeddings": "true")", "tie_word_embeddings"},
        {R"("qkv_bias": null)", "qkv_bias"},
        {R"("lm_head_bias": 0)", "lm_head_bias"},
        {R"("norm_position": true)", "norm_position"},
        {R"("position_embedding": {})", "position_embedding"},
        {R"("embedding_scale": "2")", "embedding_scale"},
        {R"("final_layer_norm": "yes")", "final_layer_norm"},
    };
    for (const Case& c : cases) {
        INFO(c.member);
        // A duplicate of a required key is a JSON error, so replace it instead of appending.
        std::string text = std::string(kMinimal) + "}";
        std::string key = std::string("\"") + c.key + "\"";
        size_t at = text.find(key);
        if (at != std::string::npos) {
            size_t end = text.find_first_of(",}", at);
            text.replace(at, end - at, c.member);
        } else {
            text = with(c.member);
        }
        std::string msg = load_error(text);
        CHECK_THAT(msg, Catch::StartsWith(std::string("dir/config.json: ") + c.key));
    }
}

TEST_CASE("impossible values are errors with the numbers in the message") {
    auto replace = [](const char* key, const std::string& value) {
        std::string text = std::string(kMinimal) + "}";
        size_t at = text.find(std::string("\"") + key + "\"");
        size_t colon = text.find(':', at);
        size_t end = text.find_first_of(",}", colon);
        text.replace(colon + 1, end - colon - 1, " " + value);
        return text;
    };
    CHECK(load_error(R"({"vocab_size": 50257, "n_positions": 1024, "n_embd": 770, "n_layer": 12, "n_head": 12})") ==
          "dir/config.json: n_embd (770) is not divisible by n_head (12)");
    CHECK_THAT(load_error(replace("n_embd", "0")), Catch::Contains("n_embd must be positive, found 0"));
    CHECK_THAT(load_error(replace("n_head", "-2")), Catch::Contains("n_head must be positive, found -2"));
    CHECK_THAT(load_error(replace("vocab_size", "0")), Catch::Contains("vocab_size must be positive"));
    CHECK_THAT(load_error(replace("n_layer", "0")), Catch::Contains("n_layer must be positive"));
    CHECK_THAT(load_error(replace("n_positions", "-1")), Catch::Contains("n_positions must be positive"));
    CHECK_THAT(load_error(with(R"("n_inner": 0)")), Catch::Contains("n_inner must be positive"));
    // Sizes past the caps, including ones past int64 (which are not integers to the reader at all).
    CHECK_THAT(load_error(replace("vocab_size", "1048577")), Catch::Contains("vocab_size (1048577) is larger"));
    CHECK_THAT(load_error(replace("n_layer", "5000")), Catch::Contains("n_layer (5000) is larger"));
    CHECK_THAT(load_error(replace("n_embd", "99999999999999999999")), Catch::Contains("n_embd must be a whole number"));
    CHECK_THAT(load_error(replace("n_embd", "9223372036854775807")), Catch::Contains("n_embd (9223372036854775807)"));
    // Each dimension under its cap, but together too many parameters (2^20 * 2^20 embedding alone).
    CHECK_THAT(load_error(R"({"vocab_size": 1048576, "n_positions": 8, "n_embd": 1048576, "n_layer": 4096,
                             "n_head": 1})"),
               Catch::Contains("parameters, more than kvscope supports"));
    for (const char* eps : {"0", "-1e-5", "0.0"}) {
        INFO(eps);
        CHECK_THAT(load_error(with(std::string("\"layer_norm_epsilon\": ") + eps)),
                   Catch::Contains("layer_norm_epsilon must be a finite number greater than 0"));
    }
    CHECK_THAT(load_error(with(R"("layer_norm_epsilon": 1e400)")), Catch::Contains("not valid JSON"));
    CHECK_THAT(load_error(with(R"("embedding_scale": 0)")), Catch::Contains("embedding_scale must be a finite"));
    CHECK_THAT(load_error(with(R"("embedding_scale": -2.0)")), Catch::Contains("embedding_scale must be a finite"));
    CHECK_THAT(load_error(R"({"vocab_size": 10, "n_positions": 8, "n_embd": 3, "n_layer": 1, "n_head": 1,
                             "position_embedding": "sinusoidal"})"),
               Catch::Contains("sinusoidal\" needs an even n_embd, found 3"));
    CHECK_THAT(load_error(with(R"("activation_function": "swish")")),
               Catch::Contains("activation_function \"swish\" is not supported"));
    CHECK_THAT(load_error(with(R"("norm_position": "sandwich")")), Catch::Contains("use one of pre, post"));
    CHECK_THAT(load_error(with(R"("position_embedding": "rotary")")),
               Catch::Contains("use one of learned, sinusoidal"));
}

TEST_CASE("documents that are not a JSON object are errors with a line and column") {
    CHECK(load_error("[1, 2]") == "dir/config.json: expected a JSON object, found array");
    // Counted by hand: '{' + newline (2 bytes), two 15-byte lines, so the '}' is byte 32, line 4, column 1.
    CHECK_THAT(load_error("{\n  \"n_embd\": 4,\n  \"n_head\": 2,\n}"),
               Catch::Contains("not valid JSON at line 4, column 1 (byte 32): trailing comma in object"));
    CHECK_THAT(load_error(""), Catch::Contains("line 1, column 1 (byte 0)"));
}

TEST_CASE("unknown keys are ignored") {
    CHECK(parse_config(with(R"("rope_theta": 10000, "something": {"nested": [1, 2]})"), "c").n_embd == 4);
}

TEST_CASE("config_to_json round trips every field") {
    ModelConfig a;
    a.n_vocab = 300;
    a.n_ctx = 64;
    a.n_embd = 48;
    a.n_layer = 3;
    a.n_head = 6;
    a.n_inner = 100;
    a.activation = Activation::GeluErf;
    a.layer_norm_epsilon = 1e-6;
    a.tie_word_embeddings = false;
    a.qkv_bias = false;
    a.lm_head_bias = true;
    a.norm_position = NormPosition::Post;
    a.position_embedding = PositionEmbedding::Sinusoidal;
    a.embedding_scale = 0.1;  // not exact in binary: the text must still read back bit-exactly
    a.final_layer_norm = false;
    for (Activation act : {Activation::GeluTanh, Activation::GeluErf, Activation::Relu}) {
        a.activation = act;
        ModelConfig b = parse_config(config_to_json(a), "roundtrip");
        CHECK(b.n_vocab == a.n_vocab);
        CHECK(b.n_ctx == a.n_ctx);
        CHECK(b.n_embd == a.n_embd);
        CHECK(b.n_layer == a.n_layer);
        CHECK(b.n_head == a.n_head);
        CHECK(b.n_inner == a.n_inner);
        CHECK(b.activation == a.activation);
        CHECK(b.layer_norm_epsilon == a.layer_norm_epsilon);
        CHECK(b.tie_word_embeddings == a.tie_word_embeddings);
        CHECK(b.qkv_bias == a.qkv_bias);
        CHECK(b.lm_head_bias == a.lm_head_bias);
        CHECK(b.norm_position == a.norm_position);
        CHECK(b.position_embedding == a.position_embedding);
        CHECK(b.embedding_scale == a.embedding_scale);
        CHECK(b.final_layer_norm == a.final_layer_norm);
    }
    ModelConfig gpt2 = parse_config(kGpt2Config, "c");
    CHECK_THAT(config_to_json(gpt2), Catch::Contains("\"layer_norm_epsilon\": 1e-05"));
    CHECK_THAT(config_to_json(gpt2), Catch::Contains("\"embedding_scale\": 1.0"));
}

TEST_CASE("load_config reads a file and names it in errors") {
    namespace fs = std::filesystem;
    fs::path dir = kvscope::test::scratch_root() / "config";
    fs::create_directories(dir);
    fs::path good = dir / "config.json";
    std::ofstream(good) << kGpt2Config;
    CHECK(load_config(good.string()).n_embd == 768);
    fs::path missing = dir / "nope" / "config.json";
    try {
        load_config(missing.string());
        FAIL("no error for a missing file");
    } catch (const LoadError& e) {
        CHECK(e.path == missing.string());
        CHECK_THAT(std::string(e.what()), Catch::Contains("cannot open"));
    }
}

// ---------------------------------------------------------------------------------------------------
// Llama family (model_type "llama"): Hugging Face LlamaConfig keys and defaults.

namespace {

// The keys of SmolLM2-135M's config.json (LlamaForCausalLM), including ones kvscope ignores.
const char* const kSmolLM2Config = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "eos_token_id": 0,
  "hidden_act": "silu",
  "hidden_size": 576,
  "initializer_range": 0.041666666666666664,
  "intermediate_size": 1536,
  "is_llama_config": true,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_interleaved": false,
  "rope_scaling": null,
  "rope_theta": 100000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 49152
})";

const char* const kLlamaMinimal =
    R"({"model_type": "llama", "vocab_size": 10, "max_position_embeddings": 8, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4)";

std::string llama_with(const std::string& member) { return std::string(kLlamaMinimal) + ", " + member + "}"; }

}  // namespace

TEST_CASE("SmolLM2-135M's config.json reads as a Llama-family GQA model") {
    ModelConfig c = parse_config(kSmolLM2Config, "config.json");
    CHECK(c.family == Family::Llama);
    CHECK(c.n_vocab == 49152);
    CHECK(c.n_ctx == 8192);
    CHECK(c.n_embd == 576);
    CHECK(c.n_inner == 1536);
    CHECK(c.n_layer == 30);
    CHECK(c.n_head == 9);
    CHECK(c.kv_heads() == 3);
    CHECK(c.head_dim() == 64);
    CHECK(c.kv_width() == 192);
    CHECK(c.rope.theta == 100000.0);
    CHECK(c.rope.scaling == RopeScaling::None);
    CHECK(c.tie_word_embeddings);
    CHECK(c.activation == Activation::Silu);
    CHECK(c.layer_norm_epsilon == 1e-5);
    // query head h reads K/V head h / 3
    CHECK(c.kv_head_of(0) == 0);
    CHECK(c.kv_head_of(2) == 0);
    CHECK(c.kv_head_of(3) == 1);
    CHECK(c.kv_head_of(8) == 2);
}

TEST_CASE("Llama defaults are LlamaConfig's") {
    ModelConfig c = parse_config(std::string(kLlamaMinimal) + "}", "config.json");
    CHECK(c.kv_heads() == 4);                 // num_key_value_heads absent = num_attention_heads
    CHECK(c.head_dim() == 2);
    CHECK(c.layer_norm_epsilon == 1e-6);      // rms_norm_eps
    CHECK(c.rope.theta == 10000.0);
    CHECK_FALSE(c.tie_word_embeddings);       // LlamaConfig ties nothing by default
    CHECK_FALSE(c.attention_bias);
    CHECK_FALSE(c.mlp_bias);
    CHECK(parse_config(llama_with(R"("head_dim": 6)"), "c").head_dim() == 6);
    CHECK(parse_config(llama_with(R"("head_dim": null, "num_key_value_heads": null)"), "c").head_dim() == 2);
}

TEST_CASE("rope_scaling linear and llama3 are read; other kinds are refused by name") {
    ModelConfig lin = parse_config(llama_with(R"("rope_scaling": {"type": "linear", "factor": 4.0})"), "c");
    CHECK(lin.rope.scaling == RopeScaling::Linear);
    CHECK(lin.rope.factor == 4.0);
    ModelConfig l3 = parse_config(llama_with(R"("rope_scaling": {"rope_type": "llama3", "factor": 32.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"), "c");
    CHECK(l3.rope.scaling == RopeScaling::Llama3);
    CHECK(l3.rope.original_max_positions == 8192);
    CHECK_THAT(load_error(llama_with(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})")),
               Catch::Contains("rope_scaling type \"yarn\" is not supported"));
    CHECK_THAT(load_error(llama_with(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})")),
               Catch::Contains("low_freq_factor"));
}

// A GGUF file's rope_freqs.weight lands in the config as per-frequency divisors; config_to_json writes them
// (prompt-cache fingerprints, inspect --json) under kvscope's own rope_type, which reads back.
TEST_CASE("rope_scaling rope_freqs: per-frequency divisors round trip through config_to_json, wrong ones are refused") {
    ModelConfig a = parse_config(llama_with(R"("head_dim": 6)"), "c");
    a.rope.scaling = RopeScaling::Frequencies;
    a.rope.freq_factors = {1.0f, 3.2922628f, 32.0f};
    const std::string text = config_to_json(a);
    CHECK_THAT(text, Catch::Contains("\"rope_type\": \"rope_freqs\""));
    const ModelConfig b = parse_config(text, "c");
    CHECK(b.rope.scaling == RopeScaling::Frequencies);
    CHECK(b.rope.freq_factors == a.rope.freq_factors);  // bit for bit
    CHECK(config_to_json(b) == text);
    for (const ArchLine& line : architecture(b))
        if (std::string(line.key) == "rope_scaling") {
            CHECK(line.value == "rope_freqs");
            CHECK(line.meaning == "3 per-frequency divisors from the GGUF file, 1 .. 32");
        }
    CHECK_THAT(load_error(llama_with(R"("head_dim": 6, "rope_scaling": {"rope_type": "rope_freqs", "factors": [1, 2]})")),
               Catch::Contains("rope_scaling.factors has 2 entries, not head_dim / 2 = 3"));
    CHECK_THAT(load_error(llama_with(R"("head_dim": 6, "rope_scaling": {"rope_type": "rope_freqs", "factors": [1, 0, 2]})")),
               Catch::Contains("rope_scaling.factors[1] must be a finite number from 0.001 to 10000, found 0"));
    CHECK_THAT(load_error(llama_with(R"("rope_scaling": {"rope_type": "rope_freqs"})")),
               Catch::Contains("rope_scaling (rope_freqs) needs factors, a list of numbers"));
}

TEST_CASE("Llama configs that cannot be computed are errors naming the keys") {
    CHECK_THAT(load_error(llama_with(R"("num_key_value_heads": 3)")),
               Catch::Contains("num_attention_heads (4) is not divisible by num_key_value_heads (3)"));
    CHECK_THAT(load_error(llama_with(R"("head_dim": 3)")), Catch::Contains("head_dim 3 is odd"));
    CHECK_THAT(load_error(R"({"model_type": "llama", "vocab_size": 10})"),
               Catch::Contains("missing required key max_position_embeddings"));
    CHECK_THAT(load_error(with(R"("model_type": "falcon")")), Catch::Contains("model_type \"falcon\" is not supported"));
}

TEST_CASE("a Llama config_to_json round trips") {
    ModelConfig a = parse_config(llama_with(R"("num_key_value_heads": 2, "head_dim": 6, "attention_bias": true,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16})"), "c");
    ModelConfig b = parse_config(config_to_json(a), "c");
    CHECK(config_to_json(b) == config_to_json(a));
    CHECK(b.kv_heads() == 2);
    CHECK(b.head_dim() == 6);
    CHECK(b.attention_bias);
    CHECK(b.rope.scaling == RopeScaling::Llama3);
    CHECK(b.rope.high_freq_factor == 4.0);
}

TEST_CASE("qwen2 and qwen3 are the Llama family with their own biases, norms and head_dim default") {
    const std::string body = R"("vocab_size": 10, "max_position_embeddings": 8, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2)";
    ModelConfig q2 = parse_config("{\"model_type\": \"qwen2\", " + body + "}", "c");
    CHECK(q2.family == Family::Llama);
    CHECK(q2.attention_bias);   // Qwen2Attention: q, k, v biases always
    CHECK_FALSE(q2.o_bias);     // o never
    CHECK_FALSE(q2.qk_norm);
    CHECK(q2.head_dim() == 2);
    ModelConfig q3 = parse_config("{\"model_type\": \"qwen3\", " + body + "}", "c");
    CHECK(q3.qk_norm);
    CHECK(q3.head_dim() == 128);  // Qwen3Config's default, not hidden_size / heads
    CHECK_FALSE(q3.attention_bias);
    CHECK(parse_config(config_to_json(q3), "c").head_dim() == 128);
    CHECK(config_to_json(parse_config(config_to_json(q2), "c")) == config_to_json(q2));
}

// Which layers slide, per family, as Hugging Face's config classes decide it (values worked out by hand
// from Qwen2Config.__post_init__, MistralModel's mask choice and Gemma3TextConfig's pattern).
TEST_CASE("per-layer sliding windows follow each family's rule, or layer_types when given") {
    const std::string body = R"("vocab_size": 10, "max_position_embeddings": 8, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2)";
    auto windows = [&](const std::string& keys) { return parse_config("{" + keys + ", " + body + "}", "c").layer_window; };
    using W = std::vector<int64_t>;
    // Qwen2 / Qwen3: sliding_window counts only with use_sliding_window; layers il >= max_window_layers slide.
    CHECK(windows(R"("model_type": "qwen2", "sliding_window": 3, "max_window_layers": 1)") == W{0, 0, 0, 0});
    CHECK(windows(R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 3, "max_window_layers": 1)") ==
          W{0, 3, 3, 3});
    CHECK(windows(R"("model_type": "qwen3", "use_sliding_window": true, "max_window_layers": 2)") == W{0, 0, 4096, 4096});
    CHECK(windows(R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": null)") == W{0, 0, 0, 0});
    CHECK(windows(R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 3,
                     "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention"])") ==
          W{3, 0, 0, 3});
    // Mistral: every layer when sliding_window is set; MistralConfig's default is 4096; null = none.
    CHECK(windows(R"("model_type": "mistral", "sliding_window": 5)") == W{5, 5, 5, 5});
    CHECK(windows(R"("model_type": "mistral")") == W{4096, 4096, 4096, 4096});
    CHECK(windows(R"("model_type": "mistral", "sliding_window": null)") == W{0, 0, 0, 0});
    CHECK_FALSE(parse_config(R"({"model_type": "mistral", "sliding_window": null, )" + body + "}", "c").has_sliding_layers());
    // Gemma 3: layer il is full when (il + 1) % sliding_window_pattern == 0 (default 6).
    CHECK(windows(R"("model_type": "gemma3_text", "sliding_window": 2, "sliding_window_pattern": 2)") == W{2, 0, 2, 0});
    CHECK(windows(R"("model_type": "gemma3_text", "sliding_window": 2)") == W{2, 2, 2, 2});
    CHECK(windows(R"("model_type": "gemma3_text", "layer_types": ["full_attention", "sliding_attention",
                     "sliding_attention", "full_attention"])") == W{0, 4096, 4096, 0});
    for (const std::string keys : {R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 3, "max_window_layers": 1)",
                                   R"("model_type": "mistral", "sliding_window": 5)",
                                   R"("model_type": "gemma3_text", "sliding_window": 2, "sliding_window_pattern": 2)"}) {
        const ModelConfig c = parse_config(std::string("{").append(keys).append(", ").append(body).append("}"), "c");
        CHECK(parse_config(config_to_json(c), "c").layer_window == c.layer_window);
        CHECK(config_to_json(parse_config(config_to_json(c), "c")) == config_to_json(c));
    }
    CHECK(parse_config(R"({"model_type": "gemma3_text", "sliding_window": 2, "sliding_window_pattern": 2, )" + body + "}", "c")
              .describe_windows() == "layers 0, 2 slide a window of 2; layers 1, 3 attend to every position");
}

TEST_CASE("bad sliding windows and layer_types are one-line errors") {
    const std::string body = R"("vocab_size": 10, "max_position_embeddings": 8, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)";
    auto error = [&](const std::string& keys) { return load_error("{" + keys + ", " + body + "}"); };
    CHECK_THAT(error(R"("model_type": "mistral", "sliding_window": 0)"), Catch::Contains("sliding_window must be positive, found 0"));
    CHECK_THAT(error(R"("model_type": "gemma3_text", "sliding_window": -4)"), Catch::Contains("sliding_window must be positive"));
    CHECK_THAT(error(R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 0)"),
               Catch::Contains("sliding_window must be positive"));
    CHECK_THAT(error(R"("model_type": "gemma3_text", "layer_types": ["sliding_attention", "chunked_attention"])"),
               Catch::Contains("layer_types[1] is string \"chunked_attention\", not \"sliding_attention\" or \"full_attention\""));
    CHECK_THAT(error(R"("model_type": "gemma3_text", "layer_types": ["sliding_attention"])"),
               Catch::Contains("layer_types has 1 entries, num_hidden_layers is 2"));
    CHECK_THAT(error(R"("model_type": "qwen3", "use_sliding_window": true, "layer_types": "sliding_attention")"),
               Catch::Contains("layer_types must be a list"));
    CHECK_THAT(error(R"("model_type": "gemma3_text", "rope_parameters": {"full_attention": {"rope_theta": 1e6}})"),
               Catch::Contains("rope_parameters is not read yet"));
    CHECK_THAT(error(R"("model_type": "gemma3_text", "use_bidirectional_attention": true)"),
               Catch::Contains("use_bidirectional_attention true is not supported"));
    CHECK_THAT(error(R"("model_type": "gemma3_text", "final_logit_softcapping": 0)"),
               Catch::Contains("final_logit_softcapping must be a finite number from 0.01 to 1e+06"));
}

// Gemma3TextConfig's defaults and the keys only Gemma 3 has.
TEST_CASE("gemma3_text reads Gemma 3's keys and defaults") {
    const std::string body = R"("vocab_size": 10, "max_position_embeddings": 8, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1)";
    ModelConfig g = parse_config(R"({"model_type": "gemma3_text", )" + body + "}", "c");
    CHECK(g.family == Family::Llama);
    CHECK(g.head_dim() == 256);                    // Gemma3TextConfig's default
    CHECK(g.activation == Activation::GeluTanh);   // hidden_activation default gelu_pytorch_tanh
    CHECK(g.tie_word_embeddings);
    CHECK(g.qk_norm);
    CHECK(g.norm_plus_one);
    CHECK(g.sandwich_norm);
    CHECK(g.query_pre_attn_scalar == 256.0);
    CHECK(g.attention_scale() == float(1.0 / 16.0));
    CHECK(g.local_rope);
    CHECK(g.local_rope_theta == 10000.0);
    CHECK(g.final_logit_softcap == 0.0);
    CHECK(g.embedding_scale == double(float(std::sqrt(8.0))));
    CHECK(g.layer_window == std::vector<int64_t>{4096, 4096, 4096, 4096, 4096, 0});
    ModelConfig h = parse_config(R"({"model_type": "gemma3_text", "hidden_activation": "silu", "query_pre_attn_scalar": 144,
        "rope_local_base_freq": 500.0, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
        "tie_word_embeddings": false, "head_dim": 12, )" + body + "}", "c");
    CHECK(h.activation == Activation::Silu);
    CHECK(h.attention_scale() == float(1.0 / 12.0));
    CHECK(h.local_rope_theta == 500.0);
    CHECK(h.final_logit_softcap == 30.0);
    CHECK_FALSE(h.tie_word_embeddings);
    const ModelConfig back = parse_config(config_to_json(h), "c");
    CHECK(back.final_logit_softcap == 30.0);
    CHECK(back.local_rope_theta == 500.0);
    CHECK(back.attention_scale() == h.attention_scale());
    CHECK(back.activation == Activation::Silu);
    // Llama keeps head_dim^-0.5
    CHECK(parse_config(R"({"model_type": "llama", )" + body + "}", "c").attention_scale() == 1.0f / std::sqrt(2.0f));
}

// Issue 43: the Model panel's chips are the architecture lines' labels; a null rope_scaling is not a bare
// "null" chip, and every view names the norm through norm_form().
TEST_CASE("architecture labels say what a null rope_scaling means, and norm_form names each family's norm") {
    const std::string body = R"("vocab_size": 10, "max_position_embeddings": 8, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1)";
    const ModelConfig g = parse_config(R"({"model_type": "gemma3_text", "rope_scaling": null, )" + body + "}", "c");
    const ModelConfig l = parse_config(R"({"model_type": "llama", )" + body + "}", "c");
    for (const ModelConfig* c : {&g, &l})
        for (const ArchLine& line : architecture(*c)) {
            INFO(line.key);
            CHECK(line.label != "null");
            if (std::string(line.key) == "rope_scaling") {
                CHECK(line.value == "null");
                CHECK(line.label == "RoPE unscaled");
            }
        }
    CHECK(g.norm_form() == "RMSNorm times (1 + weight)");
    CHECK(l.norm_form() == "RMSNorm times the weight");
    CHECK(parse_config(kGpt2Config, "c").norm_form() == "LayerNorm");
}
