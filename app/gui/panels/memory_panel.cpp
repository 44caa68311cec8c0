// Memory: the paged KV cache's block pool after the viewed step. Every pool block is a cell, coloured by
// the sequence(s) whose block table maps it (stripes = shared, with the number of sharers), grey when
// free; each sequence's block table beside it; the blocks the step allocated, shared or copied on write
// are outlined; the figures say what sharing saved.
#include "panels/memory_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "base/errors.h"
#include "panels/figures.h"

namespace kvscope::gui {
namespace {

ImU32 seq_colour(int64_t i, int alpha = 255) {
    // Eight hues that stay apart on the dark background; sequence 8 repeats sequence 0's.
    static const ImU32 rgb[] = {IM_COL32(66, 133, 214, 0), IM_COL32(222, 135, 50, 0), IM_COL32(80, 170, 90, 0),
                                IM_COL32(170, 100, 200, 0), IM_COL32(200, 80, 110, 0), IM_COL32(60, 170, 170, 0),
                                IM_COL32(180, 170, 70, 0), IM_COL32(140, 120, 100, 0)};
    return rgb[size_t(i) % 8] | (ImU32(alpha) << IM_COL32_A_SHIFT);
}

constexpr ImU32 kFree = IM_COL32(58, 58, 64, 255);
constexpr ImU32 kHeld = IM_COL32(84, 70, 52, 255);      // only step-back history refers to it
constexpr ImU32 kNew = IM_COL32(250, 200, 60, 255);     // allocated this step
constexpr ImU32 kShared = IM_COL32(255, 255, 255, 255); // gained a sharer this step
constexpr ImU32 kCopied = IM_COL32(255, 70, 70, 255);   // copied on write this step

ImU32 change_colour(uint8_t change) {
    if (change & PoolView::Copied) return kCopied;
    if (change & PoolView::Shared) return kShared;
    if (change & PoolView::Allocated) return kNew;
    return 0;
}

// A block's fill: its owner's colour, vertical stripes of every sharer's colour, or free / held grey.
void fill_block(ImDrawList* dl, ImVec2 a, ImVec2 b, const PoolView::Block& k) {
    if (k.seqs.empty()) {
        dl->AddRectFilled(a, b, k.refs > 0 ? kHeld : kFree, 3);
        return;
    }
    const float w = (b.x - a.x) / float(k.seqs.size());
    for (size_t i = 0; i < k.seqs.size(); ++i)
        dl->AddRectFilled({a.x + w * float(i), a.y}, {a.x + w * float(i + 1), b.y}, seq_colour(k.seqs[i]),
                          i == 0 || i + 1 == k.seqs.size() ? 3.0f : 0.0f);
}

std::string seq_list(const std::vector<int32_t>& seqs) {
    std::string s;
    for (size_t i = 0; i < seqs.size(); ++i) s += (i ? ", " : "") + std::to_string(seqs[i]);
    return s;
}

void block_tooltip(const Model& model, const PoolView& m, int32_t id) {
    const PoolView::Block& k = m.blocks[size_t(id)];
    const uint8_t change = m.change(id);
    const int64_t B = m.block_size;
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 28);
    ImGui::Text("pool block %d", id);
    if (k.seqs.empty() && k.refs == 0) {
        ImGui::TextDisabled("free: on the free list, ready to be allocated");
    } else if (k.seqs.empty()) {
        ImGui::TextDisabled("no sequence maps it now; kept (%s) so Step back can restore it", count_of(k.refs, "reference").c_str());
    } else {
        ImGui::Text("positions %lld..%lld of sequence%s %s", (long long)(k.logical * B), (long long)(k.logical * B + B - 1),
                    k.seqs.size() > 1 ? "s" : "", seq_list(k.seqs).c_str());
        if (k.seqs.size() > 1)
            ImGui::TextColored({1, 1, 1, 1}, "shared: %zu sequences read the same K/V (stored once)", k.seqs.size());
        if (k.refs > int32_t(k.seqs.size()))
            ImGui::TextDisabled("pool reference count %d (%d more held by step-back history)", k.refs,
                                k.refs - int32_t(k.seqs.size()));
        std::string toks;
        for (size_t i = 0; i < k.tokens.size(); ++i) toks += (i ? " | " : "") + token_text(model, k.tokens[i]);
        ImGui::Text("holds %zu of %lld slots: %s", k.tokens.size(), (long long)B, toks.c_str());
    }
    if (change & PoolView::Copied)
        ImGui::TextColored({1, 0.45f, 0.45f, 1}, "this step: copied from block %d, because sequence %s wrote into a "
                           "block it shared (copy-on-write)", m.copied_from(id), seq_list(k.seqs).c_str());
    else if (change & PoolView::Shared)
        ImGui::TextColored({1, 1, 1, 1}, "this step: mapped by another sequence whose prompt starts with the same tokens "
                           "(prefix sharing: not computed again)");
    else if (change & PoolView::Allocated)
        ImGui::TextColored({1, 0.8f, 0.3f, 1}, "this step: allocated from the free list");
    if (change & PoolView::Freed) ImGui::TextDisabled("this step: returned to the free list");
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
}

// The legend: one line a new user reads before anything else (a swatch per sequence, then the outlines
// of this step's changes), beside the Save figure button; what stripes and grey mean is in its (?).
void memory_legend(int64_t N, ImDrawList* dl) {
    const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
    auto fits = [&](const char* text) {
        ImGui::SameLine(0, 12);
        if (ImGui::GetCursorScreenPos().x + ImGui::CalcTextSize(text).x + ImGui::GetTextLineHeight() + 8 > right) ImGui::NewLine();
    };
    auto swatch = [&](ImU32 fill, ImU32 outline, const char* label) {
        fits(label);
        const ImVec2 p = ImGui::GetCursorScreenPos();
        const float h = ImGui::GetTextLineHeight();
        dl->AddRectFilled({p.x, p.y + 2}, {p.x + h, p.y + h - 1}, fill, 2);
        if (outline) dl->AddRect({p.x, p.y + 2}, {p.x + h, p.y + h - 1}, outline, 2, 0, 2);
        ImGui::Dummy({h, h});
        ImGui::SameLine(0, 4);
        ImGui::TextUnformatted(label);
    };
    for (int64_t i = 0; i < N && i < 8; ++i) {
        char label[24];
        std::snprintf(label, sizeof label, "seq %lld", (long long)i);
        swatch(seq_colour(i), 0, label);
    }
    fits("this step:");
    ImGui::TextDisabled("this step:");
    swatch(kFree, kNew, "new");
    swatch(kFree, kShared, "shared");
    swatch(kFree, kCopied, "copied on write");
    help_marker("A cell is a pool block, coloured by the sequence whose block table maps it; stripes and xN = "
                "shared by N sequences (stored once); grey = free (brown: kept only so Step back can restore "
                "it). Outlined: what this step did to the block (allocated, shared, copied on write).");
    dump_item("memory legend");
}

// Above the pool: Save figure and the legend, then what sharing saved; the details on a line of their own
// when the panel is tall enough for them and the pool (1920x1080), else in the (?) after the figures.
void memory_header(PanelContext& c, const PoolView& m) {
    const int64_t N = int64_t(m.tables.size());
    const float font = ImGui::GetFontSize();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    ImGui::BeginGroup();
    figure_button(c, Panel::Memory);
    memory_legend(N, dl);
    const int64_t mapped = m.n_mapped(), unshared = m.n_unshared();
    int64_t n_shared = 0;
    for (const auto& k : m.blocks) n_shared += k.seqs.size() > 1;
    ImGui::Text("%s in use, %lld without sharing:", count_of(mapped, "block").c_str(), (long long)unshared);
    ImGui::SameLine(0, 6);
    ImGui::TextColored({0.55f, 0.9f, 0.55f, 1}, "saved %lld = %s", (long long)(unshared - mapped),
                       human_bytes(double((unshared - mapped) * m.bytes_per_block)).c_str());
    char details[256];
    std::snprintf(details, sizeof details, "%s, %s | prefill positions adopted, not computed: %lld | copies on write: %lld | %s",
                  count_of(N, "sequence").c_str(), count_of(n_shared, "shared block").c_str(),
                  (long long)m.positions_adopted, (long long)m.copies_on_write,
                  m.group_step < 0 ? "before the first step" : ("after batch step " + std::to_string(m.group_step)).c_str());
    if (ImGui::GetContentRegionAvail().y > font * 13) wrapped_disabled("%s", details);
    else help_marker(details);
    ImGui::EndGroup();
    dump_item("memory header");
}

}  // namespace

