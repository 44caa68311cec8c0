#include "report/export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stb_image_write.h>  // implementation compiled into Debian's libstb

#include "analysis/logit_lens.h"
#include "base/errors.h"
#include "io/atomic_file.h"
#include "io/json_write.h"
#include "io/npy.h"
#include "io/output_path.h"
#include "io/ownership.h"
#include "report/colormap.h"
#include "report/plot.h"

namespace kvscope {
namespace {

// {"id": id, "text": its bytes as text} (put_text: "text_hex" too when they are not valid UTF-8); the
// text is null without a tokenizer, "<id N>" for an id the tokenizer does not have (padded vocabulary).
JsonOut token_entry(const Tokenizer* tokenizer, TokenId id) {
    JsonOut e = {{"id", id}, {"text", nullptr}};
    if (tokenizer) put_text(e, "text", tokenizer->bytes_or_id(id));
    return e;
}

// {"ids": ids, "text": [each token's text]} (put_texts), text null without a tokenizer.
JsonOut tokens_entry(const Tokenizer* tokenizer, const std::vector<TokenId>& ids) {
    JsonOut e = {{"ids", ids}, {"text", nullptr}};
    if (!tokenizer) return e;
    std::vector<std::string> texts;
    for (TokenId id : ids) texts.push_back(tokenizer->bytes_or_id(id));
    put_texts(e, "text", texts);
    return e;
}

std::string step_folder_name(size_t step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step_%04zu", step);
    return buf;
}

std::string head_prefix(int64_t il, int64_t h) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "l%02lld_h%02lld_", (long long)il, (long long)h);
    return buf;
}

// One written file, for meta.json's "files" list: what it holds, its dtype, shape and the meaning of
// each axis (outer to inner), so a reader needs no other document.
JsonOut file_entry(const std::string& name, const char* probe, std::optional<int64_t> il, std::optional<int64_t> h,
                   const char* dtype, const std::vector<int64_t>& shape, const std::vector<std::string>& axes,
                   const std::string& meaning, const JsonOut& extra = JsonOut::object()) {
    JsonOut e = {{"name", name}, {"probe", probe}};
    if (il) e["layer"] = *il;
    if (h) e["head"] = *h;
    e["dtype"] = dtype;
    e["shape"] = shape;
    e["axes"] = axes;
    e["meaning"] = meaning;
    e.update(extra);
    return e;
}

std::string mask_rule(const MaskRule& m) {
    return "row r (query position q = query_positions[r]) sees key position k iff " + m.formula() +
           "; column c is key position key_positions[c] = first_key_position + c; row r's own key is column "
           "own_key_column + r";
}

// Each layer's own rule (issue 43): a sliding layer of Gemma 3 or Mistral narrows the session's. The
// top-level rule is theirs when every layer shares it.
JsonOut layer_rules(const StepRecord& r, JsonOut& rule) {
    JsonOut layers = JsonOut::array();
    bool same = true;
    for (int64_t il = 0; il < r.rows.n_layer; ++il) {
        const MaskRule m = r.mask_rule(il);
        same = same && m.formula() == r.mask_rule(0).formula();
        layers.push_back({{"layer", il},
                          {"rule_name", m.name()},
                          {"window", m.window()},
                          {"layer_window", m.layer_window},
                          {"sinks", m.sinks},
                          {"rule", mask_rule(m)}});
    }
    rule = same && r.rows.n_layer > 0 ? JsonOut(mask_rule(r.mask_rule(0)))
                                      : JsonOut("each layer's own: see layers[il].rule (the model's sliding layers "
                                                "narrow the window)");
    return layers;
}

// meta.json's "mask": where the map starts, the session's window and sinks, and each layer's own rule.
JsonOut mask_json(const StepRecord& r, const std::vector<int64_t>& query_positions,
                  const std::vector<int64_t>& key_positions, int64_t own_key_column) {
    JsonOut rule;
    const JsonOut layers = layer_rules(r, rule);
    return {{"first_query_position", query_positions.empty() ? JsonOut() : JsonOut(query_positions.front())},
            {"first_key_position", key_positions.empty() ? JsonOut() : JsonOut(key_positions.front())},
            {"own_key_column", own_key_column},
            {"window", r.id.window},
            {"sinks", r.id.sinks},
            {"sink_positions", sink_positions_name(r.id.sink_positions)},
            {"values", "mask.npy: 1 = visible, 0 = masked; scores.npy holds -inf where masked"},
            {"rule", rule},
            {"layers", layers},
            {"cross_attention", r.rows.encoder ? JsonOut("no mask: every decoder query sees all source tokens") : JsonOut()}};
}

}  // namespace

