#include "export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stb_image_write.h>  // implementation compiled into Debian's libstb

#include "colormap.h"
#include "errors.h"
#include "json.h"
#include "npy.h"

namespace kvscope {
namespace {

// JSON text pieces. Non-finite numbers have no JSON spelling and become null.
std::string num(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}
std::string num(float v) {
    if (!std::isfinite(v)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", double(v));
    return buf;
}
std::string num(int64_t v) { return std::to_string(v); }
std::string boolean(bool b) { return b ? "true" : "false"; }

template <class T>
std::string list(const std::vector<T>& values) {
    std::string s = "[";
    for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + num(int64_t(values[i]));
    return s + "]";
}

std::string object(const std::vector<std::pair<std::string, std::string>>& members, const char* sep = ", ") {
    return json_object(members, sep);
}

// Display text of a token, or null without a tokenizer (or for an id the tokenizer does not know).
std::string token_text(const Tokenizer* tokenizer, TokenId id) {
    if (!tokenizer || id < 0 || id >= tokenizer->n_vocab()) return "null";
    return json_escape(display_bytes(tokenizer->token_bytes(id)));
}

std::string tokens_text(const Tokenizer* tokenizer, const std::vector<TokenId>& ids) {
    if (!tokenizer) return "null";
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + token_text(tokenizer, ids[i]);
    return s + "]";
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

void make_folder(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (dir.empty()) throw UsageError("export: the output folder name is empty");
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir, ec))
        throw UsageError("cannot create folder " + dir + (ec ? ": " + ec.message() : ": a file is in the way"));
}

void png_sink(void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(size));
}

void write_png(const std::string& path, const HeatmapImage& image) {
    std::string bytes;
    const int w = int(image.width), h = int(image.height);
    if (!stbi_write_png_to_func(png_sink, &bytes, w, h, 3, image.rgb.data(), w * 3))
        throw UsageError("cannot write " + path + ": PNG encoding failed");
    write_file_atomic(path, bytes);
}

// One written file, for meta.json's "files" list.
std::string file_entry(const std::string& name, const char* probe, std::optional<int64_t> il,
                       std::optional<int64_t> h, const char* dtype, const std::vector<int64_t>& shape,
                       const std::string& extra = "") {
    std::vector<std::pair<std::string, std::string>> m = {{"name", json_escape(name)}, {"probe", json_escape(probe)}};
    if (il) m.push_back({"layer", num(*il)});
    if (h) m.push_back({"head", num(*h)});
    m.push_back({"dtype", json_escape(dtype)});
    m.push_back({"shape", list(shape)});
    std::string s = object(m);
    if (!extra.empty()) s.insert(s.size() - 1, ", " + extra);
    return s;
}

std::string mask_rule(int64_t window, int64_t sinks) {
    std::string rule = "row r (query position q = query_positions[r]) sees key position k iff k <= q";
    if (window > 0 && sinks > 0) rule += " and (k > q - " + std::to_string(window) + " or k < " + std::to_string(sinks) + ")";
    else if (window > 0) rule += " and k > q - " + std::to_string(window);
    return rule + "; column c is key position key_positions[0] + c; row r's own key is column offset + r";
}

}  // namespace

void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi) {
    write_heatmap_png(path, rows, cols, values, visible, lo, hi, viridis());
}

void write_heatmap_png(const std::string& path, int64_t rows, int64_t cols, const float* values,
                       const uint8_t* visible, float lo, float hi, const ColorTable& table) {
    if (rows <= 0 || cols <= 0)
        throw UsageError("cannot write " + path + ": a heatmap needs at least one row and one column");
    write_png(path, render_heatmap(rows, cols, values, visible, lo, hi, table));
}

