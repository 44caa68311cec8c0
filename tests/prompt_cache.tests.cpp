// Prompt cache files: round trip, the documented byte layout, logits after a restore, partial matches,
// windows, every kind of damage and mismatch, and failed writes.
//
// How the expectations are made: rows written are compared with the cache's own rows (a round trip must
// be exact); the byte layout is checked by a reader written here from the header's format table; logits
// after a restore are compared bit for bit with forward() run over the same chunks without a file, and
// within 1e-4 with kvtest::reference_forward (double precision, shares no code with core/). Damaged files
// are made by truncating or flipping bytes of a good one; the few mismatches that need a valid checksum
// (token ids, a header that lies) recompute it with Hash64, the one place the test uses the code under test
// to build input, never to make an expected value.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "base/errors.h"
#include "forward/model.h"
#include "model/random_model.h"
#include "run/prompt_cache.h"
#include "test_models.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}
// Removed first: ext4 flushes a file truncated and rewritten on close, which costs seconds over thousands.
void write_bytes(const fs::path& p, const std::string& s) {
    fs::remove(p);
    std::ofstream(p, std::ios::binary) << s;
}

// The fixture model (fixture_config, seed 1), written once per process.
struct Fixture {
    kvtest::FixtureModel fm;
    std::shared_ptr<const Model> model;
    ModelFingerprint fp;
};
const Fixture& fixture() {
    static const Fixture f = [] {
        Fixture x;
        x.fm = kvtest::write_fixture(kvtest::work_dir("prompt_cache") / "model", {});
        x.model = Model::load(x.fm.dir.string());
        x.fp = model_fingerprint(*x.model);
        return x;
    }();
    return f;
}

// Runs `tokens` through forward() in the given chunk sizes; returns the last chunk's logits. (V)
std::vector<float> run(const Model& m, KvCache& cache, std::span<const TokenId> tokens, int64_t chunk) {
    const ModelConfig& c = m.config();
    Workspace ws(c, chunk, 1, cache.capacity());
    std::vector<float> logits(size_t(c.n_vocab));
    for (size_t p = 0; p < tokens.size(); p += size_t(chunk)) {
        Chunk ch;
        ch.cache = &cache;
        ch.tokens = tokens.data() + p;
        ch.n_tokens = std::min<int64_t>(chunk, int64_t(tokens.size() - p));
        ch.logits = logits.data();
        forward(m, std::span<Chunk>(&ch, 1), ws);
    }
    return logits;
}

// A file made from `tokens` run through the fixture in one chunk.
fs::path make_file(const std::string& name, const std::vector<TokenId>& tokens) {
    const Fixture& f = fixture();
    KvCache cache = f.model->make_cache(f.fm.config.n_ctx, 0);
    run(*f.model, cache, tokens, int64_t(tokens.size()));
    const fs::path path = kvtest::work_dir("prompt_cache") / name;
    write_prompt_cache(path.string(), f.fp, tokens, cache);
    return path;
}

std::string load_error(const fs::path& path, const ModelFingerprint& fp) {
    try {
        read_prompt_cache(path.string(), fp);
    } catch (const LoadError& e) {
        return e.what();
    }
    return "";
}

// This process's prompt-cache temporary files in dir (the writer names them NAME.tmp-PID-N). Other test
// processes run in parallel (ctest -j) and write fixtures next to ours: theirs are not ours to count.
int n_temp_files(const fs::path& dir) {
    const std::string mine = ".tmp-" + std::to_string(::getpid()) + "-";
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(mine) != std::string::npos;
    return n;
}