// The cache edits made before a step (cache_edit.h): what changed, and the next prediction before / after.
JsonOut edits_json(const Tokenizer* tokenizer, const std::vector<CacheEditRecord>& edits) {
    JsonOut out = JsonOut::array();
    for (const CacheEditRecord& r : edits) {
        const EditComparison& c = r.effect;
        JsonOut movers = JsonOut::array();
        for (const TokenShift& m : c.movers) {
            JsonOut e = token_entry(tokenizer, m.token);
            e["p_before"] = m.p_before;
            e["p_after"] = m.p_after;
            movers.push_back(e);
        }
        out.push_back({{"kind", cache_edit_kind_name(r.edit.kind)},
                       {"position", r.edit.position},
                       {"layer", r.edit.layer < 0 ? JsonOut("all") : JsonOut(r.edit.layer)},
                       {"kv_head", r.edit.kv_head < 0 ? JsonOut("all") : JsonOut(r.edit.kv_head)},
                       {"source", r.edit.kind == CacheEditKind::Patch ? JsonOut(r.edit.source) : JsonOut()},
                       {"n_changed", r.n_changed},
                       {"next_position", c.position},
                       {"next_token", token_entry(tokenizer, c.token)},
                       {"kl", c.kl},
                       {"kl_is", "KL(before || after) in nats, softmax of the logits in double; before = no edit since the "
                                 "previous step, after = every edit up to this one"},
                       {"top1_before", token_entry(tokenizer, c.top1_before)},
                       {"p_top1_before", c.p_top1_before},
                       {"top1_after", token_entry(tokenizer, c.top1_after)},
                       {"p_top1_after", c.p_top1_after},
                       {"movers", movers}});
    }
    return out;
}


void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi) {
    write_heatmap_png(path, rows, cols, values, visible, lo, hi, viridis());
}

void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi, const ColorTable& table) {
    if (rows <= 0 || cols <= 0)
        throw UsageError("cannot write " + path + ": a heatmap needs at least one row and one column");
    const HeatmapImage image = render_heatmap(rows, cols, values, visible, lo, hi, table);
    write_png_rgb(path, image.width, image.height, image.rgb.data());
}

std::string encode_png_rgb(int64_t width, int64_t height, const uint8_t* rgb) {
    auto append = [](void* context, void* data, int size) {
        static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(size));
    };
    std::string bytes;
    const int w = int(width), h = int(height);
    if (!stbi_write_png_to_func(append, &bytes, w, h, 3, rgb, w * 3)) throw UsageError("PNG encoding failed");
    return bytes;
}

void write_png_rgb(const std::string& path, int64_t width, int64_t height, const uint8_t* rgb) {
    // stb encodes into memory; the file is then replaced whole.
    std::string bytes;
    try {
        bytes = encode_png_rgb(width, height, rgb);
    } catch (const UsageError& e) {
        throw UsageError("cannot write " + path + ": " + e.what());
    }
    write_file_atomic(path, bytes);
}

