// Where the panels go, and small helpers shared by them. Every workspace (widgets/workspace.h) keeps the
// same frame: Controls down the left with Export below it, the timeline and the Model panel across the top;
// between them each workspace gives its main view most of the room and puts the panels it works with beside
// it, stacked as tabs where two would not be legible side by side. A panel may appear in several workspaces.
// Panels are docked: each frame puts them in their places (switching workspaces and resizing the window lay
// them out again); what is remembered between runs is the workspace (window/settings.h).
#include <algorithm>
#include <cstdarg>
#include <string_view>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "base/errors.h"
#include "panels/panel.h"
#include "panels/panel_list.h"

namespace kvscope::gui {

namespace {

struct Arrangement {
    std::vector<Slot> slots;
    ImVec2 display = {0, 0};
    float bar = -1;
    Workspace workspace = Workspace::Step;
    bool lesson = false;          // a lesson is open: its panel has a place
    float font = 0;               // the font size the slots were laid out for (the UI scale)
    int select = -1;              // a Panel whose tab show_tab asked for
    int highlight = -1;           // a Panel highlight_panel asked to outline this frame
    const Slot* open = nullptr;   // the slot being drawn
    bool tabs_visible = false;    // its tab bar is open
};
Arrangement a;

// Flags of a docked panel window: placed by the layout, never moved, resized or folded by the mouse.
constexpr ImGuiWindowFlags kDocked = ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                                     ImGuiWindowFlags_NoBringToFrontOnFocus;

// The outline highlight_panel asked for, around the window being drawn.
void outline_if_highlighted(Panel p) {
    if (a.highlight != int(p)) return;
    ImDrawList* dl = ImGui::GetForegroundDrawList();
    const ImVec2 lo = ImGui::GetWindowPos(), hi = {lo.x + ImGui::GetWindowWidth(), lo.y + ImGui::GetWindowHeight()};
    dl->AddRect({lo.x + 1, lo.y + 1}, {hi.x - 1, hi.y - 1}, IM_COL32(255, 196, 60, 255), 0, 0, 3);
}

}  // namespace

bool panel_named(const std::string& title, Panel& out) {
    for (const PanelModule& m : panel_modules())
        if (title == m.title) return out = m.panel, true;
    // Titles shortened so five tabs fit the KV cache slot at 1280x720; scripts may use the old ones.
    if (title == "K/V quantization") return out = Panel::Quant, true;
    return false;
}

void show_tab(Panel p) { a.select = int(p); }
void highlight_panel(Panel p) { a.highlight = int(p); }

std::vector<Slot> layout_slots(ImVec2 d, float bar, Workspace w, bool lesson) {
    const float font = ImGui::GetFontSize();
    auto slot = [](ImVec2 pos, ImVec2 end, std::vector<Panel> panels) {
        return Slot{pos, {end.x - pos.x, end.y - pos.y}, std::move(panels)};
    };
    // The frame: the left column, the top row. Sizes in font heights (16 px at UI scale 1), so a screen at
    // 150 % gets the arrangement of one at 100 % with two thirds of its pixels.
    const float left = std::round(std::max(d.x * 0.23f, std::min(font * 22.5f, d.x * 0.4f)));
    const float top = bar + std::round(std::max(d.y * 0.16f, font * 9.8f));
    // The Model panel shares the top row with the timeline, at least 19 font heights wide; Export keeps room
    // for its box, format row, buttons and one line of result (about 10 font heights).
    const float model_left = std::round(std::min(left + (d.x - left) * 0.74f, d.x - font * 19));
    // An open lesson takes Export's place and more (its text, the check and its buttons), Export a tab behind it.
    const float export_top = std::round(d.y - (lesson ? std::max(font * 21, d.y * 0.42f) : std::max(font * 11, d.y * 0.13f)));
    std::vector<Slot> s;
    s.push_back(slot({0, bar}, {left, export_top}, {Panel::Controls}));
    s.push_back(slot({0, export_top}, {left, d.y}, lesson ? std::vector<Panel>{Panel::Lesson, Panel::Export}
                                                         : std::vector<Panel>{Panel::Export}));
    s.push_back(slot({left, bar}, {model_left, top}, {Panel::Timeline}));
    s.push_back(slot({model_left, bar}, {d.x, top}, {Panel::Model}));
    // The main area, split into a main view on the left and a column of one or two places on the right.
    const float x0 = left, y0 = top, width = d.x - left, height = d.y - top;  // the main area
    auto split = [&](float main_share, std::vector<Panel> main, float upper_share, std::vector<Panel> upper,
                     std::vector<Panel> lower) {
        const float xm = std::round(x0 + width * main_share), ym = std::round(y0 + height * upper_share);
        s.push_back(slot({x0, y0}, {xm, d.y}, std::move(main)));
        if (lower.empty()) {
            s.push_back(slot({xm, y0}, d, std::move(upper)));
            return;
        }
        s.push_back(slot({xm, y0}, {d.x, ym}, std::move(upper)));
        s.push_back(slot({xm, ym}, d, std::move(lower)));
    };
    switch (w) {
        case Workspace::Step:  // the attention map at least 45 % of the window's width at 1280x720
            split(0.64f, {Panel::Attention}, 0.5f, {Panel::Mask}, {Panel::NextToken, Panel::Compare, Panel::Heads});
            break;
        case Workspace::Cache:
            split(0.55f, {Panel::KvCache}, 1, {Panel::Rotary, Panel::Quant}, {});
            break;
        case Workspace::Memory:  // the pool grid and the block tables side by side need the width
            s.push_back(slot({x0, y0}, d, {Panel::Memory}));
            break;
        case Workspace::Lab:
            split(0.52f, {Panel::Lab}, 1, {Panel::Edits, Panel::Lens, Panel::Compare}, {});
            break;
        case Workspace::Chat:
            split(0.58f, {Panel::Attention}, 0.55f, {Panel::Compare}, {Panel::NextToken});
            break;
    }
    return s;
}

namespace {

// The room panel p has in workspace w (its place's area at 1280x720, a lesson open); 0 when w does not show it.
float room_of(Panel p, Workspace w) {
    for (const Slot& slot : layout_slots({1280, 720}, 0, w, true))
        if (std::find(slot.panels.begin(), slot.panels.end(), p) != slot.panels.end()) return slot.size.x * slot.size.y;
    return 0;
}

}  // namespace

Workspace workspace_holding(Panel p, Workspace current) {
    if (room_of(p, current) > 0) return current;
    for (const WorkspaceInfo& w : workspaces())
        if (room_of(p, w.workspace) > 0) return w.workspace;
    return current;
}

Workspace workspace_for(Panel p) {
    Workspace best = Workspace::Step;
    float best_room = 0;
    for (const WorkspaceInfo& w : workspaces())
        if (const float room = room_of(p, w.workspace); room > best_room) best_room = room, best = w.workspace;
    return best;
}

const std::vector<Slot>& arrange_panels(ImVec2 display, float bar, Workspace w, bool lesson) {
    // A new window size, UI scale, workspace or lesson lays the panels out again.
    const float font = ImGui::GetFontSize();
    if (a.display.x != display.x || a.display.y != display.y || a.bar != bar || a.workspace != w || a.lesson != lesson ||
        a.font != font || a.slots.empty()) {
        a.slots = layout_slots(display, bar, w, lesson);
        a.font = font;
        a.display = display;
        a.bar = bar;
        a.workspace = w;
        a.lesson = lesson;
    }
    return a.slots;
}

void begin_slot(const Slot& slot) {
    a.open = &slot;
    ImGui::SetNextWindowPos(slot.pos, ImGuiCond_Always);
    ImGui::SetNextWindowSize(slot.size, ImGuiCond_Always);
    if (slot.panels.size() == 1) return;
    // Several panels in one place: a window of tabs, named after what it holds.
    std::string name;
    for (Panel p : slot.panels) name += std::string(name.empty() ? "" : " | ") + panel_title(p);
    const bool shown = ImGui::Begin(name.c_str(), nullptr, kDocked | ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoScrollbar);
    dump_panel_window(name.c_str());
    a.tabs_visible = shown && ImGui::BeginTabBar("panels");
}

void end_slot() {
    if (a.open && a.open->panels.size() > 1) {
        if (a.tabs_visible) ImGui::EndTabBar();
        ImGui::End();
    }
    a.open = nullptr;
    a.tabs_visible = false;
}

bool begin_panel(Panel p) {
    const char* title = panel_title(p);
    if (!a.open || a.open->panels.size() == 1) {
        if (!ImGui::Begin(title, nullptr, kDocked)) {
            ImGui::End();
            return false;
        }
        dump_window(title);
        dump_panel_window(title);
        outline_if_highlighted(p);
        return true;
    }
    if (!a.tabs_visible) return false;
    const bool select = a.select == int(p);
    if (select) a.select = -1;
    const ImGuiTabItemFlags flags = select ? ImGuiTabItemFlags_SetSelected : 0;
    const bool open = ImGui::BeginTabItem(title, nullptr, flags);
    dump_item((std::string("tab ") + title).c_str());
    if (!open) return false;
    outline_if_highlighted(p);
    ImGui::BeginChild(title, {0, 0}, false);
    dump_window(title);
    return true;
}

void end_panel() {
    if (!a.open || a.open->panels.size() == 1) {
        ImGui::End();
        return;
    }
    ImGui::EndChild();
    ImGui::EndTabItem();
}

void end_layout_frame() { a.highlight = -1; }

std::string short_token(const Model& model, TokenId id, size_t max_chars) {
    std::string t = token_text(model, id);
    // A chip must never look empty or show an escape for a line break: spaces alone become middle dots
    // and a newline a return arrow (the tooltip keeps the exact bytes).
    if (!t.empty() && t.find_first_not_of(' ') == std::string::npos) {
        std::string dots;
        for (size_t k = 0; k < t.size(); ++k) dots += "\u00b7";
        t = dots;
    }
    for (size_t at; (at = t.find("\\x0a")) != std::string::npos;) t.replace(at, 4, "\u21b5");
    // Count UTF-8 code points, cut at max_chars.
    size_t n = 0, i = 0;
    for (; i < t.size(); ++i) {
        if ((uint8_t(t[i]) & 0xC0) != 0x80) {
            if (n == max_chars) break;
            ++n;
        }
    }
    if (i < t.size()) t = t.substr(0, i) + "..";
    return t;
}

std::string human_bytes(double b) {
    char buf[32];
    if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1 << 30));
    else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1 << 20));
    else if (b >= 1 << 10) std::snprintf(buf, sizeof buf, "%.1f KiB", b / double(1 << 10));
    else std::snprintf(buf, sizeof buf, "%.0f B", b);
    return buf;
}

