// The workspaces, one line each (see workspace.h). Which panels each shows and where: panels/layout.cpp.
#include "logic/workspace.h"

#include <cassert>
#include <cctype>

namespace kvscope::gui {

const std::vector<WorkspaceInfo>& workspaces() {
    static const std::vector<WorkspaceInfo> table = {
        {Workspace::Step, "Step", "step prefill and decode: a large attention map, the mask and the next token"},
        {Workspace::Cache, "Cache", "what the cache holds: K and V rows, K/V head groups, rotary positions, quantization"},
        {Workspace::Memory, "Memory", "a paged cache: the block pool, block tables, prefix sharing, the prompt cache"},
        {Workspace::Lab, "Lab", "experiments: the cache lab's configurations, cache edits, the logit lens, cache on vs off"},
        {Workspace::Chat, "Chat", "a conversation: its turns on the timeline, attention across turns, the rows each turn reuses"},
    };
    return table;
}

const WorkspaceInfo& workspace_info(Workspace w) {
    const WorkspaceInfo& info = workspaces()[size_t(w)];
    assert(info.workspace == w && "workspaces() lists the workspaces in the order of enum Workspace");
    return info;
}

bool workspace_named(const std::string& name, Workspace& out) {
    for (size_t i = 0; i < workspaces().size(); ++i) {
        std::string lower = workspaces()[i].name;
        for (char& ch : lower) ch = char(std::tolower(uint8_t(ch)));
        std::string asked = name;
        for (char& ch : asked) ch = char(std::tolower(uint8_t(ch)));
        if (asked == lower || asked == std::to_string(i + 1)) return out = workspaces()[i].workspace, true;
    }
    return false;
}

}  // namespace kvscope::gui
