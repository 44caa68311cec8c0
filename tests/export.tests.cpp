// export: attention snapshots read back with the test's own .npy reader and stb_image, and compared with
// an independent attention computed here in double precision from the exported q.npy/k.npy (a plain
// loop over positions, the causal/window rule written from its definition, a max-shifted softmax).
// Goldens for the colour tables are published values: the viridis 5-colour palette (#440154, #3B528B,
// #21908C, #5DC863, #FDE725) and Moreland's cool-warm endpoints (59,76,192) / (180,4,38); lightness
// is checked with the CIE 1976 L* formula, not with the Oklab code under test.
#include <catch2/catch.hpp>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/errors.h"
#include "forward/model.h"
#include "io/json.h"
#include "io/json_write.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "png_file.h"
#include "report/colormap.h"
#include "report/export.h"
#include "run/session.h"
#include "text/tokenizer.h"
#include "scratch_dir.h"

using namespace kvscope;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using kvtest::Png;
using kvtest::read_png;

namespace {

fs::path work_dir(const std::string& name) {
    fs::path dir = kvscope::test::scratch_root() / "export" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    REQUIRE(in.good());
    return std::string(std::istreambuf_iterator<char>(in), {});
}

Json read_json(const fs::path& p) { return Json::parse(read_bytes(p)); }

// A minimal .npy (format 1.0) reader written from the NumPy format description.
struct Npy {
    std::string descr;
    std::vector<int64_t> shape;
    std::string data;  // raw little-endian bytes
    int64_t size() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
    float f32(int64_t i) const {
        float v;
        std::memcpy(&v, data.data() + i * 4, 4);
        return v;
    }
    uint8_t u8(int64_t i) const { return uint8_t(data[size_t(i)]); }
};

Npy read_npy(const fs::path& p) {
    const std::string bytes = read_bytes(p);
    REQUIRE(bytes.size() >= 10);
    REQUIRE(bytes.substr(0, 6) == "\x93NUMPY");
    REQUIRE(bytes[6] == 1);
    const size_t header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
    REQUIRE((10 + header_len) % 64 == 0);
    const std::string header = bytes.substr(10, header_len);
    Npy npy;
    const size_t d = header.find("'descr': '");
    REQUIRE(d != std::string::npos);
    npy.descr = header.substr(d + 10, header.find('\'', d + 10) - (d + 10));
    REQUIRE(header.find("'fortran_order': False") != std::string::npos);
    const size_t s = header.find("'shape': (");
    REQUIRE(s != std::string::npos);
    const std::string dims = header.substr(s + 10, header.find(')', s) - (s + 10));
    for (size_t i = 0; i < dims.size();) {
        if (std::isdigit(uint8_t(dims[i]))) {
            size_t end = i;
            while (end < dims.size() && std::isdigit(uint8_t(dims[end]))) ++end;
            npy.shape.push_back(std::stoll(dims.substr(i, end - i)));
            i = end;
        } else {
            ++i;
        }
    }
    npy.data = bytes.substr(10 + header_len);
    const int64_t item = npy.descr == "<f4" ? 4 : npy.descr == "|u1" ? 1 : 8;
    REQUIRE(int64_t(npy.data.size()) == npy.size() * item);
    return npy;
}


// A tiny GPT-2 with seeded random weights: V=50, C=16, L=2, H=2, n_ctx=32.
fs::path make_model() {
    ModelConfig c;
    c.n_vocab = 50;
    c.n_ctx = 32;
    c.n_embd = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_inner = 64;
    const fs::path dir = work_dir("model");
    std::ofstream(dir / "config.json") << config_to_json(c);

    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<TensorToWrite> tensors;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float bias = 0) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> values(static_cast<size_t>(n));
        for (float& v : values) v = bias + scale * normal(rng);
        TensorToWrite t{name, Dtype::F32, shape, std::vector<std::byte>(size_t(n) * 4)};
        std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
        tensors.push_back(std::move(t));
    };
    const int64_t V = c.n_vocab, P = c.n_ctx, C = c.n_embd, F = c.n_inner;
    add("wte.weight", {V, C}, 0.5f);
    add("wpe.weight", {P, C}, 0.5f);
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string h = "h." + std::to_string(il) + ".";
        add(h + "ln_1.weight", {C}, 0.1f, 1.0f);
        add(h + "ln_1.bias", {C}, 0.1f);
        add(h + "attn.c_attn.weight", {C, 3 * C}, 0.5f);  // large enough for peaked attention
        add(h + "attn.c_attn.bias", {3 * C}, 0.1f);
        add(h + "attn.c_proj.weight", {C, C}, 0.2f);
        add(h + "attn.c_proj.bias", {C}, 0.1f);
        add(h + "ln_2.weight", {C}, 0.1f, 1.0f);
        add(h + "ln_2.bias", {C}, 0.1f);
        add(h + "mlp.c_fc.weight", {C, F}, 0.2f);
        add(h + "mlp.c_fc.bias", {F}, 0.1f);
        add(h + "mlp.c_proj.weight", {F, C}, 0.2f);
        add(h + "mlp.c_proj.bias", {C}, 0.1f);
    }
    add("ln_f.weight", {C}, 0.1f, 1.0f);
    add("ln_f.bias", {C}, 0.1f);
    write_safetensors((dir / "model.safetensors").string(), tensors);
    return dir;
}

