#include "figures.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "analysis/logit_lens.h"
#include "analysis/map_overview.h"
#include "base/errors.h"
#include "io/output_path.h"
#include "report/plot_layout.h"
#include "test_dumps.h"

namespace kvscope::gui {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kMaxFigureCells = int64_t(2048) * 2048;  // a bigger mask is refused (67M cells of 8192 tokens)

// Colour-blind-safe series colours (Okabe & Ito): blue, vermillion, bluish green, orange, reddish purple, sky blue.
constexpr Rgb kSeries[] = {{0, 114, 178}, {213, 94, 0}, {0, 158, 115}, {230, 159, 0}, {204, 121, 167}, {86, 180, 233}};

[[noreturn]] void nothing(const std::string& why) { throw UsageError("nothing to draw yet: " + why); }

std::string model_name(const Snapshot& s) {
    fs::path dir = fs::path(s.model().dir()).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    return dir.filename().string();
}

std::vector<TokenId> tokens_of(const Snapshot& s) {
    std::vector<TokenId> t = s.prompt();
    t.insert(t.end(), s.generated().begin(), s.generated().end());
    return t;
}

std::string token_label(const Model& model, const std::vector<TokenId>& tokens, int64_t p) {
    return p >= 0 && p < int64_t(tokens.size()) ? short_token(model, tokens[size_t(p)], plot_label_chars) : "";
}

std::vector<int64_t> iota(int64_t n, int64_t first = 0) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
    return v;
}

// A signed map: the diverging table, symmetric around 0 so that 0 is its neutral middle.
void signed_range(HeatmapPlot& p, float absmax) {
    const float r = std::max(absmax, 1e-6f);
    p.lo = -r, p.hi = r;
    p.table = &diverging();
}

// The step the panel shows and its layer and head, clamped as the panels clamp them.
struct Shown {
    const StepRecord* r = nullptr;
    size_t step = 0;
    int64_t layer = 0, head = 0;
};
Shown shown_step(const Snapshot& s, const ViewPrefs& v) {
    Shown out;
    out.r = viewed_step(s, v, &out.step);
    if (!out.r) nothing("no step has run (run a prefill step)");
    if (!out.r->recorded()) nothing("step " + std::to_string(out.step) + " was run without recording");
    out.layer = std::clamp<int64_t>(v.layer, 0, out.r->rows.n_layer - 1);
    out.head = std::clamp<int64_t>(v.head, 0, out.r->rows.n_head - 1);
    return out;
}

std::string where(const Snapshot& s, const Shown& w, bool head = true) {
    std::string t = model_name(s) + ", step " + std::to_string(w.step) + ", layer " + std::to_string(w.layer);
    if (head) t += ", head " + std::to_string(w.head);
    return t;
}

std::string base_name(const char* what, const Shown& w, bool head = true) {
    std::string n = std::string(what) + "_step" + std::to_string(w.step) + "_l" + std::to_string(w.layer);
    if (head) n += "_h" + std::to_string(w.head);
    return n;
}

