// Where the panels go, and small helpers shared by them. Controls in a left column, the timeline across
// the top, attention and the KV cache side by side in the middle, mask / next token / cache comparison
// along the bottom; panels that would not fit legibly side by side become tabs of one window, so every
// panel stays reachable at 1280x720 as at 1920x1080.
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
    float font = 0;               // the font size the slots were laid out for (the UI scale)
    bool paged = false;
    ImGuiCond cond = ImGuiCond_FirstUseEver;
    bool select_memory = false;   // the Memory tab was just added: show it once
    int select = -1;              // a Panel whose tab show_tab asked for
    const Slot* open = nullptr;   // the slot being drawn
    bool tabs_visible = false;    // its tab bar is open
};
Arrangement a;

}  // namespace

bool panel_named(const std::string& title, Panel& out) {
    for (const PanelModule& m : panel_modules())
        if (title == m.title) return out = m.panel, true;
    // Titles shortened so five tabs fit the KV cache slot at 1280x720; scripts may use the old ones.
    if (title == "K/V quantization") return out = Panel::Quant, true;
    return false;
}

void show_tab(Panel p) { a.select = int(p); }

std::vector<Slot> layout_slots(ImVec2 d, bool paged) {
    const float font = ImGui::GetFontSize();
    // Wide: every panel has its own window except Memory, a tab beside the cache comparison. Narrower
    // screens keep the maps large and stack the smaller panels as tabs. Sizes in font heights (16 px at
    // UI scale 1), so a screen at 150 % gets the arrangement of one at 100 % with two thirds of its pixels.
    const bool wide = d.x >= font * 97.5f && d.y >= font * 56.25f;  // 1560 x 900 at 16 px
    const float left = std::round(std::max(d.x * 0.23f, std::min(font * 22.5f, d.x * 0.4f)));
    const float top = std::round(std::max(d.y * 0.16f, font * 9.8f)), bottom = std::round(d.y * 0.69f);
    const float mid = std::round(left + (d.x - left) * 0.55f);
    // The Model panel shares the top row with the timeline, at least 19 font heights wide.
    const float model_left = std::round(std::min(left + (d.x - left) * 0.74f, d.x - font * 19));
    // The Export panel keeps room for its box, format row, buttons and one line of result (about 10 font heights).
    const float export_top = std::round(std::min(d.y * 0.87f, d.y - font * 10)), heads_top = std::round(d.y * 0.73f);
    auto slot = [](ImVec2 pos, ImVec2 end, std::vector<Panel> panels) {
        return Slot{pos, {end.x - pos.x, end.y - pos.y}, std::move(panels)};
    };
    std::vector<Slot> s;
    s.push_back(slot({left, 0}, {model_left, top}, {Panel::Timeline}));
    s.push_back(slot({model_left, 0}, {d.x, top}, {Panel::Model}));
    s.push_back(slot({left, top}, {mid, bottom}, {Panel::Attention}));
    s.push_back(slot({mid, top}, {d.x, bottom}, {Panel::KvCache, Panel::Rotary, Panel::Lens, Panel::Quant, Panel::Edits}));
    std::vector<Panel> last = {Panel::Compare, Panel::Lab};
    if (paged) last.push_back(Panel::Memory);
    if (wide) {
        const float b1 = std::round(left + (d.x - left) * 0.30f), b2 = std::round(left + (d.x - left) * 0.58f);
        s.push_back(slot({0, 0}, {left, heads_top}, {Panel::Controls}));
        s.push_back(slot({0, heads_top}, {left, export_top}, {Panel::Heads}));
        s.push_back(slot({0, export_top}, {left, d.y}, {Panel::Export}));
        s.push_back(slot({left, bottom}, {b1, d.y}, {Panel::Mask}));
        s.push_back(slot({b1, bottom}, {b2, d.y}, {Panel::NextToken}));
        s.push_back(slot({b2, bottom}, d, last));
    } else {
        const float b1 = std::round(left + (d.x - left) * 0.32f), lower = std::round(font * 12);
        s.push_back(slot({0, 0}, {left, d.y - lower}, {Panel::Controls}));
        s.push_back(slot({0, d.y - lower}, {left, d.y}, {Panel::Export, Panel::Heads}));
        s.push_back(slot({left, bottom}, {b1, d.y}, {Panel::Mask}));
        last.insert(last.begin(), Panel::NextToken);
        s.push_back(slot({b1, bottom}, d, last));
    }
    return s;
}

const std::vector<Slot>& arrange_panels(ImVec2 display, bool paged) {
    // A new window size or UI scale lays every panel out again (a user's own arrangement is kept otherwise).
    const float font = ImGui::GetFontSize();
    const bool resized = a.display.x != 0 && (a.display.x != display.x || a.display.y != display.y || a.font != font);
    a.cond = resized ? ImGuiCond_Always : ImGuiCond_FirstUseEver;
    a.select_memory = paged && !a.paged;
    a.display = display;
    a.font = font;
    a.paged = paged;
    a.slots = layout_slots(display, paged);
    return a.slots;
}

void begin_slot(const Slot& slot) {
    a.open = &slot;
    ImGui::SetNextWindowPos(slot.pos, a.cond);
    ImGui::SetNextWindowSize(slot.size, a.cond);
    if (slot.panels.size() == 1) return;
    // Several panels in one place: a window of tabs, named after what it holds.
    std::string name;
    for (Panel p : slot.panels) name += std::string(name.empty() ? "" : " | ") + panel_title(p);
    const bool shown = ImGui::Begin(name.c_str(), nullptr, ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoScrollbar);
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
        if (!ImGui::Begin(title)) {
            ImGui::End();
            return false;
        }
        dump_window(title);
        dump_panel_window(title);
        return true;
    }
    if (!a.tabs_visible) return false;
    const bool select = (p == Panel::Memory && a.select_memory) || a.select == int(p);
    if (a.select == int(p)) a.select = -1;
    const ImGuiTabItemFlags flags = select ? ImGuiTabItemFlags_SetSelected : 0;
    const bool open = ImGui::BeginTabItem(title, nullptr, flags);
    dump_item((std::string("tab ") + title).c_str());
    if (!open) return false;
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
