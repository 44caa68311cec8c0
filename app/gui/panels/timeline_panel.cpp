// Token timeline: every token of the sequence at its absolute position, coloured by what the cache
// holds after the viewed step (prompt / generated / new this step / evicted by the window / kept as an
// attention sink / not yet processed; K/V mapped from another sequence or loaded from a prompt cache),
// the position pointer, the window bounds and the fill level. Encoder-decoder models show the source
// first (the encoder's input, its own positions s0..), marked where the encoder ran, then the decoder
// input from its start token.
#include "panels/timeline_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "widgets/turn_marks.h"

namespace kvscope::gui {
namespace {

// What changed the cache besides the step's own rows: the policy's evictions after the step and the edits
// by hand before it, in words (the tooltip of the step's mark); empty when neither happened.
std::string cache_changes(const StepRecord& r) {
    std::string out;
    const int64_t L = std::max<int64_t>(1, r.rows.n_layer);
    const int64_t K = std::max<int64_t>(1, r.rows.n_kv_head > 0 ? r.rows.n_kv_head : r.rows.n_head);
    std::vector<int64_t> count(size_t(L * K), 0);  // (L, K) positions evicted
    int64_t n = 0;
    float lo = 0, hi = 0;
    for (const EvictionEvent& e : r.eviction.events) {
        if (e.restored || e.layer < 0 || e.layer >= L || e.kv_head < 0 || e.kv_head >= K) continue;
        lo = n ? std::min(lo, e.score) : e.score;
        hi = n ? std::max(hi, e.score) : e.score;
        ++count[size_t(e.layer * K + e.kv_head)];
        ++n;
    }
    char line[160];
    if (n > 0) {
        std::snprintf(line, sizeof line, "%s evicted after this step's queries attended:", r.eviction.policy.c_str());
        out += line;
        for (int64_t l = 0; l < L; ++l) {
            int64_t sum = 0;
            std::string heads;
            for (int64_t k = 0; k < K; ++k) {
                sum += count[size_t(l * K + k)];
                heads += (k ? ", " : "") + std::to_string(count[size_t(l * K + k)]);
            }
            std::snprintf(line, sizeof line, "\n  layer %lld: %lld position%s", (long long)l, (long long)sum, sum == 1 ? "" : "s");
            out += line;
            if (K > 1) out += " (per K/V head " + heads + ")";
        }
        std::snprintf(line, sizeof line, "\ndeciding scores %.4g .. %.4g%s", double(lo), double(hi),
                      r.eviction.policy == "window+sinks" ? " (positions)" : "");
        out += line;
    }
    for (const CacheEditRecord& e : r.edits) {
        const std::string layer = e.edit.layer < 0 ? "all layers" : "layer " + std::to_string(e.edit.layer);
        const std::string head = e.edit.kv_head < 0 ? "all K/V heads" : "K/V head " + std::to_string(e.edit.kv_head);
        std::snprintf(line, sizeof line, "%sedit before this step: %s position %lld (%s, %s)", out.empty() ? "" : "\n",
                      cache_edit_kind_name(e.edit.kind), (long long)e.edit.position, layer.c_str(), head.c_str());
        out += line;
    }
    return out;
}

// Steps (up to the viewed one) after which the policy evicted (bit 0) or before which edits by hand
// changed the cache (bit 1), keyed by the step's last position: its chip carries the mark.
struct StepMark {
    size_t step = 0;
    uint8_t what = 0;
};
std::map<int64_t, StepMark> step_marks(const Trace& t, size_t viewed) {
    std::map<int64_t, StepMark> out;
    for (size_t i = 0; i < t.size() && i <= viewed; ++i) {
        uint8_t what = t[i].edits.empty() ? 0 : 2;
        for (const EvictionEvent& e : t[i].eviction.events) what |= e.restored ? 0 : 1;
        if (what) out[t[i].last_position()] = {i, what};
    }
    return out;
}

// The step browser (which step every panel shows) and notes on the viewed step.
void step_browser(const Snapshot& s, ViewPrefs& v, const StepRecord* r, size_t step_index) {
    const int n_steps = int(s.trace().size());
    if (n_steps > 0) {
        int64_t shown = int64_t(step_index);
        if (stepper("step", shown, 0, n_steps - 1)) v.view_step = shown == n_steps - 1 ? -1 : shown;
        ImGui::SameLine();
        bool follow = v.view_step < 0;
        if (ImGui::Checkbox("follow newest", &follow)) v.view_step = follow ? -1 : int64_t(step_index);
        // Each note on the same line when it fits, else on the next (nothing is cut at the panel's edge).
        const auto note = text_after;
        const ImVec4 plain = ImGui::GetStyle().Colors[ImGuiCol_Text], dim = ImGui::GetStyle().Colors[ImGuiCol_TextDisabled];
        note(plain, std::string("| ") + phase_name(r->id.phase) + ", cache " + (r->id.cache_on ? "ON" : "OFF") +
                        " | next position " + std::to_string(r->cache.next_position));
        dump_item("timeline step note");
        if (r->id.window > 0) {
            const KeyRange k = r->visible_keys(r->cache.next_position);
            char text[128];
            if (k.n_sink > 0)
                std::snprintf(text, sizeof text, "| window %lld + %lld sinks: keys 0..%lld and %lld..%lld", (long long)r->id.window,
                              (long long)r->id.sinks, (long long)(k.n_sink - 1), (long long)k.lo, (long long)k.hi);
            else
                std::snprintf(text, sizeof text, "| window %lld: keys %lld..%lld", (long long)r->id.window, (long long)k.lo,
                              (long long)k.hi);
            note(plain, text);
        }
        if (!r->rows.layer_window.empty() && r->cache.next_position > 0) {
            // A model with its own sliding layers: what the selected layer's last query saw.
            const int64_t il = std::min(v.layer, r->rows.n_layer - 1), last = r->cache.next_position - 1;
            const KeyRange k = r->visible_keys(last, il);
            char text[160];
            if (r->rows.window_of(il) > 0)
                std::snprintf(text, sizeof text, "| layer %lld slides (window %lld): its last query saw keys %lld..%lld",
                              (long long)il, (long long)r->rows.window_of(il), (long long)k.lo, (long long)k.hi);
            else
                std::snprintf(text, sizeof text, "| layer %lld: full attention, keys 0..%lld", (long long)il, (long long)k.hi);
            note(plain, text);
            dump_text("timeline layer window", text);
        }
        if (r->rows.encoder) {
            if (r->rows.ran_encoder) note({1, 0.75f, 0.3f, 1}, "| the encoder ran at this step");
            else
                note(dim, "| encoder ran at step " + std::to_string(encoder_step(s.trace(), r->rows.encoder.get())) +
                              "; its cross cache is reused");
            dump_item("timeline encoder note");
        }

    } else {
        ImGui::TextDisabled("no step yet: type a prompt and press Prefill");
    }
}

// What the chips of one frame share: the tokens, the viewed step's cache, where adopted K/V came from.
struct Strip {
    const Snapshot& s;
    const Model& model;
    const ViewPrefs& v;
    const StepRecord* r;
    size_t step_index;
    std::vector<TokenId> tokens;
    int64_t n_prompt = 0, next_pos = 0;
    KeyRange visible;
    int64_t new_lo = -1, new_hi = -2;
    std::vector<StepCost::Source> source;
    bool ed = false;

