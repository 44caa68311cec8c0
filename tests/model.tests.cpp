// The forward pass against an independent reference (tests/test_models.h: dense double-precision Eigen
// over the whole sequence with an explicit, optionally banded, causal mask; written from the model
// description, sharing no code with core/). Fixture weights are seeded N(0, 0.2) values written with
// write_safetensors; the reference reads the exact values stored (after F16/BF16 rounding).
//
// Every option of the config is swept: a full product of the architectural switches (norm position x
// position embedding x activation x qkv bias x tied head = 48 models), with the remaining options
// (lm_head bias, final LN, custom n_inner, embedding scale, epsilon, dtype, "transformer." prefix,
// extra buffers, window) drawn per model from a seeded generator so each appears on and off many times.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <sstream>

#include "base/errors.h"
#include "base/thread_pool.h"
#include "forward/model.h"
#include "model/random_model.h"
#include "run/session.h"
#include "test_models.h"

using namespace kvscope;
using namespace kvtest;

namespace {

struct Variant {
    FixtureSpec spec;
    int64_t window = 0;
    int64_t chunk = 0;
    std::string text;
};

Variant variant(int index) {
    Variant v;
    ModelConfig& c = v.spec.config;
    c.norm_position = index % 2 ? NormPosition::Post : NormPosition::Pre;
    c.position_embedding = (index / 2) % 2 ? PositionEmbedding::Sinusoidal : PositionEmbedding::Learned;
    c.activation = Activation((index / 4) % 3);
    c.qkv_bias = (index / 12) % 2 == 0;
    c.tie_word_embeddings = (index / 24) % 2 == 0;

    std::mt19937 rng(uint32_t(1000 + index));
    auto coin = [&] { return (rng() & 1u) != 0; };
    c.lm_head_bias = coin();
    c.final_layer_norm = coin();
    if (coin()) c.n_inner = 40;
    c.embedding_scale = coin() ? 1.0 : 1.7;
    c.layer_norm_epsilon = coin() ? 1e-5 : 1e-3;
    const int d = int(rng() % 4);
    v.spec.mixed_dtypes = d == 3;
    v.spec.dtype = d == 3 ? Dtype::F32 : Dtype(d);
    v.spec.prefix = coin();
    v.spec.extra_buffers = coin();
    v.spec.seed = uint32_t(7 + index);
    static const int64_t windows[] = {0, 0, 1, 3, 6};
    v.window = windows[rng() % 5];
    v.chunk = int64_t(rng() % 5);  // 0 = whole prompt

    std::ostringstream s;
    s << "model " << index << ": " << to_string(c.norm_position) << "-LN, " << to_string(c.position_embedding)
      << ", " << to_string(c.activation) << ", qkv_bias " << c.qkv_bias << ", tied " << c.tie_word_embeddings
      << ", lm_head_bias " << c.lm_head_bias << ", final_ln " << c.final_layer_norm << ", n_inner " << c.n_inner
      << ", scale " << c.embedding_scale << ", eps " << c.layer_norm_epsilon << ", dtype "
      << (v.spec.mixed_dtypes ? "mixed" : to_string(v.spec.dtype)) << ", prefix " << v.spec.prefix
      << ", buffers " << v.spec.extra_buffers << ", window " << v.window << ", chunk " << v.chunk;
    v.text = s.str();
    return v;
}

// Logits the engine gives after each chunk of `sizes` (cycled), fed through forward() with its own cache.
// Returns (position of the chunk's last row, logits) pairs.
std::vector<std::pair<int64_t, std::vector<float>>> engine_logits(const Model& model, const std::vector<int32_t>& tokens,
                                                                  int64_t window, int64_t chunk_size, int64_t sinks = 0) {
    const ModelConfig& c = model.config();
    const int64_t T = int64_t(tokens.size());
    // The smallest ring that the window allows, so slots are reused as early as possible.
    const int64_t capacity = window > 0 ? std::min(T, window + chunk_size - 1 + sinks) : T;
    KvCache cache = model.make_cache(capacity, window, sinks);
    Workspace ws(c, chunk_size, 1, capacity);
    std::vector<std::pair<int64_t, std::vector<float>>> out;
    for (int64_t p = 0; p < T; p += chunk_size) {
        const int64_t n = std::min(chunk_size, T - p);
        std::vector<float> logits(size_t(c.n_vocab));
        Chunk ch;
        ch.cache = &cache;
        ch.tokens = tokens.data() + p;
        ch.n_tokens = n;
        ch.logits = logits.data();
        forward(model, std::span<Chunk>(&ch, 1), ws);
        out.push_back({p + n - 1, std::move(logits)});
    }
    return out;
}

void check_logits_row(const std::vector<float>& got, const MatD& ref_logits, int64_t row, const std::string& what) {
    const auto ref = ref_logits.row(row);
    const double tol = 1e-4 * std::max(1.0, ref.cwiseAbs().maxCoeff());
    for (int64_t i = 0; i < ref.size(); ++i) {
        if (std::abs(double(got[size_t(i)]) - ref(i)) > tol) {
            FAIL_CHECK(what << ": position " << row << ", logit " << i << ": engine " << got[size_t(i)]
                            << ", reference " << ref(i) << " (tolerance " << tol << ")");
            return;  // the first mismatch of a row says enough
        }
    }
}

// Greedy tokens must match exactly, up to the first step where the reference itself is nearly tied
// (a float run may then legitimately choose the other token); such steps are reported, not hidden.
void check_greedy(const std::vector<int32_t>& got, const GreedyRun& ref) {
    REQUIRE(got.size() == ref.tokens.size());
    for (size_t i = 0; i < got.size(); ++i) {
        if (ref.margins[i] < 1e-4) {
            WARN("reference top-2 margin " << ref.margins[i] << " at generated token " << i << "; stop comparing");
            return;
        }
        INFO("generated token " << i);
        REQUIRE(got[i] == ref.tokens[i]);
    }
}

}  // namespace

