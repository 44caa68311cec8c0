// Jinja2's filters and tests (jinja2/filters.py, jinja2/tests.py semantics) and transformers' tojson.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/utf8.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"

namespace kvscope::jinja {
namespace {

const char* const k_filters[] = {"trim", "length", "count", "tojson", "items", "list", "first", "last", "join",
                                 "replace", "lower", "upper", "title", "capitalize", "default", "d", "selectattr",
                                 "rejectattr", "select", "reject", "map", "safe", "string", "int", "float", "round",
                                 "abs", "unique", "indent", "reverse", "sort", "sum", "escape", "e", "attr"};
const char* const k_tests[] = {"defined", "undefined", "none", "string", "mapping", "iterable", "number", "integer",
                               "float", "boolean", "sequence", "callable", "true", "false", "equalto", "eq", "==",
                               "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=",
                               "in", "odd", "even", "divisibleby", "lower", "upper", "sameas"};

// str.splitlines(): the line breaks Python knows, without keeping them.
std::vector<std::string> splitlines(std::string_view s) {
    std::vector<std::string> lines;
    std::string line;
    for (size_t i = 0; i < s.size();) {
        char32_t cp;
        size_t n = decode_utf8(s, i, cp);
        if (n == 0) {
            cp = 0xfffd;
            n = 1;
        }
        const bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
                         cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (brk) {
            lines.push_back(line);
            line.clear();
            if (cp == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++n;
        } else {
            line.append(s.substr(i, n));
        }
        i += n;
    }
    if (!line.empty()) lines.push_back(line);
    return lines;
}

std::string require_str(const Value& v, const char* filter) {
    if (!v.is_string()) throw JinjaError(std::string("the filter ") + filter + " needs a string, not " + v.type_name());
    return v.as_string();
}

Value tojson(const Value& x, CallArgs& a) {
    ArgBinder b("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions o;
    o.ensure_ascii = b.present[0] && b[0].truthy();
    o.sort_keys = b.present[3] && b[3].truthy();
    const Value& indent = b[1];
    if (b.present[1] && !indent.is_none()) {
        o.has_indent = true;
        if (indent.is_int()) o.indent = std::string(size_t(std::clamp<int64_t>(indent.as_int(), 0, 1024)), ' ');
        else if (indent.is_string()) o.indent = indent.as_string();
        else throw JinjaError("tojson's indent must be an integer or a string");
        o.item_separator = ",";
    }
    if (b.present[2] && !b[2].is_none()) {
        const Value& sep = b[2];
        if (!sep.is_list() || sep.items().size() != 2 || !sep.items()[0].is_string() || !sep.items()[1].is_string())
            throw JinjaError("tojson's separators must be a pair of strings");
        o.item_separator = sep.items()[0].as_string();
        o.key_separator = sep.items()[1].as_string();
    }
    return Value::str(to_json(x, o));
}

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value attr_path(Interpreter& in, Value v, const std::string& path) {
    size_t start = 0;
    while (true) {
        const size_t dot = path.find('.', start);
        const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        v = in.item(v, digits && part.size() < 18 ? Value::integer(std::stoll(part)) : Value::str(part));
        if (dot == std::string::npos) return v;
        start = dot + 1;
    }
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test result equals `keep`.
Value select_items(Interpreter& in, const Value& seq, CallArgs& a, bool with_attr, bool keep) {
    size_t next = 0;
    std::string attr;
    if (with_attr) {
        if (a.positional.empty() || !a.positional[0].is_string()) throw JinjaError("selectattr/rejectattr need an attribute name");
        attr = a.positional[next++].as_string();
    }
    std::string test;
    if (next < a.positional.size()) {
        if (!a.positional[next].is_string()) throw JinjaError("the test name must be a string");
        test = a.positional[next++].as_string();
        if (!is_known_test(test)) throw JinjaError("the test '" + test + "' is not supported");
    }
    CallArgs test_args;
    test_args.positional.assign(a.positional.begin() + std::ptrdiff_t(next), a.positional.end());
    test_args.keyword = a.keyword;
    std::vector<Value> out;
    if (!seq.truthy()) return Value::iterator({});  // Jinja2 tests `if value:` before iterating (none gives nothing)
    for (const auto& item : iterate(seq)) {
        in.tick();
        const Value v = with_attr ? attr_path(in, item, attr) : item;
        CallArgs args = test_args;
        const bool r = test.empty() ? v.truthy() : apply_test(in, test, v, args);
        if (r == keep) out.push_back(item);
    }
    return Value::iterator(std::move(out));
}

Value map_items(Interpreter& in, const Value& seq, CallArgs& a) {
    std::vector<Value> out;
    if (!seq.truthy()) return Value::iterator({});  // as select: a falsy value maps to nothing
    const Value* attribute = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, v] : a.keyword) {
        if (k == "attribute") attribute = &v;
        else if (k == "default") dflt = &v;
    }
    if (attribute) {
        if (!attribute->is_string()) throw JinjaError("map's attribute must be a string");
        for (const auto& item : iterate(seq)) {
            in.tick();
            Value v = attr_path(in, item, attribute->as_string());
            out.push_back(v.is_undefined() && dflt ? *dflt : v);
        }
        return Value::iterator(std::move(out));
    }
    if (a.positional.empty() || !a.positional[0].is_string()) throw JinjaError("map needs a filter name or attribute=");
    const std::string filter = a.positional[0].as_string();
    if (!is_known_filter(filter)) throw JinjaError("the filter '" + filter + "' is not supported");
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const auto& item : iterate(seq)) {
        in.tick();
        CallArgs args = rest;
        out.push_back(apply_filter(in, filter, item, args));
    }
    return Value::iterator(std::move(out));
}

Value to_int(const Value& v, CallArgs& a) {
    ArgBinder b("int", a, {"default", "base"});
    const Value dflt = b.present[0] ? b[0] : Value::integer(0);
    if (b.present[1] && !(b[1].is_int() && b[1].as_int() == 10)) throw JinjaError("int with a base other than 10 is not supported");
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) {
        if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) >= 9.2e18) return dflt;
        return Value::integer(int64_t(v.as_float()));
    }
    if (!v.is_string()) return dflt;
    std::string s = py_strip(v.as_string(), Value::none(), true, true);
    if (s.find('_') != std::string::npos) throw JinjaError("int of a string with '_' is not supported");
    errno = 0;
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && std::isdigit(static_cast<unsigned char>(s.back()))) {
        if (errno == ERANGE) throw JinjaError("an integer beyond 64 bits");
        return Value::integer(i);
    }
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(int64_t(d));
    return dflt;
}

