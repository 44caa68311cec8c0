#include "text/jinja/template.h"

#include "base/errors.h"
#include "base/utf8.h"
#include "io/json.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace kvscope::jinja {

JinjaTemplate JinjaTemplate::parse(std::string_view source, std::string origin) {
    for (size_t i = 0; i < source.size();) {  // Python reads templates as str: other bytes never get this far
        char32_t cp;
        const size_t n = decode_utf8(source, i, cp);
        if (n == 0) throw UsageError(origin + ": the template is not valid UTF-8 (at byte " + std::to_string(i) + ")");
        i += n;
    }
    JinjaTemplate t;
    t.program_ = std::make_shared<const Program>(jinja::parse(lex(source, origin), origin));
    t.origin_ = std::move(origin);
    return t;
}

std::string JinjaTemplate::render(const Dict& variables, const RenderOptions& options) const {
    Interpreter in(origin_, options);
    return in.run(*program_, variables);
}

Dict chat_variables(std::string_view messages_json, bool add_generation_prompt, const std::string& bos_token,
                    const std::string& eos_token) {
    Json doc;
    try {
        doc = Json::parse(messages_json);
    } catch (const JsonError& e) {
        throw UsageError(std::string("messages: not valid JSON: ") + e.what());
    }
    if (!doc.is_array()) throw UsageError(std::string("messages: expected a JSON array of messages, found ") + doc.kind_name());
    Dict d;
    d.set("messages", from_json(doc));
    d.set("add_generation_prompt", Value::of(add_generation_prompt));
    d.set("bos_token", Value::str(bos_token));
    d.set("eos_token", Value::str(eos_token));
    return d;
}

}  // namespace kvscope::jinja
