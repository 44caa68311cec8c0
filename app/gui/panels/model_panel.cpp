// Model: which model is loaded and what its config means (every architecture key, extension keys
// included), the KV cache cost per token, and a picker over the example folders in assets/. Picking a
// folder, typing a path or dropping a folder on the window all push the same LoadModel intent.
#include "panels/model_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "base/errors.h"
#include "cache/kv_footprint.h"
#include "model/architecture.h"
#include "model/gguf_model.h"
#include "run/options.h"

namespace kvscope::gui {
namespace {

namespace fs = std::filesystem;

struct Folder {
    std::string path;     // what LoadModel receives
    std::string name;     // folder name, shown in the list
    std::string summary;  // "3 layers, pre-LN, gelu, untied" from its config.json, or why it cannot be read
    bool readable = false;
};

struct PickerState {
    std::vector<Folder> folders;  // model folders under assets/, rescanned when the list opens
    std::string typed;            // the path box
};
PickerState picker;

std::string summary_of(const ModelConfig& c) {
    char buf[160];
    if (c.family == Family::Llama) {  // "llama, 3 layers, 4 heads / 2 K/V heads, silu, tied"
        std::snprintf(buf, sizeof buf, "%s, %lld layers, %lld heads / %lld K/V heads, %s, %s", c.model_type.c_str(),
                      (long long)c.n_layer, (long long)c.n_head, (long long)c.kv_heads(), to_string(c.activation),
                      c.tie_word_embeddings ? "tied" : "untied");
        return buf;
    }
    if (c.encoder_decoder) {
        std::snprintf(buf, sizeof buf, "encoder-decoder, %lld+%lld layers, %s-LN, %s%s", (long long)c.n_encoder_layer,
                      (long long)c.n_layer, to_string(c.norm_position), to_string(c.activation),
                      c.position_embedding == PositionEmbedding::Sinusoidal ? ", sinusoidal" : "");
        return buf;
    }
    std::snprintf(buf, sizeof buf, "%lld layers, %s-LN, %s, %s%s", (long long)c.n_layer, to_string(c.norm_position),
                  to_string(c.activation), c.tie_word_embeddings ? "tied" : "untied",
                  c.position_embedding == PositionEmbedding::Sinusoidal ? ", sinusoidal" : "");
    return buf;
}

// Folders holding a config.json directly under assets/: default, the chat model, then the rest by name.
void scan_assets() {
    picker.folders.clear();
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(KVSCOPE_ASSETS_DIR, ec)) {
        if (!e.is_directory(ec) || !fs::exists(e.path() / "config.json", ec)) continue;
        Folder f;
        f.path = e.path().string();
        f.name = e.path().filename().string();
        try {
            f.summary = summary_of(load_config((e.path() / "config.json").string()));
            f.readable = true;
        } catch (const LoadError& err) {
            f.summary = render_labels(err.what());
        }
        picker.folders.push_back(std::move(f));
    }
    auto rank = [](const Folder& f) { return f.name == "default" ? 0 : f.name == "chat" ? 1 : 2; };  // then by name
    std::sort(picker.folders.begin(), picker.folders.end(), [&](const Folder& a, const Folder& b) {
        return rank(a) != rank(b) ? rank(a) < rank(b) : a.name < b.name;
    });
}

bool same_folder(const std::string& a, const std::string& b) {
    std::error_code ea, eb;
    const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
    return !ea && !eb ? ca == cb : a == b;
}

void load(Controller& ctl, const std::string& path) {
    ctl.push(LoadModel{path});
}

// The path box and its Load button: the one way a typed folder is loaded, in the drop-down and in the
// Open folder popup. True when it pushed the load (the caller closes its popup).
bool path_loader(Controller& ctl) {
    ImGui::SetNextItemWidth(std::max(ImGui::GetFontSize() * 16, ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("Load").x -
                                                                      ImGui::GetStyle().FramePadding.x * 2 - ImGui::GetStyle().ItemSpacing.x));
    const bool enter = ImGui::InputTextWithHint("##model path", "a model folder or .gguf file: path, Enter", &picker.typed,
                                                ImGuiInputTextFlags_EnterReturnsTrue);
    dump_item("Model path");
    ImGui::SameLine();
    ImGui::BeginDisabled(picker.typed.empty());
    const bool load_now = (ImGui::Button("Load") || enter) && !picker.typed.empty();
    ImGui::EndDisabled();
    ImGui::TextDisabled("or drop a model folder or .gguf file on the window");
    if (load_now) load(ctl, picker.typed);
    return load_now;
}

void draw_picker(PanelContext& c) {
    const std::string& current = c.snap.model().dir();
    const std::string shown = fs::path(current).filename().string();
    const ImGuiStyle& st = ImGui::GetStyle();
    const char* open_label = "Open folder...";
    const float open_w = ImGui::CalcTextSize(open_label).x + st.FramePadding.x * 2;
    ImGui::SetNextItemWidth(-(open_w + ImGui::CalcTextSize("(?)").x + st.ItemSpacing.x * 2 + 2));
    ImGui::SetNextWindowSizeConstraints({ImGui::GetFontSize() * 30, 0}, {FLT_MAX, FLT_MAX});
    if (ImGui::BeginCombo("##model picker", shown.empty() ? current.c_str() : shown.c_str())) {
        if (ImGui::IsWindowAppearing()) scan_assets();
        for (const Folder& f : picker.folders) {
            const bool here = same_folder(f.path, current);
            ImGui::BeginDisabled(!f.readable);
            if (ImGui::Selectable(f.name.c_str(), here) && !here) load(c.ctl, f.path);
            ImGui::EndDisabled();
            dump_item(("Model " + f.name).c_str());
            if (here) ImGui::SetItemDefaultFocus();
            ImGui::SameLine(ImGui::GetFontSize() * 9);
            ImGui::TextDisabled("%s", f.summary.c_str());
        }
        if (picker.folders.empty()) ImGui::TextDisabled("no model folders in %s", KVSCOPE_ASSETS_DIR);
        ImGui::Separator();
        if (path_loader(c.ctl)) ImGui::CloseCurrentPopup();
        ImGui::EndCombo();
    }
    dump_item("Model picker");
    help_marker("Example folders shipped in assets/ (assets/README.md says which reference system each one "
                "rebuilds), or any folder or .gguf file by path (Open folder...); dropping one on the window loads it too. "
                "The prompt and the session options are kept; if the folder cannot be loaded, the current model stays.");
    ImGui::SameLine();
    if (ImGui::Button(open_label)) ImGui::OpenPopup("open model folder");
    dump_item("Open folder");
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("Load any model folder or GGUF file by its path (or drop it on the window)");
    if (ImGui::BeginPopup("open model folder")) {
        ImGui::TextUnformatted("Open a model folder (config.json and the weights) or a .gguf file");
        if (path_loader(c.ctl)) ImGui::CloseCurrentPopup();
        ImGui::EndPopup();
    }
}

// One small chip per architecture key; keys where the model is not GPT-2 stand out. The chips fill the
// rows the panel has left; when they need more, the last one is "+N more", naming the rest in its tooltip
// (the whole table shows when the panel is dragged taller), so no chip is cut at the panel's edge.
void key_chips(const std::vector<ArchLine>& lines) {
    const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
    const ImGuiStyle& st = ImGui::GetStyle();
    const float row_h = ImGui::GetFontSize() + st.ItemSpacing.y;  // a small button is one text line tall
    const int rows_fit = std::max(1, int((ImGui::GetContentRegionAvail().y + st.ItemSpacing.y) / row_h));
    auto width = [&](const std::string& label) { return ImGui::CalcTextSize(label.c_str()).x + st.FramePadding.x * 2; };
    // How many chips fit in rows_fit rows, leaving room for a "+N more" chip after them when not all do.
    auto fit = [&](float more_w) {
        const float x0 = ImGui::GetCursorScreenPos().x;
        float x = x0;
        int row = 1;
        size_t n = 0;
        for (; n < lines.size(); ++n) {
            const float w = width(lines[n].label);
            if (x > x0 && x + w > right) ++row, x = x0;
            if (row > rows_fit) break;
            x += w + 4;
        }
        if (n == lines.size() || more_w == 0) return n;
        while (n > 0) {  // take chips back until "+N more" fits on the last row
            x = x0, row = 1;
            for (size_t i = 0; i < n; ++i) {
                const float w = width(lines[i].label);
                if (x > x0 && x + w > right) ++row, x = x0;
                x += w + 4;
            }
            if (x > x0 && x + more_w > right) ++row;
            if (row <= rows_fit) break;
            --n;
        }
        return n;
    };
    size_t shown = fit(0);
    if (shown < lines.size()) shown = fit(width("+" + std::to_string(lines.size()) + " more"));
    for (size_t i = 0; i <= shown && i < lines.size(); ++i) {
        const bool more = i == shown;
        const ArchLine& l = lines[i];
        const std::string label = more ? "+" + std::to_string(lines.size() - shown) + " more" : l.label;
        const float w = width(label);
        if (i > 0) {
            ImGui::SameLine(0, 4);
            if (ImGui::GetCursorScreenPos().x + w > right) ImGui::NewLine();
        }
        const bool differs = !more && l.differs;
        ImGui::PushStyleColor(ImGuiCol_Button, differs ? ImVec4(0.55f, 0.36f, 0.10f, 1) : ImVec4(0.20f, 0.22f, 0.27f, 1));
        ImGui::PushStyleColor(ImGuiCol_ButtonHovered, differs ? ImVec4(0.65f, 0.44f, 0.14f, 1) : ImVec4(0.28f, 0.31f, 0.38f, 1));
        ImGui::PushStyleColor(ImGuiCol_ButtonActive, ImGui::GetStyleColorVec4(ImGuiCol_ButtonHovered));
        ImGui::PushID(int(i));
        ImGui::SmallButton(label.c_str());
        ImGui::PopID();
        ImGui::PopStyleColor(3);
        if (more) {
            dump_item("Model more keys");
            std::string rest;
            for (size_t k = shown; k < lines.size(); ++k)
                rest += (rest.empty() ? "" : "\n") + lines[k].label + ": " + lines[k].key + " = " + lines[k].value;
            dump_text("Model more keys", rest);
            if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s\n(drag the panel taller for the table of every key)", rest.c_str());
        } else if (ImGui::IsItemHovered()) {
            ImGui::SetTooltip("%s%s = %s\n%s\n%s", l.key, l.extension ? " (kvscope key)" : "", l.value.c_str(),
                              l.meaning.c_str(), l.differs ? "GPT-2 does otherwise" : "as in GPT-2");
        }
    }
}

void key_table(const std::vector<ArchLine>& lines) {
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
    if (!ImGui::BeginTable("config keys", 3, flags)) return;
    ImGui::TableSetupColumn("key");
    ImGui::TableSetupColumn("value");
    ImGui::TableSetupColumn("what it does", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableHeadersRow();
    for (const ArchLine& l : lines) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("%s%s", l.key, l.extension ? "*" : "");
        ImGui::TableNextColumn();
        if (l.differs) ImGui::TextColored({0.95f, 0.70f, 0.35f, 1}, "%s", l.value.c_str());
        else ImGui::TextUnformatted(l.value.c_str());
        ImGui::TableNextColumn();
        ImGui::TextDisabled("%s", l.meaning.c_str());
    }
    ImGui::EndTable();
}

// A GGUF file: the types its tensors are stored in (a quantized file mixes several), the bits per weight
// they cost, and every tensor's type on request; quantized matrices stay in the file's blocks (matmul.h),
// the rest is dequantized at load.
void gguf_types(const Model& model) {
    auto fixed = [](double v, int digits) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.*f", digits, v);
        return std::string(buf);
    };
    const GgufTypeSummary s = summarize_types(model.gguf_tensors());
    std::string line = "GGUF, " + fixed(s.bits_per_weight, 2) + " bits per weight:";
    for (size_t i = 0; i < s.types.size(); ++i)
        line += std::string(i ? "," : "") + " " + ggml_type_info(s.types[i].type).name + " " +
                fixed(100.0 * double(s.types[i].weights) / double(std::max<int64_t>(1, s.weights)), 1) + "%";
    wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text], "%s", line.c_str());
    dump_item("Model gguf types");
    dump_text("Model gguf types", line);
    help_marker((std::string("The weights as the file stores them, by share of weights. A quantized type keeps blocks of "
                             "small integers with a float16 scale per block (Q4_K: 256 weights in 144 bytes = 4.5 bits; "
                             "Q6_K: 6.56; Q8_0: 8.5). ") +
                 (model.weights().blocks_total() > 0
                      ? "Matrices kept as the file's blocks: " + model.weights().blocks_text() +
                            ". Q4_1 and Q5_1: each weight dequantized exactly into float32 as it is used. The others "
                            "(Q4_0, Q5_0, Q8_0 and the K types): multiplied in integers, as llama.cpp does, against the "
                            "activations rounded to 8 bits per 32 values (per 256 for the K types; fewer instructions, "
                            "and the logits move by that rounding). " +
                            (model.weights().panel_matrices > 0
                                 ? "Reordered at load, " + model.weights().panels_text() + " side by side: as many bytes as the file's, "
                                   "read as one stream. "
                                 : std::string()) +
                            "Vectors, and GPT-2's transposed matrices, are dequantized once at load. "
                      : std::string("kvscope dequantizes them once at load. ")) +
                 "It computes in " + (model.weights().bf16 ? "bfloat16" : "float32") +
                 ", so the cache and the maps are those of the file's weights.")
                    .c_str());
    if (ImGui::TreeNode("tensors in the file")) {
        const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY;
        const float h = std::min(ImGui::GetTextLineHeightWithSpacing() * float(model.gguf_tensors().size() + 1),
                                 std::max(ImGui::GetTextLineHeightWithSpacing() * 4, ImGui::GetContentRegionAvail().y));
        if (ImGui::BeginTable("gguf tensors", 3, flags, {0, h})) {
            ImGui::TableSetupScrollFreeze(0, 1);
            ImGui::TableSetupColumn("tensor");
            ImGui::TableSetupColumn("type");
            ImGui::TableSetupColumn("bits / weight");
            ImGui::TableHeadersRow();
            for (const GgufTensorSummary& t : model.gguf_tensors()) {
                const GgmlTypeInfo& info = ggml_type_info(t.type);
                ImGui::TableNextRow();
                ImGui::TableNextColumn();
                ImGui::TextUnformatted(t.name.c_str());
                if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", t.hf_name.c_str());
                ImGui::TableNextColumn();
                ImGui::TextUnformatted(info.name);
                ImGui::TableNextColumn();
                ImGui::Text("%.2f", info.bits_per_weight());
            }
            ImGui::EndTable();
        }
        ImGui::TreePop();
    }
    dump_item("Model gguf tensors");
}

