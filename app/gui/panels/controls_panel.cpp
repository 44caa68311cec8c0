// Controls: the prompt (tokenized as you type), the step buttons, long runs, session options and the
// cache switch. Every button only queues a Command. Encoder-decoder models get a source box above the
// prompt (the encoder's input), and the decoder start token as the first prompt chip.
#include "panels/controls_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "base/errors.h"
#include "run/options.h"
#include "widgets/shortcuts.h"

namespace kvscope::gui {
namespace {

int run_n = 8;  // the Run N box

// Chip colours: prompt tokens, the decoder start token, source tokens.
constexpr ImU32 kPromptChip = IM_COL32(46, 70, 110, 255), kStartChip = IM_COL32(140, 92, 24, 255),
                kSourceChip = IM_COL32(92, 72, 120, 255);

// Where each chip of a strip goes, computed once per (tokens, width): a long prompt has thousands of
// chips, and measuring every token's text each frame would cost more than the rest of the window.
struct ChipLayout {
    const Model* model = nullptr;
    std::vector<TokenId> ids;
    float width = 0, font = 0;
    bool start = false;
    std::vector<ImVec2> at;      // (n) top-left of chip i, relative to the strip's origin
    std::vector<float> w;        // (n) chip widths
    std::vector<float> text_w;   // (n) width of the token text (the id follows it)
    float height = 0;            // of the whole strip
};

// Encoded prompt text, kept until the text or the model changes (a long prompt is not re-tokenized each frame).
struct EncodedText {
    const Model* model = nullptr;
    std::string dir, text;  // a model loaded where the last one was freed has another folder, or the same tokens
    std::vector<TokenId> ids;
    std::string error;
};

const EncodedText& encoded(EncodedText& cache, const Model& model, const std::string& text) {
    if (cache.model != &model || cache.dir != model.dir() || cache.text != text) {
        cache.model = &model;
        cache.dir = model.dir();
        cache.text = text;
        cache.ids.clear();
        cache.error.clear();
        try {
            cache.ids = encode_prompt(model, text);
        } catch (const UsageError& err) {
            cache.error = render_labels(err.what());
        }
    }
    return cache;
}

// One chip per token: text and id; `first_position` is the position of ids[0]. With `start`, a chip for
// the decoder start token comes first (position 0). Only the chips in view are drawn and hovered.
void token_chips(const Model& model, const std::vector<TokenId>& ids, ImU32 fill = kPromptChip, int64_t first_position = 0,
                 std::optional<TokenId> start = std::nullopt, const char* what = "position", int64_t selected = -1) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImGuiStyle& st = ImGui::GetStyle();
    const float h = ImGui::GetTextLineHeight() + 4;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    const float width = std::max(1.0f, ImGui::GetContentRegionAvail().x);
    float start_w = 0;
    if (start) {
        const std::string text = short_token(model, *start, 10) + " start";
        const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
        const float w = ts.x + st.FramePadding.x * 2;
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::InvisibleButton("start chip", {w, h});
        dump_item("decoder start chip");
        dl->AddRectFilled(p, {p.x + w, p.y + h}, kStartChip, 4);
        dl->AddText({p.x + st.FramePadding.x, p.y + 2}, IM_COL32(245, 235, 215, 255), text.c_str());
        if (ImGui::IsItemHovered()) {
            ImGui::BeginTooltip();
            ImGui::PushTextWrapPos(ImGui::GetFontSize() * 28.0f);
            ImGui::Text("decoder start token %d '%s', position 0", *start, token_text(model, *start).c_str());
            ImGui::TextDisabled("Every decoder input begins with it (config.json decoder_start_token_id): the decoder "
                                "needs a first token to predict from, so the prompt after it may be empty. It is "
                                "not part of the source; the encoder never sees it.");
            ImGui::PopTextWrapPos();
            ImGui::EndTooltip();
        }
        start_w = w + 4;
    }
    static std::unordered_map<ImGuiID, ChipLayout> layouts;
    ChipLayout& l = layouts[ImGui::GetID("chip layout")];
    if (l.model != &model || l.ids != ids || l.width != width || l.font != ImGui::GetFontSize() || l.start != bool(start)) {
        l.model = &model;
        l.ids = ids;
        l.width = width;
        l.font = ImGui::GetFontSize();
        l.start = bool(start);
        l.at.clear();
        l.w.clear();
        l.text_w.clear();
        float x = start_w, y = 0;  // the first line starts after the start chip
        for (size_t i = 0; i < ids.size(); ++i) {
            char id[24];
            std::snprintf(id, sizeof id, "%d", ids[i]);
            const float tw = ImGui::CalcTextSize(short_token(model, ids[i], 10).c_str()).x;
            const float w = tw + ImGui::CalcTextSize(id).x + st.FramePadding.x * 3;
            if (x > 0 && x + w > width) x = 0, y += h + st.ItemSpacing.y;  // does not fit: the next line
            l.at.push_back({x, y});
            l.w.push_back(w);
            l.text_w.push_back(tw);
            x += w + 4;
        }
        l.height = ids.empty() ? 0 : y + h;
    }
    // The chips whose line is in view: the strip's visible part of the child window.
    const float clip_top = ImGui::GetWindowPos().y, clip_bottom = clip_top + ImGui::GetWindowSize().y;
    const auto first = std::lower_bound(l.at.begin(), l.at.end(), clip_top - origin.y - h,
                                        [](const ImVec2& a, float y) { return a.y < y; });
    const bool hovering = ImGui::IsWindowHovered();
    for (size_t i = size_t(first - l.at.begin()); i < ids.size(); ++i) {
        const ImVec2 p = {origin.x + l.at[i].x, origin.y + l.at[i].y};
        if (p.y > clip_bottom) break;
        const float w = l.w[i];
        const int64_t pos = first_position + int64_t(i);
        char id[24];
        std::snprintf(id, sizeof id, "%d", ids[i]);
        dl->AddRectFilled(p, {p.x + w, p.y + h}, fill, 4);
        if (pos == selected) dl->AddRect({p.x - 1, p.y - 1}, {p.x + w + 1, p.y + h + 1}, IM_COL32(90, 220, 255, 255), 4, 0, 2);
        dl->AddText({p.x + st.FramePadding.x, p.y + 2}, IM_COL32(235, 235, 240, 255), short_token(model, ids[i], 10).c_str());
        dl->AddText({p.x + l.text_w[i] + st.FramePadding.x * 2, p.y + 2}, IM_COL32(150, 170, 200, 255), id);
        if (hovering && ImGui::IsMouseHoveringRect(p, {p.x + w, p.y + h}))
            ImGui::SetTooltip("token %d, %s %lld\n'%s'", ids[i], what, (long long)pos, token_text(model, ids[i]).c_str());
    }
    if (l.height > 0) {
        ImGui::SetCursorScreenPos(origin);
        ImGui::Dummy({width, l.height});
    }
}

// "working..." with what the worker does, how long it has been at it, and a bar: steps of a run, or an
// indeterminate sweep for a single long step (the engine does not report progress inside a step).
void working_indicator(const Progress& p) {
    if (!p.busy && p.notice.empty()) return;
    if (p.busy) {
        char label[96];
        float fraction = 0;
        if (p.running) {
            const int64_t total = p.run_total > 0 ? p.run_total : p.run_limit;
            std::snprintf(label, sizeof label, "%lld / %lld%s steps  %.1f s", (long long)p.run_done, (long long)total,
                          p.run_total > 0 ? "" : " (to the end)", p.elapsed_s);
            fraction = total > 0 ? std::min(1.0f, float(p.run_done) / float(total)) : 0.0f;
        } else {
            std::snprintf(label, sizeof label, "working... %.1f s", p.elapsed_s);
            fraction = float(std::fmod(p.elapsed_s * 0.5, 1.0));  // a sweep: alive, not a percentage
        }
        ImGui::PushStyleColor(ImGuiCol_PlotHistogram, ImVec4(0.85f, 0.62f, 0.18f, 1));
        ImGui::ProgressBar(fraction, {-1, 0}, label);
        ImGui::PopStyleColor();
        if (!p.activity.empty()) wrapped_disabled("%s", p.activity.c_str());
        if (p.queued > 0) wrapped_disabled("%s queued behind it", count_of(int64_t(p.queued), "intent").c_str());
    }
    if (!p.notice.empty()) {
        wrapped_text({1.0f, 0.6f, 0.3f, 1}, "%s", p.notice.c_str());
    }
}

// "Apply" in the colours of a change waiting for it.
bool apply_button(const char* label, bool pending) {
    if (pending) {
        ImGui::PushStyleColor(ImGuiCol_Button, ImVec4(0.75f, 0.50f, 0.10f, 1));
        ImGui::PushStyleColor(ImGuiCol_ButtonHovered, ImVec4(0.85f, 0.60f, 0.15f, 1));
    }
    const bool pressed = ImGui::Button(label);
    if (pending) ImGui::PopStyleColor(2);
    return pressed;
}

// A float box's value as text that reads back as the same double (the box keeps a float).
std::string float_text(float x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", double(x));
    return b;
}

// One session option's box, as the option table declares it (core/run/options.h), shown only where it
// applies (the KV budget under an eviction policy, int4's group with int4). A bad combination is refused
// when applied, in the error box. Choices are combos of named items (not Combo's string list) so tests
// find each in the layout dump; a two-way choice whose first is the default is a checkbox.
void option_widget(const OptionSpec& spec, SessionOptions& o, BatchOptions& b) {
    RunOptions r{o, GroupOptions{}};
    r.group.n_seq = b.n_seq;
    if (spec.applies && !spec.applies(r)) return;
    const float w = ImGui::GetFontSize() * 7;
    const std::string value = spec.get(r);
    std::string changed;
    switch (spec.kind) {
    case OptionKind::Int: {
        const int64_t fallback = std::stoll(default_text(spec));
        // An open range leaves the explaining to the check: the box takes positive values (or the default).
        const int64_t lo = spec.min == INT64_MIN ? std::min<int64_t>(1, fallback) : std::min(spec.min, fallback);
        int x = int(std::stoll(value));
        ImGui::SetNextItemWidth(w);
        if (ImGui::InputInt(spec.label, &x)) changed = std::to_string(std::max<int64_t>(lo, x));
        break;
    }
    case OptionKind::Real: {
        const bool probability = std::string_view(spec.name) == "top_p";
        float x = float(std::stod(value));
        ImGui::SetNextItemWidth(w);
        if (ImGui::InputFloat(spec.label, &x, probability ? 0.05f : 0.1f, probability ? 0.1f : 0.5f, "%.2f"))
            changed = float_text(probability ? std::clamp(x, 0.01f, 1.0f) : std::max(0.0f, x));
        break;
    }
    case OptionKind::Switch: {
        bool on = value == "1";
        if (ImGui::Checkbox(spec.label, &on)) changed = on ? "1" : "0";
        break;
    }
    case OptionKind::Choice: {
        const std::vector<std::string> names = choices_of(spec);
        if (names.size() == 2 && default_text(spec) == names[0]) {
            bool second = value == names[1];
            if (ImGui::Checkbox(spec.label, &second)) changed = names[second ? 1 : 0];
            break;
        }
        ImGui::SetNextItemWidth(w);
        if (ImGui::BeginCombo(spec.label, value.c_str())) {
            for (const std::string& name : names) {
                if (ImGui::Selectable(name.c_str(), name == value)) changed = name;
                dump_item((std::string(spec.label) + " " + name).c_str());
            }
            ImGui::EndCombo();
        }
        break;
    }
    case OptionKind::Text:
        return;
    }
    dump_item(spec.label);
    help_marker(*spec.tip ? spec.tip : spec.help);
    if (!changed.empty()) {
        set_option(r, spec, changed);
        o = r.session;
    }
}

}  // namespace