Figure kv_cache_figure(const Snapshot& s, const ViewPrefs& v) {
    const Shown w = shown_step(s, v);
    const StepRecord& r = *w.r;
    const Model& model = s.model();
    const std::vector<TokenId> tokens = tokens_of(s);
    const int64_t S = r.cache.capacity;
    bool identity = true;  // every filled slot holds its own position (no window wrapped the ring)
    for (int64_t slot = 0; slot < S; ++slot)
        identity = identity && (r.cache.slot_positions[size_t(slot)] < 0 || r.cache.slot_positions[size_t(slot)] == slot);
    std::string head_name = "head " + std::to_string(w.head);
    const ModelConfig& cfg = model.config();
    if (cfg.kv_heads() < cfg.n_head) {
        const int64_t G = cfg.n_head / cfg.kv_heads(), kv = cfg.kv_head_of(w.head);
        head_name = "K/V head " + std::to_string(kv) + " (query heads " + std::to_string(kv * G) + ".." +
                    std::to_string(kv * G + G - 1) + ")";
    }
    Figure f;
    f.name = base_name("kv_cache", w);
    for (int which = 0; which < 2; ++which) {
        KvSlots kv = kv_slots(s.trace(), w.step, w.layer, w.head, which == 1);
        FigureMap m;
        m.part = which ? "V" : "K";
        m.values = std::move(kv.values);
        m.visible = std::move(kv.visible);
        HeatmapPlot& p = m.plot;
        p.title = model_name(s) + ", step " + std::to_string(w.step) + ", layer " + std::to_string(w.layer) + ", " +
                  head_name + ": " + (which ? "V" : "K") + " cache after the step";
        p.value_label = which ? "value" : "key";
        p.rows = kv.n_slot, p.cols = kv.head_dim;
        signed_range(p, kv.absmax);
        p.row_positions = iota(S);
        p.col_positions = iota(kv.head_dim);
        for (int64_t slot = 0; slot < S; ++slot) {
            const int64_t pos = r.cache.slot_positions[size_t(slot)];
            p.row_labels.push_back(pos < 0 ? "empty"
                                   : identity ? token_label(model, tokens, pos)
                                              : "@" + std::to_string(pos) + " " + token_label(model, tokens, pos));
        }
        p.x_label = "head dimension";
        p.y_label = identity ? "cache slot = position" : "cache slot (@position)";
        p.masked_label = "empty slot";
        f.maps.push_back(std::move(m));
    }
    return f;
}

Figure quant_figure(const Snapshot& s, const ViewPrefs& v) {
    const Shown w = shown_step(s, v);
    KvQuantSpec spec = v.quant_view;
    if (!spec.quantized()) spec.format = KvQuant::Int8;  // as the panel shows it
    if (s.options().kv_quant.quantized())
        nothing("this session's cache already stores quantized K/V (the panel has nothing to compare)");
    const KvQuantError e = kv_quant_error(spec, s.trace(), w.step, w.layer, w.head, kQuantMaxQueries);
    const Model& model = s.model();
    const std::vector<TokenId> tokens = tokens_of(s);
    std::string fmt = to_string(spec.format);
    if (spec.format == KvQuant::Int4) fmt += " G=" + std::to_string(spec.group) + " R=" + std::to_string(spec.residual);
    Figure f;
    f.name = base_name("kv_quant", w);
    auto labels = [&](const std::vector<int64_t>& positions) {
        std::vector<std::string> out;
        for (int64_t p : positions) out.push_back(token_label(model, tokens, p));
        return out;
    };
    for (int which = 0; which < 2; ++which) {
        FigureMap m;
        m.part = which ? "V_error" : "K_error";
        m.values = which ? e.value_error : e.key_error;
        HeatmapPlot& p = m.plot;
        p.title = where(s, w) + ": " + fmt + " " + (which ? "V" : "K") + " error (dequantized - float32)";
        p.value_label = "error";
        p.rows = e.n_keys, p.cols = e.head_dim;
        signed_range(p, which ? e.value_error_max : e.key_error_max);
        p.row_positions = e.key_positions;
        p.row_labels = labels(e.key_positions);
        p.col_positions = iota(e.head_dim);
        p.x_label = "head dimension";
        p.y_label = "key position";
        f.maps.push_back(std::move(m));
    }
    FigureMap m;
    m.part = "score_change";
    score_change_cells(e, m.values, m.visible);
    HeatmapPlot& p = m.plot;
    p.title = where(s, w) + ": " + fmt + " score change (query x key)";
    p.value_label = "change";
    p.masked_label = "not seen";
    p.rows = e.n_queries, p.cols = e.n_keys;
    signed_range(p, e.score_change_max);
    p.row_positions = e.query_positions;
    p.row_labels = labels(e.query_positions);
    p.col_positions = e.key_positions;
    p.col_labels = labels(e.key_positions);
    f.maps.push_back(std::move(m));
    return f;
}