void draw_memory(PanelContext& c) {
    const Snapshot& s = c.snap;
    if (!begin_panel(Panel::Memory)) return;
    if (s.pool_views.empty()) {  // contiguous caches: nothing pooled; say how to see a pool
        wrapped_disabled("This session's cache is one contiguous ring per sequence: there is no block pool to show.");
        wrapped_text({0.85f, 0.85f, 0.9f, 1}, "To page it: Controls > Batch and memory, set a block size (e.g. 4), tick "
                     "prefix sharing, give 3 sequences suffixes, Apply, then Prefill. The pool, each sequence's block "
                     "table and the blocks they share appear here.");
        dump_item("memory not paged");
        // The same options in one click (they show in Controls, where they can be changed back).
        if (ImGui::Button("Page it: 3 sequences share this prompt, blocks of 4")) {
            SessionOptions o = s.options();
            o.block_size = 4;
            o.share_prefix = true;
            BatchOptions b = s.batch;
            b.n_seq = 3;
            b.suffixes = {"", " Why?", " Who sat?"};
            c.ctl.push(SetOptions{o, b, {}});
            c.ctl.push(Prefill{});
        }
        dump_item("memory page it");
        end_panel();
        return;
    }
    size_t step = 0;
    const StepRecord* r = viewed_step(s, c.prefs, &step);
    const PoolView* m = s.pool_at(r ? int64_t(step) : -1);
    const Model& model = s.model();
    const int64_t N = int64_t(m->tables.size()), B = m->block_size;
    const float font = ImGui::GetFontSize();
    memory_header(c, *m);

    // Pool grid on the left, block tables on the right.
    // The tables take what their longest row needs (leaving the grid 12 font heights), the grid the rest;
    // cells shrink until the whole pool fits the height.
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    size_t longest = 1;
    int64_t most_adopted = 0;
    for (const auto& t : m->tables) longest = std::max(longest, t.size());
    for (int64_t a : m->adopted) most_adopted = std::max(most_adopted, a);
    const float ew = std::round(font * 2.2f), head_w = ImGui::CalcTextSize("seq 00 ").x + 8;
    // A row: the outline's room (3), the head, the cells, then "N adopted" after an 8-pixel gap; and room for
    // the child's vertical scrollbar.
    const float adopted_w = most_adopted > 0 ? 8 + ImGui::CalcTextSize((std::to_string(most_adopted) + " adopted").c_str()).x : 0;
    const float tables_w = std::min(avail.x - font * 12, 3 + head_w + float(longest) * (ew + 3) + adopted_w +
                                                           ImGui::GetStyle().ScrollbarSize + 4);
    const float grid_w = std::max(font * 10, avail.x - tables_w - ImGui::GetStyle().ItemSpacing.x);  // the tables take the rest
    float cell_w = std::round(font * 2.6f), cell_h = std::round(font * 1.9f);
    // The pool child holds its title line, then rows of cells (cell_h + gap each), above the window's padding.
    const float gap = 4, grid_h = avail.y - ImGui::GetTextLineHeightWithSpacing() - 6 - gap;
    auto n_cols = [&] { return std::max(1, int((grid_w - 8 + gap) / (cell_w + gap))); };
    while (cell_w > font * 1.4f && float((int(m->blocks.size()) + n_cols() - 1) / n_cols()) * (cell_h + gap) > grid_h) {
        cell_w = std::round(cell_w * 0.9f);
        cell_h = std::round(cell_h * 0.92f);
    }
    const int cols = n_cols();
    static int32_t hovered = -1;  // block under the mouse last frame (grid or table), highlighted in both
    int32_t hovered_now = -1;
    ImGui::BeginChild("pool", {grid_w, 0}, false);
    ImGui::TextDisabled("pool: %s (%s each)", count_of(int64_t(m->blocks.size()), "block").c_str(), human_bytes(double(m->bytes_per_block)).c_str());
    {
        ImDrawList* gl = ImGui::GetWindowDrawList();
        const ImVec2 o = ImGui::GetCursorScreenPos();
        const int rows = (int(m->blocks.size()) + cols - 1) / cols;
        for (int32_t b = 0; b < int32_t(m->blocks.size()); ++b) {
            const PoolView::Block& k = m->blocks[size_t(b)];
            const ImVec2 a = {o.x + float(b % cols) * (cell_w + gap), o.y + float(b / cols) * (cell_h + gap)};
            const ImVec2 z = {a.x + cell_w, a.y + cell_h};
            fill_block(gl, a, z, k);
            char id[16];
            std::snprintf(id, sizeof id, "%d", b);
            gl->AddText({a.x + 3, a.y + 1}, k.seqs.empty() ? IM_COL32(140, 140, 150, 255) : IM_COL32(240, 240, 245, 255), id);
            if (k.seqs.size() > 1) {
                char x[16];
                std::snprintf(x, sizeof x, "x%zu", k.seqs.size());
                const ImVec2 ts = ImGui::CalcTextSize(x);
                gl->AddRectFilled({z.x - ts.x - 5, z.y - ts.y - 2}, {z.x - 1, z.y - 1}, IM_COL32(20, 20, 24, 220), 3);
                gl->AddText({z.x - ts.x - 3, z.y - ts.y - 2}, IM_COL32(255, 255, 255, 255), x);
                gl->AddRect(a, z, IM_COL32(235, 235, 240, 255), 3, 0, 1.5f);
            }
            if (const ImU32 oc = change_colour(m->change(b))) gl->AddRect({a.x - 2, a.y - 2}, {z.x + 2, z.y + 2}, oc, 4, 0, 2.5f);
            if (b == hovered) gl->AddRect({a.x - 3, a.y - 3}, {z.x + 3, z.y + 3}, IM_COL32(90, 220, 255, 255), 4, 0, 2);
            if (ImGui::IsWindowHovered() && ImGui::IsMouseHoveringRect(a, z)) {
                hovered_now = b;
                block_tooltip(model, *m, b);
            }
        }
        ImGui::Dummy({float(cols) * (cell_w + gap), float(rows) * (cell_h + gap)});
        dump_item("memory pool");
    }
    ImGui::EndChild();
    ImGui::SameLine();
    ImGui::BeginChild("tables", {0, 0}, false, ImGuiWindowFlags_HorizontalScrollbar);
    ImGui::TextDisabled("block tables: logical -> pool block");
    help_marker("Logical block k of a sequence holds its positions k*B .. k*B+B-1. Click a row to show that sequence "
                "in the other panels.");
    {
        const float eh = ImGui::GetTextLineHeight() + 4;
        for (int64_t i = 0; i < N; ++i) {
            const std::vector<int32_t>& t = m->tables[size_t(i)];
            ImDrawList* tl = ImGui::GetWindowDrawList();
            ImGui::SetCursorPosX(ImGui::GetCursorPosX() + 3);  // room for the selection outline
            const ImVec2 o = ImGui::GetCursorScreenPos();
            const bool selected = i == s.selected;
            char head[24];
            std::snprintf(head, sizeof head, "seq %lld", (long long)i);
            ImGui::PushID(int(i));
            if (ImGui::InvisibleButton("row", {head_w + float(std::max<size_t>(t.size(), 1)) * (ew + 3), eh}) && !selected)
                c.ctl.push(Select{i});
            ImGui::PopID();
            tl->AddRectFilled(o, {o.x + head_w - 6, o.y + eh}, seq_colour(i), 3);
            if (selected) tl->AddRect({o.x - 2, o.y - 2}, {o.x + head_w - 4, o.y + eh + 2}, IM_COL32(250, 200, 60, 255), 3, 0, 2);
            tl->AddText({o.x + 4, o.y + 2}, IM_COL32(255, 255, 255, 255), head);
            for (size_t k = 0; k < t.size(); ++k) {
                const ImVec2 a = {o.x + head_w + float(k) * (ew + 3), o.y}, z = {a.x + ew, a.y + eh};
                if (t[k] < 0) {
                    tl->AddRect(a, z, IM_COL32(90, 90, 96, 255), 3);
                    tl->AddText({a.x + 4, a.y + 2}, IM_COL32(120, 120, 128, 255), "-");
                    if (ImGui::IsWindowHovered() && ImGui::IsMouseHoveringRect(a, z))
                        ImGui::SetTooltip("sequence %lld, logical block %zu (positions %lld..%lld): evicted, no query sees "
                                          "it any more; its block went back to the pool", (long long)i, k,
                                          (long long)(int64_t(k) * B), (long long)(int64_t(k) * B + B - 1));
                    continue;
                }
                const PoolView::Block& blk = m->blocks[size_t(t[k])];
                fill_block(tl, a, z, blk);
                if (blk.seqs.size() > 1) tl->AddRect(a, z, IM_COL32(235, 235, 240, 255), 3, 0, 1.5f);
                if (const ImU32 oc = change_colour(m->change(t[k]))) tl->AddRect({a.x - 1, a.y - 1}, {z.x + 1, z.y + 1}, oc, 3, 0, 2);
                if (t[k] == hovered) tl->AddRect({a.x - 2, a.y - 2}, {z.x + 2, z.y + 2}, IM_COL32(90, 220, 255, 255), 3, 0, 2);
                char id[16];
                std::snprintf(id, sizeof id, "%d", t[k]);
                tl->AddText({a.x + 4, a.y + 2}, IM_COL32(255, 255, 255, 255), id);
                if (ImGui::IsWindowHovered() && ImGui::IsMouseHoveringRect(a, z)) {
                    hovered_now = t[k];
                    block_tooltip(model, *m, t[k]);
                }
            }
            if (t.empty()) tl->AddText({o.x + head_w, o.y + 2}, IM_COL32(140, 140, 150, 255), "(empty)");
            // What the sequence saved: positions it mapped from earlier sequences instead of computing.
            if (size_t(i) < m->adopted.size() && m->adopted[size_t(i)] > 0) {
                ImGui::SameLine(0, 8);
                ImGui::TextDisabled("%lld adopted", (long long)m->adopted[size_t(i)]);
                dump_item(("memory adopted " + std::to_string(i)).c_str());
            }
        }
        dump_item("memory tables");
    }
    ImGui::EndChild();
    hovered = hovered_now;
    end_panel();
}

// The paged cache: each sequence's block table (logical block -> pool block, the id written in the cell) and
// the pool, every cell shaded by how many sequences map the block: a prefix shared by three prompts is a run
// of 3s holding the same ids in three rows.
Figure memory_figure(const Snapshot& s, const ViewPrefs& v) {
    using namespace fig;
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

}  // namespace kvscope::gui
