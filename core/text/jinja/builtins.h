#pragma once
// The names a chat template may use beyond the syntax: filters, tests, methods of str/dict values and
// the globals transformers adds — each with Jinja2's (and Python's) semantics; anything else is refused.
//
//   is_known_filter(name) / is_known_test(name)   what the parser accepts after `|` and `is`
//   apply_filter(in, name, input, args)           x | name(args)
//   apply_test(in, name, value, args)             x is name(args)
//   method(in, self, name)                        self.name for str and dict values: a bound callable, or
//                                                 Undefined when Python has no such method
//   global_value(name)                            range, namespace, dict, raise_exception, strftime_now,
//                                                 or Undefined
//
// Filters: trim length count tojson (transformers': json.dumps with ensure_ascii=False, indent, separators,
//   sort_keys) items list first last join replace lower upper title capitalize default/d selectattr
//   rejectattr select reject map safe string escape/e int float round abs unique indent reverse sort sum
//   attr.
//   select/reject/map/unique/items/reverse give one-shot iterators as Jinja2's generators do.
// Tests: defined undefined none string mapping iterable number integer float boolean sequence callable
//   true false equalto eq == ne != lt lessthan < le <= gt greaterthan > ge >= in odd even divisibleby
//   lower upper (ASCII) sameas (None and booleans).
// Methods: str.strip lstrip rstrip split rsplit startswith endswith upper lower replace title capitalize
//   join find rfind count isdigit isalpha isalnum isspace (ASCII); dict.get items keys values copy. Other
//   str methods (format, splitlines, partition ...) are refused when called. Methods that modify a value (list.append,
//   dict.update, pop ...) are refused as transformers' ImmutableSandboxedEnvironment refuses them.
// Markup (markupsafe): |safe and |escape return it, |string keeps it, `+` with a plain str escapes that
// str; every other operation gives a plain str (where Python's Markup methods would keep Markup and
// escape their arguments, e.g. Markup.replace, kvscope does not follow).
// Case mapping (upper, lower, title, capitalize) covers ASCII, Latin-1 and basic Cyrillic; text with
// other cased letters (Greek, Latin Extended, Armenian, Georgian, ...) is refused rather than mapped
// differently from Python.
#include <string>

#include "text/jinja/value.h"

namespace kvscope::jinja {

class Interpreter;

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
Value apply_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& value, CallArgs& args);
Value method(Interpreter& in, const Value& self, const std::string& name);
Value global_value(const std::string& name);

// Shared by filters and methods.
std::string case_map(std::string_view s, bool upper);  // str.upper()/lower(); throws JinjaError (see above)
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string html_escape(std::string_view s);    // markupsafe.escape: & < > " ' as &amp; &lt; &gt; &#34; &#39;

// Binds call arguments to parameter names like Python: positional first, then keywords; unknown keywords
// and too many arguments are errors naming the callee.
struct ArgBinder {
    ArgBinder(const char* callee, CallArgs& args, std::initializer_list<const char*> names);
    const Value& operator[](size_t k) const { return bound[k]; }
    bool given(size_t k) const { return !bound[k].is_undefined() || present[k]; }
    std::vector<Value> bound;
    std::vector<bool> present;
};

}  // namespace kvscope::jinja