void sync_option_edits(ViewPrefs& v, const Snapshot& s) {
    if (v.edit_generation == s.generation) return;
    v.edit_options = s.options();
    v.edit_batch = s.batch;
    v.edit_generation = s.generation;
}

std::string pending_options(const ViewPrefs& v, const Snapshot& s) {
    if (v.edit_generation != s.generation) return "";
    const BatchOptions &ab = s.batch, &eb = v.edit_batch;
    const RunOptions a{s.options(), {.n_seq = ab.n_seq, .prompt_cache = ab.prompt_cache}},
        e{v.edit_options, {.n_seq = eb.n_seq, .prompt_cache = eb.prompt_cache}};
    std::string out;
    auto change = [&](const std::string& what, const std::string& from, const std::string& to) {
        if (from != to) out += (out.empty() ? "" : ", ") + what + " " + from + " \u2192 " + to;
    };
    // every option the window sets, by its label, its value as the table writes it; a parameter the edited
    // setup leaves without effect (int4's group under int8) is not a change
    auto shown = [](const OptionSpec& o, const RunOptions& r) {
        const std::string t = o.get(r);
        if (o.kind == OptionKind::Switch) return std::string(t == "1" ? "on" : "off");
        if (o.kind == OptionKind::Text) return t.empty() ? std::string("none") : t;
        return t;
    };
    for (const OptionSpec& o : option_table())
        if (*o.label && (!o.applies || o.applies(e))) change(o.label, shown(o, a), shown(o, e));
    for (size_t i = 0; i < size_t(eb.n_seq) && i < eb.suffixes.size(); ++i) {
        const std::string was = i < ab.suffixes.size() ? ab.suffixes[i] : "";
        if (was != eb.suffixes[i]) change("suffix " + std::to_string(i), "'" + was + "'", "'" + eb.suffixes[i] + "'");
    }
    return out;
}