Figure mask_figure(const Snapshot& s, const ViewPrefs& v) {
    const Shown w = shown_step(s, v);
    const MapExtent x = map_extent(s.trace(), w.step, AttentionKind::Self);
    if (x.n_query * x.n_key > kMaxFigureCells)
        throw UsageError("the mask has " + std::to_string(x.n_query * x.n_key) + " cells, more than a figure holds (" +
                         std::to_string(kMaxFigureCells) + "): save the attention map through Export instead");
    const Model& model = s.model();
    const std::vector<TokenId> tokens = tokens_of(s);
    Figure f;
    f.name = base_name("mask", w, false);
    FigureMap m;
    m.values.assign(size_t(x.n_query * x.n_key), 1.0f);
    m.visible.assign(m.values.size(), 0);
    for (int64_t i = 0; i < x.n_query; ++i) {
        const KeyRange seen = w.r->visible_keys(x.first_query + i, w.layer);
        for (int64_t j = 0; j < x.n_key; ++j) m.visible[size_t(i * x.n_key + j)] = seen.contains(x.first_key + j) ? 1 : 0;
    }
    // Keys an eviction policy or an edit took from the shown head's K/V head: the rule lets the query see
    // them, the cache gives them weight 0, as the panel veils them red. They are 0 on the bar, visible 1.
    const std::vector<uint8_t> gone = evicted_before(s.trace(), w.step, w.layer, w.head, x.first_key, x.n_key);
    int64_t n_gone = 0;
    for (int64_t i = 0; i < x.n_query && !gone.empty(); ++i)
        for (int64_t j = 0; j < x.n_key; ++j)
            if (gone[size_t(j)] && m.visible[size_t(i * x.n_key + j)]) m.values[size_t(i * x.n_key + j)] = 0.0f, ++n_gone;
    HeatmapPlot& p = m.plot;
    p.title = where(s, w, false) + ": attention mask (visible cells; masked hatched)";
    p.value_label = "visible";
    if (n_gone > 0) {
        f.name = base_name("mask", w);
        p.title = where(s, w) + ": attention mask (1 = visible, 0 = evicted from this head's K/V; masked hatched)";
        p.value_label = "visible (0 = evicted)";
    }
    p.rows = x.n_query, p.cols = x.n_key;
    p.lo = 0, p.hi = 1;
    p.row_positions = iota(x.n_query, x.first_query);
    p.col_positions = iota(x.n_key, x.first_key);
    for (int64_t q : p.row_positions) p.row_labels.push_back(token_label(model, tokens, q));
    for (int64_t k : p.col_positions) p.col_labels.push_back(token_label(model, tokens, k));
    f.maps.push_back(std::move(m));
    return f;
}

Figure heads_figure(const Snapshot& s) {
    if (s.heads.empty()) nothing("the heads are not measured (Explain heads)");
    int64_t L = 0, H = 0;
    for (const HeadScore& h : s.heads) L = std::max(L, h.layer + 1), H = std::max(H, h.head + 1);
    Figure f;
    f.name = "heads";
    for (int which = 0; which < 2; ++which) {
        FigureMap m;
        m.part = which ? "induction" : "previous_token";
        m.values.assign(size_t(L * H), 0.0f);
        m.visible.assign(size_t(L * H), 0);
        for (const HeadScore& h : s.heads) {
            m.values[size_t(h.layer * H + h.head)] = float(which ? h.induction : h.previous_token);
            m.visible[size_t(h.layer * H + h.head)] = 1;
        }
        HeatmapPlot& p = m.plot;
        p.title = model_name(s) + ": " + (which ? "induction" : "previous-token") + " score of every head";
        p.value_label = "score";
        p.rows = L, p.cols = H;
        p.lo = 0, p.hi = 1;  // a mean attention weight: viridis over [0, 1]
        p.row_positions = iota(L);
        p.col_positions = iota(H);
        p.x_label = "head";
        p.y_label = "layer";
        p.masked_label = "not measured";
        f.maps.push_back(std::move(m));
    }
    return f;
}

LineSeries series(const std::string& label, size_t colour, const std::vector<double>& ys, double unit = 1) {
    LineSeries out{label, kSeries[colour % std::size(kSeries)], {}, {}};
    for (size_t i = 0; i < ys.size(); ++i) out.xs.push_back(double(i)), out.ys.push_back(ys[i] * unit);
    return out;
}

