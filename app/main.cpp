// kvscope entry point: subcommand dispatch. Errors are caught here once and printed as one line; the
// exit code follows the table in core/base/errors.h (UsageError 2, everything else 1).
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "base/errors.h"
#include "cli/commands.h"
#include "run/options.h"

namespace {

const char* kUsage =
    "usage: kvscope [COMMAND] [options]\n"
    "Watch a GPT-style transformer generate text with a KV cache, one step at a time.\n\n"
    "commands:\n"
    "  gui         open the step-through debugger window (default when no command is given)\n"
    "  generate    prefill + decode from a prompt; --json, --dump-logits, --trace DIR\n"
    "  chat        a multi-turn chat in one KV cache, turns from a file or stdin; --json per turn\n"
    "  chat-template  render messages with a model's (or any) chat template, as apply_chat_template does\n"
    "  inspect     model config, parameters, tensors, KV cache bytes\n"
    "  tokenize    text -> token ids\n"
    "  detokenize  token ids -> text bytes\n"
    "  bench       cached vs uncached speed, per-step time vs position\n"
    "  train       train a small GPT-2 on the generated corpus, write a model folder\n"
    "  heads       previous-token and induction score of every attention head\n"
    "  lab         what each KV cache configuration costs (window, sinks, int8/int4/fp8): loss, KL, bytes\n\n"
    "Run 'kvscope COMMAND --help' for the options of a command; 'kvscope --version' for the version.\n\n"
    "Outputs (--trace DIR, --dump-logits, --chart, --screenshot, --out, ...) are checked before any work: the\n"
    "file or folder is created, the folder it goes in must exist; an existing file is replaced only when it\n"
    "is the kind kvscope writes there, an existing folder used only when empty or already kvscope's.\n"
    "Exit codes: 0 done; 1 the work failed (a file could not be read or written, a broken model folder);\n"
    "2 the request was refused before any work (a bad option or value, an output path, an unknown token id,\n"
    "prompt text for a model without tokenizer files). Errors are one line on stderr: 'error: ...'.\n";

void print_error(const std::string& what) {
    std::string line = what;
    for (char& c : line)
        if (c == '\n' || c == '\r') c = ' ';
    std::fprintf(stderr, "error: %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    using namespace kvscope;
    const std::string command = argc > 1 ? argv[1] : "gui";
    int sub_argc = argc > 1 ? argc - 1 : 1;
    char* gui_argv[] = {const_cast<char*>("gui"), nullptr};
    char** sub_argv = argc > 1 ? argv + 1 : gui_argv;
    try {
        if (command == "generate") return cli_generate(sub_argc, sub_argv);
        if (command == "chat") return cli_chat(sub_argc, sub_argv);
        if (command == "chat-template") return cli_chat_template(sub_argc, sub_argv);
        if (command == "inspect") return cli_inspect(sub_argc, sub_argv);
        if (command == "tokenize") return cli_tokenize(sub_argc, sub_argv);
        if (command == "detokenize") return cli_detokenize(sub_argc, sub_argv);
        if (command == "bench") return cli_bench(sub_argc, sub_argv);
        if (command == "train") return cli_train(sub_argc, sub_argv);
        if (command == "heads") return cli_heads(sub_argc, sub_argv);
        if (command == "lab") return cli_lab(sub_argc, sub_argv);
        if (command == "gui") return cli_gui(sub_argc, sub_argv);
        if (command == "--version" || command == "version") {
            if (argc > 2) throw UsageError(command + " takes no arguments, got '" + argv[2] + "'");
            std::printf("kvscope %s\n", KVSCOPE_VERSION);
            return 0;
        }
        if (command == "--help" || command == "-h" || command == "help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (command.rfind("--", 0) == 0) return cli_gui(argc, argv);  // `kvscope --model DIR` opens the window
        print_error("unknown command '" + command + "' (try kvscope --help)");
        return exit_usage;
    } catch (const UsageError& e) {  // the engine names options and inputs ({window}): here they are flags
        print_error(render(e.what(), cli_words));
        return exit_usage;
    } catch (const std::bad_alloc&) {
        print_error("out of memory");
        return exit_failure;
    } catch (const std::exception& e) {  // LoadError, JsonError and anything unexpected
        print_error(render(e.what(), cli_words));
        return exit_failure;
    }
}