int64_t encoder_step(const Trace& t, const EncoderOutput* enc) {
    for (size_t i = 0; enc && i < t.size(); ++i)
        if (t[i].rows.encoder.get() == enc) return int64_t(i);
    return -1;
}

std::string human_count(double n, const char* unit) {
    const struct { double scale; const char* prefix; const char* format; } steps[] = {
        {1e12, "T", "%.2f"}, {1e9, "G", "%.2f"}, {1e6, "M", "%.2f"}, {1e3, "k", "%.1f"}, {1, "", "%.0f"}};
    for (const auto& s : steps)
        if (n >= s.scale || s.scale == 1) {
            char num[32];
            std::snprintf(num, sizeof num, s.format, n / s.scale);
            // A unit is written apart from the number ("16.14 MFLOP", "523 FLOP"); a bare count keeps its
            // prefix attached ("3.4M")
            return std::string(num) + (*unit ? " " : "") + s.prefix + unit;
        }
    return {};
}

void help_marker(const char* text) {
    ImGui::SameLine();
    ImGui::TextDisabled("(?)");
    if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30.0f);
        ImGui::TextUnformatted(text);
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
    }
}

namespace {

std::string wrapped_v(ImVec4 color, const char* fmt, va_list args) {
    char buf[2048];
    std::vsnprintf(buf, sizeof buf, fmt, args);
    const float width = std::max(ImGui::GetContentRegionAvail().x, ImGui::GetFontSize() * 6);
    ImGui::PushStyleColor(ImGuiCol_Text, color);
    ImGui::BeginGroup();
    std::string_view text = buf;
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        std::string_view para = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        do {
            // The longest run of words that fits; a single longer word gets a line of its own.
            size_t cut = para.size();
            if (ImGui::CalcTextSize(para.data(), para.data() + para.size()).x > width) {
                size_t fit = std::string_view::npos;
                for (size_t sp = para.find(' '); sp != std::string_view::npos; sp = para.find(' ', sp + 1)) {
                    if (ImGui::CalcTextSize(para.data(), para.data() + sp).x > width) break;
                    fit = sp;
                }
                if (fit != std::string_view::npos) cut = fit;
                else {
                    // One word wider than the line (a long path): cut it where it still fits, after a '/' if
                    // there is one, else at the last character that fits.
                    size_t end = 1;
                    while (end < para.size() && ImGui::CalcTextSize(para.data(), para.data() + end + 1).x <= width) ++end;
                    while (end < para.size() && (uint8_t(para[end]) & 0xC0) == 0x80) --end;  // whole UTF-8 characters
                    const size_t slash = para.substr(0, end).rfind('/');
                    cut = slash != std::string_view::npos && slash > 0 ? slash + 1 : std::max<size_t>(1, end);
                }
            }
            ImGui::TextUnformatted(para.data(), para.data() + cut);
            para = para.substr(cut);
            while (!para.empty() && para.front() == ' ') para.remove_prefix(1);
        } while (!para.empty());
    }
    ImGui::EndGroup();
    ImGui::PopStyleColor();
    return buf;
}

}  // namespace

