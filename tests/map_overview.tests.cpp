// Overviews of large attention maps (core/analysis/map_overview.h) against brute force:
//  1. max_pool over random maps with random masks, for whole-map and zoomed windows, equals a loop that
//     visits each texel's block cell by cell and keeps the visible cell of largest |value| (ties: the
//     positive one);
//  2. one strong cell in a 4096 x 4096 map survives pooling to 100 x 100 texels;
//  3. pooled_attention, which never holds the map, equals max_pool of the full attention_map of the same
//     step (weights and scores, row-normalised or not, with a window and sinks), and its 1x1 window holds
//     the exact cells; pooled_mask and visible_cells equal the map's own mask.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "analysis/map_overview.h"
#include "forward/model.h"
#include "run/session.h"
#include "test_models.h"

using namespace kvscope;

namespace {

// Texel (tr, tc) of window w, cell by cell.
void brute_texel(const std::vector<float>& v, const std::vector<uint8_t>& vis, int64_t cols, const MapWindow& w,
                 int64_t tr, int64_t tc, float& value, uint8_t& visible) {
    value = 0;
    visible = 0;
    for (int64_t r = w.row0 + tr * w.block_rows; r < std::min(w.row0 + (tr + 1) * w.block_rows, w.row0 + w.n_rows); ++r)
        for (int64_t c = w.col0 + tc * w.block_cols; c < std::min(w.col0 + (tc + 1) * w.block_cols, w.col0 + w.n_cols); ++c) {
            const size_t i = size_t(r * cols + c);
            if (!vis[i]) continue;
            const bool stronger = std::fabs(v[i]) > std::fabs(value) || (std::fabs(v[i]) == std::fabs(value) && v[i] > value);
            if (!visible || stronger) value = v[i];
            visible = 1;
        }
}

void require_brute(const std::vector<float>& v, const std::vector<uint8_t>& vis, int64_t cols, const PooledMap& p) {
    const MapWindow& w = p.window;
    REQUIRE(p.values.size() == size_t(w.out_rows() * w.out_cols()));
    for (int64_t tr = 0; tr < w.out_rows(); ++tr)
        for (int64_t tc = 0; tc < w.out_cols(); ++tc) {
            float want = 0;
            uint8_t want_visible = 0;
            brute_texel(v, vis, cols, w, tr, tc, want, want_visible);
            INFO("texel (" << tr << ", " << tc << ") of blocks " << w.block_rows << "x" << w.block_cols);
            REQUIRE(p.visible[size_t(tr * w.out_cols() + tc)] == want_visible);
            REQUIRE(p.values[size_t(tr * w.out_cols() + tc)] == want);
        }
}

}  // namespace

TEST_CASE("max_pool keeps each block's strongest visible cell", "[map_overview]") {
    const int64_t rows = GENERATE(1, 7, 64, 133), cols = GENERATE(1, 9, 200);
    const int64_t px = GENERATE(1, 5, 16, 300);
    std::mt19937 rng(uint32_t(rows * 1000 + cols + px));
    std::normal_distribution<float> value(0.0f, 1.0f);
    std::vector<float> v(size_t(rows * cols));
    std::vector<uint8_t> vis(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        v[i] = value(rng);
        if (i % 11 == 3) v[i] = -v[(i + 1) % v.size()];  // some ties between +x and -x
        vis[i] = rng() % 4 != 0;
    }
    INFO(rows << " x " << cols << " on " << px << " px");
    const MapWindow whole = MapWindow::whole(rows, cols, px, px);
    CHECK(whole.out_rows() <= std::max<int64_t>(px, 1));
    CHECK(whole.out_cols() <= std::max<int64_t>(px, 1));
    require_brute(v, vis, cols, max_pool(v.data(), vis.data(), rows, cols, whole));
    // A zoomed view of the middle third; the window must cover it.
    const int64_t r0 = rows / 3, r1 = std::max(r0 + 1, 2 * rows / 3), c0 = cols / 3, c1 = std::max(c0 + 1, 2 * cols / 3);
    const MapWindow detail = MapWindow::detail(rows, cols, r0, r1, c0, c1, px, px);
    CHECK(detail.covers(r0, r1, c0, c1));
    CHECK(detail.out_rows() <= std::max<int64_t>(2 * px, 2 * (r1 - r0)));
    require_brute(v, vis, cols, max_pool(v.data(), vis.data(), rows, cols, detail));
}