std::shared_ptr<const Model> tiny_model() {
    static std::shared_ptr<const Model> model = Model::load(make_model().string());
    return model;
}

const std::vector<TokenId> kPrompt = {3, 17, 42, 8, 0, 25, 11};

Trace run_session(SessionOptions options) {
    options.max_new_tokens = 4;
    options.n_top = 5;
    Session session(tiny_model(), options);
    session.set_prompt(kPrompt);
    while (session.next() != Session::Next::Done) session.step();
    return session.trace();
}

int64_t integer(const Json& j, const char* key) {
    const Json* v = j.find(key);
    REQUIRE(v);
    return v->as_integer();
}

std::vector<int64_t> integers(const Json& j) {
    std::vector<int64_t> out;
    for (const Json& v : j.as_array()) out.push_back(v.as_integer());
    return out;
}

// CIE 1976 lightness of an sRGB colour (D65), for the colour-table checks.
double cie_lightness(const Rgb& c) {
    auto lin = [](uint8_t v) {
        const double x = v / 255.0;
        return x <= 0.04045 ? x / 12.92 : std::pow((x + 0.055) / 1.055, 2.4);
    };
    const double y = 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
    return y > 216.0 / 24389.0 ? 116.0 * std::cbrt(y) - 16.0 : y * 24389.0 / 27.0;
}

double rgb_distance(const Rgb& a, const Rgb& b) {
    double s = 0;
    for (int k = 0; k < 3; ++k) s += (double(a[k]) - b[k]) * (double(a[k]) - b[k]);
    return std::sqrt(s);
}

}  // namespace

