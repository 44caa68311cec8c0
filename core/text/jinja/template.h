#pragma once
// A Jinja chat template, compiled once and rendered many times, byte for byte as Hugging Face
// transformers' apply_chat_template renders it (Jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loopcontrols; transformers' tojson, raise_exception and strftime_now).
//
//   JinjaTemplate::parse(source, origin)   lex + parse; throws UsageError "ORIGIN:LINE:COLUMN: what" for a
//                                          syntax error or a construct outside the subset (parser.h lists it),
//                                          "ORIGIN: ... not valid UTF-8" for bytes Python could not read as str
//   render(variables, options)             the text; throws UsageError "ORIGIN:LINE:COLUMN: what" where
//                                          Jinja2 raises (an undefined value's attribute, a type error,
//                                          the template's raise_exception(msg): "the template raised an error:
//                                          msg") and where kvscope does not follow (builtins.h says what), or
//                                          when the text would pass 16 MiB or the work budget
//   chat_variables(messages_json, ...)     the variables apply_chat_template passes: messages, add_generation_prompt,
//                                          bos_token, eos_token (tools left undefined) plus extra ones
//
// Semantics are Jinja2 3.1's: see lexer.h (whitespace), parser.h (syntax), interpreter.h (scopes,
// limits), value.h (Python values and printing), builtins.h (filters, tests, methods, globals).
#include <memory>
#include <string>
#include <string_view>

#include "text/jinja/ast.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace kvscope::jinja {

class JinjaTemplate {
public:
    static JinjaTemplate parse(std::string_view source, std::string origin = "chat template");
    std::string render(const Dict& variables, const RenderOptions& options = {}) const;
    const std::string& origin() const { return origin_; }

private:
    std::shared_ptr<const Program> program_;
    std::string origin_;
};

// messages: a JSON array of message objects (any keys: role, content, tool_calls ...). Throws UsageError
// when it is not valid JSON or not an array.
Dict chat_variables(std::string_view messages_json, bool add_generation_prompt, const std::string& bos_token,
                    const std::string& eos_token);

}  // namespace kvscope::jinja