    // The sequence whose blocks a shared position came from: the first earlier one with the same tokens
    // up to it (sharing prefills run in sequence order).
    int64_t shared_from(int64_t p) const {
        for (int64_t j = 0; j < s.selected && j < int64_t(s.sequences.size()); ++j) {
            const std::vector<TokenId>& other = s.sequences[size_t(j)].prompt_ids;
            if (int64_t(other.size()) > p && std::equal(other.begin(), other.begin() + p + 1, tokens.begin())) return j;
        }
        return -1;
    }
};

Strip strip_of(const Snapshot& s, const ViewPrefs& v, const StepRecord* r, size_t step_index) {
    Strip t{s, s.model(), v, r, step_index, {}, 0, 0, {0, 0, -1}, -1, -2, {}, s.encoder_decoder()};
    t.tokens = s.prompt();
    t.tokens.insert(t.tokens.end(), s.generated().begin(), s.generated().end());
    t.n_prompt = int64_t(s.prompt().size());
    t.next_pos = r ? r->cache.next_position : 0;
    t.visible = r ? r->visible_keys(t.next_pos) : KeyRange{0, 0, -1};
    // Outlined as new: the positions this step computed (adopted ones are coloured by where they came from).
    t.new_lo = r ? r->id.first_position + r->cost.n_adopted : -1, t.new_hi = r ? r->last_position() : -2;
    // Positions whose K/V were not computed by this sequence: mapped from another's blocks or loaded
    // from a prompt cache, as of the viewed step.
    t.source.assign(t.tokens.size(), StepCost::Source::None);
    for (size_t i = 0; r && i <= step_index; ++i) {
        const StepRecord& q = s.trace()[i];
        for (int64_t p = q.id.first_position; p < q.id.first_position + q.cost.n_adopted && p < int64_t(t.tokens.size()); ++p)
            t.source[size_t(p)] = q.cost.adopted_from;
    }
    return t;
}

// Encoder-decoder models: the source in its own pane left of the decoder strip (which scrolls to follow
// the pointer): what the encoder read, at its own positions s0.., outlined when the viewed step ran the encoder.
void source_pane(const Strip& t) {
    const Snapshot& s = t.s;
    const Model& model = t.model;
    const ViewPrefs& v = t.v;
    const StepRecord* r = t.r;
    const std::vector<TokenId>& src = r && r->rows.encoder ? r->rows.encoder->source : s.source_ids;
    const int64_t ran = r ? encoder_step(s.trace(), r->rows.encoder.get()) : -1;
    const bool ran_now = r && r->rows.ran_encoder;
    char note[64];
    if (ran >= 0) std::snprintf(note, sizeof note, "encoder ran here (step %lld)", (long long)ran);
    else std::snprintf(note, sizeof note, "the encoder runs at the first step");
    float want_w = ImGui::CalcTextSize("->").x + 16;
    for (TokenId id : src)
        want_w += std::max(ImGui::CalcTextSize(short_token(model, id, 10).c_str()).x, ImGui::CalcTextSize("s00").x) + 13;
    want_w = std::max(want_w, ImGui::CalcTextSize(note).x + 12);
    const float pane_w = std::min(want_w, ImGui::GetContentRegionAvail().x * 0.45f);
    ImGui::BeginChild("source strip", {pane_w, 0}, false, ImGuiWindowFlags_HorizontalScrollbar);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float line = ImGui::GetTextLineHeight();
    const float chip_h = line + 6;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    float x = origin.x;
    const float y = origin.y + 2;
    for (int64_t sp = 0; sp < int64_t(src.size()); ++sp) {
        const std::string text = short_token(model, src[size_t(sp)], 10);
        const float w = std::max(ImGui::CalcTextSize(text.c_str()).x, ImGui::CalcTextSize("s00").x) + 10;
        const bool read = ran >= 0;
        dl->AddRectFilled({x, y}, {x + w, y + chip_h}, read ? IM_COL32(92, 72, 120, 255) : IM_COL32(48, 42, 58, 255), 4);
        if (ran_now) dl->AddRect({x, y}, {x + w, y + chip_h}, IM_COL32(250, 200, 60, 255), 4, 0, 2);
        if (sp == v.sel_source) dl->AddRect({x - 2, y - 2}, {x + w + 2, y + chip_h + 2}, IM_COL32(90, 220, 255, 255), 4, 0, 2);
        dl->AddText({x + 5, y + 3}, read ? IM_COL32(235, 225, 245, 255) : IM_COL32(150, 140, 160, 255), text.c_str());
        char pos[24];
        std::snprintf(pos, sizeof pos, "s%lld", (long long)sp);
        dl->AddText({x + 5, y + chip_h + 2}, IM_COL32(170, 150, 190, 255), pos);
        if (ImGui::IsMouseHoveringRect({x, y}, {x + w, y + chip_h}) && ImGui::IsWindowHovered())
            ImGui::SetTooltip("source position %lld: token %d '%s'\n%s", (long long)sp, src[size_t(sp)],
                              token_text(model, src[size_t(sp)]).c_str(),
                              read ? "read by the encoder; its K/V for cross-attention are in the fixed cross cache"
                                   : "the encoder reads the source at the first prefill step");
        x += w + 3;
    }
    dl->AddText({x + 2, y + 3}, IM_COL32(200, 200, 210, 255), "->");
    x += ImGui::CalcTextSize("->").x + 10;
    // Under the source: where the encoder ran.
    dl->AddText({origin.x, y + chip_h + line + 4}, ran_now ? IM_COL32(250, 200, 60, 255) : IM_COL32(200, 160, 90, 255), note);
    x = std::max(x, origin.x + ImGui::CalcTextSize(note).x + 8);
    ImGui::Dummy({x - origin.x, chip_h + 2 * line + 8});
    dump_item("timeline source");
    ImGui::EndChild();
}

// Left edge of every chip relative to the strip, (n + 1) with the end last; measured once per token
// sequence (a decode step measures only its new token): only the chips in view are drawn, found by binary
// search, so an 8192-token strip costs what a short one does.
const std::vector<float>& chip_offsets(const Strip& t) {
    const Model& model = t.model;
    const std::vector<TokenId>& tokens = t.tokens;
    static struct {
        std::shared_ptr<const Model> model;  // held: a model loaded later cannot take its address
        float font = 0;
        std::vector<TokenId> tokens;
        std::vector<float> x;  // (n + 1) left edge of chip p relative to the strip; x[n] = the end
    } lay;
    const float min_w = ImGui::CalcTextSize("0000").x + 10;
    {
        size_t keep = 0;  // chips still measured right: the common prefix
        if (lay.model.get() == &model && lay.font == ImGui::GetFontSize())
            while (keep < lay.tokens.size() && keep < tokens.size() && lay.tokens[keep] == tokens[keep]) ++keep;
        lay.model = t.s.model_ptr;
        lay.font = ImGui::GetFontSize();
        lay.tokens.assign(tokens.begin(), tokens.end());
        lay.x.resize(keep + 1);
        if (keep == 0) lay.x[0] = 0;
        for (size_t p = keep; p < tokens.size(); ++p)
            lay.x.push_back(lay.x[p] + std::max(ImGui::CalcTextSize(short_token(model, tokens[p], 10).c_str()).x + 10, min_w) + 3);
    }
    return lay.x;
}

// The hovered chip: its token, bytes, where its K/V came from, and the step that ended there.
void chip_tooltip(const Strip& t, int64_t p, const StepMark* mark) {
    const Model& model = t.model;
    const std::vector<TokenId>& tokens = t.tokens;
    const int64_t next_pos = t.next_pos, n_prompt = t.n_prompt;
    const bool done = p < next_pos;
    const bool evicted = done && !t.visible.contains(p);
    const bool sunk = done && p < t.visible.n_sink;
    const bool ed = t.ed;
    const StepCost::Source from = t.source[size_t(p)];
    const std::string bytes = model.tokenizer() && model.tokenizer()->has(tokens[size_t(p)])
                                  ? model.tokenizer()->token_bytes(tokens[size_t(p)]) : std::string();
    std::string hex;
    for (unsigned char ch : bytes) {
        char b[4];
        std::snprintf(b, sizeof b, "%02x ", ch);
        hex += b;
    }
    std::string origin;
    if (done && from == StepCost::Source::PromptCache) origin = "\nK/V loaded from prompt cache (not computed)";
    if (done && from == StepCost::Source::SharedPrefix) {
        const int64_t j = t.shared_from(p);
        origin = j >= 0 ? "\nmapped from sequence " + std::to_string(j) + "'s blocks (prefix sharing: not computed)"
                        : std::string("\nmapped from another sequence's blocks (prefix sharing: not computed)");
    }
    ImGui::SetTooltip("position %lld: token %d '%s'\nbytes: %s\n%s%s%s", (long long)p, tokens[size_t(p)],
                      token_text(model, tokens[size_t(p)]).c_str(), hex.c_str(),
                      ed && p == 0 ? "decoder start token (begins every decoder input)"
                      : p < n_prompt ? "prompt" : "generated",
                      sunk      ? ", attention sink: kept visible beside the window"
                      : evicted ? ", outside the window (evicted)"
                      : done    ? ", in the cache"
                                : ", not processed yet",
                      origin.c_str());
    if (mark) {  // the step that ended here, in the same tooltip
        const std::string what = "step " + std::to_string(mark->step) + " ended here: " +
                                 cache_changes(t.s.trace()[mark->step]);
        ImGui::BeginTooltip();
        ImGui::Separator();
        ImGui::TextUnformatted(what.c_str());
        ImGui::EndTooltip();
        dump_text("timeline step tooltip", what);
    }
}

// Chip p at x: coloured by what the cache holds, outlined when new or selected, its step mark, its position.
void draw_chip(const Strip& t, int64_t p, float x, float y, float w, float chip_h, ImDrawList* dl,
               const std::map<int64_t, StepMark>& marks) {
    const Model& model = t.model;
    const ViewPrefs& v = t.v;
    const std::vector<TokenId>& tokens = t.tokens;
    const int64_t next_pos = t.next_pos, n_prompt = t.n_prompt;
    const bool ed = t.ed;
    const std::string text = short_token(model, tokens[size_t(p)], 10);
    const bool done = p < next_pos;
    const bool evicted = done && !t.visible.contains(p);
    const bool sunk = done && p < t.visible.n_sink;
    const bool is_new = p >= t.new_lo && p <= t.new_hi;
    const StepCost::Source from = t.source[size_t(p)];
    ImU32 fill = p < n_prompt ? IM_COL32(46, 70, 110, 255) : IM_COL32(40, 100, 70, 255);
    if (ed && p == 0) fill = IM_COL32(140, 92, 24, 255);  // the decoder start token
    if (done && from == StepCost::Source::SharedPrefix) fill = IM_COL32(30, 118, 124, 255);
    if (done && from == StepCost::Source::PromptCache) fill = IM_COL32(106, 76, 152, 255);
    if (sunk) fill = IM_COL32(128, 58, 112, 255);
    ImU32 ink = IM_COL32(235, 235, 240, 255);
    if (!done) {
        fill = IM_COL32(40, 40, 46, 255);
        ink = IM_COL32(140, 140, 150, 255);
    }
    if (evicted) {
        fill = IM_COL32(60, 60, 60, 255);
        ink = IM_COL32(120, 120, 120, 255);
    }
    dl->AddRectFilled({x, y}, {x + w, y + chip_h}, fill, 4);
    if (is_new) dl->AddRect({x, y}, {x + w, y + chip_h}, IM_COL32(250, 200, 60, 255), 4, 0, 2);
    if (p == v.sel_query) dl->AddRect({x - 2, y - 2}, {x + w + 2, y + chip_h + 2}, IM_COL32(255, 110, 110, 255), 4, 0, 2);
    if (p == v.sel_key) dl->AddRect({x - 2, y - 2}, {x + w + 2, y + chip_h + 2}, IM_COL32(90, 220, 255, 255), 4, 0, 2);
    dl->AddText({x + 5, y + 3}, ink, text.c_str());
    // The last chip of a step after which the policy evicted (red bar along its top) or before which
    // edits changed the cache (orange bar): hover says what.
    const auto mark = marks.find(p);
    if (mark != marks.end()) {
        const uint8_t what = mark->second.what;
        const float mid = what == 3 ? x + w / 2 : x + w;
        if (what & 1) dl->AddRectFilled({x + 3, y + 1}, {mid - 1, y + 4}, IM_COL32(240, 70, 60, 255), 1);
        if (what & 2) dl->AddRectFilled({what == 3 ? mid + 1 : x + 3, y + 1}, {x + w - 3, y + 4}, IM_COL32(245, 160, 40, 255), 1);
        dump_box(("timeline step mark " + std::to_string(mark->second.step)).c_str(), x, y, x + w, y + chip_h);
    }
    char pos[24];
    std::snprintf(pos, sizeof pos, "%lld", (long long)p);
    dl->AddText({x + 5, y + chip_h + 2}, IM_COL32(150, 150, 160, 255), pos);
    if (ImGui::IsMouseHoveringRect({x, y}, {x + w, y + chip_h}) && ImGui::IsWindowHovered())
        chip_tooltip(t, p, mark == marks.end() ? nullptr : &mark->second);
}

// The cache fill bar under the strip (it stays put when the strip scrolls), and colours a new user has not
// met elsewhere named beside it, never over it: the bar shrinks (down to its own text) to make room, and a
// note that still does not fit is left out.
void fill_bar(const Strip& t, ImDrawList* dl, float bar_y, float line) {
    const StepRecord* r = t.r;
    const Snapshot& s = t.s;
    const size_t step_index = t.step_index;
    const KeyRange& visible = t.visible;
    char fill[96];
    std::snprintf(fill, sizeof fill, "cache fill: %lld / %lld slots", (long long)r->cache.used,
                  (long long)r->cache.capacity);
    bool shared = false, cached = false;
    for (size_t i = 0; i <= step_index; ++i) {
        const StepCost& c = s.trace()[i].cost;
        shared |= c.n_adopted > 0 && c.adopted_from == StepCost::Source::SharedPrefix;
        cached |= c.n_adopted > 0 && c.adopted_from == StepCost::Source::PromptCache;
    }
    const std::pair<bool, std::pair<const char*, ImU32>> notes[] = {
        {visible.n_sink > 0, {"magenta = attention sink", IM_COL32(230, 130, 210, 255)}},
        {cached, {"purple = K/V loaded from a prompt cache", IM_COL32(190, 150, 250, 255)}},
        {shared, {"teal = K/V mapped from another sequence", IM_COL32(110, 215, 220, 255)}},
    };
    const float gap = 14, avail = std::max(200.0f, ImGui::GetContentRegionAvail().x - 10);
    const float min_bar = ImGui::CalcTextSize(fill).x + 16;
    float notes_w = 0;  // the notes that fit beside a bar at least as wide as its text
    std::vector<const std::pair<const char*, ImU32>*> shown;
    for (const auto& [on, note] : notes) {
        const float w = ImGui::CalcTextSize(note.first).x + gap;
        if (!on || min_bar + notes_w + w > avail) continue;
        notes_w += w;
        shown.push_back(&note);
    }
    const float bw = std::max(min_bar, avail - notes_w);
    const float fw = bw * float(r->cache.used) / float(std::max<int64_t>(1, r->cache.capacity));
    const float bx = ImGui::GetWindowPos().x + 4;  // the bar stays put when the strip scrolls
    dl->AddRectFilled({bx, bar_y}, {bx + bw, bar_y + line + 2}, IM_COL32(50, 50, 58, 255), 3);
    dl->AddRectFilled({bx, bar_y}, {bx + fw, bar_y + line + 2}, IM_COL32(50, 110, 170, 255), 3);
    dl->AddText({bx + 6, bar_y + 1}, IM_COL32(230, 230, 235, 255), fill);
    dump_box("timeline fill bar", bx, bar_y, bx + bw, bar_y + line + 2);
    float nx = bx + bw + gap;
    for (size_t i = 0; i < shown.size(); ++i) {
        const float w = ImGui::CalcTextSize(shown[i]->first).x;
        dl->AddText({nx, bar_y + 1}, shown[i]->second, shown[i]->first);
        dump_box(("timeline fill note " + std::to_string(i)).c_str(), nx, bar_y + 1, nx + w, bar_y + 1 + line);
        nx += w + gap;
    }
}

// Follow the position pointer when it moves (a step, a step back, another viewed step), scrolling only
// as far as needed to bring it and its label into view: a sequence that fits never scrolls, so position 0
// stays visible.
void follow_pointer(int64_t next_pos, float pointer_x, ImVec2 origin) {
    static int64_t followed = -1;
    if (next_pos != followed) {
        followed = next_pos;
        const float scroll = ImGui::GetScrollX();
        const float want = pointer_x - origin.x;  // pointer in content coordinates (origin already moves with the scroll)
        const float width = ImGui::GetWindowSize().x;
        const float label = ImGui::CalcTextSize("next position").x + 24;
        if (want + label <= width) ImGui::SetScrollX(0);  // fits from position 0: show the start (sinks, prompt)
        else if (want + label > scroll + width) ImGui::SetScrollX(want + label - width);
        else if (want < scroll + 40) ImGui::SetScrollX(std::max(0.0f, want - 40));
    }
}

// The decoder's chips, the position pointer, the turns of a chat and the fill bar, in a child that scrolls.
void draw_strip(const Strip& t) {
    const Snapshot& s = t.s;
    const StepRecord* r = t.r;
    const std::vector<TokenId>& tokens = t.tokens;
    const int64_t next_pos = t.next_pos;
    ImGui::BeginChild("strip", {0, 0}, false, ImGuiWindowFlags_HorizontalScrollbar);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float line = ImGui::GetTextLineHeight();
    const float chip_h = line + 6;
    constexpr float kPointerHalf = 6;  // the pointer's half width: the chips start after it, so at position 0 it shows whole
    ImVec2 origin = ImGui::GetCursorScreenPos();
    origin.x += kPointerHalf;
    float x = origin.x;
    TurnMarks turn_marks(s);  // a chat's turns and roles, in a band above the chips
    const float y = origin.y + 2 + turn_marks.height();
    const std::vector<float>& chip_x = chip_offsets(t);
    const float view_lo = ImGui::GetWindowPos().x - origin.x, view_hi = view_lo + ImGui::GetWindowSize().x;
    const int64_t n_tok = int64_t(tokens.size());
    const int64_t first_p = std::max<int64_t>(0, int64_t(std::upper_bound(chip_x.begin(), chip_x.end() - 1, view_lo) - chip_x.begin()) - 1);
    float pointer_x = origin.x + chip_x[size_t(std::min(next_pos, n_tok))];
    for (int64_t p = 0; p < n_tok; ++p) turn_marks.place(p, origin.x + chip_x[size_t(p)]);  // every turn, in view or not
    const std::map<int64_t, StepMark> marks = r ? step_marks(s.trace(), t.step_index) : std::map<int64_t, StepMark>{};
    {
        std::string listed;  // "step:e" (evicted) "step:d" (edited) "step:ed", for the tests
        for (const auto& [pos, m] : marks)
            listed += (listed.empty() ? "" : " ") + std::to_string(m.step) + ":" + (m.what & 1 ? "e" : "") + (m.what & 2 ? "d" : "");
        if (!marks.empty()) dump_text("timeline step marks", listed);
    }
    for (int64_t p = first_p; p < n_tok; ++p) {
        x = origin.x + chip_x[size_t(p)];
        if (x - origin.x > view_hi) break;
        draw_chip(t, p, x, y, chip_x[size_t(p) + 1] - chip_x[size_t(p)] - 3, chip_h, dl, marks);
    }
    x = origin.x + chip_x.back();
    turn_marks.draw(dl, origin.y);
    // Position pointer: where the next token goes.
    const float py = y + chip_h + line + 4;
    dl->AddTriangleFilled({pointer_x, py - 6}, {pointer_x - kPointerHalf, py + 4}, {pointer_x + kPointerHalf, py + 4},
                          IM_COL32(250, 200, 60, 255));
    dl->AddText({pointer_x + kPointerHalf + 2, py - 4}, IM_COL32(250, 200, 60, 255), "next position");
    // Cache fill bar under the strip.
    const float bar_y = py + line + 4;
    if (r) fill_bar(t, dl, bar_y, line);
    ImGui::Dummy({x - origin.x + kPointerHalf + ImGui::CalcTextSize("next position").x + 24, bar_y + line + 2 - origin.y});
    follow_pointer(next_pos, pointer_x, origin);
    ImGui::EndChild();
}

}  // namespace

void draw_timeline(PanelContext& c) {
    if (!begin_panel(Panel::Timeline)) return;
    size_t step_index = 0;
    const StepRecord* r = viewed_step(c.snap, c.prefs, &step_index);
    step_browser(c.snap, c.prefs, r, step_index);
    const Strip t = strip_of(c.snap, c.prefs, r, step_index);
    if (t.ed) {
        source_pane(t);
        ImGui::SameLine(0, 4);
    }
    draw_strip(t);
    end_panel();
}

}  // namespace kvscope::gui