Figure compare_figure(const Snapshot& s) {
    const Trace* shadow = s.shadow();
    if (!shadow) nothing(s.has_shadow ? "the two ways sampled different tokens" : "the comparison is off");
    const CostSeries c = cost_series(s.trace(), *shadow, s.step_timings);
    if (c.flops_on.empty()) nothing("no step has run both ways");
    Figure f;
    f.name = "compare_steps" + std::to_string(c.flops_on.size());
    LineChart flops{model_name(s) + ": FLOPs per step, cache on vs off", "step", "GFLOP", {}};
    flops.series = {series("cache on", 0, c.flops_on, 1e-9), series("cache off", 1, c.flops_off, 1e-9)};
    LineChart time{model_name(s) + ": compute time per step (median of runs)", "step", "ms", {}};
    time.series = {series("cache on", 0, c.seconds_on, 1e3), series("cache off", 1, c.seconds_off, 1e3)};
    flops.markers = time.markers = c.flops_on.size() <= 32;
    f.charts = {flops, time};
    return f;
}

Figure lens_figure(const Snapshot& s, const ViewPrefs& v) {
    const Shown w = shown_step(s, v);
    if (w.r->rows.residual.empty()) nothing("step " + std::to_string(w.step) + " recorded no residual stream");
    const Model& model = s.model();
    const int64_t q_pos = lens_position(*w.r, v);
    const LogitLens lens = logit_lens(model, w.r->rows, q_pos - w.r->cost.first_computed_position, kLensTop);
    const std::vector<TokenId> tokens = tokens_of(s);
    const int64_t depths = int64_t(lens.depths.size());
    Figure f;
    f.name = "logit_lens_step" + std::to_string(w.step) + "_pos" + std::to_string(q_pos);
    FigureMap m;
    HeatmapPlot& p = m.plot;
    m.values.assign(size_t(depths * kLensTop), 0.0f);
    m.visible.assign(size_t(depths * kLensTop), 0);
    p.cell_texts.assign(size_t(depths * kLensTop), "");
    for (int64_t d = 0; d < depths; ++d) {
        const LensDepth& depth = lens.depths[size_t(d)];
        for (size_t k = 0; k < depth.top.size() && int64_t(k) < kLensTop; ++k) {
            const size_t cell = size_t(d * kLensTop) + k;
            m.values[cell] = depth.top[k].probability;
            m.visible[cell] = 1;
            p.cell_texts[cell] = short_token(model, depth.top[k].id, plot_label_chars);
        }
        p.row_labels.push_back(d == 0 ? "embeddings" : "after L" + std::to_string(d - 1));  // fits the axis's 12 characters
    }
    const TokenId answer = lens.depths.back().top.front().id;
    p.title = model_name(s) + ", step " + std::to_string(w.step) + ": logit lens at position " + std::to_string(q_pos) +
              " '" + token_label(model, tokens, q_pos) + "' (the full model's choice: '" +
              short_token(model, answer, plot_label_chars) + "')";
    p.value_label = "probability";
    p.rows = depths, p.cols = kLensTop;
    p.lo = 0, p.hi = 1;
    p.row_positions = iota(depths);
    p.col_positions = iota(kLensTop, 1);
    p.x_label = "rank";
    p.y_label = "depth (the residual after layer L)";
    f.maps.push_back(std::move(m));
    return f;
}