Value to_float(const Value& v, CallArgs& a) {
    ArgBinder b("float", a, {"default"});
    const Value dflt = b.present[0] ? b[0] : Value::real(0.0);
    if (v.is_number()) return Value::real(v.as_float());
    if (!v.is_string()) return dflt;
    const std::string s = py_strip(v.as_string(), Value::none(), true, true);
    if (s.empty() || s.find_first_of("xXpP_") != std::string::npos) return dflt;
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return dflt;
    return Value::real(d);
}

Value round_filter(const Value& v, CallArgs& a) {
    ArgBinder b("round", a, {"precision", "method"});
    const int64_t p = b.present[0] ? b[0].as_int() : 0;
    const std::string method = b.present[1] ? py_str(b[1]) : "common";
    if (!v.is_number()) throw JinjaError(std::string("round of a ") + v.type_name() + " is not supported");
    if (p < 0 || p > 15) throw JinjaError("round with a precision outside 0..15 is not supported");
    if (method == "common") {
        if (!v.is_float()) return Value::integer(v.as_int());
        if (!std::isfinite(v.as_float())) return v;
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", int(p), v.as_float());  // correctly rounded, ties to even, as Python
        return Value::real(std::strtod(buf, nullptr));
    }
    if (method != "floor" && method != "ceil") throw JinjaError("method must be common, ceil or floor");
    const double scale = std::pow(10.0, double(p));
    const double x = v.as_float() * scale;
    return Value::real((method == "floor" ? std::floor(x) : std::ceil(x)) / scale);
}