// Offsets of the header fields, from the format table in prompt_cache.h.
struct Layout {
    size_t dims = 0, tokens = 0, k = 0, v = 0, checksum = 0, size = 0;
    int64_t L = 0, H = 0, D = 0, N = 0;
};
Layout parse_layout(const std::string& b) {
    Layout l;
    size_t at = 12;
    for (int i = 0; i < 4; ++i) {  // config text, weight format, kernels, KV format
        uint32_t n;
        std::memcpy(&n, b.data() + at, 4);
        at += 4 + n;
    }
    at += 8;  // weights hash
    l.dims = at;
    int64_t d[4];
    std::memcpy(d, b.data() + at, 32);
    l.L = d[0], l.H = d[1], l.D = d[2], l.N = d[3];
    l.tokens = at + 32;
    l.k = l.tokens + size_t(l.N) * 4;
    l.v = l.k + size_t(l.L * l.H * l.N * l.D) * 4;
    l.checksum = l.v + size_t(l.L * l.H * l.N * l.D) * 4;
    l.size = l.checksum + 8;
    return l;
}
void fix_checksum(std::string& b) {
    const uint64_t h = Hash64::of(b.data(), b.size() - 8);
    std::memcpy(b.data() + b.size() - 8, &h, 8);
}

}  // namespace

TEST_CASE("Hash64: split-independent, sensitive to every bit and to length") {
    std::mt19937 rng(7);
    std::vector<unsigned char> data(1000);
    for (auto& x : data) x = static_cast<unsigned char>(rng());
    const uint64_t whole = Hash64::of(data.data(), data.size());
    for (int trial = 0; trial < 200; ++trial) {
        Hash64 h;
        size_t at = 0;
        while (at < data.size()) {
            const size_t n = std::min(data.size() - at, size_t(rng() % 70));
            h.update(data.data() + at, n);
            at += n;
        }
        REQUIRE(h.digest() == whole);
    }
    std::set<uint64_t> seen{whole};
    for (size_t bit = 0; bit < 8 * 100; ++bit) {
        std::vector<unsigned char> d(data.begin(), data.begin() + 100);
        d[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
        seen.insert(Hash64::of(d.data(), d.size()));
    }
    const std::vector<unsigned char> zeros(100, 0);
    for (size_t n = 0; n <= 100; ++n) seen.insert(Hash64::of(zeros.data(), n));
    CHECK(seen.size() == 1 + 800 + 101);
}

TEST_CASE("prompt cache: round trip is bit-exact and the bytes follow the documented layout") {
    const Fixture& f = fixture();
    const std::vector<TokenId> tokens = kvtest::random_tokens(11, 13, f.fm.config.n_vocab);
    KvCache cache = f.model->make_cache(f.fm.config.n_ctx, 0);
    run(*f.model, cache, tokens, 5);
    const fs::path path = kvtest::work_dir("prompt_cache") / "roundtrip.kvp";
    write_prompt_cache(path.string(), f.fp, tokens, cache);

    const PromptCache pc = read_prompt_cache(path.string(), f.fp);
    const int64_t L = f.fm.config.n_layer, H = f.fm.config.n_head, D = f.fm.config.head_dim(), N = 13;
    REQUIRE(pc.tokens == tokens);
    REQUIRE((pc.n_layer == L && pc.n_head == H && pc.head_dim == D));
    const std::string b = read_bytes(path);
    const Layout l = parse_layout(b);
    REQUIRE(b.substr(0, 8) == "KVPROMPT");
    uint32_t version;
    std::memcpy(&version, b.data() + 8, 4);
    CHECK(version == 1);
    uint32_t n_config;
    std::memcpy(&n_config, b.data() + 12, 4);
    CHECK(b.substr(16, n_config) == config_to_json(f.fm.config));
    REQUIRE((l.L == L && l.H == H && l.D == D && l.N == N));
    REQUIRE(l.size == b.size());
    for (int64_t il = 0; il < L; ++il)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t p = 0; p < N; ++p) {
                const size_t row = size_t(((il * H + h) * N + p) * D) * 4;
                INFO("layer " << il << " head " << h << " position " << p);
                const KvRows r = cache.rows(il, h);
                REQUIRE(std::memcmp(pc.key(il, h, p), r.key<float>(p), size_t(D) * 4) == 0);
                REQUIRE(std::memcmp(pc.value(il, h, p), r.value<float>(p), size_t(D) * 4) == 0);
                REQUIRE(std::memcmp(b.data() + l.k + row, r.key<float>(p), size_t(D) * 4) == 0);
                REQUIRE(std::memcmp(b.data() + l.v + row, r.value<float>(p), size_t(D) * 4) == 0);
            }
    CHECK(n_temp_files(path.parent_path()) == 0);
}