Figure rotary_figure(const Snapshot& s, const ViewPrefs& v) {
    const ModelConfig& cfg = s.model().config();
    if (cfg.family != Family::Llama) nothing("this model's keys are not rotated (learned positions)");
    const Shown w = shown_step(s, v);
    const RotaryShown shown = rotary_shown(s, v, *w.r, w.step);
    const RotaryView rv = rotary_view_of(cfg, shown);
    // Four charts side by side: short titles, the model named in the first.
    const std::string at = "step " + std::to_string(w.step) + ", L" + std::to_string(shown.layer) + " H" +
                           std::to_string(shown.head);
    std::vector<double> freq, freq_unscaled, angle;
    for (const RotaryPairView& p : rv.pairs) {
        freq.push_back(p.inv_freq), freq_unscaled.push_back(p.inv_freq_unscaled), angle.push_back(p.query_angle);
    }
    LineChart frequencies{model_name(s) + ", " + at + ": frequency per pair", "pair", "radians per position", {}, true};
    if (freq != freq_unscaled) frequencies.series.push_back(series("without rope_scaling", 1, freq_unscaled));
    frequencies.series.push_back(series("as the model turns", 0, freq));
    LineChart angles{at + ": angles at query position " + std::to_string(shown.query_position), "pair",
                     "radians (0 .. 2 pi)", {}};
    angles.series.push_back(series("query at " + std::to_string(shown.query_position), 0, angle));
    LineChart key{at + ": key at position " + std::to_string(shown.key_position), "dimension", "value", {}};
    key.series = {series("before rotation", 1, rv.key_unrotated), series("as cached", 0, rv.key_rotated)};
    LineChart by_distance{at + ": score q.k by distance", "distance", "score", {}};
    by_distance.series.push_back(series("q . k . scale", 0, rv.score_by_distance));
    if (rv.scored_distance < int64_t(rv.score_by_distance.size())) {  // where the model scored them
        const auto [lo, hi] = std::minmax_element(rv.score_by_distance.begin(), rv.score_by_distance.end());
        by_distance.series.push_back({"scored at distance " + std::to_string(rv.scored_distance), kSeries[1],
                                      {double(rv.scored_distance), double(rv.scored_distance)}, {*lo, *hi}});
    }
    frequencies.markers = angles.markers = rv.pairs.size() <= 32;
    Figure f;
    f.name = "rotary_step" + std::to_string(w.step) + "_l" + std::to_string(shown.layer) + "_h" + std::to_string(shown.head) +
             "_q" + std::to_string(shown.query_position) + "_k" + std::to_string(shown.key_position);
    f.charts = {frequencies, angles, key, by_distance};
    return f;
}

// The paged cache: each sequence's block table (logical block -> pool block, the id written in the cell) and
// the pool, every cell shaded by how many sequences map the block: a prefix shared by three prompts is a run
// of 3s holding the same ids in three rows.
Figure memory_figure(const Snapshot& s, const ViewPrefs& v) {
    if (s.pool_views.empty()) nothing("the cache is not paged (Batch and memory: paged)");
    size_t step = 0;
    const StepRecord* r = viewed_step(s, v, &step);
    const PoolView& m = *s.pool_at(r ? int64_t(step) : -1);
    const int64_t N = int64_t(m.tables.size()), n_blocks = int64_t(m.blocks.size());
    int64_t widest = 1;
    for (const auto& t : m.tables) widest = std::max<int64_t>(widest, int64_t(t.size()));
    const std::string at = model_name(s) + (r ? ", step " + std::to_string(step) : ", before the first step");
    auto sharers = [&](int32_t b) { return b >= 0 && b < n_blocks ? float(m.blocks[size_t(b)].seqs.size()) : 0.0f; };
    Figure f;
    f.name = "memory" + (r ? "_step" + std::to_string(step) : std::string());
    FigureMap tables;
    tables.part = "block_tables";
    HeatmapPlot& t = tables.plot;
    t.rows = N, t.cols = widest;
    tables.values.assign(size_t(N * widest), 0.0f);
    tables.visible.assign(size_t(N * widest), 0);
    t.cell_texts.assign(size_t(N * widest), "");
    for (int64_t i = 0; i < N; ++i)
        for (size_t j = 0; j < m.tables[size_t(i)].size(); ++j) {
            const int32_t b = m.tables[size_t(i)][j];
            if (b < 0) continue;
            const size_t cell = size_t(i * widest) + j;
            tables.values[cell] = sharers(b), tables.visible[cell] = 1, t.cell_texts[cell] = "#" + std::to_string(b);
        }
    t.title = at + ": block tables (the pool block each logical block maps; " + std::to_string(m.n_mapped()) +
              " blocks hold what " + std::to_string(m.n_unshared()) + " would unshared)";
    t.value_label = "sequences sharing";
    t.lo = 0, t.hi = float(std::max<int64_t>(N, 1));
    t.row_positions = iota(N);
    t.col_positions = iota(widest);
    t.x_label = "logical block (positions block x " + std::to_string(m.block_size) + " ..)";
    t.y_label = "sequence";
    t.masked_label = "not mapped";
    f.maps.push_back(std::move(tables));

    FigureMap pool;
    pool.part = "pool";
    HeatmapPlot& p = pool.plot;
    // Rows of up to 16 blocks; a width that divides the pool, where one of 8..16 does, leaves no padding cell
    // that could pass for a free block.
    int64_t cols = std::min<int64_t>(16, std::max<int64_t>(n_blocks, 1));
    for (int64_t c = cols; c >= 8; --c)
        if (n_blocks % c == 0) {
            cols = c;
            break;
        }
    const int64_t rows = (n_blocks + cols - 1) / cols;
    p.rows = rows, p.cols = cols;
    pool.values.assign(size_t(rows * cols), 0.0f);
    pool.visible.assign(size_t(rows * cols), 0);
    p.cell_texts.assign(size_t(rows * cols), "");
    for (int64_t b = 0; b < n_blocks; ++b) {
        const PoolView::Block& k = m.blocks[size_t(b)];
        if (k.seqs.empty()) continue;
        pool.values[size_t(b)] = float(k.seqs.size()), pool.visible[size_t(b)] = 1;
        std::string who;
        for (int32_t q : k.seqs) who += (who.empty() ? "s" : ",") + std::to_string(q);
        p.cell_texts[size_t(b)] = who;
    }
    p.title = at + ": the block pool (" + std::to_string(n_blocks) + " blocks of " + std::to_string(m.block_size) +
              " positions; the sequences mapping each)";
    p.value_label = "sequences sharing";
    p.lo = 0, p.hi = float(std::max<int64_t>(N, 1));
    p.row_positions = iota(rows, 0);
    for (int64_t& y : p.row_positions) y *= cols;
    p.col_positions = iota(cols);
    p.x_label = "pool block = row + column";
    p.y_label = "pool block";
    p.masked_label = rows * cols > n_blocks ? "free (or held for step back); past block " + std::to_string(n_blocks - 1) + ": none"
                                            : "free (or held for step back)";
    f.maps.push_back(std::move(pool));
    return f;
}

