// Without the GUI build (KVSCOPE_GUI=OFF) `kvscope gui` explains how to get it.
#ifndef KVSCOPE_WITH_GUI
#include "cli_commands.h"
#include "errors.h"

namespace kvscope {
int cli_gui(int, char**) {
    throw UsageError("this kvscope was built without the window (cmake -DKVSCOPE_GUI=ON); "
                     "use the subcommands: generate, inspect, tokenize, detokenize, bench");
}
}  // namespace kvscope
#endif
