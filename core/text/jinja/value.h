#pragma once
// The values a chat template computes with, as Python and Jinja2 see them: Jinja2's default Undefined,
// None, bool, int (int64 here; overflow is refused), float, str (UTF-8; lengths and indices count code
// points), list, tuple, dict views, dict (insertion-ordered, string keys), namespace, callables (macros,
// builtins, bound methods) and one-shot iterators (what select/map/unique/reverse return in Jinja2).
//
//   Value::undefined(name)         Jinja2's Undefined; `name` is what was looked up, for error messages
//   Value::none() / of(bool) / integer(i) / real(d) / str(s) / list(v) / tuple(v) / dict(d)
//   Value::markup(s)               a str marked safe (markupsafe.Markup): `+` HTML-escapes a plain str joined to it
//   Value::iterator(items, kind)   a one-shot iterator: iterating consumes it (a second loop sees nothing)
//   v.truthy()                     Python bool(v); Undefined is false, an iterator is always true
//   py_str(v)                      str(v): what {{ v }} and `~` print ("None", "True", "1.0", "['a', 1]")
//   py_repr(v)                     repr(v), as inside a printed list
//   py_equal(a, b)                 a == b (1 == 1.0 == True; Undefined equals only Undefined)
//   py_compare(a, b)               <0, 0, >0 for numbers, strings (code point order), lists; throws otherwise
//   iterate(v)                     the items a for loop sees (a dict gives its keys, a string its characters);
//                                  throws JinjaError for what Python cannot iterate
//   to_json(v, indent, ...)        json.dumps as transformers' tojson calls it (ensure_ascii=False default)
//   py_float_repr(d)               Python's repr(float): shortest round trip, "1.0", "1e+16", "inf"
//   from_json(json)                a JSON document (io/json.h) as a Value: objects become dicts
//
// Errors inside the engine are JinjaError (a message without position); the interpreter adds the template
// line:column and turns it into the UsageError callers see.
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope {

class Json;

namespace jinja {

struct JinjaError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Value;
class Interpreter;

struct Dict {
    std::vector<std::pair<std::string, Value>> items;  // insertion order; keys unique
    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value v);
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
    std::string name;  // "raise_exception", "strip", a macro's name
    std::function<Value(Interpreter&, CallArgs&)> call;
};

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable, Iterator };
// How a List prints and behaves: a list, a tuple, or one of dict.items()/.keys()/.values() (len works,
// indexing does not, printed as dict_items([...])), or a range (printing one is refused).
enum class SeqKind { List, Tuple, DictItems, DictKeys, DictValues, Range };

struct IteratorState {
    std::vector<Value> items;
    size_t pos = 0;
    std::string what;  // "generator", "list_reverseiterator": Python's type name, for errors
};

class Value {
public:
    Value() = default;
    static Value undefined(std::string name = "");
    static Value none();
    static Value of(bool b);
    static Value integer(int64_t i);
    static Value real(double d);
    static Value str(std::string s);
    static Value markup(std::string s);  // markupsafe.Markup: what |safe returns (see `+` in interpreter.cpp)
    static Value list(std::vector<Value> items, SeqKind kind = SeqKind::List);
    static Value tuple(std::vector<Value> items) { return list(std::move(items), SeqKind::Tuple); }
    static Value dict(Dict d);
    static Value namespace_(Dict d);
    static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);
    static Value iterator(std::vector<Value> items, std::string what = "generator");

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    bool is_none() const { return kind_ == Kind::None; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_int() const { return kind_ == Kind::Int; }
    bool is_float() const { return kind_ == Kind::Float; }
    bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_markup() const { return kind_ == Kind::String && b_; }
    bool is_list() const { return kind_ == Kind::List; }
    bool is_dict() const { return kind_ == Kind::Dict; }
    bool is_namespace() const { return kind_ == Kind::Namespace; }
    bool is_callable() const { return kind_ == Kind::Callable; }
    bool is_iterator() const { return kind_ == Kind::Iterator; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return kind_ == Kind::Bool ? int64_t(b_) : i_; }  // bools are ints in Python
    double as_float() const { return kind_ == Kind::Float ? f_ : double(as_int()); }
    const std::string& as_string() const { return s_; }
    const std::vector<Value>& items() const { return *list_; }  // List
    SeqKind seq_kind() const { return seq_; }
    const Dict& as_dict() const { return *dict_; }              // Dict
    Dict& namespace_vars() const { return *ns_; }               // Namespace (the one mutable kind)
    const Callable& as_callable() const { return *fn_; }
    IteratorState& iterator_state() const { return *iter_; }
    const std::string& undefined_name() const { return s_; }

    bool truthy() const;
    const char* type_name() const;  // Python's: "str", "int", "dict", "NoneType", "Undefined" ...

private:
    Kind kind_ = Kind::Undefined;
    bool b_ = false;
    SeqKind seq_ = SeqKind::List;
    int64_t i_ = 0;
    double f_ = 0;
    std::string s_;  // String value, or an Undefined's name
    std::shared_ptr<const std::vector<Value>> list_;
    std::shared_ptr<const Dict> dict_;
    std::shared_ptr<Dict> ns_;
    std::shared_ptr<const Callable> fn_;
    std::shared_ptr<IteratorState> iter_;
};

std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_str_repr(std::string_view s);  // repr of a str: 'it''s' quoting and escapes as Python
std::string py_float_repr(double d);
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b);
std::vector<Value> iterate(const Value& v);
size_t py_len(const Value& v);  // throws for what has no len() (numbers, iterators, None)

struct JsonOptions {
    bool ensure_ascii = false;
    bool has_indent = false;
    std::string indent;  // an int indent n becomes n spaces
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

Value from_json(const Json& json);

// Code points of UTF-8 text (invalid bytes count one each, as the engine never makes them).
std::vector<std::string_view> code_points(std::string_view s);
size_t code_point_count(std::string_view s);
bool is_py_space(char32_t cp);  // str.isspace(): \t\n\v\f\r, U+001C..U+001F, space, U+0085, U+00A0, Zs, U+2028/9

// Limits that keep any template finite: the rendered text, every string the engine builds, the items
// a loop or list may hold. Over them the render is refused, never truncated.
constexpr size_t k_max_text_bytes = size_t(16) << 20;
constexpr size_t k_max_items = 1'000'000;

}  // namespace jinja
}  // namespace kvscope