namespace {
// One attention map of a step as .npy arrays and PNG heatmaps, files named base + "scores.npy" etc.
void write_map(const std::string& folder, const std::string& base, const AttentionMap& m, int64_t il, int64_t h,
           std::vector<std::string>& files) {
    const std::vector<int64_t> shape = {m.n_query, m.n_key};
    const std::string prefix = folder + "/" + base;
    write_npy_f32(prefix + "scores.npy", shape, m.scores.data());
    write_npy_f32(prefix + "weights.npy", shape, m.weights.data());
    write_npy_u8(prefix + "mask.npy", shape, m.visible.data());
    files.push_back(file_entry(base + "scores.npy", probe_name(Probe::Scores), il, h, "float32", shape));
    files.push_back(file_entry(base + "weights.npy", probe_name(Probe::Weights), il, h, "float32", shape));
    files.push_back(file_entry(base + "mask.npy", probe_name(Probe::Mask), il, h, "uint8", shape));

    // Weights on a fixed [0, 1] scale so heads compare; scores on ±max|visible score|, 0 = white.
    write_heatmap_png(prefix + "weights.png", m.n_query, m.n_key, m.weights.data(), m.visible.data(),
                      0.0f, 1.0f, viridis());
    float extent = 0;
    for (size_t c = 0; c < m.scores.size(); ++c)
        if (m.visible[c] && std::isfinite(m.scores[c])) extent = std::max(extent, std::abs(m.scores[c]));
    if (extent == 0) extent = 1;
    write_heatmap_png(prefix + "scores.png", m.n_query, m.n_key, m.scores.data(), m.visible.data(),
                      -extent, extent, diverging());
    const int64_t px = heatmap_cell_px(m.n_query, m.n_key);
    const std::vector<int64_t> image_shape = {std::min(m.n_query * px, heatmap_max_side_px),
                                              std::min(m.n_key * px, heatmap_max_side_px), 3};
    files.push_back(file_entry(base + "weights.png", probe_name(Probe::Weights), il, h, "png_rgb8",
                               image_shape, "\"colormap\": \"viridis\", \"range\": [0, 1]"));
    files.push_back(file_entry(base + "scores.png", probe_name(Probe::Scores), il, h, "png_rgb8",
                               image_shape, "\"colormap\": \"diverging\", \"range\": [" + num(-extent) +
                                                ", " + num(extent) + "]"));
}
}  // namespace