TEST_CASE("forward equals the reference for every architecture option", "[model][reference]") {
    const int index = GENERATE(range(0, 48));
    const Variant v = variant(index);
    INFO(v.text);
    const FixtureModel fm = write_fixture(work_dir("model") / ("variant_" + std::to_string(index)), v.spec);
    const auto model = Model::load(fm.dir.string());

    // The config went through config.json and back.
    const ModelConfig& c = model->config();
    CHECK(c.norm_position == v.spec.config.norm_position);
    CHECK(c.position_embedding == v.spec.config.position_embedding);
    CHECK(c.activation == v.spec.config.activation);
    CHECK(c.n_inner == v.spec.config.n_inner);
    CHECK(c.embedding_scale == v.spec.config.embedding_scale);

    const std::vector<int32_t> tokens = random_tokens(uint32_t(50 + index), 20, c.n_vocab);
    const Reference ref = reference_forward(fm, tokens, v.window);

    SECTION("every position, one token per step and in chunks of 1, 5 and 7") {
        std::map<int64_t, std::vector<float>> seen;  // position -> logits from the first chunking that ended there
        for (int64_t chunk : {1, 5, 7}) {
            for (const auto& [pos, logits] : engine_logits(*model, tokens, v.window, chunk)) {
                check_logits_row(logits, ref.logits, pos, "chunk size " + std::to_string(chunk));
                // And bit-identical to the same position reached with another chunk size (kernels.h).
                auto [it, fresh] = seen.emplace(pos, logits);
                if (!fresh) CHECK(first_mismatch(logits, it->second) == "");
            }
        }
    }
    SECTION("greedy generation through a Session, cached and uncached") {
        const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 6);
        const int64_t n_new = 14;
        const GreedyRun greedy = reference_greedy(fm, prompt, n_new, v.window);
        for (bool cached : {true, false}) {
            INFO("cache " << cached);
            SessionOptions o;
            o.window = v.window;
            o.prefill_chunk = v.chunk;
            o.max_new_tokens = n_new;
            o.use_cache = cached;
            o.record = false;
            Session s(model, o);
            s.set_prompt(prompt);
            while (s.next() != Session::Next::Done) s.step();
            check_greedy(s.parts().generated, greedy);
            // Each prediction's logits against the reference over the sequence actually generated.
            std::vector<int32_t> seq = prompt;
            seq.insert(seq.end(), s.parts().generated.begin(), s.parts().generated.end());
            const Reference full = reference_forward(fm, seq, v.window);
            for (size_t i = 0; i < s.trace().size(); ++i) {
                const StepRecord& r = s.trace()[i];
                if (r.prediction.logits.empty()) continue;
                check_logits_row(r.prediction.logits, full.logits, r.last_position(), "session step " + std::to_string(i));
            }
        }
    }
}