TEST_CASE("exported attention equals a naive attention recomputed from q.npy and k.npy", "[export]") {
    const int64_t chunk = GENERATE(0, 3);
    const int64_t window = GENERATE(0, 3);
    const bool use_cache = GENERATE(true, false);
    CAPTURE(chunk, window, use_cache);
    SessionOptions options;
    options.prefill_chunk = chunk;
    options.window = window;
    options.use_cache = use_cache;
    const Trace trace = run_session(options);
    REQUIRE(trace.size() == (chunk ? 3u : 1u) + 3u);  // prefill chunks, then N - 1 decodes

    const fs::path dir = work_dir("trace");
    std::vector<size_t> progress;
    export_trace(trace, nullptr, dir.string(), {}, [&](size_t i) { progress.push_back(i); });
    REQUIRE(progress.size() == trace.size());
    CHECK(progress.back() == trace.size() - 1);

    const int64_t L = 2, H = 2, D = 8, C = 16;
    std::vector<Json> metas;
    for (size_t s = 0; s < trace.size(); ++s) {
        char name[32];
        std::snprintf(name, sizeof name, "step_%04zu", s);
        metas.push_back(read_json(dir / name / "meta.json"));
    }

    for (size_t s = 0; s < trace.size(); ++s) {
        CAPTURE(s);
        char name[32];
        std::snprintf(name, sizeof name, "step_%04zu", s);
        const fs::path folder = dir / name;
        const Json& meta = metas[s];
        const StepRecord& r = trace[s];

        // meta.json against the record.
        CHECK(integer(meta, "step") == int64_t(s));
        CHECK(meta.find("phase")->as_string() == (r.id.phase == Phase::Prefill ? "prefill" : "decode"));
        CHECK(meta.find("cache_on")->as_bool() == use_cache);
        CHECK(meta.find("recorded")->as_bool());
        CHECK(integers(*meta.find("tokens")->find("ids")) == std::vector<int64_t>(r.id.tokens.begin(), r.id.tokens.end()));
        CHECK(meta.find("tokens")->find("text")->is_null());
        CHECK(integer(meta, "first_position") == r.id.first_position);
        CHECK(integer(meta, "n_rows_computed") == r.cost.n_rows_computed);
        CHECK(integer(meta, "n_rows_reused") == r.cost.n_rows_reused);
        CHECK(meta.find("entropy")->as_number() == r.prediction.entropy);  // %.17g round-trips a double
        CHECK(meta.find("seconds")->as_number() == r.cost.seconds);
        const Json& cache = *meta.find("cache_state");
        CHECK(integer(cache, "capacity") == r.cache.capacity);
        CHECK(integer(cache, "used") == r.cache.used);
        CHECK(integer(cache, "write_slot") == r.cache.write_slot);
        CHECK(integer(cache, "next_position") == r.cache.next_position);
        CHECK(integers(*cache.find("slot_positions")) == r.cache.slot_positions);
        if (r.prediction.chosen) {
            CHECK(integer(*meta.find("chosen"), "id") == *r.prediction.chosen);
            REQUIRE(meta.find("top")->as_array().size() == r.prediction.top.size());
            for (size_t i = 0; i < r.prediction.top.size(); ++i) {
                CHECK(integer(meta.find("top")->as_array()[i], "id") == r.prediction.top[i].id);
                CHECK(float(meta.find("top")->as_array()[i].find("probability")->as_number()) == r.prediction.top[i].probability);
            }
            const Npy logits = read_npy(folder / "logits.npy");
            REQUIRE(logits.shape == std::vector<int64_t>{50});
            for (int64_t i = 0; i < 50; ++i) REQUIRE(logits.f32(i) == r.prediction.logits[size_t(i)]);
        } else {
            CHECK(meta.find("chosen")->is_null());
            CHECK_FALSE(fs::exists(folder / "logits.npy"));
        }
        CHECK(meta.find("heatmaps")->find("written")->as_bool());

        // Positions: queries are the rows this step computed; keys run from the first visible one.
        const int64_t R = r.cost.n_rows_computed, q0 = r.cost.first_computed_position;
        const int64_t k0 = window > 0 ? std::max<int64_t>(0, q0 - window + 1) : 0, P = q0 + R - k0;
        std::vector<int64_t> want_q, want_k;
        for (int64_t i = 0; i < R; ++i) want_q.push_back(q0 + i);
        for (int64_t j = 0; j < P; ++j) want_k.push_back(k0 + j);
        CHECK(integers(*meta.find("query_positions")) == want_q);
        CHECK(integers(*meta.find("key_positions")) == want_k);
        // One meaning per name: own_key_column is a column index, first_key_position a position.
        CHECK_FALSE(meta.find("mask")->find("offset"));
        CHECK(integer(*meta.find("mask"), "own_key_column") == q0 - k0);
        CHECK(integer(*meta.find("mask"), "first_key_position") == k0);
        CHECK(integer(*meta.find("mask"), "first_query_position") == q0);
        CHECK(integer(*meta.find("mask"), "window") == window);

        const Npy q = read_npy(folder / "q.npy");
        REQUIRE(q.descr == "<f4");
        REQUIRE(q.shape == std::vector<int64_t>{L, R, C});

        // Every listed file exists.
        for (const Json& f : meta.find("files")->as_array())
            CHECK(fs::exists(folder / f.find("name")->as_string()));

        for (int64_t il = 0; il < L; ++il)
            for (int64_t h = 0; h < H; ++h) {
                CAPTURE(il, h);
                char prefix[32];
                std::snprintf(prefix, sizeof prefix, "l%02lld_h%02lld_", (long long)il, (long long)h);
                const Npy scores = read_npy(folder / (std::string(prefix) + "scores.npy"));
                const Npy weights = read_npy(folder / (std::string(prefix) + "weights.npy"));
                const Npy mask = read_npy(folder / (std::string(prefix) + "mask.npy"));
                REQUIRE(scores.shape == std::vector<int64_t>{R, P});
                REQUIRE(weights.shape == std::vector<int64_t>{R, P});
                REQUIRE(mask.shape == std::vector<int64_t>{R, P});
                REQUIRE(mask.descr == "|u1");

                // Key row of position p: from the newest step <= s whose computed rows include p.
                auto key_row = [&](int64_t p) {
                    for (size_t t = s + 1; t-- > 0;) {
                        const int64_t first = integer(metas[t], "first_computed_position");
                        const int64_t n = integer(metas[t], "n_rows_computed");
                        if (p < first || p >= first + n) continue;
                        char other[32];
                        std::snprintf(other, sizeof other, "step_%04zu", t);
                        const Npy k = read_npy(dir / other / "k.npy");
                        std::vector<double> row(static_cast<size_t>(D));
                        for (int64_t d = 0; d < D; ++d) row[size_t(d)] = k.f32((il * n + (p - first)) * C + h * D + d);
                        return row;
                    }
                    FAIL("no step computed key position " << p);
                    return std::vector<double>{};
                };
                std::vector<std::vector<double>> keys;
                for (int64_t j = 0; j < P; ++j) keys.push_back(key_row(k0 + j));

                for (int64_t i = 0; i < R; ++i) {
                    const int64_t qpos = q0 + i;
                    std::vector<double> naive_scores(static_cast<size_t>(P)), naive_weights(static_cast<size_t>(P), 0.0);
                    std::vector<int> naive_visible(static_cast<size_t>(P));
                    double max_score = -INFINITY;
                    for (int64_t j = 0; j < P; ++j) {
                        double dot = 0;
                        for (int64_t d = 0; d < D; ++d)
                            dot += double(q.f32((il * R + i) * C + h * D + d)) * keys[size_t(j)][size_t(d)];
                        naive_scores[size_t(j)] = dot / std::sqrt(double(D));
                        const int64_t kpos = k0 + j;
                        naive_visible[size_t(j)] = kpos <= qpos && (window == 0 || kpos > qpos - window);
                        if (naive_visible[size_t(j)]) max_score = std::max(max_score, naive_scores[size_t(j)]);
                    }
                    double total = 0;
                    for (int64_t j = 0; j < P; ++j)
                        if (naive_visible[size_t(j)])
                            total += naive_weights[size_t(j)] = std::exp(naive_scores[size_t(j)] - max_score);
                    double row_sum = 0;
                    for (int64_t j = 0; j < P; ++j) {
                        CAPTURE(i, j);
                        const int64_t c = i * P + j;
                        REQUIRE(int(mask.u8(c)) == naive_visible[size_t(j)]);
                        // Masked cells hold -inf, so a plain row softmax of scores.npy is weights.npy.
                        if (naive_visible[size_t(j)])
                            CHECK_THAT(double(scores.f32(c)), Catch::Matchers::WithinAbs(naive_scores[size_t(j)], 1e-5));
                        else
                            CHECK((std::isinf(scores.f32(c)) && scores.f32(c) < 0));
                        if (naive_visible[size_t(j)]) {
                            CHECK_THAT(double(weights.f32(c)),
                                       Catch::Matchers::WithinAbs(naive_weights[size_t(j)] / total, 1e-5));
                            row_sum += weights.f32(c);
                        } else {
                            CHECK(weights.f32(c) == 0.0f);
                        }
                    }
                    CHECK_THAT(row_sum, Catch::Matchers::WithinAbs(1.0, 1e-5));
                }

                // The weights PNG: meta.json says where its cells are; cells are >= 8 px wide and the map
                // >= 96 px tall; a visible cell's centre is the viridis entry nearest its weight, a masked
                // cell's centre is one of the two hatch greys.
                const Png png = read_png(folder / (std::string(prefix) + "weights.png"));
                const Json* entry = nullptr;
                for (const Json& f : meta.find("files")->as_array())
                    if (f.find("name")->as_string() == std::string(prefix) + "weights.png") entry = &f;
                REQUIRE(entry);
                CHECK(integers(*entry->find("shape")) == std::vector<int64_t>{png.height, png.width, 3});
                const Json& cells = *entry->find("cells");
                const int64_t x0 = integer(cells, "x"), y0 = integer(cells, "y");
                const int64_t cw = integer(cells, "width") / P, ch = integer(cells, "height") / R;
                REQUIRE(integer(cells, "width") == cw * P);
                REQUIRE(integer(cells, "height") == ch * R);
                CHECK(cw >= 8);
                CHECK(ch >= cw);
                CHECK(ch * R >= 96);
                CHECK(x0 > 0);  // room for the query positions on the left
                CHECK(png.height - (y0 + ch * R) >= 40);  // and the key positions below
                for (int64_t i = 0; i < R; ++i)
                    for (int64_t j = 0; j < P; ++j) {
                        CAPTURE(i, j);
                        const Rgb got = png.at(int(x0 + j * cw + cw / 2), int(y0 + i * ch + ch / 2));
                        if (mask.u8(i * P + j)) {
                            CHECK(got == viridis()[size_t(std::lround(weights.f32(i * P + j) * 255.0))]);
                        } else {
                            CHECK((got == Rgb{64, 64, 64} || got == Rgb{128, 128, 128}));
                        }
                    }
                const Png score_png = read_png(folder / (std::string(prefix) + "scores.png"));
                CHECK(score_png.height == png.height);
            }
    }

    // trace.json: one summary per step.
    const Json summary = read_json(dir / "trace.json");
    REQUIRE(summary.find("steps")->as_array().size() == trace.size());
    CHECK(integer(summary, "n_steps") == int64_t(trace.size()));
    CHECK(integer(*summary.find("model"), "n_head") == H);
    for (size_t s = 0; s < trace.size(); ++s) {
        const Json& st = summary.find("steps")->as_array()[s];
        CHECK(integer(st, "index") == int64_t(s));
        CHECK(integers(*st.find("tokens")) == std::vector<int64_t>(trace[s].id.tokens.begin(), trace[s].id.tokens.end()));
        if (trace[s].prediction.chosen) CHECK(integer(st, "chosen") == *trace[s].prediction.chosen);
        else CHECK(st.find("chosen")->is_null());
    }
}