void draw_config(const Model& model) {
    const ModelConfig& cfg = model.config();
    if (cfg.encoder_decoder) {
        ImGui::Text("E=%lld", (long long)cfg.n_encoder_layer);
        ImGui::SameLine();
    }
    char shape[160];
    std::snprintf(shape, sizeof shape, "L=%lld H=%lld D=%lld C=%lld  V=%lld P=%lld", (long long)cfg.n_layer,
                  (long long)cfg.n_head, (long long)cfg.head_dim(), (long long)cfg.n_embd, (long long)cfg.n_vocab,
                  (long long)cfg.n_ctx);
    ImGui::BeginGroup();
    if (cfg.encoder_decoder) text_after(ImGui::GetStyle().Colors[ImGuiCol_Text], shape);
    else wrapped_text(ImGui::GetStyle().Colors[ImGuiCol_Text], "%s", shape);
    if (!model.tokenizer()) text_after(ImGui::GetStyle().Colors[ImGuiCol_TextDisabled], "ids only");  // wraps, never cut
    ImGui::EndGroup();
    dump_item("Model shape");
    // The cache holds K and V of every layer's K/V heads for each position, in bfloat16 when the weights
    // are kept in bfloat16 (--dtype bf16), else float32.
    const bool bf16 = model.weights().bf16;
    const KvFootprint kv = kv_footprint(cfg, bf16);
    const double per_token = double(kv.per_token);
    ImGui::Text("KV cache %s / token (%s)", human_bytes(per_token).c_str(), bf16 ? "bf16" : "f32");
    dump_item("Model kv bytes");
    help_marker(("K and V (2) x n_layer x " + std::to_string(kv.n_kv_head) + (kv.n_kv_head == 1 ? " K/V head" : " K/V heads") + " x head_dim numbers of " +
                 std::string(bf16 ? "2 bytes (bfloat16, --dtype bf16)" : "4 bytes (float32)") +
                 " for each position the cache holds; the full context of " + cfg.positions_key() + " = " +
                 std::to_string(cfg.n_ctx) + " tokens takes " + human_bytes(per_token * double(cfg.n_ctx)) + "." +
                 (kv.n_kv_head < kv.n_head ? " With one K/V head per query head (multi-head attention) it would be " +
                                                 human_bytes(double(kv.per_token_mha)) + " / token."
                                           : std::string()))
                    .c_str());
    if (cfg.encoder_decoder) {
        // EncoderOutput keeps the cross-attention cache in float32 whatever the weights' format.
        const double per_source = 2.0 * double(cfg.n_layer) * double(cfg.n_embd) * sizeof(float);
        ImGui::Text("cross cache %s / source token (f32)", human_bytes(per_source).c_str());
        dump_item("Model cross bytes");
        help_marker(("The cross-attention cache: K and V (2) x n_layer x n_embd float32 numbers per source token, "
                     "computed once from the encoder's output and fixed while the decoder steps (a source of "
                     "n_positions = " + std::to_string(cfg.n_ctx) + " tokens takes " +
                     human_bytes(per_source * double(cfg.n_ctx)) + ").").c_str());
    }
    if (!model.gguf_tensors().empty()) gguf_types(model);
    const std::vector<ArchLine> lines = architecture(cfg);
    ImGui::BeginGroup();
    key_chips(lines);
    ImGui::EndGroup();
    dump_item("Model keys");
    // Taller than the first-start layout (the user dragged it open): the whole table with its sentences.
    if (ImGui::GetContentRegionAvail().y > ImGui::GetTextLineHeightWithSpacing() * 4) {
        ImGui::Spacing();
        key_table(lines);
    }
}

}  // namespace

void draw_model(PanelContext& c) {
    if (!begin_panel(Panel::Model)) return;
    problem_box(c, Place::Model);
    draw_picker(c);
    draw_config(c.snap.model());
    end_panel();
}

}  // namespace kvscope::gui