TEST_CASE("prompt cache: a restored prefix gives the logits of computing it") {
    const Fixture& f = fixture();
    const ModelConfig& c = f.fm.config;
    const int64_t n_cached = GENERATE(1, 4, 9, 15);
    const int64_t chunk = GENERATE(1, 3, 32);
    // The file holds 15 tokens; the prompt shares its first n_cached and then goes elsewhere.
    const std::vector<TokenId> file_tokens = kvtest::random_tokens(21, 15, c.n_vocab);
    std::vector<TokenId> prompt(file_tokens.begin(), file_tokens.begin() + n_cached);
    for (TokenId t : kvtest::random_tokens(22, 20 - n_cached, c.n_vocab)) prompt.push_back(t);
    if (n_cached < 15 && prompt[size_t(n_cached)] == file_tokens[size_t(n_cached)])
        prompt[size_t(n_cached)] = (prompt[size_t(n_cached)] + 1) % TokenId(c.n_vocab);
    const PromptCache pc = read_prompt_cache(make_file("restore.kvp", file_tokens).string(), f.fp);

    KvCache restored = f.model->make_cache(c.n_ctx, 0);
    const int64_t n = matching_prefix(pc, prompt, restored);
    REQUIRE(n == n_cached);
    restore_prompt_cache(pc, n, restored);
    REQUIRE(restored.next_position() == n);
    const std::vector<float> got = run(*f.model, restored, std::span(prompt).subspan(size_t(n)), chunk);

    // The same chunks without a file: prefix in one chunk (as the file was made), then the rest.
    KvCache plain = f.model->make_cache(c.n_ctx, 0);
    run(*f.model, plain, std::span(prompt).first(size_t(n)), n);
    const std::vector<float> want = run(*f.model, plain, std::span(prompt).subspan(size_t(n)), chunk);
    INFO(kvtest::first_mismatch(got, want));
    REQUIRE(kvtest::first_mismatch(got, want).empty());

    const kvtest::Reference ref = kvtest::reference_forward(f.fm, prompt, 0);
    const auto last = ref.logits.row(ref.logits.rows() - 1);
    const double tol = 1e-4 * std::max(1.0, last.cwiseAbs().maxCoeff());
    for (int64_t i = 0; i < c.n_vocab; ++i) REQUIRE(std::abs(double(got[size_t(i)]) - last(i)) < tol);
}

TEST_CASE("prompt cache: matching_prefix counts the common prefix, keeps the last prompt token, obeys windows") {
    const Fixture& f = fixture();
    PromptCache pc;
    pc.tokens = {5, 6, 7, 8};
    const KvCache no_window = f.model->make_cache(32, 0);
    using V = std::vector<TokenId>;
    CHECK(matching_prefix(pc, V{5, 6, 7, 8, 9, 10}, no_window) == 4);
    CHECK(matching_prefix(pc, V{5, 6, 7, 8}, no_window) == 3);  // the last token's logits are needed
    CHECK(matching_prefix(pc, V{5, 6, 1, 8, 9}, no_window) == 2);
    CHECK(matching_prefix(pc, V{1, 6, 7, 8, 9}, no_window) == 0);
    CHECK(matching_prefix(pc, V{5}, no_window) == 0);
    CHECK(matching_prefix(pc, V{}, no_window) == 0);
    CHECK(matching_prefix(pc, V{5, 6, 7, 8, 9}, f.model->make_cache(8, 3)) == 2);            // W - 1
    CHECK(matching_prefix(pc, V{5, 6, 7, 8, 9}, KvCache(2, 3, 8, 8, 2, 1)) == 2);           // W + S - 1
    CHECK(matching_prefix(pc, V{5, 6, 7, 8, 9}, KvCache(2, 3, 8, 8, 8, 0)) == 4);
}