TEST_CASE("a tokenizer adds each token's text; a scope limits the heads written", "[export]") {
    const Trace trace = run_session({});
    const Tokenizer tokenizer = Tokenizer::load(std::string(KVSCOPE_ASSETS_DIR) + "/default");
    const fs::path dir = work_dir("scoped");
    const std::string folder = export_step(trace, 0, &tokenizer, dir.string(), ExportScope{1, 0});
    CHECK(fs::path(folder) == dir / "step_0000");
    const Json meta = read_json(fs::path(folder) / "meta.json");
    const Json::Array& text = meta.find("tokens")->find("text")->as_array();
    REQUIRE(text.size() == kPrompt.size());
    for (size_t i = 0; i < kPrompt.size(); ++i) {  // the token's bytes as they are (these are valid UTF-8)
        REQUIRE(is_valid_utf8(tokenizer.token_bytes(kPrompt[i])));
        CHECK(text[i].as_string() == tokenizer.token_bytes(kPrompt[i]));
    }
    CHECK_FALSE(meta.find("tokens")->find("text_hex"));
    CHECK(meta.find("chosen")->find("text")->as_string() == tokenizer.token_bytes(*trace[0].prediction.chosen));
    CHECK(fs::exists(fs::path(folder) / "l01_h00_weights.npy"));
    CHECK(fs::exists(fs::path(folder) / "l01_h00_weights.png"));
    CHECK_FALSE(fs::exists(fs::path(folder) / "l00_h00_weights.npy"));
    CHECK_FALSE(fs::exists(fs::path(folder) / "l01_h01_weights.npy"));
    for (const Json& f : meta.find("files")->as_array())
        if (f.find("layer")) CHECK((integer(f, "layer") == 1 && integer(f, "head") == 0));

    CHECK_THROWS_AS(export_step(trace, 0, nullptr, dir.string(), ExportScope{2, {}}), UsageError);
    CHECK_THROWS_AS(export_step(trace, 0, nullptr, dir.string(), ExportScope{{}, -1}), UsageError);
    CHECK_THROWS_AS(export_step(trace, trace.size(), nullptr, dir.string()), UsageError);
}