namespace {

// A chat with the model's own template: the conversation so far and a message box. Enter (or Send) appends
// the message as a new turn to the same cache and runs to the end of the reply.
void draw_chat(PanelContext& c) {
    static std::string message;  // the box's text: the UI's own until sent
    const Snapshot& s = c.snap;
    ImGui::Spacing();
    ImGui::TextUnformatted("Chat");
    help_marker("The model folder has a chat template (tokenizer_config.json). Each message is rendered with it; the "
                "first one becomes the prompt, later ones are appended to the same KV cache as a new turn: only the "
                "new message's tokens (and the reply's last token) are computed, earlier positions are reused. The "
                "reply is decoded until the template's end of turn. The Cache on vs off panel compares with "
                "re-prefilling the whole conversation each turn.");
    std::string convo;
    const float box_h = ImGui::GetTextLineHeight() * (s.chat.empty() ? 2.5f : 8.0f);
    if (ImGui::BeginChild("conversation", {-1, box_h}, true)) {
        if (s.chat.empty()) ImGui::TextDisabled("no message yet: type one below and press Enter");
        for (const Snapshot::ChatLine& l : s.chat) {
            const bool user = l.role == "user";
            ImGui::TextColored(user ? ImVec4{0.47f, 0.70f, 1, 1} : ImVec4{0.47f, 0.86f, 0.55f, 1}, "%s %lld:", l.role.c_str(),
                               (long long)l.turn);
            ImGui::SameLine();
            ImGui::PushTextWrapPos(0);
            ImGui::TextUnformatted(l.text.empty() && !l.complete ? "..." : l.text.c_str());
            ImGui::PopTextWrapPos();
            convo += (convo.empty() ? "" : "\n") + l.role + " " + std::to_string(l.turn) + ": " + l.text +
                     (l.complete ? "" : " ...");
        }
        if (!s.chat.empty() && s.chat.back().role == "assistant" && !s.chat.back().complete) ImGui::SetScrollHereY(1.0f);
    }
    ImGui::EndChild();
    dump_item("chat conversation");
    dump_text("chat", convo);
    const float send_w = ImGui::CalcTextSize("Send").x + ImGui::GetStyle().FramePadding.x * 2;
    ImGui::SetNextItemWidth(-send_w - ImGui::GetStyle().ItemSpacing.x);
    bool entered = ImGui::InputTextWithHint("##chat message", "message (Enter sends)", &message,
                                            ImGuiInputTextFlags_EnterReturnsTrue);
    // A held Enter repeats; only its first press sends (a repeat would send the cleared box).
    const ImGuiIO& io = ImGui::GetIO();
    for (ImGuiKey k : {ImGuiKey_Enter, ImGuiKey_KeyPadEnter})
        if (const int i = ImGui::GetKeyIndex(k); i >= 0 && i < 512 && io.KeysDown[i] && io.KeysDownDuration[i] > 0) entered = false;
    dump_item("chat message");
    if (entered) ImGui::SetKeyboardFocusHere(-1);  // keep typing the next message
    ImGui::SameLine();
    const bool pressed = ImGui::Button("Send");
    dump_item("chat send");
    if (entered || pressed) {
        c.ctl.push(SendChat{message});
        message.clear();
    }
}

// The model's folder and its shape in one line.
void draw_model_line(const Model& model) {
    const ModelConfig& cfg = model.config();
    ImGui::TextDisabled("model");
    ImGui::SameLine();
    ImGui::TextWrapped("%s", model.dir().c_str());
    if (cfg.encoder_decoder)
        wrapped_disabled("encoder-decoder: E=%lld encoder + L=%lld decoder layers, H=%lld D=%lld  vocab %lld  ctx %lld",
                            (long long)cfg.n_encoder_layer, (long long)cfg.n_layer, (long long)cfg.n_head,
                            (long long)cfg.head_dim(), (long long)cfg.n_vocab, (long long)cfg.n_ctx);
    else  // D is the config's head_dim (Gemma 3 sets it apart from hidden_size / heads), as in the Model panel
        dump_text("controls shape", wrapped_disabled("L=%lld H=%lld D=%lld  vocab %lld  ctx %lld", (long long)cfg.n_layer,
                                                     (long long)cfg.n_head, (long long)cfg.head_dim(),
                                                     (long long)cfg.n_vocab, (long long)cfg.n_ctx));
}

// Encoder-decoder models: the encoder's input, tokenized with the same tokenizer, read once by the encoder.
void draw_source(PanelContext& c, Inputs& in) {
    const Model& model = c.snap.model();
    ImGui::Spacing();
    ImGui::TextUnformatted(model.tokenizer() ? "Source (the encoder's input)" : "Source (token ids: 1,2,3)");
    help_marker("The encoder reads the whole source at once (no mask) on the first prefill step and leaves, for "
                "every decoder layer, the keys and values of each source token: the cross-attention cache. It "
                "stays fixed while the decoder steps. Editing the source restarts the session.");
    ImGui::SetNextItemWidth(-1);
    const bool source_edited = ImGui::InputText("##source", &in.source);
    dump_item("source");
    if (source_edited) c.ctl.push(SetSource{in.source});
    static EncodedText source_cache;
    const std::vector<TokenId>& src = encoded(source_cache, model, in.source).ids;
    const std::string& src_error = source_cache.error;
    ImGui::TextDisabled("%s (S)", count_of(int64_t(src.size()), "source token").c_str());
    if (!src_error.empty() || src.empty()) {
        ImGui::SameLine();
        ImGui::TextColored({1, 0.5f, 0.4f, 1}, "%s", src.empty() && src_error.empty() ? "the encoder needs a source" : src_error.c_str());
    }
    ImGui::PushID("source chips");
    if (ImGui::BeginChild("chips", {-1, ImGui::GetTextLineHeight() * 2 + 16}, false))  // two rows of chips
        token_chips(model, src, kSourceChip, 0, std::nullopt, "source position", c.prefs.sel_source);
    ImGui::EndChild();
    ImGui::PopID();
}

// The prompt box and its chips, from the text as typed (the tokenizer is part of the model, not the session).
void draw_prompt(PanelContext& c, Inputs& in) {
    const Snapshot& s = c.snap;
    const Model& model = s.model();
    const ModelConfig& cfg = model.config();
    const bool ed = cfg.encoder_decoder;
    ImGui::Spacing();
    wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text], "%s",
                 ed ? (model.tokenizer() ? "Prompt (decoder input after the start token; may be empty)"
                                         : "Prompt (token ids after the start token; may be empty)")
                    : model.tokenizer() ? "Prompt" : "Prompt (token ids: 1,2,3 - no tokenizer files)");
    if (!s.chat.empty())  // the conversation is the session's prompt now
        wrapped_disabled("The chat above is the session's input (%s so far, rendered with the model's chat "
                         "template); typing a prompt here starts over without it.",
                         count_of(int64_t(s.prompt().size() + s.generated().size()), "token").c_str());
    const float box_h = ImGui::GetTextLineHeight() * (ed ? 2.2f : !s.chat.empty() ? 1.6f : 3.2f);
    const bool edited = ImGui::InputTextMultiline("##prompt", &in.prompt, {-1, box_h});
    dump_item("prompt");
    if (edited) c.ctl.push(SetPrompt{in.prompt});
    static EncodedText prompt_cache;
    const std::vector<TokenId>& ids = encoded(prompt_cache, model, in.prompt).ids;
    const std::string& token_error = prompt_cache.error;
    if (ed) ImGui::TextDisabled("start token + %s", count_of(int64_t(ids.size()), "prompt token").c_str());
    else ImGui::TextDisabled("%s", count_of(int64_t(ids.size()), "token").c_str());
    if (!token_error.empty()) {
        ImGui::SameLine();
        ImGui::TextColored({1, 0.5f, 0.4f, 1}, "%s", token_error.c_str());
    }
    const float chips_h = ed ? ImGui::GetTextLineHeight() * 2 + 16 : ImGui::GetTextLineHeight() * (s.chat.empty() ? 3.6f : 1.6f);
    if (ImGui::BeginChild("chips", {-1, chips_h}, false)) {
        if (ed) token_chips(model, ids, kPromptChip, 1, TokenId(cfg.decoder_start_token_id));
        else token_chips(model, ids);
    }
    ImGui::EndChild();
}