TEST_CASE("prompt cache: a window run uses rows made without one, below its window") {
    const Fixture& f = fixture();
    const ModelConfig& c = f.fm.config;
    const int64_t W = 6;
    const std::vector<TokenId> prompt = kvtest::random_tokens(31, 14, c.n_vocab);
    const PromptCache pc = read_prompt_cache(make_file("window.kvp", prompt).string(), f.fp);

    KvCache restored = f.model->make_cache(W + 2, W);
    const int64_t n = matching_prefix(pc, prompt, restored);
    REQUIRE(n == W - 1);
    restore_prompt_cache(pc, n, restored);
    const std::vector<float> got = run(*f.model, restored, std::span(prompt).subspan(size_t(n)), 3);
    KvCache plain = f.model->make_cache(W + 2, W);
    const std::vector<float> want = run(*f.model, plain, prompt, 3);
    INFO(kvtest::first_mismatch(got, want));
    REQUIRE(kvtest::first_mismatch(got, want).empty());
    const kvtest::Reference ref = kvtest::reference_forward(f.fm, prompt, W);
    const double tol = 1e-4 * std::max(1.0, ref.logits.row(13).cwiseAbs().maxCoeff());
    for (int64_t i = 0; i < c.n_vocab; ++i) REQUIRE(std::abs(double(got[size_t(i)]) - ref.logits(13, i)) < tol);

    // Writing from a window cache: fine while every query saw everything, refused after.
    KvCache small = f.model->make_cache(W + 2, W);
    run(*f.model, small, std::span(prompt).first(W - 1), 2);
    const fs::path path = kvtest::work_dir("prompt_cache") / "window-write.kvp";
    CHECK_NOTHROW(write_prompt_cache(path.string(), f.fp, std::span(prompt).first(W - 1), small));
    run(*f.model, small, std::span(prompt).subspan(W - 1, 1), 1);
    CHECK_THROWS_AS(write_prompt_cache(path.string(), f.fp, std::span(prompt).first(W), small), UsageError);
    KvCache fresh = f.model->make_cache(W + 2, W);
    CHECK_THROWS_AS(restore_prompt_cache(pc, W, fresh), UsageError);
    CHECK(fresh.next_position() == 0);
}

TEST_CASE("prompt cache: misuse is a UsageError and changes nothing") {
    const Fixture& f = fixture();
    const ModelConfig& c = f.fm.config;
    const std::vector<TokenId> tokens = kvtest::random_tokens(41, 6, c.n_vocab);
    const PromptCache pc = read_prompt_cache(make_file("misuse.kvp", tokens).string(), f.fp);
    KvCache cache = f.model->make_cache(c.n_ctx, 0);
    run(*f.model, cache, tokens, 6);
    const fs::path path = kvtest::work_dir("prompt_cache") / "misuse-out.kvp";
    fs::remove(path);
    CHECK_THROWS_AS(write_prompt_cache(path.string(), f.fp, std::vector<TokenId>{}, cache), UsageError);
    CHECK_THROWS_AS(write_prompt_cache(path.string(), f.fp, kvtest::random_tokens(41, 7, c.n_vocab), cache), UsageError);
    std::vector<TokenId> bad = tokens;
    bad[2] = TokenId(c.n_vocab);
    CHECK_THROWS_AS(write_prompt_cache(path.string(), f.fp, bad, cache), UsageError);
    CHECK_THROWS_AS(write_prompt_cache(path.string(), f.fp, tokens, KvCache(2, 3, 4, 32, 0)), UsageError);
    CHECK(!fs::exists(path));

    CHECK_THROWS_AS(restore_prompt_cache(pc, 3, cache), UsageError);  // not empty
    KvCache empty = f.model->make_cache(c.n_ctx, 0);
    CHECK_THROWS_AS(restore_prompt_cache(pc, 7, empty), UsageError);
    CHECK_THROWS_AS(restore_prompt_cache(pc, -1, empty), UsageError);
    KvCache other(2, 3, 4, 32, 0);
    CHECK_THROWS_AS(restore_prompt_cache(pc, 2, other), UsageError);
    KvCache tiny = f.model->make_cache(4, 0);
    CHECK_THROWS_AS(restore_prompt_cache(pc, 5, tiny), UsageError);
    CHECK(tiny.next_position() == 0);
    CHECK(empty.next_position() == 0);
}