TEST_CASE("a single strong cell survives pooling a 4096 x 4096 map to 100 x 100", "[map_overview]") {
    const int64_t n = 4096;
    std::vector<float> v(size_t(n * n), 1.0f / float(n));
    std::vector<uint8_t> vis(v.size(), 1);
    v[size_t(1234 * n + 3001)] = 0.9f;
    const MapWindow w = MapWindow::whole(n, n, 100, 100);
    CHECK(w.block_rows == 41);
    const PooledMap p = max_pool(v.data(), vis.data(), n, n, w);
    CHECK(p.values[size_t(1234 / 41 * w.out_cols() + 3001 / 41)] == 0.9f);
    CHECK(p.absmax == 0.9f);
    CHECK(p.values[0] == 1.0f / float(n));
}

TEST_CASE("pooled_attention equals max_pool of the full attention map", "[map_overview]") {
    const kvtest::FixtureModel fx = kvtest::small_fixture("map_overview", 5);
    const auto model = Model::load(fx.dir.string());
    SessionOptions o;
    o.window = GENERATE(0, 9);
    o.sinks = o.window ? 2 : 0;
    o.prefill_chunk = GENERATE(0, 13);
    o.max_new_tokens = 3;  // the prefill predicts the first: two decode steps follow
    Session s(model, o);
    s.set_prompt(kvtest::random_tokens(7, 40, model->config().n_vocab));
    while (s.next() != Session::Next::Done) s.step();
    const size_t step = GENERATE(0, 1, 2);
    INFO("window " << o.window << ", chunk " << o.prefill_chunk << ", step " << step);
    REQUIRE(step < s.trace().size());
    const int64_t layer = 1, head = 2;
    const AttentionMap m = attention_map(s.trace(), step, layer, head);
    const AttentionRows rows(s.trace(), step, layer, head);
    REQUIRE(rows.n_query() == m.n_query);
    REQUIRE(rows.n_key() == m.n_key);
    REQUIRE(rows.first_key() == m.key_positions.front());
    for (const bool scores : {false, true})
        for (const bool row_norm : {false, true}) {
            INFO((scores ? "scores" : "weights") << (row_norm ? ", row-normalised" : ""));
            std::vector<float> v = scores ? m.scores : m.weights;
            if (row_norm)
                for (int64_t r = 0; r < m.n_query; ++r) {
                    float mx = 0;
                    for (int64_t c = 0; c < m.n_key; ++c)
                        if (m.visible[size_t(r * m.n_key + c)]) mx = std::max(mx, std::fabs(v[size_t(r * m.n_key + c)]));
                    if (mx > 0)
                        for (int64_t c = 0; c < m.n_key; ++c) v[size_t(r * m.n_key + c)] /= mx;
                }
            for (const MapWindow& w : {MapWindow::whole(m.n_query, m.n_key, 4, 6), MapWindow::whole(m.n_query, m.n_key, 100, 100),
                                       MapWindow::detail(m.n_query, m.n_key, 0, m.n_query, m.n_key / 2, m.n_key, 3, 3)}) {
                const PooledMap got = pooled_attention(rows, scores ? MapValues::Scores : MapValues::Weights, row_norm, w);
                require_brute(v, m.visible, m.n_key, got);
                if (w.exact() && w.n_rows == m.n_query && w.n_cols == m.n_key)  // every cell, bit for bit
                    for (size_t i = 0; i < v.size(); ++i)
                        if (m.visible[i]) REQUIRE(got.values[i] == v[i]);
            }
        }
    const MapWindow w = MapWindow::whole(m.n_query, m.n_key, 5, 7);
    const PooledMap mask = pooled_mask(s.trace()[step], layer, m.query_positions.front(), m.key_positions.front(), m.n_key, w);
    const PooledMap want = max_pool(m.weights.data(), m.visible.data(), m.n_query, m.n_key, w);
    CHECK(mask.visible == want.visible);
    int64_t n_visible = 0;
    for (uint8_t x : m.visible) n_visible += x;
    CHECK(visible_cells(s.trace()[step], layer, m.query_positions.front(), m.n_query, m.key_positions.front(), m.n_key) ==
          n_visible);
}