namespace {
// One attention map of a step as .npy arrays and labelled PNG heatmaps, files named base + "scores.npy"
// etc. `what` names the map in the PNG titles ("step 3, layer 1, head 0").
void write_map(const std::string& folder, const std::string& base, const AttentionMap& m, int64_t il, int64_t h,
               const std::string& what, JsonOut& files, const PlotOutput& out,
               const std::vector<std::string>& position_texts = {}) {
    const std::vector<int64_t> shape = {m.n_query, m.n_key};  // (R, P)
    const bool cross = base.rfind("cross_", 0) == 0, encoder = base.rfind("encoder_", 0) == 0;
    const std::vector<std::string> axes = {
        encoder ? "query row r: source position r" : "query row r: query_positions[r]",
        cross || encoder ? "key column c: source position c" : "key column c: key_positions[c]"};
    const std::string prefix = folder + "/" + base;
    // Masked cells hold -inf in scores.npy: a plain softmax over a row then gives weights.npy.
    std::vector<float> masked_scores = m.scores;  // (R, P)
    for (size_t c = 0; c < masked_scores.size(); ++c)
        if (!m.visible[c]) masked_scores[c] = -INFINITY;
    write_npy_f32(prefix + "scores.npy", shape, masked_scores.data());
    write_npy_f32(prefix + "weights.npy", shape, m.weights.data());
    write_npy_u8(prefix + "mask.npy", shape, m.visible.data());
    files.push_back(file_entry(base + "scores.npy", probe_name(Probe::Scores), il, h, "float32", shape, axes,
                               "attention scores q.k / sqrt(head_dim) of visible cells; -inf where the mask hides "
                               "the key, so softmax over each row equals weights.npy"));
    files.push_back(file_entry(base + "weights.npy", probe_name(Probe::Weights), il, h, "float32", shape, axes,
                               "softmax weights; each row sums to 1 over visible cells, 0 where masked"));
    files.push_back(file_entry(base + "mask.npy", probe_name(Probe::Mask), il, h, "uint8", shape, axes,
                               "1 = the query row sees this key (visible), 0 = masked (a future key, or outside "
                               "the window and not a sink)"));

    // Weights on a fixed [0, 1] scale so heads compare; scores on ±max|visible score|, 0 = light grey.
    HeatmapPlot plot;
    plot.rows = m.n_query;
    plot.cols = m.n_key;
    plot.visible = m.visible.data();
    plot.row_positions = m.query_positions;
    plot.col_positions = m.key_positions;
    auto texts_of = [&](const std::vector<int64_t>& positions) {
        std::vector<std::string> texts;
        for (int64_t p : positions)
            texts.push_back(p >= 0 && size_t(p) < position_texts.size() ? position_texts[size_t(p)] : "");
        return texts;
    };
    if (!position_texts.empty()) {
        plot.row_labels = texts_of(m.query_positions);
        plot.col_labels = texts_of(m.key_positions);
    }
    // A PNG's pixels are (y, x, RGB); an SVG's user units are (y, x) of its viewBox, the same layout.
    const bool svg = out.format == PlotFormat::Svg;
    const std::string ext = plot_extension(out.format);
    auto plot_entry = [&](const std::string& name, Probe probe, const PlotArea& a, const char* colormap) {
        const std::vector<int64_t> shape = svg ? std::vector<int64_t>{a.image_height, a.image_width}
                                               : std::vector<int64_t>{a.image_height, a.image_width, 3};
        const std::vector<std::string> image_axes = svg ? std::vector<std::string>{"image y", "image x"}
                                                        : std::vector<std::string>{"image y", "image x", "RGB"};
        return file_entry(name, probe_name(probe), il, h, svg ? "svg" : "png_rgb8", shape, image_axes,
                          std::string(probe == Probe::Weights ? "softmax weights" : "scores") +
                              " as a heatmap: rows = query positions (left axis), columns = key positions (bottom "
                              "axis), masked cells hatched grey",
                          {{"colormap", colormap},
                           {"range", {plot.lo, plot.hi}},
                           {"scale", a.scale},
                           {"cells", {{"x", a.x}, {"y", a.y}, {"width", a.width}, {"height", a.height}}}});
    };
    plot.title = what + ": softmax weights";
    plot.value_label = "weight";
    plot.values = m.weights.data();
    plot.lo = 0;
    plot.hi = 1;
    plot.table = &viridis();
    const PlotArea weights_area = write_heatmap_plot(prefix + "weights" + ext, plot, out);
    files.push_back(plot_entry(base + "weights" + ext, Probe::Weights, weights_area, "viridis"));

    float extent = 0;
    for (size_t c = 0; c < m.scores.size(); ++c)
        if (m.visible[c] && std::isfinite(m.scores[c])) extent = std::max(extent, std::abs(m.scores[c]));
    if (extent == 0) extent = 1;
    plot.title = what + ": scores q.k/sqrt(d)";
    plot.value_label = "score";
    plot.values = m.scores.data();
    plot.lo = -extent;
    plot.hi = extent;
    plot.table = &diverging();
    const PlotArea scores_area = write_heatmap_plot(prefix + "scores" + ext, plot, out);
    files.push_back(plot_entry(base + "scores" + ext, Probe::Scores, scores_area, "diverging"));

    // The step folder is the trace's: the same maps in the other format, from an earlier export, would
    // disagree with meta.json (and maybe with this run), so they go.
    const std::string other = plot_extension(svg ? PlotFormat::Png : PlotFormat::Svg);
    for (const char* name : {"weights", "scores"}) remove_written(prefix + name + other);  // never a file kvscope did not write
}
// The token text (Tokenizer's display form) at every position steps 0..step wrote, for the heatmaps'
// axes; empty without a tokenizer, "" for an id the tokenizer does not know.
std::vector<std::string> position_texts(const Trace& trace, size_t step, const Tokenizer* tokenizer) {
    std::vector<std::string> out;
    if (!tokenizer) return out;
    for (size_t s = 0; s <= step; ++s) {
        const StepRecord& r = trace[s];
        for (size_t k = 0; k < r.id.tokens.size(); ++k) {
            const int64_t pos = r.id.first_position + int64_t(k);
            const TokenId id = r.id.tokens[k];
            if (pos < 0) continue;
            if (out.size() <= size_t(pos)) out.resize(size_t(pos) + 1);
            out[size_t(pos)] = display_bytes(tokenizer->bytes_or_id(id));
        }
    }
    return out;
}

// Rows recorded per query head (RecordedRows) -> one copy per K/V head, as the cache holds them:
// K/V head g is query head g * (H / K)'s copy. (N, H * D) -> (N, K * D)
std::vector<float> kv_heads_only(const std::vector<float>& rows, int64_t N, int64_t H, int64_t K, int64_t D) {
    const int64_t group = H / K;
    std::vector<float> out(size_t(N * K * D));  // (N, K * D)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < K; ++g)
            std::memcpy(out.data() + (n * K + g) * D, rows.data() + (n * H + g * group) * D, size_t(D) * sizeof(float));
    return out;
}

// The step and scope exist: refused (UsageError) before anything is written.
void check_step(const Trace& trace, size_t step, const ExportScope& scope) {
    if (step >= trace.size())
        throw UsageError("export: step " + std::to_string(step) + " is not in the trace (" +
                         std::to_string(trace.size()) + " steps)");
    check_plot_scale("export: plot scale", scope.plots.scale);
    const RecordedRows& rows = trace[step].rows;
    if (scope.layer && (*scope.layer < 0 || *scope.layer >= rows.n_layer))
        throw UsageError("export: layer " + std::to_string(*scope.layer) + " does not exist (the model has " +
                         std::to_string(rows.n_layer) + " layers)");
    if (scope.head && (*scope.head < 0 || *scope.head >= rows.n_head))
        throw UsageError("export: head " + std::to_string(*scope.head) + " does not exist (the model has " +
                         std::to_string(rows.n_head) + " heads)");
}

// A step's sizes, as meta.json names them: L layers, H heads, K K/V heads, D head_dim, C = H * D,
// R rows computed this step.
struct StepDims {
    int64_t L, H, K, D, C, R;
    explicit StepDims(const StepRecord& r)
        : L(r.rows.n_layer), H(r.rows.n_head), K(r.rows.n_kv_head > 0 ? r.rows.n_kv_head : r.rows.n_head),
          D(r.rows.head_dim), C(r.rows.n_head * r.rows.head_dim), R(r.cost.n_rows_computed) {}
};

// The step's folder in `dir`, made if it is not there.
std::string make_step_folder(const std::string& dir, size_t step) {
    const std::string folder = dir + "/" + step_folder_name(step);
    std::error_code ec;
    std::filesystem::create_directory(folder, ec);
    if (ec || !std::filesystem::is_directory(folder))
        throw LoadError(folder, "cannot create folder" + (ec ? ": " + ec.message() : ": a file is in the way"));
    return folder;
}

// logit_lens.json: the logit lens of the last computed row, top 10 at every depth.
void write_logit_lens(const std::string& folder, const StepRecord& r, const Model& model, const StepDims& n,
                      JsonOut& files) {
    const LogitLens lens = logit_lens(model, r.rows, n.R - 1, 10);
    JsonOut depths = JsonOut::array();
    for (size_t d = 0; d < lens.depths.size(); ++d) {
        JsonOut top = JsonOut::array();
        for (const TokenProbability& t : lens.depths[d].top)
            top.push_back({{"id", t.id}, {"probability", t.probability}, {"logit", t.logit}});
        depths.push_back({{"depth", d}, {"entropy", lens.depths[d].entropy}, {"top", top}});
    }
    const JsonOut doc = {{"position", r.cost.first_computed_position + n.R - 1},
                         {"row", n.R - 1},
                         {"rule", "depth d: the residual entering layer d (0 = embeddings, L = after the last "
                                  "layer) through the final norm and the output layer; softmax at temperature 1"},
                         {"depths", depths}};
    write_file_atomic(folder + "/logit_lens.json", json_text(doc, 1) + "\n");
    files.push_back(file_entry("logit_lens.json", "logit_lens", {}, {}, "json",
                               {n.L + 1, int64_t(lens.depths.front().top.size())}, {"depth", "rank"},
                               "the logit lens of the last computed row: the top tokens at every depth"));
}

// The recorded rows: q.npy, k.npy, v.npy, residual.npy (and logit_lens.json), cross_q.npy.
void write_rows(const std::string& folder, const StepRecord& r, const ExportScope& scope, const StepDims& n,
                JsonOut& files) {
    const std::vector<int64_t> rows_shape = {n.L, n.R, n.C}, kv_shape = {n.L, n.R, n.K * n.D};
    write_npy_f32(folder + "/q.npy", rows_shape, r.rows.q.data());
    write_npy_f32(folder + "/k.npy", kv_shape, kv_heads_only(r.rows.k, n.L * n.R, n.H, n.K, n.D).data());
    write_npy_f32(folder + "/v.npy", kv_shape, kv_heads_only(r.rows.v, n.L * n.R, n.H, n.K, n.D).data());
    files.push_back(file_entry("q.npy", "q", {}, {}, "float32", rows_shape,
                               {"layer", "row r: position first_computed_position + r", "channel: head * head_dim + d"},
                               "the q vectors of the rows computed this step, every layer"));
    for (const char* name : {"k", "v"})
        files.push_back(file_entry(std::string(name) + ".npy", name, {}, {}, "float32", kv_shape,
                                   {"layer", "row r: position first_computed_position + r",
                                    "channel: kv_head * head_dim + d (query head h reads kv_head h / (n_head / n_kv_head))"},
                                   std::string("the ") + name + " vectors of the rows computed this step, every layer, "
                                   "as the cache holds them" + (std::string(name) == "k" ? " (after rotation for rotary models)" : "")));
    if (!r.rows.residual.empty()) {
        const int64_t hidden = int64_t(r.rows.residual.size()) / ((n.L + 1) * n.R);
        const std::vector<int64_t> shape = {n.L + 1, n.R, hidden};
        write_npy_f32(folder + "/residual.npy", shape, r.rows.residual.data());
        files.push_back(file_entry("residual.npy", "residual", {}, {}, "float32", shape,
                                   {"depth d: entering layer d (0 = the embeddings); L = leaving the last layer, before the final norm",
                                    "row r: position first_computed_position + r", "channel"},
                                   "the residual stream of the rows computed this step, what a logit lens reads"));
        if (scope.logit_lens) write_logit_lens(folder, r, *scope.logit_lens, n, files);
    }
    if (!r.rows.cross_q.empty()) {  // encoder-decoder: the cross-attention queries of the computed rows
        write_npy_f32(folder + "/cross_q.npy", rows_shape, r.rows.cross_q.data());
        files.push_back(file_entry("cross_q.npy", "cross_q", {}, {}, "float32", rows_shape,
                                   {"layer", "row r: position first_computed_position + r", "channel: head * head_dim + d"},
                                   "the cross-attention queries of the rows computed this step, every decoder layer"));
    }
}

// The attention maps of the heads in scope (cross- and encoder attention too); the last map's query and
// key positions go to query_positions / key_positions. Returns meta.json's "heatmaps" member.
JsonOut write_maps(const Trace& trace, size_t step, const Tokenizer* tokenizer, const std::string& folder,
                   const ExportScope& scope, const StepDims& n, JsonOut& files,
                   std::vector<int64_t>& query_positions, std::vector<int64_t>& key_positions) {
    const StepRecord& r = trace[step];
    const int64_t l0 = scope.layer.value_or(0), l1 = scope.layer ? *scope.layer + 1 : n.L;
    const int64_t h0 = scope.head.value_or(0), h1 = scope.head ? *scope.head + 1 : n.H;
    std::string skipped;
    const std::vector<std::string> texts = position_texts(trace, step, tokenizer);
    for (int64_t il = l0; il < l1 && skipped.empty(); ++il)
        for (int64_t h = h0; h < h1 && skipped.empty(); ++h) {
            AttentionMap m;
            try {
                m = attention_map(trace, step, il, h);
            } catch (const UsageError& e) {  // keys from an unrecorded step: nothing exact to draw
                skipped = e.what();
                break;
            }
            query_positions = m.query_positions;
            key_positions = m.key_positions;
            const std::string what = "step " + std::to_string(step) + ", layer " + std::to_string(il) + ", head " + std::to_string(h);
            write_map(folder, head_prefix(il, h), m, il, h, what, files, scope.plots, texts);
            if (r.rows.encoder && !r.rows.cross_q.empty())  // decoder queries x source positions
                write_map(folder, "cross_" + head_prefix(il, h), cross_attention_map(trace, step, il, h), il, h,
                          "cross-attention " + what, files, scope.plots);
        }
    if (r.rows.ran_encoder && r.rows.encoder && !r.rows.encoder->q.empty())
        for (int64_t il = 0; il < r.rows.encoder->n_encoder_layer; ++il)
            for (int64_t h = h0; h < h1; ++h)
                write_map(folder, "encoder_" + head_prefix(il, h), encoder_attention_map(*r.rows.encoder, il, h), il, h,
                          "encoder layer " + std::to_string(il) + ", head " + std::to_string(h), files, scope.plots);
    return {{"written", skipped.empty()}, {"reason", skipped.empty() ? JsonOut() : JsonOut(skipped)}};
}

// meta.json's "eviction" member: null without a policy.
JsonOut eviction_json(const StepRecord& r, const StepDims& n) {
    if (r.eviction.policy.empty()) return JsonOut();
    JsonOut events = JsonOut::array();
    for (const EvictionEvent& e : r.eviction.events)
        events.push_back({{"layer", e.layer}, {"kv_head", e.kv_head}, {"position", e.position}, {"score", e.score},
                          {"restored", e.restored}});
    return {{"policy", r.eviction.policy},
            {"about", "keys evicted after this step's queries attended; masked from the next step on"},
            {"events", events},
            {"kept", r.cache.kept.empty() ? JsonOut() : JsonOut(r.cache.kept)},
            {"kept_shape", {n.L, n.K}},
            {"bytes_kept", r.cache.bytes_kept}};
}

// meta.json, every member but "heatmaps" and "files", which the caller knows.
JsonOut meta_json(const StepRecord& r, const Tokenizer* tokenizer, const StepDims& n,
                  const std::vector<int64_t>& query_positions, const std::vector<int64_t>& key_positions,
                  const JsonOut& heatmaps, const JsonOut& files) {
    JsonOut top = JsonOut::array();
    for (const auto& t : r.prediction.top) {
        JsonOut e = token_entry(tokenizer, t.id);
        e["probability"] = t.probability;
        e["logit"] = t.logit;
        top.push_back(std::move(e));
    }
    // The column of row 0's own key (row r's is own_key_column + r): a column index, not a position.
    const int64_t own_key_column = query_positions.empty() || key_positions.empty()
                                       ? 0 : query_positions.front() - key_positions.front();
    const char* adopted_from = r.cost.adopted_from == StepCost::Source::PromptCache    ? "prompt_cache"
                               : r.cost.adopted_from == StepCost::Source::SharedPrefix ? "shared_prefix"
                                                                                    : nullptr;
    JsonOut encoder;  // null for a decoder-only model
    if (r.rows.encoder)
        encoder = {{"source", tokens_entry(tokenizer, r.rows.encoder->source)},
                   {"ran_this_step", r.rows.ran_encoder},
                   {"cross_cache_bytes", r.rows.encoder->cross_bytes()}};
    return {
        {"format", "kvscope-attention-step"},
        {"version", 2},
        {"step", r.id.index},
        {"phase", phase_name(r.id.phase)},
        {"cache_on", r.id.cache_on},
        {"recorded", r.recorded()},
        {"tokens", tokens_entry(tokenizer, r.id.tokens)},
        {"first_position", r.id.first_position},
        {"n_rows_computed", n.R},
        {"first_computed_position", r.cost.first_computed_position},
        {"n_rows_reused", r.cost.n_rows_reused},
        {"query_positions", query_positions},
        {"key_positions", key_positions},
        {"mask", mask_json(r, query_positions, key_positions, own_key_column)},
        {"adopted", {{"positions", r.cost.n_adopted}, {"from", adopted_from ? JsonOut(adopted_from) : JsonOut()}}},
        {"encoder", encoder},
        {"model", {{"n_layer", n.L}, {"n_head", n.H}, {"n_kv_head", n.K}, {"head_dim", n.D}}},
        {"shapes", {{"q", {n.L, n.R, n.C}},
                    {"kv", {n.L, n.R, n.K * n.D}},
                    {"attention", {int64_t(query_positions.size()), int64_t(key_positions.size())}},
                    {"logits", r.prediction.logits.empty() ? JsonOut() : JsonOut::array({int64_t(r.prediction.logits.size())})}}},
        {"legend", "L = layers, R = rows computed this step (queries), P = key positions, C = n_head * head_dim, "
                   "K = n_kv_head, V = vocabulary"},
        {"chosen", r.prediction.chosen ? token_entry(tokenizer, *r.prediction.chosen) : JsonOut()},
        {"top", top},
        {"entropy", r.prediction.entropy},
        {"flops", r.cost.flops},
        {"seconds", r.cost.seconds},
        {"compute_seconds", r.cost.compute_seconds},
        {"cache_state", {{"capacity", r.cache.capacity},
                         {"used", r.cache.used},
                         {"write_slot", r.cache.write_slot},
                         {"next_position", r.cache.next_position},
                         {"bytes_used", r.cache.bytes_used},
                         {"bytes_capacity", r.cache.bytes_capacity},
                         {"slot_positions", r.cache.slot_positions}}},
        {"eviction", eviction_json(r, n)},
        {"heatmaps", heatmaps},
        {"files", files},
        {"edits", edits_json(tokenizer, r.edits)}};
}

// One step's folder in `dir`, which the caller made kvscope's (make_output_folder checks every file in
// it: once per export, not once per step).
std::string write_step(const Trace& trace, size_t step, const Tokenizer* tokenizer, const std::string& dir,
                       const ExportScope& scope) {
    check_step(trace, step, scope);
    const StepRecord& r = trace[step];
    const StepDims n(r);
    const std::string folder = make_step_folder(dir, step);

    JsonOut files = JsonOut::array();  // meta.json "files" entries
    std::vector<int64_t> query_positions, key_positions;
    JsonOut heatmaps;                  // meta.json "heatmaps" member
    if (r.recorded()) {
        write_rows(folder, r, scope, n, files);
        heatmaps = write_maps(trace, step, tokenizer, folder, scope, n, files, query_positions, key_positions);
    } else {
        heatmaps = {{"written", false}, {"reason", "the step ran with recording off: no q/k/v rows were kept"}};
    }
    if (query_positions.empty()) {  // no map was made: the same positions attention_map would use
        const int64_t q0 = r.cost.first_computed_position;
        for (int64_t i = 0; i < n.R; ++i) query_positions.push_back(q0 + i);
        const int64_t first_key = r.visible_keys(q0).n_sink > 0 ? 0 : r.visible_from(q0);
        for (int64_t p = first_key; p < q0 + n.R; ++p) key_positions.push_back(p);
    }
    const Prediction& pred = r.prediction;
    if (!pred.logits.empty()) {
        write_npy_f32(folder + "/logits.npy", {int64_t(pred.logits.size())}, pred.logits.data());
        files.push_back(file_entry("logits.npy", probe_name(Probe::Logits), {}, {}, "float32",
                                   {int64_t(pred.logits.size())}, {"token id"},
                                   "the logits the next token was chosen from (last computed row)"));
    }
    files.push_back(file_entry("meta.json", "meta", {}, {}, "json", {}, {}, "this file"));
    const JsonOut meta = meta_json(r, tokenizer, n, query_positions, key_positions, heatmaps, files);
    write_file_atomic(folder + "/meta.json", json_text(meta, 2) + "\n");
    return folder;
}

}  // namespace