TEST_CASE("steps run without recording get meta.json and logits but no heatmaps", "[export]") {
    SessionOptions options;
    options.record = false;
    const Trace trace = run_session(options);
    const fs::path dir = work_dir("unrecorded");
    export_trace(trace, nullptr, dir.string());
    for (size_t s = 0; s < trace.size(); ++s) {
        CAPTURE(s);
        char name[32];
        std::snprintf(name, sizeof name, "step_%04zu", s);
        const Json meta = read_json(dir / name / "meta.json");
        CHECK_FALSE(meta.find("recorded")->as_bool());
        CHECK_FALSE(meta.find("heatmaps")->find("written")->as_bool());
        CHECK_THAT(meta.find("heatmaps")->find("reason")->as_string(), Contains("recording off"));
        CHECK_FALSE(fs::exists(dir / name / "q.npy"));
        CHECK_FALSE(fs::exists(dir / name / "l00_h00_weights.png"));
        CHECK(fs::exists(dir / name / "logits.npy") == trace[s].prediction.chosen.has_value());
    }
    CHECK(read_json(dir / "trace.json").find("steps")->as_array().size() == trace.size());
}

TEST_CASE("a trace exported over a longer earlier one leaves none of its step folders behind", "[export]") {
    const Trace trace = run_session({});  // 1 prefill + 3 decode steps
    REQUIRE(trace.size() == 4);
    const fs::path dir = work_dir("reused");
    fs::remove_all(dir);
    CHECK(export_trace(trace, nullptr, dir.string()) == 0);
    // A file kvscope did not write, in the trace's folder: the next export is refused and the file stays.
    std::ofstream(dir / "step_0003" / "notes.txt") << "not the trace's";
    fs::create_directories(dir / "step_extra");
    Trace shorter = trace;
    shorter.truncate(2);
    CHECK_THROWS_AS(export_trace(shorter, nullptr, dir.string()), UsageError);
    CHECK(fs::exists(dir / "step_0003" / "notes.txt"));
    fs::rename(dir / "step_0003" / "notes.txt", dir / "notes.txt.moved");
    CHECK_THROWS_AS(export_trace(shorter, nullptr, dir.string()), UsageError);  // still inside the folder
    const fs::path moved = kvscope::test::scratch_root() / "export" / "reused_notes.txt";
    fs::rename(dir / "notes.txt.moved", moved);
    CHECK(export_trace(shorter, nullptr, dir.string()) == 2);
    std::vector<std::string> steps;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().rfind("step_", 0) == 0) steps.push_back(e.path().filename().string());
    std::sort(steps.begin(), steps.end());
    CHECK(steps == std::vector<std::string>{"step_0000", "step_0001", "step_extra"});  // an empty folder holds nothing to lose
    CHECK(fs::exists(moved));
    CHECK(integer(read_json(dir / "trace.json"), "n_steps") == 2);
}