std::string indent_filter(const Value& v, CallArgs& a) {
    ArgBinder b("indent", a, {"width", "first", "blank"});
    std::string pad = "    ";
    if (b.present[0]) {
        if (b[0].is_string()) pad = b[0].as_string();
        else if (b[0].is_int()) pad = std::string(size_t(std::clamp<int64_t>(b[0].as_int(), 0, 4096)), ' ');
        else throw JinjaError("indent's width must be an integer or a string");
    }
    const bool first = b.present[1] && b[1].truthy();
    const bool blank = b.present[2] && b[2].truthy();
    const std::vector<std::string> lines = splitlines(require_str(v, "indent") + "\n");
    std::string out;
    for (size_t k = 0; k < lines.size(); ++k) {
        if (k) {
            out += "\n";
            if (blank || !lines[k].empty()) out += pad;
        }
        out += lines[k];
        if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
    }
    return first ? pad + out : out;
}

Value sort_filter(Interpreter& in, const Value& v, CallArgs& a, bool unique) {
    ArgBinder b(unique ? "unique" : "sort", a, unique ? std::initializer_list<const char*>{"case_sensitive", "attribute"}
                                                      : std::initializer_list<const char*>{"reverse", "case_sensitive", "attribute"});
    const size_t off = unique ? 0 : 1;
    const bool reverse = !unique && b.present[0] && b[0].truthy();
    const bool case_sensitive = b.present[off] && b[off].truthy();
    const bool has_attr = b.present[off + 1] && !b[off + 1].is_none();
    std::vector<Value> items = iterate(v);
    in.tick(items.size());
    std::vector<Value> keys;
    for (const auto& item : items) {
        Value k = has_attr ? attr_path(in, item, py_str(b[off + 1])) : item;
        if (k.is_string() && !case_sensitive) k = Value::str(case_map(k.as_string(), false));
        keys.push_back(std::move(k));
    }
    if (unique) {
        std::vector<Value> out, seen;
        for (size_t k = 0; k < items.size(); ++k) {
            bool dup = false;
            for (const auto& s : seen) dup = dup || py_equal(s, keys[k]);
            if (!dup) {
                seen.push_back(keys[k]);
                out.push_back(items[k]);
            }
            in.tick(seen.size());
        }
        return Value::iterator(std::move(out));
    }
    std::vector<size_t> order(items.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        return reverse ? py_compare(keys[y], keys[x]) < 0 : py_compare(keys[x], keys[y]) < 0;
    });
    std::vector<Value> out;
    for (size_t k : order) out.push_back(items[k]);
    return Value::list(std::move(out));
}

}  // namespace

bool is_known_filter(const std::string& name) {
    return std::any_of(std::begin(k_filters), std::end(k_filters), [&](const char* f) { return name == f; });
}

