#pragma once
// The Cache lab panel (lab_panel.cpp): the cache lab over the session's own tokens: per configuration bytes, loss, KL,
// top-1, and curves over the positions.
#include <string>
#include <vector>

#include "panels/panel.h"

namespace kvscope::gui {

void draw_lab(PanelContext& c);
Figure lab_figure(const Snapshot& s, const ViewPrefs& v);  // its "Save figure" (figures.h); throws UsageError when there is nothing to draw
// Its curves: per configuration the loss it adds over the reference (summed over the positions) and its KL
// per position.
struct LabCurves {
    std::vector<std::vector<double>> added, kl;  // (configurations, N positions)
    std::vector<std::string> names;              // (configurations)
};
LabCurves lab_curves(const LabReport& lab);

}  // namespace kvscope::gui