TEST_CASE("an unusable output folder is a UsageError naming it", "[export]") {
    const Trace trace = run_session({});
    const fs::path base = work_dir("unwritable");
    std::ofstream(base / "a_file") << "not a folder";
    const std::string bad = (base / "a_file" / "out").string();
    try {
        export_trace(trace, nullptr, bad);
        FAIL("export into a path below a file succeeded");
    } catch (const UsageError& e) {
        CHECK_THAT(e.what(), Contains(bad));
    }
    CHECK_THROWS_AS(export_step(trace, 0, nullptr, (base / "a_file").string()), UsageError);
    CHECK_THROWS_AS(export_trace(trace, nullptr, ""), UsageError);
}

TEST_CASE("colour tables match published anchors and are ordered in lightness", "[export][colormap]") {
    // viridis 5-colour palette at t = 0, 0.25, 0.5, 0.75, 1 (index 255 t).
    const std::vector<std::pair<size_t, Rgb>> anchors = {
        {0, {0x44, 0x01, 0x54}}, {64, {0x3B, 0x52, 0x8B}}, {128, {0x21, 0x90, 0x8C}},
        {191, {0x5D, 0xC8, 0x63}}, {255, {0xFD, 0xE7, 0x25}}};
    for (const auto& [i, want] : anchors) {
        CAPTURE(i);
        for (int k = 0; k < 3; ++k) CHECK(std::abs(int(viridis()[i][size_t(k)]) - int(want[size_t(k)])) <= 4);
    }
    for (size_t i = 1; i < 256; ++i) CHECK(cie_lightness(viridis()[i]) >= cie_lightness(viridis()[i - 1]) - 0.3);
    CHECK(cie_lightness(viridis()[255]) - cie_lightness(viridis()[0]) > 75);

    const ColorTable& div = diverging();
    for (int k = 0; k < 3; ++k) {
        CHECK(std::abs(int(div[0][size_t(k)]) - int(Rgb{59, 76, 192}[size_t(k)])) <= 1);
        CHECK(std::abs(int(div[255][size_t(k)]) - int(Rgb{180, 4, 38}[size_t(k)])) <= 1);
    }
    CHECK(rgb_distance(div[127], {242, 242, 242}) < 6);
    CHECK(rgb_distance(div[128], {242, 242, 242}) < 6);
    for (size_t i = 1; i < 128; ++i) CHECK(cie_lightness(div[i]) >= cie_lightness(div[i - 1]) - 0.3);
    for (size_t i = 129; i < 256; ++i) CHECK(cie_lightness(div[i]) <= cie_lightness(div[i - 1]) + 0.3);
    // Symmetric: -v and +v are equally light (CIE L*), so neither sign looks stronger; 0 is a neutral grey.
    for (size_t i = 0; i < 128; ++i) {
        CAPTURE(i);
        CHECK(std::abs(cie_lightness(div[i]) - cie_lightness(div[255 - i])) < 2.5);
    }
    const Rgb zero = color_for(0.0f, -3.0f, 3.0f, div);
    CHECK(std::max({zero[0], zero[1], zero[2]}) - std::min({zero[0], zero[1], zero[2]}) <= 3);
    for (size_t i = 0; i < 120; ++i) CHECK(div[i][2] > div[i][0]);   // negative side is blue
    for (size_t i = 136; i < 256; ++i) CHECK(div[i][0] > div[i][2]); // positive side is red

    // The hatch is far from every table entry, so a masked cell never reads as a value.
    for (const ColorTable* table : {&viridis(), &diverging()})
        for (const Rgb& c : *table) {
            CHECK(rgb_distance(c, masked_dark) > 30);
            CHECK(rgb_distance(c, masked_light) > 30);
        }
    CHECK(color_for(-5.0f, 0.0f, 1.0f) == viridis()[0]);
    CHECK(color_for(7.0f, 0.0f, 1.0f) == viridis()[255]);
    CHECK(color_for(0.0f, -2.0f, 2.0f, diverging()) == diverging()[128]);
    CHECK(color_for(NAN, 0.0f, 1.0f) == masked_color(0, 0));
}