std::string export_step(const Trace& trace, size_t step, const Tokenizer* tokenizer, const std::string& dir,
                        const ExportScope& scope) {
    if (step >= trace.size())
        throw UsageError("export: step " + std::to_string(step) + " is not in the trace (" +
                         std::to_string(trace.size()) + " steps)");
    const StepRecord& r = trace[step];
    const int64_t L = r.rows.n_layer, H = r.rows.n_head, D = r.rows.head_dim, C = H * D, R = r.cost.n_rows_computed;
    if (scope.layer && (*scope.layer < 0 || *scope.layer >= L))
        throw UsageError("export: layer " + std::to_string(*scope.layer) + " does not exist (the model has " +
                         std::to_string(L) + " layers)");
    if (scope.head && (*scope.head < 0 || *scope.head >= H))
        throw UsageError("export: head " + std::to_string(*scope.head) + " does not exist (the model has " +
                         std::to_string(H) + " heads)");
    const std::string folder = dir + "/" + step_folder_name(step);
    make_folder(folder);

    std::vector<std::string> files;  // meta.json "files" entries
    std::vector<int64_t> query_positions, key_positions;
    std::string heatmaps;            // meta.json "heatmaps" member
    if (r.recorded()) {
        const std::vector<int64_t> rows_shape = {L, R, C};
        write_npy_f32(folder + "/q.npy", rows_shape, r.rows.q.data());
        write_npy_f32(folder + "/k.npy", rows_shape, r.rows.k.data());
        write_npy_f32(folder + "/v.npy", rows_shape, r.rows.v.data());
        for (const char* name : {"q", "k", "v"})
            files.push_back(file_entry(std::string(name) + ".npy", name, {}, {}, "float32", rows_shape));
        if (!r.rows.cross_q.empty()) {  // encoder-decoder: the cross-attention queries of the computed rows
            write_npy_f32(folder + "/cross_q.npy", rows_shape, r.rows.cross_q.data());
            files.push_back(file_entry("cross_q.npy", "cross_q", {}, {}, "float32", rows_shape));
        }

        const int64_t l0 = scope.layer.value_or(0), l1 = scope.layer ? *scope.layer + 1 : L;
        const int64_t h0 = scope.head.value_or(0), h1 = scope.head ? *scope.head + 1 : H;
        std::string skipped;
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
                write_map(folder, head_prefix(il, h), m, il, h, files);
                if (r.rows.encoder && !r.rows.cross_q.empty())  // decoder queries x source positions
                    write_map(folder, "cross_" + head_prefix(il, h), cross_attention_map(trace, step, il, h), il, h, files);
            }
        if (r.rows.ran_encoder && r.rows.encoder && !r.rows.encoder->q.empty())
            for (int64_t il = 0; il < r.rows.encoder->n_encoder_layer; ++il)
                for (int64_t h = h0; h < h1; ++h)
                    write_map(folder, "encoder_" + head_prefix(il, h), encoder_attention_map(*r.rows.encoder, il, h), il, h,
                              files);
        heatmaps = skipped.empty()
                       ? object({{"written", "true"}, {"reason", "null"}})
                       : object({{"written", "false"}, {"reason", json_escape(skipped)}});
    } else {
        heatmaps = object({{"written", "false"},
                           {"reason", json_escape("the step ran with recording off: no q/k/v rows were kept")}});
    }
    if (query_positions.empty()) {  // no map was made: the same positions attention_map would use
        const int64_t q0 = r.cost.first_computed_position;
        for (int64_t i = 0; i < R; ++i) query_positions.push_back(q0 + i);
        const int64_t first_key = r.visible_keys(q0).n_sink > 0 ? 0 : r.visible_from(q0);
        for (int64_t p = first_key; p < q0 + R; ++p) key_positions.push_back(p);
    }
    const Prediction& pred = r.prediction;
    if (!pred.logits.empty()) {
        write_npy_f32(folder + "/logits.npy", {int64_t(pred.logits.size())}, pred.logits.data());
        files.push_back(file_entry("logits.npy", probe_name(Probe::Logits), {}, {}, "float32",
                                   {int64_t(pred.logits.size())}));
    }

    std::string top = "[";
    for (size_t i = 0; i < pred.top.size(); ++i)
        top += (i ? ", " : "") + object({{"id", num(int64_t(pred.top[i].id))},
                                         {"text", token_text(tokenizer, pred.top[i].id)},
                                         {"probability", num(pred.top[i].probability)},
                                         {"logit", num(pred.top[i].logit)}});
    top += "]";
    const int64_t offset = query_positions.empty() || key_positions.empty()
                               ? 0 : query_positions.front() - key_positions.front();
    files.push_back(file_entry("meta.json", "meta", {}, {}, "json", {}));
    std::string file_list = "[\n    ";
    for (size_t i = 0; i < files.size(); ++i) file_list += (i ? ",\n    " : "") + files[i];
    file_list += "\n  ]";

    const EncoderOutput* enc = r.rows.encoder.get();
    const std::string meta = object(
        {{"format", "\"kvscope-attention-step\""},
         {"version", "1"},
         {"step", num(r.id.index)},
         {"phase", json_escape(phase_name(r.id.phase))},
         {"cache_on", boolean(r.id.cache_on)},
         {"recorded", boolean(r.recorded())},
         {"tokens", object({{"ids", list(r.id.tokens)}, {"text", tokens_text(tokenizer, r.id.tokens)}})},
         {"first_position", num(r.id.first_position)},
         {"n_rows_computed", num(R)},
         {"first_computed_position", num(r.cost.first_computed_position)},
         {"n_rows_reused", num(r.cost.n_rows_reused)},
         {"query_positions", list(query_positions)},
         {"key_positions", list(key_positions)},
         {"mask", object({{"offset", num(offset)},
                          {"window", num(r.id.window)},
                          {"sinks", num(r.id.sinks)},
                          {"rule", json_escape(mask_rule(r.id.window, r.id.sinks))}})},
         {"adopted", object({{"positions", num(r.cost.n_adopted)},
                             {"from", r.cost.adopted_from == StepCost::Source::PromptCache    ? "\"prompt_cache\""
                                      : r.cost.adopted_from == StepCost::Source::SharedPrefix ? "\"shared_prefix\""
                                                                                              : "null"}})},
         {"encoder", enc ? object({{"source", object({{"ids", list(enc->source)},
                                                     {"text", tokens_text(tokenizer, enc->source)}})},
                                   {"ran_this_step", boolean(r.rows.ran_encoder)},
                                   {"cross_cache_bytes", num(enc->cross_bytes())}})
                         : "null"},
         {"model", object({{"n_layer", num(L)}, {"n_head", num(H)}, {"head_dim", num(D)}})},
         {"shapes", object({{"q", list(std::vector<int64_t>{L, R, C})},
                            {"attention", list(std::vector<int64_t>{int64_t(query_positions.size()),
                                                                    int64_t(key_positions.size())})},
                            {"logits", pred.logits.empty() ? "null"
                                                           : list(std::vector<int64_t>{int64_t(pred.logits.size())})}})},
         {"legend", json_escape("L = layers, R = rows computed this step (queries), P = key positions, "
                                "C = n_head * head_dim, V = vocabulary")},
         {"chosen", pred.chosen
                        ? object({{"id", num(int64_t(*pred.chosen))}, {"text", token_text(tokenizer, *pred.chosen)}})
                        : "null"},
         {"top", top},
         {"entropy", num(r.prediction.entropy)},
         {"flops", num(r.cost.flops)},
         {"seconds", num(r.cost.seconds)},
         {"cache_state", object({{"capacity", num(r.cache.capacity)},
                                 {"used", num(r.cache.used)},
                                 {"write_slot", num(r.cache.write_slot)},
                                 {"next_position", num(r.cache.next_position)},
                                 {"bytes_used", num(r.cache.bytes_used)},
                                 {"bytes_capacity", num(r.cache.bytes_capacity)},
                                 {"slot_positions", list(r.cache.slot_positions)}})},
         {"heatmaps", heatmaps},
         {"files", file_list}},
        ",\n  ");
    write_file_atomic(folder + "/meta.json", meta.substr(0, 1) + "\n  " + meta.substr(1, meta.size() - 2) + "\n}\n");
    return folder;
}