std::string wrapped_text(ImVec4 color, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string text = wrapped_v(color, fmt, args);
    va_end(args);
    return text;
}

void text_after(ImVec4 color, const std::string& text) {
    ImGui::SameLine();
    if (ImGui::CalcTextSize(text.c_str()).x > ImGui::GetContentRegionAvail().x) ImGui::NewLine();
    wrapped_text(color, "%s", text.c_str());
}

std::string wrapped_disabled(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string text = wrapped_v(ImGui::GetStyle().Colors[ImGuiCol_TextDisabled], fmt, args);
    va_end(args);
    return text;
}

void problem_box(PanelContext& c, Place place) {
    const Snapshot::Problem& p = c.snap.problem;
    if (!p.id || p.place != place || p.id == c.prefs.dismissed_problem) return;
    const std::string name = std::string("problem ") + place_name(place);
    ImGui::PushID(name.c_str());
    // The text and its button in a group, a red panel drawn behind them once their size is known.
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->ChannelsSplit(2);
    dl->ChannelsSetCurrent(1);
    const float pad = 4;
    ImGui::SetCursorPos({ImGui::GetCursorPosX() + pad, ImGui::GetCursorPosY() + pad});
    ImGui::BeginGroup();
    wrapped_text({1.0f, 0.78f, 0.72f, 1}, "%s", p.text.c_str());
    if (ImGui::SmallButton("Dismiss")) c.prefs.dismissed_problem = p.id;
    ImGui::EndGroup();
    dump_item(name.c_str());
    const ImVec2 a = ImGui::GetItemRectMin(), z = ImGui::GetItemRectMax();
    dl->ChannelsSetCurrent(0);
    dl->AddRectFilled({a.x - pad, a.y - pad}, {std::max(z.x, a.x + ImGui::GetContentRegionAvail().x - pad) + pad, z.y + pad},
                      IM_COL32(82, 26, 23, 255), 4);
    dl->ChannelsMerge();
    ImGui::Dummy({1, pad});
    ImGui::PopID();
}