TEST_CASE("prompt cache: every truncation and every flipped byte is a one-line LoadError, the file untouched") {
    const Fixture& f = fixture();
    const fs::path good = make_file("damage-good.kvp", kvtest::random_tokens(51, 9, f.fm.config.n_vocab));
    const std::string bytes = read_bytes(good);
    const fs::path bad = kvtest::work_dir("prompt_cache") / "damage-bad.kvp";
    int n_checked = 0;
    auto refused = [&](const std::string& b, const char* expect) {
        write_bytes(bad, b);
        const std::string e = load_error(bad, f.fp);
        ++n_checked;
        if (e.empty() || e.find('\n') != std::string::npos || e.find(expect) == std::string::npos) {
            FAIL_CHECK("size " << b.size() << ": got \"" << e << "\", wanted one line with \"" << expect << "\"");
            return false;
        }
        return read_bytes(bad) == b;
    };
    for (size_t n = 0; n < bytes.size(); ++n) {
        REQUIRE(refused(bytes.substr(0, n), n == 0 ? "is empty" : "truncated"));
    }
    REQUIRE(refused(bytes + '\0', "after its end"));
    for (size_t at = 0; at < bytes.size(); ++at)
        for (unsigned char mask : {0x01, 0x80, 0xFF}) {
            std::string b = bytes;
            b[at] = char(static_cast<unsigned char>(b[at]) ^ mask);
            // Where the flip lands decides the message; each is one of the refusals, never a crash.
            const char* expect = at < 8 ? "no KVPROMPT magic" : at < 12 ? "version" : "";
            REQUIRE(refused(b, expect));
        }
    INFO(n_checked << " damaged files");
    CHECK(n_checked == int(bytes.size() * 4 + 1));
    CHECK(read_bytes(good) == bytes);
    CHECK(read_prompt_cache(good.string(), f.fp).tokens.size() == 9);
}

TEST_CASE("prompt cache: each refusal names its cause") {
    const Fixture& f = fixture();
    const ModelConfig& c = f.fm.config;
    const std::vector<TokenId> tokens = kvtest::random_tokens(61, 7, c.n_vocab);
    const fs::path good = make_file("causes-good.kvp", tokens);
    const std::string bytes = read_bytes(good);
    const Layout l = parse_layout(bytes);
    const fs::path bad = kvtest::work_dir("prompt_cache") / "causes-bad.kvp";
    auto error_of = [&](std::string b, bool fix) {
        if (fix) fix_checksum(b);
        write_bytes(bad, b);
        return load_error(bad, f.fp);
    };

    CHECK_THAT(load_error(kvtest::work_dir("prompt_cache") / "no-such.kvp", f.fp), Catch::Contains("cannot open"));
    CHECK_THAT(load_error(f.fm.dir / "config.json", f.fp), Catch::Contains("not a kvscope prompt cache"));
    std::string v2 = bytes;
    v2[8] = 2;
    CHECK_THAT(error_of(v2, false), Catch::Contains("format version 2, this kvscope reads version 1"));
    std::string payload = bytes;
    payload[l.k + 5] ^= 0x10;
    CHECK_THAT(error_of(payload, false), Catch::Contains("checksum"));
    std::string token = bytes;
    const TokenId outside = TokenId(c.n_vocab);
    std::memcpy(token.data() + l.tokens + 8, &outside, 4);
    CHECK_THAT(error_of(token, true), Catch::Contains("token 2 has id 53, outside the vocabulary [0, 53)"));
    // A header that lies about sizes is caught against the real file size before anything is allocated.
    for (const int64_t lie : {int64_t(1) << 24, int64_t(1) << 40, int64_t(-1), int64_t(0)}) {
        for (int field = 0; field < 4; ++field) {
            std::string b = bytes;
            std::memcpy(b.data() + l.dims + 8 * size_t(field), &lie, 8);
            INFO("field " << field << " = " << lie);
            CHECK_THAT(error_of(b, true), Catch::Contains("truncated") || Catch::Contains("impossible"));
        }
    }
    std::string long_config = bytes;
    const uint32_t huge = 0xFFFFFFF0u;
    std::memcpy(long_config.data() + 12, &huge, 4);
    CHECK_THAT(error_of(long_config, true), Catch::Contains("claims 4294967280 bytes"));

    // A file whose header matches but which holds more positions than the model has.
    ModelFingerprint short_ctx = f.fp;
    short_ctx.config.n_ctx = 5;
    CHECK_THAT(load_error(good, short_ctx), Catch::Contains("holds 7 positions, the model has only 5"));
    ModelFingerprint other_kernels = f.fp;
    other_kernels.kernels = "elsewhere";
    CHECK_THAT(load_error(good, other_kernels), Catch::Contains("kernels"));
}

