// KV cache: K and V of the chosen layer and head after the viewed step, one row per cache slot
// (labelled with the position and token it holds), columns = head_dim. Rows written this step are
// outlined, the write pointer is marked, rows outside the window are dimmed, attention sinks marked;
// above, the fill of every layer and the bytes used. Encoder-decoder models show the cross-attention
// cache under it: S source rows per layer and head, written once by the encoder and never appended to.
#include "panels/kv_cache_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cache/kv_footprint.h"
#include "panels/figures.h"

namespace kvscope::gui {
namespace {

constexpr ImU32 kSourceInk = IM_COL32(215, 190, 240, 255);  // source tokens, as their chips in Controls

// The cross-attention cache's header lines: what it is, that it is fixed, and its bytes.
void cross_header(const StepRecord& r, int64_t ran) {
    const EncoderOutput& enc = *r.rows.encoder;
    wrapped_text({0.85f, 0.75f, 0.95f, 1}, "Cross-attention cache: %lld source rows x %lld", (long long)enc.n_source(),
                 (long long)enc.head_dim);
    dump_item("cross cache title");
    if (!r.id.cache_on && r.rows.ran_encoder)
        text_after({1, 0.6f, 0.4f, 1}, "cache OFF: this step ran the encoder again and recomputed it");
    else
        text_after({1, 0.8f, 0.3f, 1}, "FIXED: computed once by the encoder at step " + std::to_string(ran) +
                                           (r.rows.ran_encoder ? " (this step)" : ", read since"));
    help_marker("Cross-attention reads keys and values computed from the encoder's output, one row per source token "
                "(K|V = enc . crossattention.c_attn + bias, per decoder layer). They depend on the source only, so the "
                "first prefill step computes them and every later step reuses them; the decoder's own keys and values "
                "(the self-attention cache) grow by one row per token.");
    wrapped_disabled("%s (all %lld layers, K+V, float32), never appended to", human_bytes(double(enc.cross_bytes())).c_str(),
                     (long long)enc.n_layer);
}

// The cross-attention cache of decoder layer `layer`, head `head`: K and V (S, D) beside each other,
// source tokens as row labels, from `top` (labels) within `max_h`. Returns the bottom edge.
float cross_maps(PanelContext& c, const StepRecord& r, int64_t ran, int64_t layer, int64_t head, ImVec2 top, float label_w,
                 float map_w, float gap, float max_h) {
    const Model& model = c.snap.model();
    ViewPrefs& v = c.prefs;
    const std::shared_ptr<const EncoderOutput>& enc = r.rows.encoder;
    const int64_t S = enc->n_source(), D = enc->head_dim;
    const float title_h = ImGui::GetTextLineHeight() + 2;
    const float row_h = std::min(std::max(1.0f, max_h - title_h) / float(S), 22.0f);
    const ImVec2 size = {map_w, row_h * float(S)};
    ImDrawList* dl = ImGui::GetWindowDrawList();
    float abs[2] = {0, 0};
    const unsigned tex[2] = {c.maps.cross_kv_texture(enc, layer, head, false, &abs[0]),
                             c.maps.cross_kv_texture(enc, layer, head, true, &abs[1])};
    HeatmapResult h[2];
    for (int which = 0; which < 2; ++which) {
        const float x = top.x + label_w + float(which) * (map_w + gap);
        const float mx = std::max(abs[which], 1e-6f);
        HeatmapStyle st;
        st.colormap = Colormap::Diverging;
        st.lo = -mx;
        st.hi = mx;
        ImGui::SetCursorScreenPos({x, top.y});
        // "cross K" when it fits above the map, else "K" (the block's frame and header say it is the cross cache).
        const bool room = ImGui::CalcTextSize("cross K").x <= map_w + gap - 4;
        ImGui::TextColored({0.85f, 0.75f, 0.95f, 1}, "%s%s", room ? "cross " : "", which ? "V" : "K");
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("colour range +-%.2f", double(mx));
        ImGui::SetCursorScreenPos({x, top.y + title_h});
        h[which] = heatmap(which ? "cross V" : "cross K", tex[which], S, D, size, st);
        dump_item(which ? "cross V" : "cross K");
        // A frame in the source colour: this block is the other cache.
        dl->AddRect({h[which].p0.x - 1, h[which].p0.y - 1}, {h[which].p1.x + 1, h[which].p1.y + 1}, IM_COL32(150, 120, 190, 255));
    }
    const bool labels = row_h >= ImGui::GetTextLineHeight() - 2;
    for (int64_t sp = 0; sp < S; ++sp) {
        const float y0 = h[0].cell_min(sp, 0).y, y1 = h[0].cell_max(sp, 0).y;
        if (labels) {
            char label[64];
            std::snprintf(label, sizeof label, "s%lld %s", (long long)sp, short_token(model, enc->source[size_t(sp)], 4).c_str());
            dl->AddText({top.x, (y0 + y1) / 2 - ImGui::GetTextLineHeight() / 2}, kSourceInk, label);
        }
        if (sp == v.sel_source)
            for (const HeatmapResult& hh : h)
                dl->AddRect({hh.p0.x - 3, y0 - 1}, {hh.p1.x + 3, y1 + 1}, IM_COL32(90, 220, 255, 255), 0, 0, 2);
    }
    for (const HeatmapResult& hh : h)
        if (hh.hover_row >= 0) {
            const bool values = &hh == &h[1];
            const float* row = values ? enc->cross_value(layer, head, hh.hover_row) : enc->cross_key(layer, head, hh.hover_row);
            ImGui::BeginTooltip();
            ImGui::Text("source position %lld '%s'", (long long)hh.hover_row,
                        token_text(model, enc->source[size_t(hh.hover_row)]).c_str());
            ImGui::Text("cross %s[%lld] = %.5f", values ? "v" : "k", (long long)hh.hover_col, double(row[hh.hover_col]));
            ImGui::TextColored({1, 0.8f, 0.3f, 1}, "fixed: computed by the encoder at step %lld", (long long)ran);
            ImGui::EndTooltip();
            if (hh.clicked) v.sel_source = hh.hover_row;
        }
    return top.y + title_h + size.y;
}

// Grouped-query attention in one line: each K/V head as a framed box holding the query heads that read
// it; the selected query head and its K/V head in yellow. A click on a query head selects it; a click on
// a K/V head selects its group (its first query head, unless the selection is already one of its readers).
void kv_groups(ViewPrefs& v, const ModelConfig& cfg) {
    const int64_t K = cfg.kv_heads(), G = cfg.n_head / K;
    const std::string summary = K == cfg.n_head ? "multi-head attention: each query head has its own K/V head"
                                : K == 1        ? "multi-query attention: all " + std::to_string(cfg.n_head) +
                                               " query heads read the one K/V head"
                                                : "grouped-query attention: " + std::to_string(K) + " K/V heads, each read by " +
                                               std::to_string(G) + " query heads";
    wrapped_disabled("%s", summary.c_str());
    dump_text("kv groups", summary);
    if (K == cfg.n_head) return;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImGuiStyle& style = ImGui::GetStyle();
    const float right = ImGui::GetCursorScreenPos().x + ImGui::GetContentRegionAvail().x;
    const float head_w = ImGui::CalcTextSize("h00").x + 2 * style.FramePadding.x;
    const float label_w = ImGui::CalcTextSize("KV00").x + 6;
    const float group_w = label_w + float(G) * (head_w + 2) + 10;
    const int64_t selected_kv = cfg.kv_head_of(std::min(v.head, cfg.n_head - 1));
    std::string groups_text;  // "KV0: h0 h1 h2 | KV1: ..." for the layout dump
    for (int64_t kv = 0; kv < K; ++kv) {
        if (kv > 0) {
            ImGui::SameLine(0, 10);
            if (ImGui::GetCursorScreenPos().x + group_w > right) ImGui::NewLine();
        }
        const bool mine = kv == selected_kv;
        const ImVec2 p0 = ImGui::GetCursorScreenPos();
        char kv_label[24];
        std::snprintf(kv_label, sizeof kv_label, "KV%lld", (long long)kv);
        ImGui::PushStyleColor(ImGuiCol_Text, mine ? ImVec4{1, 0.8f, 0.3f, 1} : ImVec4{0.6f, 0.75f, 0.95f, 1});
        ImGui::PushStyleColor(ImGuiCol_Button, ImVec4{0, 0, 0, 0});
        if (ImGui::SmallButton(kv_label) && !mine) v.head = kv * G;
        ImGui::PopStyleColor(2);
        dump_item((std::string("kv head ") + kv_label).c_str());
        if (ImGui::IsItemHovered())
            ImGui::SetTooltip("K/V head %lld: one K row and one V row per position and layer, read by query heads "
                              "%lld..%lld (click: select this group)",
                              (long long)kv, (long long)(kv * G), (long long)(kv * G + G - 1));
        groups_text += kv ? " | KV" : "KV";
        groups_text += std::to_string(kv);
        groups_text += ':';
        for (int64_t h = kv * G; h < kv * G + G; ++h) {
            ImGui::SameLine(0, 2);
            const bool selected = h == v.head;
            if (selected) ImGui::PushStyleColor(ImGuiCol_Button, ImVec4{0.75f, 0.55f, 0.1f, 1});
            char label[16];
            std::snprintf(label, sizeof label, "h%lld", (long long)h);
            if (ImGui::SmallButton(label)) v.head = h;
            if (selected) ImGui::PopStyleColor();
            dump_item((std::string("kv query ") + label).c_str());
            if (ImGui::IsItemHovered())
                ImGui::SetTooltip("query head %lld reads K/V head %lld (h / %lld)", (long long)h, (long long)kv, (long long)G);
            groups_text += " h" + std::to_string(h);
        }
        const ImVec2 p1 = ImGui::GetItemRectMax();
        dl->AddRect({p0.x - 3, p0.y - 2}, {p1.x + 3, p1.y + 2}, mine ? IM_COL32(250, 200, 60, 255) : IM_COL32(90, 110, 150, 255),
                    3, 0, mine ? 2.0f : 1.0f);
    }
    dump_text("kv group heads", groups_text);
    ImGui::Dummy({1, 2});
}

// Bytes per token as the model caches, beside multi-head and multi-query attention for the same shape
// (bars to scale), and what the positions held now take.
void kv_bytes_meter(const ModelConfig& cfg, bool bf16, int64_t positions_held, const KvCacheView& cache) {
    const KvFootprint f = kv_footprint(cfg, bf16);
    const float bar_w = std::min(ImGui::GetContentRegionAvail().x * 0.4f, 220.0f);
    struct Line { const char* name; int64_t heads, bytes; bool model; };
    const Line lines[3] = {{"model", f.n_kv_head, f.per_token, true},
                           {"multi-head", f.n_head, f.per_token_mha, false},
                           {"multi-query", 1, f.per_token_mqa, false}};
    for (const Line& l : lines) {
        if (!l.model && l.heads == f.n_kv_head) continue;  // the model is that kind already
        char text[96];
        std::snprintf(text, sizeof text, "%s / token", human_bytes(double(l.bytes)).c_str());
        ImGui::PushStyleColor(ImGuiCol_PlotHistogram, l.model ? ImVec4{0.3f, 0.6f, 0.9f, 1} : ImVec4{0.45f, 0.45f, 0.5f, 1});
        ImGui::ProgressBar(float(double(l.bytes) / double(f.per_token_mha)), {bar_w, 0}, text);
        ImGui::PopStyleColor();
        ImGui::SameLine();
        ImGui::TextDisabled("%s: %lld K/V head%s", l.name, (long long)l.heads, l.heads == 1 ? "" : "s");
        if (ImGui::IsItemHovered())
            ImGui::SetTooltip("%s per layer; K and V rows of head_dim %lld values each", l.name, (long long)cfg.head_dim());
    }
    const std::string held = "held now: " + count_of(positions_held, "position") + " x " + human_bytes(double(f.per_token)) +
                             " = " + human_bytes(double(f.per_token * positions_held)) +
                             (f.n_kv_head < f.n_head ? " (multi-head: " + human_bytes(double(f.per_token_mha * positions_held)) + ")"
                                                     : std::string());
    wrapped_disabled("%s", held.c_str());
    if (!cache.layer_window.empty())  // the sliding layers store only their window: fewer bytes than every position
        dump_text("kv bytes stored", wrapped_disabled("stored: %s, the sliding layers keeping only their window plus the chunk "
                                                      "being written (every position in every layer: %s)",
                                                      human_bytes(double(cache.bytes_used)).c_str(),
                                                      human_bytes(double(f.per_token * positions_held)).c_str()));
    if (cache.sliding_kept_whole)  // the paged cache and int4 keep the sliding layers whole (kv_cache.h)
        dump_text("kv sliding kept whole", wrapped_disabled("the sliding layers keep every position in this cache, only "
                                                            "their mask slides: %s", cache.sliding_kept_whole));
    dump_text("kv bytes", "per_token=" + std::to_string(f.per_token) + " multi_head=" + std::to_string(f.per_token_mha) +
                              " multi_query=" + std::to_string(f.per_token_mqa) + " held=" + std::to_string(positions_held));
}

// What the K and V maps of one frame share: the viewed step, the shown layer and head, which slots hold
// what (written this step, outside the window, a sink, evicted by the policy).
struct KvView {
    const Snapshot& s;
    const Model& model;
    ViewPrefs& v;
    const StepRecord* r;
    size_t step;
    int64_t layer, S, D;
    bool cross;
    std::vector<TokenId> tokens;         // prompt then generated
    KeyRange visible;                    // what the next query sees (sinks + window)
    int64_t written_lo = 0, written_hi = -1;
    std::vector<EvictionEvent> evicted;  // by the policy, for this head's K/V head: the event and its deciding score