bool stepper(const char* label, int64_t& v, int64_t lo, int64_t hi) {
    ImGui::PushID(label);
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(label);
    ImGui::SameLine(0, 4);
    bool changed = false;
    const std::string name = label;
    ImGui::BeginDisabled(v <= lo);
    if (ImGui::ArrowButton("dec", ImGuiDir_Left)) v = std::max(lo, v - 1), changed = true;
    ImGui::EndDisabled();
    dump_item((name + " -").c_str());
    ImGui::SameLine(0, 2);
    // A drag box shows the whole number (a slider's grab would cover it); drag or double-click to type.
    int x = int(v);
    ImGui::SetNextItemWidth(ImGui::CalcTextSize("0000").x + ImGui::GetStyle().FramePadding.x * 2);
    if (ImGui::DragInt("##v", &x, 0.05f, int(lo), int(hi), "%d", ImGuiSliderFlags_AlwaysClamp)) v = x, changed = true;
    dump_item((name + " value").c_str());
    ImGui::SameLine(0, 2);
    ImGui::BeginDisabled(v >= hi);
    if (ImGui::ArrowButton("inc", ImGuiDir_Right)) v = std::min(hi, v + 1), changed = true;
    ImGui::EndDisabled();
    dump_item((name + " +").c_str());
    ImGui::SameLine(0, 4);
    // The range, not a count: indices start at 0, so "4 of 5" would read as one before the last.
    ImGui::TextDisabled("(%lld..%lld)", (long long)lo, (long long)hi);
    dump_text((name + " range").c_str(), std::to_string(v) + " (" + std::to_string(lo) + ".." + std::to_string(hi) + ")");
    ImGui::PopID();
    return changed;
}


}  // namespace kvscope::gui