void export_trace(const Trace& trace, const Tokenizer* tokenizer, const std::string& dir, const ExportScope& scope,
                  const std::function<void(size_t)>& on_step) {
    make_folder(dir);
    std::string steps;
    for (size_t s = 0; s < trace.size(); ++s) {
        export_step(trace, s, tokenizer, dir, scope);
        const StepRecord& r = trace[s];
        std::string text = "null";
        if (tokenizer) {
            std::string bytes;
            for (TokenId id : r.id.tokens)
                if (id >= 0 && id < tokenizer->n_vocab()) bytes += tokenizer->token_bytes(id);
            text = json_escape(display_bytes(bytes));
        }
        steps += (s ? ",\n    " : "\n    ") +
                 object({{"index", num(r.id.index)},
                         {"folder", json_escape(step_folder_name(s))},
                         {"phase", json_escape(phase_name(r.id.phase))},
                         {"cache_on", boolean(r.id.cache_on)},
                         {"recorded", boolean(r.recorded())},
                         {"first_position", num(r.id.first_position)},
                         {"tokens", list(r.id.tokens)},
                         {"text", text},
                         {"n_rows_computed", num(r.cost.n_rows_computed)},
                         {"n_rows_reused", num(r.cost.n_rows_reused)},
                         {"window", num(r.id.window)},
                         {"chosen", r.prediction.chosen ? num(int64_t(*r.prediction.chosen)) : "null"},
                         {"chosen_text", r.prediction.chosen ? token_text(tokenizer, *r.prediction.chosen) : "null"},
                         {"entropy", num(r.prediction.entropy)},
                         {"seconds", num(r.cost.seconds)},
                         {"flops", num(r.cost.flops)}});
        if (on_step) on_step(s);
    }
    const std::string model = trace.empty() ? "null"
                                            : object({{"n_layer", num(trace[0].rows.n_layer)},
                                                      {"n_head", num(trace[0].rows.n_head)},
                                                      {"head_dim", num(trace[0].rows.head_dim)}});
    write_file_atomic(dir + "/trace.json", "{\n  \"format\": \"kvscope-trace\",\n  \"version\": 1,\n  \"model\": " +
                                               model + ",\n  \"n_steps\": " + std::to_string(trace.size()) +
                                               ",\n  \"steps\": [" + steps + (steps.empty() ? "]" : "\n  ]") +
                                               "\n}\n");
}

}  // namespace kvscope