// Prefill / decode / back / reset, the Run N box and its buttons, Pause, and what is running.
void draw_step_buttons(PanelContext& c) {
    const Snapshot& s = c.snap;
    const Session::Next next = s.next();
    auto button = [&](const char* label, Command cmd, bool enabled) {
        ImGui::BeginDisabled(!enabled);
        const bool pressed = ImGui::Button(label);
        ImGui::EndDisabled();
        dump_item(label);
        if (pressed) c.ctl.push(std::move(cmd));
        return pressed;
    };
    // Intents queue while the worker is busy; only a run in progress disables the step buttons.
    const Progress& pr = c.progress;
    const bool idle = !pr.running;
    button("Prefill step", Prefill{}, idle && next == Session::Next::Prefill);
    ImGui::SameLine();
    button("Decode step", Decode{1}, idle && next == Session::Next::Decode);
    ImGui::SameLine();
    button("Step back", Back{1}, !s.trace().empty());
    ImGui::SameLine();
    button("Reset", Reset{}, !s.prompt().empty());

    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6);
    ImGui::InputInt("##runn", &run_n);
    run_n = std::max(1, run_n);
    ImGui::SameLine();
    button("Run N", Run{run_n}, idle && next != Session::Next::Done);
    ImGui::SameLine();
    button("Run to end", Run{-1}, idle && next != Session::Next::Done);
    ImGui::SameLine();
    button("Pause", Pause{}, pr.running);
    working_indicator(pr);
}