    bool dimmed(int64_t p) const { return p >= 0 && !visible.contains(p); }
    bool sink(int64_t p) const { return p >= 0 && p < visible.n_sink; }
    // A sliding layer stores only its last slots' worth of positions: the map shows the step record's row.
    bool dropped(int64_t p) const {
        const std::vector<int64_t>& slots = r->cache.layer_capacity;
        return p >= 0 && layer < int64_t(slots.size()) && !r->cache.layer_window.empty() &&
               p < r->cache.next_position - slots[size_t(layer)];
    }
    int64_t position_of(int64_t slot) const { return r->cache.slot_positions[size_t(slot)]; }
    bool written(int64_t slot) const {
        const int64_t p = slot >= 0 && slot < S ? r->cache.slot_positions[size_t(slot)] : -1;
        return p >= 0 && p >= written_lo && p <= written_hi;
    }
    const EvictionEvent* eviction_of(int64_t p) const {
        auto it = std::lower_bound(evicted.begin(), evicted.end(), p, [](const EvictionEvent& e, int64_t x) { return e.position < x; });
        return p >= 0 && it != evicted.end() && it->position == p ? &*it : nullptr;
    }
};

// The layer and head the maps show, the K/V heads section (decoder-only) and what the step wrote.
void kv_header(PanelContext& c, const KvView& k) {
    const Model& model = k.model;
    ViewPrefs& v = c.prefs;
    const StepRecord* r = k.r;
    const int64_t layer = k.layer, S = k.S, D = k.D;
    const bool cross = k.cross;
    // The slots this layer's ring has: a sliding layer keeps only its window plus the chunk being written.
    const int64_t slots =
        !cross && r && layer < int64_t(r->cache.layer_capacity.size()) ? r->cache.layer_capacity[size_t(layer)] : S;
    if (cross) {
        // Both caches of layer / head, each named with how it behaves; the maps below stand side by side.
        ImGui::Text("layer %lld, head %lld", (long long)layer, (long long)v.head);
        wrapped_text({0.55f, 0.75f, 1, 1}, "Self-attention cache (decoder): %lld slots x %lld", (long long)S, (long long)D);
        dump_item("self cache title");
        text_after({0.45f, 0.85f, 0.55f, 1}, "GROWS: one row per decoder token");
    } else if (model.config().kv_heads() < model.config().n_head) {
        const int64_t G = model.config().n_head / model.config().kv_heads(), kv = model.config().kv_head_of(v.head);
        dump_text("kv header", wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text],
                                            "layer %lld, K/V head %lld (read by query heads %lld..%lld): %lld slots x head_dim %lld",
                                            (long long)layer, (long long)kv, (long long)(kv * G), (long long)(kv * G + G - 1),
                                            (long long)slots, (long long)D));
    } else {
        ImGui::Text("layer %lld, head %lld: %lld slots x head_dim %lld", (long long)layer, (long long)v.head, (long long)slots,
                    (long long)D);
    }
    if (!cross) {
        // Open at first on a tall window; on a short one the maps below come first.
        const KvFootprint f = kv_footprint(model.config(), model.weights().bf16);
        ImGui::SetNextItemOpen(c.display.y >= ImGui::GetFontSize() * 56.25f, ImGuiCond_Once);  // 900 px at 16 px
        if (v.kv_heads_open >= 0) ImGui::SetNextItemOpen(v.kv_heads_open == 1, ImGuiCond_Always);
        v.kv_heads_open = -1;
        char title[128];
        std::snprintf(title, sizeof title, "K/V heads: %lld for %lld query heads, %s / token###kv heads", (long long)f.n_kv_head,
                      (long long)f.n_head, human_bytes(double(f.per_token)).c_str());
        if (ImGui::CollapsingHeader(title)) {
            kv_groups(v, model.config());
            kv_bytes_meter(model.config(), model.weights().bf16, r->cache.used, r->cache);
        }
    }
    const std::string written_note = "written this step: " + count_of(r->cost.n_rows_computed, "row") +
                                     ", read from the cache: " + std::to_string(r->cost.n_rows_reused);
    ImGui::TextDisabled("%s", written_note.c_str());
    dump_text("kv written", written_note);
}