Figure lab_figure(const Snapshot& s) {
    if (!s.lab) nothing("the cache lab has not measured (Measure)");
    const LabCurves c = lab_curves(*s.lab);
    Figure f;
    f.name = "cache_lab";
    LineChart added{model_name(s) + ": loss added, summed over the positions", "position", "nats", {}};
    LineChart kl{model_name(s) + ": KL to the full cache per position", "position", "nats", {}};
    for (size_t i = 0; i < c.names.size(); ++i) {
        added.series.push_back(series(c.names[i], i, c.added[i]));
        kl.series.push_back(series(c.names[i], i, c.kl[i]));
    }
    f.charts = {added, kl};
    return f;
}

const struct {
    Panel panel;
    const char* name;
} kFigurePanels[] = {{Panel::KvCache, "kv-cache"}, {Panel::Mask, "mask"},   {Panel::Quant, "kv-quant"},
                     {Panel::Heads, "heads"},      {Panel::Compare, "compare"}, {Panel::Lab, "lab"},
                     {Panel::Lens, "logit-lens"},  {Panel::Rotary, "rotary"},
                     {Panel::Memory, "memory"}};

}  // namespace

KvSlots kv_slots(const Trace& trace, size_t step, int64_t layer, int64_t head, bool values) {
    const StepRecord& r = trace[step];
    KvSlots out;
    const int64_t S = out.n_slot = r.cache.capacity, D = out.head_dim = r.rows.head_dim;
    out.values.assign(size_t(S * D), 0.0f);
    out.visible.assign(size_t(S * D), 0);
    for (int64_t slot = 0; slot < S; ++slot) {
        const int64_t p = r.cache.slot_positions[size_t(slot)];
        if (p < 0) continue;
        const float* row = values ? trace.value_row(step, layer, head, p) : trace.key_row(step, layer, head, p);
        if (!row) continue;
        for (int64_t d = 0; d < D; ++d) {
            out.values[size_t(slot * D + d)] = row[d];
            out.visible[size_t(slot * D + d)] = 1;
            out.absmax = std::max(out.absmax, std::fabs(row[d]));
        }
    }
    return out;
}

