#include "panels/figures.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "base/errors.h"
#include "io/output_path.h"
#include "panels/panel_list.h"
#include "report/plot_layout.h"
#include "run/options.h"
#include "widgets/test_dumps.h"

namespace kvscope::gui {
namespace fs = std::filesystem;
namespace fig {

void nothing(const std::string& why) { throw UsageError("nothing to draw yet: " + why); }

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

std::vector<int64_t> iota(int64_t n, int64_t first) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
    return v;
}

void signed_range(HeatmapPlot& p, float absmax) {
    const float r = std::max(absmax, 1e-6f);
    p.lo = -r, p.hi = r;
    p.table = &diverging();
}

Shown shown_step(const Snapshot& s, const ViewPrefs& v) {
    Shown out;
    out.r = viewed_step(s, v, &out.step);
    if (!out.r) nothing("no step has run (run a prefill step)");
    if (!out.r->recorded()) nothing("step " + std::to_string(out.step) + " was run without recording");
    out.layer = std::clamp<int64_t>(v.layer, 0, out.r->rows.n_layer - 1);
    out.head = std::clamp<int64_t>(v.head, 0, out.r->rows.n_head - 1);
    return out;
}

std::string where(const Snapshot& s, const Shown& w, bool head) {
    std::string t = model_name(s) + ", step " + std::to_string(w.step) + ", layer " + std::to_string(w.layer);
    if (head) t += ", head " + std::to_string(w.head);
    return t;
}

std::string base_name(const char* what, const Shown& w, bool head) {
    std::string n = std::string(what) + "_step" + std::to_string(w.step) + "_l" + std::to_string(w.layer);
    if (head) n += "_h" + std::to_string(w.head);
    return n;
}

LineSeries series(const std::string& label, size_t colour, const std::vector<double>& ys, double unit) {
    LineSeries out{label, kSeries[colour % std::size(kSeries)], {}, {}};
    for (size_t i = 0; i < ys.size(); ++i) out.xs.push_back(double(i)), out.ys.push_back(ys[i] * unit);
    return out;
}

}  // namespace fig

bool has_figure(Panel p) { return panel_module(p).figure != nullptr; }

const char* figure_panel_name(Panel p) {
    const PanelModule& m = panel_module(p);
    return m.figure ? m.figure_name : "";
}

bool figure_panel_named(const std::string& name, Panel& out) {
    for (const PanelModule& m : panel_modules())
        if (m.figure && name == m.figure_name) return out = m.panel, true;
    return false;
}

Figure build_figure(Panel p, const Snapshot& snap, const ViewPrefs& prefs) {
    const PanelModule& m = panel_module(p);
    if (!m.figure) throw UsageError(std::string("the ") + m.title + " panel has no figure to save");
    return m.figure(snap, prefs);
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
            status[p] = {render_labels(e.what()), true};
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