// The bytes the cache holds and every layer's fill (a sliding layer's window marked), above the maps so
// they stay visible however tall the maps get.
void fill_overview(const KvView& k) {
    const Model& model = k.model;
    const StepRecord* r = k.r;
    const int64_t layer = k.layer, S = k.S;
    const float bar_w = std::min(ImGui::GetContentRegionAvail().x * 0.5f, 260.0f);
    char text[96];
    std::snprintf(text, sizeof text, "%s / %s", human_bytes(double(r->cache.bytes_used)).c_str(),
                  human_bytes(double(r->cache.bytes_capacity)).c_str());
    ImGui::ProgressBar(float(r->cache.bytes_used) / float(std::max<int64_t>(1, r->cache.bytes_capacity)), {bar_w, 0}, text);
    ImGui::SameLine();
    wrapped_disabled("bytes used / capacity (all layers, K+V)");
    {
        // Every layer's fill from the view: a full layer stores every position, a layer with its own sliding
        // window (Mistral, Gemma 3) only its window plus the chunk being written (its slots), of which the
        // step's last query saw the last W: that part bright, the rest of what it stores dim.
        const bool sliding = !r->rows.layer_window.empty();
        const std::vector<int64_t>& held = r->cache.layer_held;
        const std::vector<int64_t>& slots = r->cache.layer_capacity;
        auto held_of = [&](int64_t il) { return il < int64_t(held.size()) ? held[size_t(il)] : r->cache.used; };
        auto slots_of = [&](int64_t il) { return il < int64_t(slots.size()) ? slots[size_t(il)] : S; };
        if (sliding)
            wrapped_disabled("positions each layer stores (yellow: layer %lld; bright: seen by the last query, dim: stored, "
                             "out of the layer's window; frame: the layer's slots; tick: the window)", (long long)layer);
        else
            ImGui::TextDisabled("slots used per layer (yellow: layer %lld)", (long long)layer);
        dump_item("fill legend");
        ImDrawList* dl = ImGui::GetWindowDrawList();
        const ImVec2 p = ImGui::GetCursorScreenPos();
        const float lw = std::max(24.0f, (ImGui::GetContentRegionAvail().x - 4) / float(r->rows.n_layer)) - 4;
        const float h = 10;
        const int64_t last = r->cache.next_position - 1;  // the step's last query: it saw the newest row too
        std::string seen_text, held_text;  // per layer "seen/stored" and "stored/slots", for the layout dump
        for (int64_t il = 0; il < r->rows.n_layer; ++il) {
            const float x = p.x + float(il) * (lw + 4);
            const int64_t W = r->rows.window_of(il), stored = held_of(il), room = slots_of(il);
            const int64_t seen = W > 0 ? std::min<int64_t>(stored, W) : stored;
            const float f = float(stored) / float(std::max<int64_t>(1, S));
            const float fs = float(seen) / float(std::max<int64_t>(1, S));
            const ImU32 ink = il == layer ? IM_COL32(250, 200, 60, 255) : IM_COL32(70, 150, 220, 255);
            dl->AddRectFilled({x, p.y}, {x + lw, p.y + h}, IM_COL32(28, 28, 32, 255), 2);
            dl->AddRectFilled({x, p.y}, {x + lw * float(room) / float(std::max<int64_t>(1, S)), p.y + h},
                              IM_COL32(50, 50, 58, 255), 2);
            dl->AddRectFilled({x, p.y}, {x + lw * f, p.y + h}, il == layer ? IM_COL32(125, 100, 30, 255) : IM_COL32(35, 75, 110, 255), 2);
            dl->AddRectFilled({x + lw * (f - fs), p.y}, {x + lw * f, p.y + h}, ink, 2);
            if (W > 0 && room < S)
                dl->AddRect({x, p.y - 1}, {x + lw * float(room) / float(S), p.y + h + 1}, IM_COL32(200, 200, 210, 255), 2);
            if (W > 0 && W < S) {
                const float tx = x + lw * float(W) / float(S);
                dl->AddLine({tx, p.y - 2}, {tx, p.y + h + 2}, IM_COL32(235, 130, 210, 255), 2);
            }
            if (ImGui::IsMouseHoveringRect({x, p.y}, {x + lw, p.y + h})) {
                if (W > 0 && r->cache.sliding_kept_whole)
                    ImGui::SetTooltip("layer %lld (sliding window %lld): this cache keeps all %lld positions; the step's last "
                                      "query (position %lld) saw %lld of them", (long long)il, (long long)W, (long long)stored,
                                      (long long)last, (long long)seen);
                else if (W > 0)
                    ImGui::SetTooltip("layer %lld (sliding window %lld): stores %lld positions in %lld slots (W - 1 + the chunk "
                                      "being written); the step's last query (position %lld) saw %lld of them",
                                      (long long)il, (long long)W, (long long)stored, (long long)room, (long long)last,
                                      (long long)seen);
                else
                    ImGui::SetTooltip("layer %lld%s: %lld / %lld slots", (long long)il, sliding ? " (full attention)" : "",
                                      (long long)stored, (long long)S);
            }
            if (il) {
                seen_text += ' ';
                held_text += ' ';
            }
            seen_text += std::to_string(seen) + '/' + std::to_string(stored);
            held_text += std::to_string(stored) + '/' + std::to_string(room);
        }
        ImGui::Dummy({1, h + 2});
        if (sliding) {
            // What is stored is what the figures say: the bytes above are each layer's positions times its
            // bytes per position; step back reads the rows a step overwrote from the undo log, not the cache.
            const ModelConfig& cfg = model.config();
            int64_t n_sliding = 0;
            for (int64_t il = 0; il < cfg.n_layer; ++il) n_sliding += r->rows.window_of(il) > 0;
            dump_text("layer windows", seen_text);
            dump_text("layer stored", held_text + " bytes=" + std::to_string(r->cache.bytes_used));
            if (r->cache.sliding_kept_whole)  // paged, int4: every layer keeps every position, the mask slides
                dump_text("layer stored text", wrapped_disabled(
                    "%lld of %lld layers slide (%s), but this cache keeps every position in every layer (llama.cpp's "
                    "--swa-full): %s. Only the mask slides.",
                    (long long)n_sliding, (long long)cfg.n_layer, cfg.describe_windows().c_str(), r->cache.sliding_kept_whole));
            else
                dump_text("layer stored text", wrapped_disabled(
                    "%lld of %lld layers slide (%s): each stores only its window plus the chunk being written (W - 1 + C "
                    "slots, as Hugging Face's DynamicSlidingWindowLayer), a full layer every position. Step back takes "
                    "the rows a step overwrote from the undo log, which is the tool's, not the model's.",
                    (long long)n_sliding, (long long)cfg.n_layer, cfg.describe_windows().c_str()));
        }
    }
}