// Steps run on the applied options: say so where the step buttons are, in the one line the key hint takes
// otherwise. A note of its own pushed every option box below it down as soon as an edit made an option
// pending, so the next click, aimed at the box just seen, landed on the one above it.
void draw_key_hint_or_pending(PanelContext& c, const std::string& pending) {
    if (pending.empty()) {
        if (ImGui::SmallButton("?")) c.prefs.help_open = true;
        dump_item("help button");
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("Help: every keyboard shortcut and what each panel shows (F1)");
        ImGui::SameLine();
        dump_text("key hint", wrapped_disabled("%s", shortcut_hint().c_str()));  // the shortcut table's, as the help lists it
        dump_item("key hint");
        return;
    }
    std::string line = "Not applied yet: " + pending;
    const float room = ImGui::GetContentRegionAvail().x;
    if (ImGui::CalcTextSize(line.c_str()).x > room) {  // cut at a whole UTF-8 character, the rest on hover
        while (!line.empty() && ImGui::CalcTextSize((line + "...").c_str()).x > room) {
            line.pop_back();
            while (!line.empty() && (uint8_t(line.back()) & 0xC0) == 0x80) line.pop_back();
            if (!line.empty() && (uint8_t(line.back()) & 0xC0) == 0xC0) line.pop_back();
        }
        line += "...";
    }
    ImGui::TextColored({0.95f, 0.70f, 0.25f, 1}, "%s", line.c_str());
    dump_item("options pending");
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("Not applied yet: %s.\nSteps (and Space) use the applied options until you press Apply "
                          "below.", pending.c_str());
}