TEST_CASE("prompt cache: another model, config or weight format is refused") {
    const Fixture& f = fixture();
    const fs::path good = make_file("models-good.kvp", kvtest::random_tokens(71, 5, f.fm.config.n_vocab));
    const std::string before = read_bytes(good);

    kvtest::FixtureSpec other_weights;
    other_weights.seed = 2;
    kvtest::write_fixture(kvtest::work_dir("prompt_cache") / "model-seed2", other_weights);
    const ModelFingerprint fp2 = model_fingerprint(*Model::load((kvtest::work_dir("prompt_cache") / "model-seed2").string()));
    CHECK(fp2.config_json == f.fp.config_json);
    CHECK_THAT(load_error(good, fp2), Catch::Contains("was made by another model: the weights differ"));

    // Same weights (same seed and shapes), another activation: only config.json differs.
    kvtest::FixtureSpec other_config;
    other_config.config.activation = Activation::Relu;
    kvtest::write_fixture(kvtest::work_dir("prompt_cache") / "model-relu", other_config);
    const ModelFingerprint fp3 = model_fingerprint(*Model::load((kvtest::work_dir("prompt_cache") / "model-relu").string()));
    CHECK(fp3.weights_hash == f.fp.weights_hash);
    CHECK_THAT(load_error(good, fp3),
               Catch::Contains("config.json differs: \"activation_function\": \"gelu_new\" in the file, "
                               "\"activation_function\": \"relu\" here"));

    const ModelFingerprint fp_bf16 = model_fingerprint(*Model::load(f.fm.dir.string(), WeightFormat::BF16));
    CHECK_THAT(load_error(good, fp_bf16), Catch::Contains("was made with f32 weights, this run uses bf16"));
    CHECK(read_bytes(good) == before);
}

TEST_CASE("prompt cache: a failed write leaves no temporary file and the old file as it was") {
    const Fixture& f = fixture();
    const ModelConfig& c = f.fm.config;
    const std::vector<TokenId> tokens = kvtest::random_tokens(81, 12, c.n_vocab);
    KvCache cache = f.model->make_cache(c.n_ctx, 0);
    run(*f.model, cache, tokens, 12);
    const fs::path dir = kvtest::work_dir("prompt_cache") / "failed-writes";
    fs::remove_all(dir);
    fs::create_directories(dir);

    SECTION("no such folder") {
        CHECK_THROWS_AS(write_prompt_cache((dir / "missing" / "p.kvp").string(), f.fp, tokens, cache), LoadError);
        CHECK(!fs::exists(dir / "missing"));
    }
    SECTION("FILE is a folder: the rename fails after the data was written") {
        fs::create_directories(dir / "p.kvp" / "inside");
        CHECK_THROWS_AS(write_prompt_cache((dir / "p.kvp").string(), f.fp, tokens, cache), LoadError);
        CHECK(fs::is_directory(dir / "p.kvp" / "inside"));
    }
    SECTION("the disk fills up mid-write (RLIMIT_FSIZE): the old FILE stays as it was") {
        const fs::path path = dir / "p.kvp";
        write_prompt_cache(path.string(), f.fp, std::span(tokens).first(2), cache);
        const std::string before = read_bytes(path);
        rlimit old{};
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
        rlimit small = old;
        small.rlim_cur = 2000;  // the 2-token file fits, the 12-token one (about 5 kB) does not
        auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
        std::string error;
        try {
            write_prompt_cache(path.string(), f.fp, tokens, cache);
        } catch (const LoadError& e) {
            error = e.what();
        }
        ::setrlimit(RLIMIT_FSIZE, &old);
        std::signal(SIGXFSZ, old_handler);
        CHECK_THAT(error, Catch::Contains(path.string() + ": cannot write"));
        CHECK(before.size() < 2000);
        CHECK(read_bytes(path) == before);
        CHECK(read_prompt_cache(path.string(), f.fp).tokens.size() == 2);
    }
    CHECK(n_temp_files(dir) == 0);
}