void score_change_cells(const KvQuantError& e, std::vector<float>& change, std::vector<uint8_t>& seen) {
    seen.resize(e.score_change.size());
    change.resize(e.score_change.size());
    for (size_t i = 0; i < seen.size(); ++i) {
        seen[i] = std::isnan(e.score_change[i]) ? 0 : 1;
        change[i] = seen[i] ? e.score_change[i] : 0.0f;
    }
}

int64_t lens_position(const StepRecord& r, const ViewPrefs& v) {
    const int64_t R = r.cost.n_rows_computed, first = r.cost.first_computed_position;
    return v.sel_query >= first && v.sel_query < first + R ? v.sel_query : first + R - 1;
}

RotaryShown rotary_shown(const Snapshot& s, const ViewPrefs& v, const StepRecord& r, size_t step) {
    const int64_t L = r.rows.n_layer, H = r.rows.n_head, D = r.rows.head_dim, C = H * D;
    RotaryShown out;
    out.step = step;
    out.layer = std::clamp<int64_t>(v.layer, 0, L - 1), out.head = std::clamp<int64_t>(v.head, 0, H - 1);
    const int64_t R = r.cost.n_rows_computed, first = r.cost.first_computed_position;
    const int64_t q_pos = v.sel_query >= first && v.sel_query < first + R ? v.sel_query : first + R - 1;
    int64_t k_pos = v.sel_key >= 0 && v.sel_key <= q_pos ? v.sel_key : 0;
    if (!s.trace().key_row(step, out.layer, out.head, k_pos)) k_pos = q_pos;
    out.query_position = q_pos, out.key_position = k_pos;
    out.k = s.trace().key_row(step, out.layer, out.head, k_pos);
    out.q = r.rows.q.data() + (out.layer * R + (q_pos - first)) * C + out.head * D;
    out.scale = r.rows.attention_scale > 0 ? r.rows.attention_scale : 1.0 / std::sqrt(double(D));
    // Sinks numbered inside the cache: the model turned the query back by the shift for these keys.
    const KeyRange seen = r.visible_keys(q_pos, out.layer);
    out.turned_back = seen.sink_shift > 0 && k_pos < seen.n_sink ? seen.sink_shift : 0;
    return out;
}

RotaryView rotary_view_of(const ModelConfig& cfg, const RotaryShown& x) {
    const int64_t max_distance = std::min<int64_t>(cfg.n_ctx - 1, 4095);
    return rotary_view(cfg, x.layer, x.q, x.query_position, x.k, x.key_position, x.scale, max_distance, x.turned_back);
}

LabCurves lab_curves(const LabReport& lab) {
    LabCurves c;
    const int64_t N = int64_t(lab.tokens.size()) - 1;
    const LabRun& ref = lab.runs[lab.reference];
    for (const LabRun& r : lab.runs) {
        std::vector<double> added;
        double sum = 0;
        for (int64_t p = 0; p < N; ++p) {
            sum += r.loss[size_t(p)] - ref.loss[size_t(p)];
            added.push_back(sum);
        }
        c.added.push_back(std::move(added));
        c.kl.push_back(r.kl);
        c.names.push_back(r.config.name);
    }
    return c;
}

bool has_figure(Panel p) {
    for (const auto& f : kFigurePanels)
        if (f.panel == p) return true;
    return false;
}

const char* figure_panel_name(Panel p) {
    for (const auto& f : kFigurePanels)
        if (f.panel == p) return f.name;
    return "";
}

bool figure_panel_named(const std::string& name, Panel& out) {
    for (const auto& f : kFigurePanels)
        if (name == f.name) return out = f.panel, true;
    return false;
}