// Wider than the sweep's models so the kernels' blocked paths run: 40 rows in one chunk (6-row tiles
// plus a tail), 3C = 192 columns over several column blocks, F = 200 with a partial SIMD vector,
// D = 12 (a masked tail in every dot product), and V = 257 (a partial group in the lm_head kernel).
//
// The second model is wider than the kernels' column blocks (3C = 576 and F = 600 columns, V = 515
// rows of the lm_head, D = 32), run with 1 and 2 threads, with chunks on both sides of the
// few-rows/many-rows switch in matmul_kn.
TEST_CASE("forward equals the reference on wider models, in one chunk and token by token", "[model][reference]") {
    struct Shape {
        const char* name;
        int64_t V, P, C, H, F, L, T;
        float stddev;
    };
    const Shape shape = GENERATE(Shape{"wide", 257, 64, 48, 4, 200, 3, 40, 0.15f},
                                 Shape{"wider", 515, 32, 192, 6, 600, 1, 24, 0.08f});
    INFO(shape.name);
    FixtureSpec spec;
    spec.config.n_vocab = shape.V;
    spec.config.n_ctx = shape.P;
    spec.config.n_embd = shape.C;
    spec.config.n_head = shape.H;
    spec.config.n_inner = shape.F;
    spec.config.n_layer = shape.L;
    spec.seed = 99;
    spec.stddev = shape.stddev;
    const FixtureModel fm = write_fixture(work_dir("model") / shape.name, spec);
    const auto model = Model::load(fm.dir.string());
    const std::vector<int32_t> tokens = random_tokens(5, shape.T, spec.config.n_vocab);
    const int threads_before = ThreadPool::global().n_threads();
    for (int threads : {1, 2}) {
        ThreadPool::global().set_threads(threads);
        for (int64_t window : {0, 9}) {
            INFO("threads " << threads << ", window " << window);
            const Reference ref = reference_forward(fm, tokens, window);
            std::map<int64_t, std::vector<float>> seen;
            for (int64_t chunk : {shape.T, int64_t(13), int64_t(8), int64_t(3), int64_t(1)})
                for (const auto& [pos, logits] : engine_logits(*model, tokens, window, chunk)) {
                    check_logits_row(logits, ref.logits, pos, "chunk size " + std::to_string(chunk));
                    auto [it, fresh] = seen.emplace(pos, logits);
                    if (!fresh) CHECK(first_mismatch(logits, it->second) == "");
                }
        }
    }
    ThreadPool::global().set_threads(threads_before);
}

TEST_CASE("a grouped-query prefill's logits keep their bits whatever the chunks, windows and sinks", "[model]") {
    // Heads of size 64 sharing K/V heads, a prompt long enough that a prefill's rows are attended in blocks
    // (attend_rows): each position's logits must be those the same cache gives token by token.
    ModelConfig c = *bench_shape_config("smollm2-135m");
    c.n_vocab = 64, c.n_ctx = 128, c.n_embd = 384, c.n_inner = 128, c.n_layer = 2, c.n_head = 6, c.n_kv_head = 2;
    REQUIRE(c.head_dim() == 64);
    struct Case {
        const char* name;
        int64_t window, sinks;
        std::vector<int64_t> layer_window;
    };
    const Case cases[] = {{"causal", 0, 0, {}}, {"cache window 24", 24, 0, {}}, {"window 24, 4 sinks", 24, 4, {}},
                          {"layer windows 20, 0", 0, 0, {20, 0}}};
    const std::vector<int32_t> tokens = random_tokens(17, 75, c.n_vocab);
    const int threads_before = ThreadPool::global().n_threads();
    for (const Case& k : cases) {
        ModelConfig ck = c;
        ck.layer_window = k.layer_window;
        const std::string dir = kvscope::test::fresh_dir("model", std::string("gqa-") + std::to_string(&k - cases)).string();
        write_random_model(dir, ck, 3);
        const auto model = Model::load(dir);
        std::map<int64_t, std::vector<float>> seen;
        for (int threads : {1, 2})
            for (int64_t chunk : {int64_t(75), int64_t(40), int64_t(1)}) {
                INFO(k.name << ", threads " << threads << ", chunk " << chunk);
                ThreadPool::global().set_threads(threads);
                for (const auto& [pos, logits] : engine_logits(*model, tokens, k.window, chunk, k.sinks)) {
                    REQUIRE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
                    auto [it, fresh] = seen.emplace(pos, logits);
                    if (!fresh) CHECK(first_mismatch(logits, it->second) == "");
                }
            }
    }
    ThreadPool::global().set_threads(threads_before);
}