TEST_CASE("prompt cache: writing over an existing file replaces it whole") {
    const Fixture& f = fixture();
    const ModelConfig& c = f.fm.config;
    const fs::path path = make_file("replace.kvp", kvtest::random_tokens(91, 10, c.n_vocab));
    const std::vector<TokenId> shorter = kvtest::random_tokens(92, 4, c.n_vocab);
    KvCache cache = f.model->make_cache(c.n_ctx, 0);
    run(*f.model, cache, shorter, 4);
    write_prompt_cache(path.string(), f.fp, shorter, cache);
    CHECK(read_prompt_cache(path.string(), f.fp).tokens == shorter);
    CHECK(n_temp_files(path.parent_path()) == 0);
}

// Measures what model_fingerprint costs on GPT-2 124M-sized weights (500 MB). Run by hand:
// prompt_cache_tests "[.bench]" -s
TEST_CASE("prompt cache: fingerprint cost on a 500 MB model", "[.bench]") {
    const fs::path dir = kvtest::work_dir("prompt_cache") / "gpt2-small-random";
    if (!fs::exists(dir / "model.safetensors")) write_random_model(dir.string(), gpt2_small_config(), 1);
    std::vector<unsigned char> buffer(size_t(500) << 20, 1);
    auto seconds = [](auto&& fn) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    uint64_t sink = 0;
    const double t_hash = seconds([&] { sink ^= Hash64::of(buffer.data(), buffer.size()); });
    const auto model = Model::load(dir.string());
    const double t_first = seconds([&] { sink ^= model_fingerprint(*model).weights_hash; });
    const double t_second = seconds([&] { sink ^= model_fingerprint(*model).weights_hash; });
    WARN("Hash64 over 500 MiB in memory: " << t_hash << " s (" << 500 / 1.048576 / t_hash / 1000 << " GB/s); "
         << "model_fingerprint, " << model->weights().file_bytes / 1e6 << " MB: first " << t_first << " s, again "
         << t_second << " s [" << sink % 2 << "]");
}

TEST_CASE("prompt cache: a bfloat16 KV cache round-trips, restores exactly, and is told apart from float32") {
    const Fixture& f = fixture();
    const ModelConfig& c = f.fm.config;
    const ModelFingerprint fp16 = model_fingerprint(*f.model, true);
    const std::vector<TokenId> prompt = kvtest::random_tokens(101, 12, c.n_vocab);
    auto bf16_cache = [&] { return KvCache(c.n_layer, c.n_head, c.head_dim(), c.n_ctx, 0, 0, true); };
    KvCache made = bf16_cache();
    run(*f.model, made, std::span(prompt).first(7), 7);
    const fs::path path = kvtest::work_dir("prompt_cache") / "bf16.kvp";
    CHECK_THROWS_AS(write_prompt_cache(path.string(), f.fp, std::span(prompt).first(7), made), UsageError);
    write_prompt_cache(path.string(), fp16, std::span(prompt).first(7), made);
    CHECK_THAT(load_error(path, f.fp), Catch::Contains("was made with a bf16 KV cache, this run's stores f32 rows"));
    const PromptCache pc = read_prompt_cache(path.string(), fp16);
    REQUIRE(pc.kv_format == "bf16");
    // Every stored value is a bfloat16 widened exactly: its low 16 bits are zero.
    for (float x : pc.k) {
        uint32_t b;
        std::memcpy(&b, &x, 4);
        REQUIRE((b & 0xFFFFu) == 0);
    }

    KvCache f32_cache = f.model->make_cache(c.n_ctx, 0);
    CHECK_THROWS_AS(restore_prompt_cache(pc, 7, f32_cache), UsageError);
    KvCache restored = bf16_cache();
    restore_prompt_cache(pc, matching_prefix(pc, prompt, restored), restored);
    REQUIRE(restored.next_position() == 7);
    const std::vector<float> got = run(*f.model, restored, std::span(prompt).subspan(7), 5);
    const std::vector<float> want = run(*f.model, made, std::span(prompt).subspan(7), 5);
    INFO(kvtest::first_mismatch(got, want));
    REQUIRE(kvtest::first_mismatch(got, want).empty());
}