// The veils, gutter bars and outlines over both maps, the row labels, the selection and the write pointer.
void kv_overlays(const KvView& k, const HeatmapResult& hk, const HeatmapResult& hv, float label_x, float row_h) {
    const Model& model = k.model;
    const ViewPrefs& v = k.v;
    const StepRecord* r = k.r;
    const int64_t S = k.S;
    const std::vector<TokenId>& tokens = k.tokens;
    const bool cross = k.cross;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const auto dimmed = [&](int64_t p) { return k.dimmed(p); };
    const auto sink = [&](int64_t p) { return k.sink(p); };
    const auto written = [&](int64_t slot) { return k.written(slot); };
    const auto position_of = [&](int64_t slot) { return k.position_of(slot); };
    const auto eviction_of = [&](int64_t p) { return k.eviction_of(p); };
    // Rows thinner than a line of text get a label every few slots, so long caches stay readable.
    const int64_t label_every = std::max<int64_t>(1, int64_t(std::ceil((ImGui::GetTextLineHeight() - 2) / std::max(1e-3f, row_h))));
    // Shading, gutter bars and outlines cover runs of slots, one shape per run: a long cache has thousands of
    // rows thinner than a pixel, and a shape per row would cost the renderer more than the rest of the window.
    auto runs = [&](auto&& holds, auto&& draw) {
        for (int64_t slot = 0; slot < S;) {
            if (!holds(slot)) {
                ++slot;
                continue;
            }
            int64_t end = slot;
            while (end + 1 < S && holds(end + 1)) ++end;
            draw(hk.cell_min(slot, 0).y, hk.cell_max(end, 0).y);
            slot = end + 1;
        }
    };
    for (const HeatmapResult* h : {&hk, &hv}) {
        // evicted by the policy: a red veil (the row may stay in its slot; attention gives it weight 0)
        runs([&](int64_t slot) { return eviction_of(position_of(slot)) != nullptr; },
             [&](float y0, float y1) { dl->AddRectFilled({h->p0.x, y0}, {h->p1.x, y1}, IM_COL32(190, 40, 40, 170)); });
        // outside the window: kept in the slot but no longer attended
        runs([&](int64_t slot) { return dimmed(position_of(slot)); },
             [&](float y0, float y1) { dl->AddRectFilled({h->p0.x, y0}, {h->p1.x, y1}, IM_COL32(0, 0, 0, 150)); });
        // no longer stored by this sliding layer (the row shown is the step record's): nearly black
        runs([&](int64_t slot) { return k.dropped(position_of(slot)); },
             [&](float y0, float y1) { dl->AddRectFilled({h->p0.x, y0}, {h->p1.x, y1}, IM_COL32(12, 12, 16, 200)); });
        // an attention sink: a bar in the gutter left of the map
        runs([&](int64_t slot) { return sink(position_of(slot)); },
             [&](float y0, float y1) { dl->AddRectFilled({h->p0.x - 7, y0}, {h->p0.x - 3, y1}, IM_COL32(220, 100, 190, 255)); });
        // A bar in the gutter beside the written rows, and one outline around each run of them: the K/V
        // colours inside stay as they are (a frame per row would cover a prefill's rows).
        runs(written, [&](float y0, float y1) {
            dl->AddRectFilled({h->p1.x + 2, y0}, {h->p1.x + 6, y1}, IM_COL32(250, 200, 60, 255));
            dl->AddRect({h->p0.x - 2, y0}, {h->p1.x + 2, y1}, IM_COL32(250, 200, 60, 255), 0, 0, 2);
        });
    }
    for (int64_t slot = 0; slot < S; ++slot) {
        const int64_t p = r->cache.slot_positions[size_t(slot)];
        const float y0 = hk.cell_min(slot, 0).y, y1 = hk.cell_max(slot, 0).y;
        if (p >= 0 && slot % label_every == 0) {
            char label[64];
            std::snprintf(label, sizeof label, "%lld %s", (long long)p,
                          p < int64_t(tokens.size()) ? short_token(model, tokens[size_t(p)], cross ? 4 : 8).c_str() : "");
            dl->AddText({label_x, (y0 + y1) / 2 - ImGui::GetTextLineHeight() / 2},
                        dimmed(p) ? IM_COL32(120, 120, 120, 255) : sink(p) ? IM_COL32(235, 130, 210, 255) : IM_COL32(200, 200, 210, 255),
                        label);
        }
        for (const HeatmapResult* h : {&hk, &hv})
            if (p >= 0 && p == v.sel_key)
                dl->AddRect({h->p0.x - 3, y0 - 1}, {h->p1.x + 3, y1 + 1}, IM_COL32(90, 220, 255, 255), 0, 0, 2);
        if (slot == r->cache.write_slot) {
            // Write pointer: an arrow left of K pointing at the next slot.
            const float yy = (y0 + y1) / 2, x = hk.p0.x - 4;
            dl->AddTriangleFilled({x, yy}, {x - 9, yy - 6}, {x - 9, yy + 6}, IM_COL32(250, 120, 60, 255));
            dl->AddLine({hv.p1.x + 2, yy}, {hv.p1.x + 14, yy}, IM_COL32(250, 120, 60, 255), 2);
        }
    }
}