TEST_CASE("forward refuses chunks that cannot run, before touching the cache", "[model]") {
    const FixtureModel fm = write_fixture(work_dir("model") / "plain", FixtureSpec{});
    const auto model = Model::load(fm.dir.string());
    const ModelConfig& c = model->config();
    Workspace ws(c, 40, 1, 40);
    std::vector<int32_t> tokens = random_tokens(3, 8, c.n_vocab);
    std::vector<float> logits(size_t(c.n_vocab));

    auto run = [&](KvCache& cache, const std::vector<int32_t>& t) {
        Chunk ch;
        ch.cache = &cache;
        ch.tokens = t.data();
        ch.n_tokens = int64_t(t.size());
        ch.logits = logits.data();
        forward(*model, std::span<Chunk>(&ch, 1), ws);
    };
    SECTION("a token outside the vocabulary") {
        KvCache cache = model->make_cache(16, 0);
        tokens[5] = int32_t(c.n_vocab);
        CHECK_THROWS_AS(run(cache, tokens), UsageError);
        tokens[5] = -1;
        CHECK_THROWS_AS(run(cache, tokens), UsageError);
        CHECK(cache.next_position() == 0);
        CHECK(cache.slot_positions()[0] == -1);
    }
    SECTION("a chunk larger than the window's ring") {
        KvCache cache = model->make_cache(6, 4);  // a chunk of n needs 4 - 1 + n slots
        const std::vector<int32_t> three(tokens.begin(), tokens.begin() + 3);
        const std::vector<int32_t> four(tokens.begin(), tokens.begin() + 4);
        run(cache, three);  // positions 0..2: needs 3 slots
        run(cache, three);  // positions 3..5: oldest needed is 0, needs 6
        CHECK_THROWS_AS(run(cache, four), UsageError);  // 6..9 needs keys 3..9 = 7 slots
        CHECK(cache.next_position() == 6);
        run(cache, three);  // 6..8 needs 3..8 = 6 slots
        CHECK(cache.next_position() == 9);
    }
    SECTION("positions beyond n_positions") {
        KvCache cache = model->make_cache(c.n_ctx + 8, 0);
        std::vector<int32_t> many = random_tokens(4, c.n_ctx - 2, c.n_vocab);
        run(cache, many);
        CHECK_THROWS_AS(run(cache, {1, 2, 3}), UsageError);
        CHECK(cache.next_position() == c.n_ctx - 2);
        run(cache, {1, 2});
    }
}

namespace {

// Parameters of a Llama-family model from its sizes, as Hugging Face counts them.
int64_t llama_parameters(const ModelConfig& c) {
    const int64_t C = c.n_embd, F = c.n_inner, Q = c.q_width(), KV = c.kv_width();
    const int64_t per_layer = 2 * C + C * Q + 2 * C * KV + Q * C + 3 * C * F + (c.attention_bias ? Q + 2 * KV : 0);
    return c.n_vocab * C * (c.tie_word_embeddings ? 1 : 2) + c.n_layer * per_layer + C;
}

}  // namespace

TEST_CASE("bench shapes are the published models, and their random folders load with every tensor", "[model]") {
    // The model cards' counts: SmolLM2-135M 134,515,008 parameters; Qwen2.5-0.5B 494,032,768.
    const std::optional<ModelConfig> smol = bench_shape_config("smollm2-135m"), qwen = bench_shape_config("qwen2.5-0.5b");
    REQUIRE(smol);
    REQUIRE(qwen);
    CHECK(llama_parameters(*smol) == 134515008);
    CHECK(llama_parameters(*qwen) == 494032768);
    CHECK(smol->kv_heads() == 3);
    CHECK(qwen->kv_heads() == 2);
    CHECK_FALSE(bench_shape_config("gpt3"));
    for (const std::string& name : bench_shape_names()) {
        ModelConfig c = *bench_shape_config(name);
        CHECK(config_to_json(parse_config(config_to_json(c), name)) == config_to_json(c));
        if (c.family != Family::Llama) continue;
        c.n_vocab = 64;  // the real widths and head layout, fewer rows and layers
        c.n_layer = 2;
        const std::string dir = kvscope::test::fresh_dir("model", "bench-shape-" + name).string();
        write_random_model(dir, c, 5);
        const auto model = Model::load(dir);
        CHECK(model->weights().n_parameters == llama_parameters(c));
        Session s(model, SessionOptions{});
        s.set_prompt({1, 2, 3});
        s.step();
        REQUIRE(s.parts().logits.size() == 64);
        for (float v : s.parts().logits) REQUIRE(std::isfinite(v));
    }
}