std::string export_step(const Trace& trace, size_t step, const Tokenizer* tokenizer, const std::string& dir,
                        const ExportScope& scope) {
    check_step(trace, step, scope);
    make_output_folder("", dir);
    return write_step(trace, step, tokenizer, dir, scope);
}

// Step folders of an earlier, longer trace in `dir` (step_NNNN with N >= n_steps): what kvscope wrote in
// them goes (ownership.h), anything else stays, and so does its folder.
int64_t remove_stale_step_folders(const std::string& dir, size_t n_steps) {
    namespace fs = std::filesystem;
    int64_t removed = 0;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() < 9 || name.rfind("step_", 0) != 0 || !e.is_directory(ec) ||
            name.find_first_not_of("0123456789", 5) != std::string::npos)
            continue;
        if (std::stoull(name.substr(5)) < n_steps) continue;
        if (remove_written_tree(e.path().string()).empty()) ++removed;
    }
    return removed;
}

int64_t export_trace(const Trace& trace, const Tokenizer* tokenizer, const std::string& dir, const ExportScope& scope,
                     const std::function<void(size_t)>& on_step) {
    make_output_folder("", dir);
    JsonOut steps = JsonOut::array();
    for (size_t s = 0; s < trace.size(); ++s) {
        write_step(trace, s, tokenizer, dir, scope);
        const StepRecord& r = trace[s];
        steps.push_back({{"index", r.id.index},
                         {"folder", step_folder_name(s)},
                         {"phase", phase_name(r.id.phase)},
                         {"cache_on", r.id.cache_on},
                         {"recorded", r.recorded()},
                         {"first_position", r.id.first_position},
                         {"tokens", r.id.tokens},
                         {"text", nullptr},
                         {"n_rows_computed", r.cost.n_rows_computed},
                         {"n_rows_reused", r.cost.n_rows_reused},
                         {"window", r.id.window},
                         {"chosen", r.prediction.chosen ? JsonOut(*r.prediction.chosen) : JsonOut()},
                         {"chosen_text", nullptr},
                         {"entropy", r.prediction.entropy},
                         {"seconds", r.cost.seconds},
                         {"compute_seconds", r.cost.compute_seconds},
                         {"flops", r.cost.flops},
                         {"turn", r.id.turn},
                         {"evicted", r.eviction.events.size()}});
        if (tokenizer) {  // the step's new tokens and its chosen one, as text (put_text)
            JsonOut& st = steps.back();
            std::string bytes;
            for (TokenId id : r.id.tokens) bytes += tokenizer->bytes_or_id(id);
            put_text(st, "text", bytes);
            if (r.prediction.chosen) put_text(st, "chosen_text", tokenizer->bytes_or_id(*r.prediction.chosen));
        }
        if (on_step) on_step(s);
    }
    JsonOut model;  // null for an empty trace
    if (!trace.empty())
    {
        const RecordedRows& rows = trace[0].rows;
        std::vector<int64_t> windows(size_t(rows.n_layer), 0);  // (L) the model's own window per layer, 0 = full
        for (int64_t il = 0; il < rows.n_layer; ++il) windows[size_t(il)] = rows.window_of(il);
        model = {{"n_layer", rows.n_layer}, {"n_head", rows.n_head},
                 {"n_kv_head", rows.n_kv_head > 0 ? rows.n_kv_head : rows.n_head}, {"head_dim", rows.head_dim},
                 {"attention_scale", rows.attention_scale}, {"layer_windows", windows}};
    }
    const JsonOut doc = {{"format", "kvscope-trace"},
                         {"version", 1},
                         {"model", model},
                         {"n_steps", trace.size()},
                         {"steps", steps}};
    write_file_atomic(dir + "/trace.json", json_text(doc, 2) + "\n");
    return remove_stale_step_folders(dir, trace.size());
}

}  // namespace kvscope