// A batch steps together; the panels show one sequence.
void draw_sequence_choice(PanelContext& c) {
    const Snapshot& s = c.snap;
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("showing sequence");
    for (size_t i = 0; i < s.sequences.size(); ++i) {
        ImGui::SameLine(0, 4);
        char label[24];
        std::snprintf(label, sizeof label, "%zu", i);
        if (ImGui::RadioButton(label, s.selected == int64_t(i)) && s.selected != int64_t(i))
            c.ctl.push(Select{int64_t(i)});
    }
    help_marker("Every step runs all sequences of the batch at once (Session::step_batch); the timeline, "
                "attention, KV cache, mask and next-token panels show the chosen one, the Memory panel all.");
}

// The KV cache switch and the cache on vs off comparison.
void draw_cache_switch(PanelContext& c) {
    const Snapshot& s = c.snap;
    bool cache_on = s.options().use_cache;
    ImGui::PushStyleColor(ImGuiCol_Button, cache_on ? ImVec4(0.16f, 0.50f, 0.30f, 1) : ImVec4(0.60f, 0.25f, 0.20f, 1));
    const bool flip = ImGui::Button(cache_on ? "KV cache: ON " : "KV cache: OFF");
    dump_item("cache switch");
    if (flip) c.ctl.push(SetCache{!cache_on});
    ImGui::PopStyleColor();
    help_marker("ON: each step computes only its new tokens and reads earlier keys/values from the cache.\n"
                "OFF: each step recomputes every position from scratch (same answer, more work).");
    bool compare = s.compare;
    if (ImGui::Checkbox("Also compute each step the other way", &compare)) c.ctl.push(SetCompare{compare});
}