// The hovered slot of either map: its position, the value under the mouse, why it is shaded; a click
// selects its position as the key.
void kv_tooltip(const KvView& k, const HeatmapResult& hk, const HeatmapResult& hv) {
    const Snapshot& s = k.s;
    const Model& model = k.model;
    ViewPrefs& v = k.v;
    const StepRecord* r = k.r;
    const size_t step = k.step;
    const int64_t layer = k.layer, written_lo = k.written_lo, written_hi = k.written_hi;
    const std::vector<TokenId>& tokens = k.tokens;
    const auto dimmed = [&](int64_t p) { return k.dimmed(p); };
    const auto sink = [&](int64_t p) { return k.sink(p); };
    const auto eviction_of = [&](int64_t p) { return k.eviction_of(p); };
    for (const HeatmapResult* h : {&hk, &hv})
        if (h->hover_row >= 0) {
            const int64_t p = r->cache.slot_positions[size_t(h->hover_row)];
            const float* row = p < 0 ? nullptr
                               : h == &hv ? s.trace().value_row(step, layer, v.head, p)
                                          : s.trace().key_row(step, layer, v.head, p);
            ImGui::BeginTooltip();
            ImGui::Text("slot %lld%s", (long long)h->hover_row,
                        h->hover_row == r->cache.write_slot ? " (write pointer)" : "");
            if (p < 0) ImGui::TextDisabled("empty");
            else {
                ImGui::Text("position %lld '%s'", (long long)p,
                            p < int64_t(tokens.size()) ? token_text(model, tokens[size_t(p)]).c_str() : "?");
                if (row) ImGui::Text("%s[%lld] = %.5f", h == &hv ? "v" : "k", (long long)h->hover_col, double(row[h->hover_col]));
                if (p >= written_lo && p <= written_hi) ImGui::TextColored({1, 0.8f, 0.3f, 1}, "written this step");
                if (dimmed(p)) ImGui::TextDisabled("outside the window: no longer attended");
                if (k.dropped(p))
                    ImGui::TextDisabled("no longer stored by layer %lld: a sliding layer keeps its window plus the chunk "
                                        "being written (this row is the step record's)", (long long)layer);
                if (sink(p)) ImGui::TextColored({0.9f, 0.5f, 0.8f, 1}, "attention sink: kept visible beside the window");
                if (const EvictionEvent* e = eviction_of(p))
                    ImGui::TextColored({1, 0.45f, 0.4f, 1}, "evicted by %s (score %.4g): no longer attended",
                                       r->eviction.policy.c_str(), double(e->score));
            }
            ImGui::EndTooltip();
            {  // for the tests: the hovered slot, its position and, if evicted, the deciding score in full
                const EvictionEvent* e = eviction_of(p);
                char tip[128];
                const int n = std::snprintf(tip, sizeof tip, "slot %lld position %lld", (long long)h->hover_row, (long long)p);
                if (e) std::snprintf(tip + n, sizeof tip - size_t(n), " evicted score %.9g", double(e->score));
                dump_text("kv tooltip", tip);
                if (row) {
                    std::snprintf(tip, sizeof tip, "%s channel %lld = %.9g", h == &hv ? "v" : "k", (long long)h->hover_col,
                                  double(row[h->hover_col]));
                    dump_text("kv tooltip value", tip);
                }
            }
            if (h->clicked && p >= 0) v.sel_key = p;
        }
}

}  // namespace