bool is_known_test(const std::string& name) {
    return std::any_of(std::begin(k_tests), std::end(k_tests), [&](const char* t) { return name == t; });
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& x, CallArgs& a) {
    const auto bind = [&](std::initializer_list<const char*> names) { return ArgBinder(name.c_str(), a, names); };
    if (name == "trim") return Value::str(py_strip(py_str(x), bind({"chars"})[0], true, true));
    if (name == "length" || name == "count") return bind({}), Value::integer(int64_t(py_len(x)));
    if (name == "tojson") return tojson(x, a);
    if (name == "items") {
        bind({});
        if (x.is_undefined()) return Value::iterator({});
        if (!x.is_dict()) throw JinjaError("can only get item pairs from a mapping");
        std::vector<Value> out;
        for (const auto& [k, v] : x.as_dict().items) out.push_back(Value::tuple({Value::str(k), v}));
        return Value::iterator(std::move(out));
    }
    if (name == "list") return bind({}), Value::list(iterate(x));
    if (name == "first") {
        bind({});
        if (x.is_iterator()) {
            IteratorState& st = x.iterator_state();
            return st.pos < st.items.size() ? st.items[st.pos++] : Value::undefined("first");
        }
        std::vector<Value> items = iterate(x);
        return items.empty() ? Value::undefined("first") : items.front();
    }
    if (name == "last") {
        bind({});
        if (x.is_iterator()) throw JinjaError(std::string("'") + x.type_name() + "' object is not reversible");
        std::vector<Value> items = iterate(x);
        return items.empty() ? Value::undefined("last") : items.back();
    }
    if (name == "join") {
        ArgBinder b = bind({"d", "attribute"});
        const std::string sep = b.present[0] ? py_str(b[0]) : "";
        std::string out;
        bool first = true;
        for (const auto& item : iterate(x)) {
            in.tick();
            if (!first) out += sep;
            out += py_str(b.present[1] && !b[1].is_none() ? attr_path(in, item, py_str(b[1])) : item);
            first = false;
            if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
        }
        return Value::str(std::move(out));
    }
    if (name == "replace") {
        ArgBinder b = bind({"old", "new", "count"});
        CallArgs m;
        m.positional = {Value::str(py_str(b[0])), Value::str(py_str(b[1]))};
        if (b.present[2] && !b[2].is_none()) m.positional.push_back(b[2]);
        return in.call(method(in, Value::str(py_str(x)), "replace"), m);
    }
    if (name == "lower" || name == "upper") return bind({}), Value::str(case_map(py_str(x), name == "upper"));
    if (name == "capitalize") return bind({}), Value::str(py_capitalize(py_str(x)));
    if (name == "title") {
        bind({});
        // Jinja2's own title: a word starts after - ( { [ < or whitespace
        const std::string s = py_str(x);
        std::string out;
        bool start = true;
        for (auto cp : code_points(s)) {
            char32_t c;
            const bool delim = cp == "-" || cp == "(" || cp == "{" || cp == "[" || cp == "<" ||
                               (decode_utf8(cp, 0, c) != 0 && is_py_space(c));
            out += start ? py_capitalize(cp) : case_map(cp, false);
            start = delim;
        }
        return Value::str(std::move(out));
    }
    if (name == "default" || name == "d") {
        ArgBinder b = bind({"default_value", "boolean"});
        const Value dflt = b.present[0] ? b[0] : Value::str("");
        const bool boolean = b.present[1] && b[1].truthy();
        if (x.is_undefined() || (boolean && !x.truthy())) return dflt;
        return x;
    }
    if (name == "attr") {  // getattr only: a dict's keys are items, not attributes
        ArgBinder b = bind({"name"});
        const std::string attr = py_str(b[0]);
        if (x.is_undefined()) return Value::undefined(attr);
        if (x.is_namespace()) return in.attribute(x, attr);
        return method(in, x, attr);
    }
    if (name == "selectattr" || name == "rejectattr") return select_items(in, x, a, true, name == "selectattr");
    if (name == "select" || name == "reject") return select_items(in, x, a, false, name == "select");
    if (name == "map") return map_items(in, x, a);
    if (name == "safe") return bind({}), x.is_markup() ? x : Value::markup(py_str(x));
    if (name == "string") return bind({}), x.is_markup() ? x : Value::str(py_str(x));
    if (name == "escape" || name == "e") return bind({}), x.is_markup() ? x : Value::markup(html_escape(py_str(x)));
    if (name == "int") return to_int(x, a);
    if (name == "float") return to_float(x, a);
    if (name == "round") return round_filter(x, a);
    if (name == "abs") {
        bind({});
        if (x.is_float()) return Value::real(std::fabs(x.as_float()));
        if (!x.is_number()) throw JinjaError(std::string("bad operand type for abs(): '") + x.type_name() + "'");
        if (x.as_int() == INT64_MIN) throw JinjaError("an integer result beyond 64 bits");
        return Value::integer(std::llabs(x.as_int()));
    }
    if (name == "unique") return sort_filter(in, x, a, true);
    if (name == "sort") return sort_filter(in, x, a, false);
    if (name == "indent") return Value::str(indent_filter(x, a));
    if (name == "reverse") {
        bind({});
        if (x.is_string()) {
            auto cps = code_points(x.as_string());
            std::string out;
            for (size_t k = cps.size(); k-- > 0;) out.append(cps[k]);
            return Value::str(std::move(out));
        }
        if (x.is_list() && (x.seq_kind() == SeqKind::DictItems || x.seq_kind() == SeqKind::DictKeys ||
                            x.seq_kind() == SeqKind::DictValues))
            throw JinjaError("reversing a dict view is not supported");
        std::vector<Value> items = iterate(x);
        std::reverse(items.begin(), items.end());
        if (x.is_iterator()) return Value::list(std::move(items));
        return Value::iterator(std::move(items), x.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
    }
    if (name == "sum") {
        ArgBinder b = bind({"attribute", "start"});
        Value total = b.present[1] ? b[1] : Value::integer(0);
        for (const auto& item : iterate(x)) {
            in.tick();
            const Value v = b.present[0] && !b[0].is_none() ? attr_path(in, item, py_str(b[0])) : item;
            if (!total.is_number() || !v.is_number()) throw JinjaError("sum of values other than numbers is not supported");
            total = total.is_float() || v.is_float() ? Value::real(total.as_float() + v.as_float())
                                                     : Value::integer(total.as_int() + v.as_int());
        }
        return total;
    }
    throw JinjaError("the filter '" + name + "' is not supported");
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
    (void)in;
    const auto arg = [&]() -> const Value& {
        ArgBinder b(name.c_str(), a, {"other"});
        if (!b.present[0]) throw JinjaError("the test '" + name + "' needs an argument");
        a.positional = {b[0]};
        a.keyword.clear();
        return a.positional[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.is_iterator();
    if (name == "sequence")
        return v.is_undefined() || v.is_string() || v.is_dict() ||
               (v.is_list() && v.seq_kind() != SeqKind::DictItems && v.seq_kind() != SeqKind::DictKeys &&
                v.seq_kind() != SeqKind::DictValues);
    if (name == "number") return v.is_number();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "callable") return v.is_callable();
    if (name == "equalto" || name == "eq" || name == "==") return py_equal(v, arg());
    if (name == "ne" || name == "!=") return !py_equal(v, arg());
    if (name == "lt" || name == "lessthan" || name == "<") return py_compare(v, arg()) < 0;
    if (name == "le" || name == "<=") return py_compare(v, arg()) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return py_compare(v, arg()) > 0;
    if (name == "ge" || name == ">=") return py_compare(v, arg()) >= 0;
    if (name == "in") {
        const Value& seq = arg();
        if (seq.is_string() && !v.is_string()) throw JinjaError("'in <string>' requires string as left operand");
        if (seq.is_string()) return seq.as_string().find(v.as_string()) != std::string::npos;
        for (const auto& item : iterate(seq))
            if (py_equal(item, v)) return true;
        return false;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
        const Value d = name == "divisibleby" ? arg() : Value::integer(2);
        if (!v.is_number() || !d.is_number()) throw JinjaError("unsupported operand type(s) for %");
        if (v.is_float() || d.is_float()) {
            if (d.as_float() == 0) throw JinjaError("float modulo");
            double m = std::fmod(v.as_float(), d.as_float());
            if (m != 0 && ((m < 0) != (d.as_float() < 0))) m += d.as_float();
            return name == "odd" ? m == 1 : m == 0;
        }
        if (d.as_int() == 0) throw JinjaError("integer division or modulo by zero");
        int64_t m = d.as_int() == -1 ? 0 : v.as_int() % d.as_int();
        if (m != 0 && ((m < 0) != (d.as_int() < 0))) m += d.as_int();
        return name == "odd" ? m == 1 : m == 0;
    }
    if (name == "lower" || name == "upper") {
        const std::string s = py_str(v);
        bool cased = false;
        for (unsigned char c : s) {
            if (c >= 0x80) throw JinjaError("the test '" + name + "' on text outside ASCII is not supported");
            if (std::isalpha(c)) {
                cased = true;
                if (name == "lower" ? std::isupper(c) : std::islower(c)) return false;
            }
        }
        return cased;
    }
    if (name == "sameas") {
        const Value& other = arg();
        if ((v.is_none() || v.is_bool()) && (other.is_none() || other.is_bool()))
            return v.kind() == other.kind() && (v.is_none() || v.as_bool() == other.as_bool());
        throw JinjaError("the test 'sameas' on values other than None and booleans is not supported");
    }
    throw JinjaError("the test '" + name + "' is not supported");
}

}  // namespace kvscope::jinja