// The option boxes of the option table (run/options.h), edited without applying until Apply.
void draw_session_options(PanelContext& c, const std::string& pending) {
    if (!ImGui::CollapsingHeader("Session options", ImGuiTreeNodeFlags_DefaultOpen)) return;
    SessionOptions& o = c.prefs.edit_options;
    for (const OptionSpec* spec : controls_options()) option_widget(*spec, o, c.prefs.edit_batch);
    if (apply_button(pending.empty() ? "Apply options (restarts the session)" : "Apply pending options (restarts the session)",
                     !pending.empty()))
        c.ctl.push(SetOptions{o, c.prefs.edit_batch, {}});
    dump_item("apply options");
    if (!pending.empty()) {
        ImGui::SameLine();
        if (ImGui::SmallButton("Discard")) c.prefs.edit_generation = ~0ull;  // the boxes go back to the applied options
        dump_item("discard options");
    }
}

// Paged cache, prefix sharing, the batch's sequences and suffixes, the prompt cache file.
void draw_batch_options(PanelContext& c, const std::string& pending) {
    if (!ImGui::CollapsingHeader("Batch and memory (paged cache, prefix sharing)")) return;
    SessionOptions& o = c.prefs.edit_options;
    BatchOptions& b = c.prefs.edit_batch;
    const float w = ImGui::GetFontSize() * 7;
    auto input64 = [&](const char* label, int64_t& v, int64_t lo, int64_t hi, const char* help) {
        int x = int(v);
        ImGui::SetNextItemWidth(w);
        if (ImGui::InputInt(label, &x)) v = std::clamp<int64_t>(x, lo, hi);
        help_marker(help);
    };
    input64(option_named("block_size")->label, o.block_size, 0, 4096, "B > 0: a paged KV cache, positions in blocks of B from one pool "
            "shared by the batch (the Memory panel shows it); 0 = one contiguous ring per sequence");
    ImGui::Checkbox(option_named("share_prefix")->label, &o.share_prefix);
    help_marker("A sequence whose prompt starts with the same tokens as an earlier one maps those blocks instead "
                "of computing them again; a shared block is copied before anyone writes into it (copy-on-write).");
    input64(option_named("sequences")->label, b.n_seq, 1, 16, "N sequences stepped together. Sequence i's prompt is the prompt above "
            "followed by its suffix, and it samples with seed + i (set temperature > 0 to see identical prompts "
            "diverge).");
    b.suffixes.resize(size_t(b.n_seq));
    for (int64_t i = 0; i < b.n_seq; ++i) {
        char label[32];
        std::snprintf(label, sizeof label, "suffix %lld", (long long)i);
        ImGui::SetNextItemWidth(-ImGui::CalcTextSize("suffix 00").x - 8);
        ImGui::InputText(label, &b.suffixes[size_t(i)]);
    }
    ImGui::SetNextItemWidth(-ImGui::CalcTextSize("prompt cache").x - 8);
    ImGui::InputTextWithHint("prompt cache", "file (one sequence)", &b.prompt_cache);
    help_marker("A file of the prompt's K/V (as kvscope generate --prompt-cache writes it): when it exists and "
                "was made by this model for a prompt this one starts with, the prefill loads those positions "
                "(purple in the timeline) instead of computing them; otherwise the prefill writes it.");
    if (o.share_prefix && o.block_size == 0) o.block_size = 4;  // sharing is by blocks
    if (apply_button("Apply (restarts every sequence)", !pending.empty())) c.ctl.push(SetOptions{o, b, {}});
    dump_item("apply batch");
    if (c.snap.pool_views.empty() && ImGui::Button("Try it: 3 sequences sharing the prompt, blocks of 4")) {
        SetOptions cmd{o, b, {}};
        cmd.options.block_size = 4;
        cmd.options.share_prefix = true;
        cmd.batch.n_seq = std::max<int64_t>(3, b.n_seq);
        c.ctl.push(std::move(cmd));
    }
}

