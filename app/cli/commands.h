#pragma once
// The subcommands of the kvscope executable. Each parses its own options (--help on each) and throws
// LoadError / UsageError; main() prints them as one line.
#include <optional>
#include <string>

#include "text/jinja/interpreter.h"

namespace kvscope {

int cli_generate(int argc, char** argv);
int cli_chat(int argc, char** argv);     // multi-turn chat in one KV cache, turns from a file or stdin
int cli_chat_template(int argc, char** argv);  // any chat template rendered as apply_chat_template does
// --date YYYY-MM-DD for strftime_now(), today (local clock) when not given; UsageError "COMMAND: --date ..."
jinja::RenderOptions parse_template_date(const std::optional<std::string>& given, const std::string& command);
int cli_inspect(int argc, char** argv);
int cli_tokenize(int argc, char** argv);
int cli_detokenize(int argc, char** argv);
int cli_bench(int argc, char** argv);
int cli_bench_sharing(int argc, char** argv);  // bench --sharing: prefix sharing and prompt cache files
int cli_bench_matmul(int argc, char** argv);   // bench --matmul: one matrix shape, in cache and from memory
int cli_train(int argc, char** argv);  // train a small GPT-2 on the generated corpus
int cli_heads(int argc, char** argv);  // previous-token and induction scores per head
int cli_lab(int argc, char** argv);    // what each KV cache configuration costs, teacher-forced
int cli_gui(int argc, char** argv);  // the window; without KVSCOPE_WITH_GUI it explains and fails

}  // namespace kvscope