void draw_kv_cache(PanelContext& c) {
    if (!begin_panel(Panel::KvCache)) return;
    const Snapshot& s = c.snap;
    const Model& model = c.snap.model();
    ViewPrefs& v = c.prefs;
    // The layer and head shown, as the Attention panel picks them (the Cache workspace has no Attention panel).
    stepper("layer", v.layer, 0, model.config().n_layer - 1);
    ImGui::SameLine(0, 16);
    stepper("head", v.head, 0, model.config().n_head - 1);
    figure_button(c, Panel::KvCache);
    size_t step = 0;
    const StepRecord* r = viewed_step(s, v, &step);
    if (!r) {
        ImGui::TextDisabled("The cache is empty: run a prefill step.");
        end_panel();
        return;
    }
    const int64_t layer = std::min(v.layer, r->rows.n_layer - 1);  // the Attention panel may show a deeper encoder layer
    KvView k{s, model, v, r, step, layer, r->cache.capacity, r->rows.head_dim, r->rows.encoder != nullptr, s.prompt(),
             r->visible_keys(r->cache.next_position), 0, -1, {}};
    // A layer with its own sliding window: the next query of this layer sees only its last W positions.
    if (const int64_t W = r->rows.window_of(layer); W > 0) k.visible.lo = std::max(k.visible.lo, r->cache.next_position - W + 1);
    k.tokens.insert(k.tokens.end(), s.generated().begin(), s.generated().end());
    k.written_lo = r->cost.first_computed_position, k.written_hi = k.written_lo + r->cost.n_rows_computed - 1;
    if (!r->eviction.policy.empty())
        k.evicted = evicted_after(s.trace(), step, layer, v.head / std::max<int64_t>(1, r->rows.n_head / std::max<int64_t>(1, r->rows.n_kv_head)));
    const int64_t S = k.S, D = k.D;
    const bool cross = k.cross;
    const KeyRange& visible = k.visible;
    const std::vector<EvictionEvent>& evicted = k.evicted;
    const int64_t ran = cross ? encoder_step(s.trace(), r->rows.encoder.get()) : -1;
    kv_header(c, k);
    fill_overview(k);
    if (cross) cross_header(*r, ran);


    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float label_w = ImGui::CalcTextSize(cross ? "000 wwwww" : "0000 wwwwwwww").x;
    const float gap = 12;
    // Encoder-decoder: self K | V on the left, cross K | V on the right, each block with its row labels.
    const float block_gap = cross ? 24 : 0;
    const float map_w = cross ? std::max(30.0f, (avail.x - 2 * label_w - 2 * gap - block_gap - 20) / 4)
                              : std::max(40.0f, (avail.x - label_w - gap - 20) / 2);
    const float title_h = ImGui::GetTextLineHeight() + 2;
    const float line_sp = ImGui::GetTextLineHeightWithSpacing();
    // The legend may wrap; a short panel scrolls to maps of a readable height rather than squeezing them.
    const float map_h = std::max(ImGui::GetFontSize() * 8, avail.y - title_h - 2 * line_sp - 8);
    const float row_h = std::min(map_h / float(S), 22.0f);
    const ImVec2 size = {map_w, row_h * float(S)};
    const ImVec2 top = ImGui::GetCursorScreenPos();
    ImDrawList* dl = ImGui::GetWindowDrawList();

    float k_abs = 0, v_abs = 0;
    const unsigned ktex = c.maps.kv_texture(s.trace(), step, layer, v.head, false, &k_abs);
    const unsigned vtex = c.maps.kv_texture(s.trace(), step, layer, v.head, true, &v_abs);
    HeatmapResult hk, hv;
    for (int which = 0; which < 2; ++which) {
        const float x = top.x + label_w + float(which) * (map_w + gap);
        const float mx = std::max(which ? v_abs : k_abs, 1e-6f);
        HeatmapStyle st;
        st.colormap = Colormap::Diverging;
        st.lo = -mx;
        st.hi = mx;
        ImGui::SetCursorScreenPos({x, top.y});
        if (cross) {
            const bool room = ImGui::CalcTextSize("self K").x <= map_w + gap - 4;
            ImGui::TextColored({0.55f, 0.75f, 1, 1}, "%s%s", room ? "self " : "", which ? "V" : "K");
            if (ImGui::IsItemHovered()) ImGui::SetTooltip("colour range +-%.2f", double(mx));
        } else {
            ImGui::Text("%s  (+-%.2f)", which ? "V" : "K", double(mx));
        }
        ImGui::SetCursorScreenPos({x, top.y + title_h});
        (which ? hv : hk) = heatmap(which ? "V" : "K", which ? vtex : ktex, S, D, size, st);
        dump_item(which ? "kv V map" : "kv K map");
    }
    kv_overlays(k, hk, hv, top.x, row_h);
    kv_tooltip(k, hk, hv);
    float bottom = top.y + title_h + size.y;
    if (cross) {
        const float cx = hv.p1.x + 20 + block_gap / 2;
        dl->AddLine({cx - block_gap / 2 - 4, top.y}, {cx - block_gap / 2 - 4, top.y + title_h + map_h}, IM_COL32(90, 90, 100, 255));
        bottom = std::max(bottom, cross_maps(c, *r, ran, layer, v.head, {cx, top.y}, label_w, map_w, gap, map_h + title_h));
    }
    ImGui::SetCursorScreenPos({top.x, bottom + 4});
    const bool drops = !r->cache.layer_window.empty() && r->rows.window_of(layer) > 0;  // this layer's ring holds its window
    dump_text("kv legend", wrapped_disabled("yellow frame and bar = rows written this step, arrow = write pointer, dark = outside the window%s%s%s%s",
                        drops ? ", near black = no longer stored by this layer (the step record's row)" : "",
                        visible.n_sink > 0 ? ", magenta bar = attention sink (stays visible)" : "",
                        evicted.empty() ? "" : ", red = evicted by the eviction policy (hover: the score that decided it)",
                        cross ? "; right: the cross cache, one row per source token" : ""));
    end_panel();
}

Figure kv_cache_figure(const Snapshot& s, const ViewPrefs& v) {
    using namespace fig;
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

}  // namespace kvscope::gui