Figure build_figure(Panel p, const Snapshot& snap, const ViewPrefs& prefs) {
    switch (p) {
        case Panel::KvCache: return kv_cache_figure(snap, prefs);
        case Panel::Quant: return quant_figure(snap, prefs);
        case Panel::Mask: return mask_figure(snap, prefs);
        case Panel::Heads: return heads_figure(snap);
        case Panel::Compare: return compare_figure(snap);
        case Panel::Lab: return lab_figure(snap);
        case Panel::Lens: return lens_figure(snap, prefs);
        case Panel::Rotary: return rotary_figure(snap, prefs);
        case Panel::Memory: return memory_figure(snap, prefs);
        default: break;
    }
    throw UsageError(std::string("the ") + panel_title(p) + " panel has no figure to save");
}

std::vector<std::string> save_figure(Panel p, const Snapshot& snap, const ViewPrefs& prefs, const std::string& name) {
    const std::string flag;  // the messages name the path; the button or script line says what was asked
    if (name.find('/') != std::string::npos || name == "." || name == "..")
        throw UsageError("'" + name + "' must be a file name without a folder (figures go to the Export folder)");
    Figure f = build_figure(p, snap, prefs);
    const PlotOutput out = prefs.export_plots;
    check_plot_scale("export scale", out.scale);
    const std::string base = name.empty() ? f.name : name;
    const fs::path dir = fs::path(prefs.export_dir) / "figures";
    std::vector<std::string> paths;
    if (f.maps.empty()) paths.push_back((dir / (base + plot_extension(out.format))).string());
    for (const FigureMap& m : f.maps)
        paths.push_back((dir / (base + (f.maps.size() > 1 ? "_" + m.part : "") + plot_extension(out.format))).string());

    // Every rule for every file first: a refusal writes nothing.
    check_output_folder(flag, prefs.export_dir);
    std::error_code ec;
    if (fs::exists(dir, ec)) {
        if (!fs::is_directory(dir, ec)) throw UsageError("cannot write " + dir.string() + ": a file is in the way (expected a folder)");
        for (const std::string& path : paths) check_output_file(flag, path, plot_output_kind(out.format));
    }
    make_output_folder(flag, prefs.export_dir);  // kvscope's manifest proves what it writes there
    fs::create_directory(dir, ec);
    if (ec) throw UsageError("cannot create " + dir.string() + ": " + ec.message());
    if (f.maps.empty()) {
        write_line_charts(paths[0], f.charts, out);
        return paths;
    }
    for (size_t i = 0; i < f.maps.size(); ++i) {
        FigureMap& m = f.maps[i];
        m.plot.values = m.values.data();
        m.plot.visible = m.visible.empty() ? nullptr : m.visible.data();
        write_heatmap_plot(paths[i], m.plot, out);
    }
    return paths;
}

void figure_button(PanelContext& c, Panel p) {
    struct Status {
        std::string text;
        bool error = false;
    };
    static std::map<Panel, Status> status;
    const std::string id = std::string("save figure ") + figure_panel_name(p);
    ImGui::PushID(id.c_str());
    const bool pressed = ImGui::SmallButton("Save figure");
    dump_item(id.c_str());
    const PlotOutput& out = c.prefs.export_plots;
    const std::string format = out.format == PlotFormat::Svg ? std::string("SVG") : "PNG at " + std::to_string(out.scale) + "x";
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("Write what this panel shows as %s into %s/figures/ (the Export panel's folder and format):\n"
                          "a title, axes with positions and tokens, and a colour bar",
                          format.c_str(), c.prefs.export_dir.c_str());
    if (pressed) {
        try {
            const std::vector<std::string> paths = save_figure(p, c.snap, c.prefs);
            std::string names;
            for (const std::string& path : paths) names += (names.empty() ? "" : ", ") + fs::path(path).filename().string();
            status[p] = {"saved " + names, false};
        } catch (const std::exception& e) {
            status[p] = {e.what(), true};
        }
    }
    const auto it = status.find(p);
    if (it != status.end()) {
        ImGui::SameLine();
        const ImVec4 colour = it->second.error ? ImVec4(1.0f, 0.5f, 0.4f, 1) : ImGui::GetStyle().Colors[ImGuiCol_TextDisabled];
        ImGui::TextColored(colour, "%s", it->second.text.c_str());  // one line; the panel clips what does not fit
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", it->second.text.c_str());
        dump_text((id + " status").c_str(), it->second.text);
    }
    ImGui::PopID();
}

}  // namespace kvscope::gui
