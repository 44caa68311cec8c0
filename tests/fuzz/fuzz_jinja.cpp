// Fuzzes the chat-template engine (core/text/jinja/): each input is a template, parsed and rendered over
// a fixed conversation (system, user, assistant with a tool call, tool result; a tools list). Any bytes
// must give text or a UsageError, never a crash, hang, sanitizer report or a rendering over 16 MiB.
// Seeds: the real templates of tests/data/chat_templates/ (tools/fuzz.sh copies them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/errors.h"
#include "text/jinja/template.h"

namespace {

const char* const k_messages = R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Weather in Zürich? {{ x }}"},
  {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
   "arguments": {"city": "Zürich"}}}]},
  {"role": "tool", "content": "{\"temp\": 21.5}"},
  {"role": "assistant", "content": "<think>\nwarm\n</think>\n\nIt is 21.5 °C."}
])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const kvscope::jinja::Dict base = [] {
        kvscope::jinja::Dict d = kvscope::jinja::chat_variables(k_messages, true, "<s>", "</s>");
        kvscope::jinja::Dict fn;
        fn.set("name", kvscope::jinja::Value::str("get_weather"));
        kvscope::jinja::Dict tool;
        tool.set("type", kvscope::jinja::Value::str("function"));
        tool.set("function", kvscope::jinja::Value::dict(fn));
        d.set("tools", kvscope::jinja::Value::list({kvscope::jinja::Value::dict(tool)}));
        return d;
    }();
    const std::string_view source(reinterpret_cast<const char*>(data), size);
    try {
        const auto t = kvscope::jinja::JinjaTemplate::parse(source, "fuzz");
        kvscope::jinja::Dict vars = base;
        vars.set("add_generation_prompt", kvscope::jinja::Value::of(size % 2 == 0));
        kvscope::jinja::RenderOptions options;
        options.max_work = 200'000;  // keeps each input well under libFuzzer's timeout
        const std::string out = t.render(vars, options);
        if (out.size() > kvscope::jinja::k_max_text_bytes) std::abort();
    } catch (const kvscope::UsageError&) {
    }
    return 0;
}