TEST_CASE("big heatmaps are capped at 2048 px a side, small ones get >= 8 px cells", "[export][colormap]") {
    const fs::path dir = work_dir("png");
    std::vector<float> wide(3 * 3000);
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = float(i % 3000) / 2999.0f;
    write_heatmap_png((dir / "wide.png").string(), 3, 3000, wide.data(), nullptr, 0.0f, 1.0f);
    const Png png = read_png(dir / "wide.png");
    CHECK(png.width == 2048);
    CHECK(png.height == 3);
    CHECK(png.at(0, 0) == viridis()[0]);
    CHECK(png.at(2047, 2) == viridis()[255]);

    const float one = 0.5f;
    const uint8_t hidden = 0;
    write_heatmap_png((dir / "one.png").string(), 1, 1, &one, &hidden, 0.0f, 1.0f);
    const Png tiny = read_png(dir / "one.png");
    CHECK(tiny.width >= 8);
    CHECK(tiny.width == tiny.height);
    int n_dark = 0, n_light = 0;
    for (int y = 0; y < tiny.height; ++y)
        for (int x = 0; x < tiny.width; ++x) {
            n_dark += tiny.at(x, y) == masked_dark;
            n_light += tiny.at(x, y) == masked_light;
        }
    CHECK(n_dark + n_light == tiny.width * tiny.height);
    CHECK(n_dark > 0);
    CHECK(n_light > 0);
    CHECK_THROWS_AS(write_heatmap_png((dir / "empty.png").string(), 0, 4, &one, nullptr, 0.0f, 1.0f), UsageError);
}