// The status line: what the last intent did (a failure also shows, until closed, where it was asked for).
void draw_status(PanelContext& c) {
    const Snapshot& s = c.snap;
    const bool boxed = s.status_error && s.problem.id != 0 && s.problem.id != c.prefs.dismissed_problem;
    if (boxed) wrapped_disabled("the last action failed: see the red box");
    else wrapped_text(s.status_error ? ImVec4(1.0f, 0.6f, 0.5f, 1) : ImGui::GetStyle().Colors[ImGuiCol_Text], "%s", s.status.c_str());
    dump_text("status", boxed ? "the last action failed: see the red box" : s.status);
}

}  // namespace

void draw_controls(PanelContext& c) {
    if (!begin_panel(Panel::Controls)) return;
    const Snapshot& s = c.snap;
    sync_option_edits(c.prefs, s);
    const std::string pending = pending_options(c.prefs, s);
    // The boxes show the controller's text (the one copy); an edit pushes the new text.
    Inputs in = c.ctl.inputs();

    draw_model_line(s.model());
    if (s.model().config().encoder_decoder) draw_source(c, in);
    if (s.chat_available) draw_chat(c);
    draw_prompt(c, in);
    ImGui::Separator();
    draw_step_buttons(c);
    problem_box(c, Place::Controls);
    draw_key_hint_or_pending(c, pending);
    if (s.sequences.size() > 1) draw_sequence_choice(c);
    ImGui::Separator();
    draw_cache_switch(c);
    draw_session_options(c, pending);
    draw_batch_options(c, pending);
    ImGui::Separator();
    draw_status(c);
    end_panel();
}

}  // namespace kvscope::gui
