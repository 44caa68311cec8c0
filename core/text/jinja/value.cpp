#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/utf8.h"
#include "io/json.h"

namespace kvscope::jinja {

const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : items)
        if (k == key) return &v;
    return nullptr;
}

void Dict::set(const std::string& key, Value v) {
    for (auto& [k, old] : items)
        if (k == key) {
            old = std::move(v);
            return;
        }
    items.emplace_back(key, std::move(v));
}

Value Value::undefined(std::string name) {
    Value v;
    v.s_ = std::move(name);
    return v;
}
Value Value::none() {
    Value v;
    v.kind_ = Kind::None;
    return v;
}
Value Value::of(bool b) {
    Value v;
    v.kind_ = Kind::Bool;
    v.b_ = b;
    return v;
}
Value Value::integer(int64_t i) {
    Value v;
    v.kind_ = Kind::Int;
    v.i_ = i;
    return v;
}
Value Value::real(double d) {
    Value v;
    v.kind_ = Kind::Float;
    v.f_ = d;
    return v;
}
Value Value::str(std::string s) {
    if (s.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
    Value v;
    v.kind_ = Kind::String;
    v.s_ = std::move(s);
    return v;
}
Value Value::markup(std::string s) {
    Value v = str(std::move(s));
    v.b_ = true;
    return v;
}
Value Value::list(std::vector<Value> items, SeqKind kind) {
    if (items.size() > k_max_items) throw JinjaError("a list of more than 1,000,000 items");
    Value v;
    v.kind_ = Kind::List;
    v.seq_ = kind;
    v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
    return v;
}
Value Value::dict(Dict d) {
    Value v;
    v.kind_ = Kind::Dict;
    v.dict_ = std::make_shared<const Dict>(std::move(d));
    return v;
}
Value Value::namespace_(Dict d) {
    Value v;
    v.kind_ = Kind::Namespace;
    v.ns_ = std::make_shared<Dict>(std::move(d));
    return v;
}
Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
    Value v;
    v.kind_ = Kind::Callable;
    v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}
Value Value::iterator(std::vector<Value> items, std::string what) {
    Value v;
    v.kind_ = Kind::Iterator;
    v.iter_ = std::make_shared<IteratorState>();
    v.iter_->items = std::move(items);
    v.iter_->what = std::move(what);
    return v;
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::Undefined: case Kind::None: return false;
        case Kind::Bool: return b_;
        case Kind::Int: return i_ != 0;
        case Kind::Float: return f_ != 0;
        case Kind::String: return !s_.empty();
        case Kind::List: return !list_->empty();
        case Kind::Dict: return !dict_->items.empty();
        case Kind::Namespace: case Kind::Callable: case Kind::Iterator: return true;
    }
    return false;
}

const char* Value::type_name() const {
    switch (kind_) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::List:
            switch (seq_) {
                case SeqKind::List: return "list";
                case SeqKind::Tuple: return "tuple";
                case SeqKind::DictItems: return "dict_items";
                case SeqKind::DictKeys: return "dict_keys";
                case SeqKind::DictValues: return "dict_values";
                case SeqKind::Range: return "range";
            }
            return "list";
        case Kind::Dict: return "dict";
        case Kind::Namespace: return "Namespace";
        case Kind::Callable: return "function";
        case Kind::Iterator: return iter_->what.c_str();
    }
    return "?";
}

std::vector<std::string_view> code_points(std::string_view s) {
    std::vector<std::string_view> out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        char32_t cp;
        size_t n = decode_utf8(s, i, cp);
        if (n == 0) n = 1;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

size_t code_point_count(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xc0) != 0x80;
    return n;
}

bool is_py_space(char32_t cp) {
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

// str.isprintable(), without Unicode's unassigned code points (Cn): controls, separators other than the
// space, format characters and private use are escaped by repr.
static bool py_printable(char32_t cp) {
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
    if (cp == 0x20) return true;
    if (is_py_space(cp)) return false;
    if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61c || cp == 0x6dd || cp == 0x70f || cp == 0x180e) return false;
    if ((cp >= 0x200b && cp <= 0x200f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f)) return false;
    if (cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) || (cp >= 0xe000 && cp <= 0xf8ff) || cp >= 0xf0000) return false;
    if (cp == 0x110bd || (cp >= 0x1bca0 && cp <= 0x1bca3) || (cp >= 0x1d173 && cp <= 0x1d17a) ||
        (cp >= 0xe0001 && cp <= 0xe007f))
        return false;
    return true;
}

std::string py_str_repr(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    for (size_t i = 0; i < s.size();) {
        char32_t cp;
        size_t n = decode_utf8(s, i, cp);
        if (n == 0) {
            cp = static_cast<unsigned char>(s[i]);
            n = 1;
        }
        if (cp == char32_t(quote) || cp == '\\') {
            out += '\\';
            out += char(cp);
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (!py_printable(cp)) {
            char buf[16];
            if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
            else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
            else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(cp));
            out += buf;
        } else {
            out.append(s.substr(i, n));
        }
        i += n;
    }
    out += quote;
    return out;
}

std::string py_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
    // pass 1: the shortest digits that read back to d, as d.ddde±x
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    const bool negative = sci[0] == '-';
    if (negative) sci.erase(0, 1);
    const size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int exp10 = std::stoi(sci.substr(e + 1));
    // pass 2: Python's layout: fixed for 1e-4 <= |d| < 1e16, else exponent with at least two digits
    std::string out = negative ? "-" : "";
    if (exp10 < -4 || exp10 >= 16) {
        out += digits[0];
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
        return out + eb;
    }
    if (exp10 < 0) return out + "0." + std::string(size_t(-exp10 - 1), '0') + digits;
    const size_t int_len = size_t(exp10) + 1;
    if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
    return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

static std::string seq_repr(const std::vector<Value>& items, const char* open, const char* close, bool tuple) {
    std::string out = open;
    for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += ", ";
        out += py_repr(items[k]);
        if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
    }
    if (tuple && items.size() == 1) out += ",";
    return out + close;
}

static std::string dict_repr(const Dict& d) {
    std::string out = "{";
    for (size_t k = 0; k < d.items.size(); ++k) {
        if (k) out += ", ";
        out += py_str_repr(d.items[k].first) + ": " + py_repr(d.items[k].second);
        if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
    }
    return out + "}";
}

static thread_local int print_depth = 0;

std::string py_repr(const Value& v) {
    switch (v.kind()) {
        case Kind::String: return v.is_markup() ? "Markup(" + py_str_repr(v.as_string()) + ")" : py_str_repr(v.as_string());
        case Kind::Undefined: return "Undefined";
        default: break;
    }
    return py_str(v);
}

std::string py_str(const Value& v) {
    struct Guard {
        Guard() {
            if (++print_depth > 300) {
                --print_depth;
                throw JinjaError("printing a value nested deeper than 300");
            }
        }
        ~Guard() { --print_depth; }
    } guard;
    switch (v.kind()) {
        case Kind::Undefined: return "";
        case Kind::None: return "None";
        case Kind::Bool: return v.as_bool() ? "True" : "False";
        case Kind::Int: return std::to_string(v.as_int());
        case Kind::Float: return py_float_repr(v.as_float());
        case Kind::String: return v.as_string();
        case Kind::List:
            switch (v.seq_kind()) {
                case SeqKind::List: return seq_repr(v.items(), "[", "]", false);
                case SeqKind::Tuple: return seq_repr(v.items(), "(", ")", true);
                case SeqKind::DictItems: return seq_repr(v.items(), "dict_items([", "])", false);
                case SeqKind::DictKeys: return seq_repr(v.items(), "dict_keys([", "])", false);
                case SeqKind::DictValues: return seq_repr(v.items(), "dict_values([", "])", false);
                case SeqKind::Range: throw JinjaError("printing a range() is not supported");
            }
            break;
        case Kind::Dict: return dict_repr(v.as_dict());
        case Kind::Namespace: return "<Namespace " + dict_repr(v.namespace_vars()) + ">";
        case Kind::Callable: throw JinjaError("printing the function '" + v.as_callable().name + "' is not supported");
        case Kind::Iterator: throw JinjaError(std::string("printing a ") + v.type_name() + " object is not supported");
    }
    return "";
}

bool py_equal(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Kind::Undefined: case Kind::None: return true;
        case Kind::String: return a.as_string() == b.as_string();
        case Kind::List: {
            const bool a_tuple = a.seq_kind() == SeqKind::Tuple, b_tuple = b.seq_kind() == SeqKind::Tuple;
            if (a_tuple != b_tuple || a.items().size() != b.items().size()) return false;
            for (size_t k = 0; k < a.items().size(); ++k)
                if (!py_equal(a.items()[k], b.items()[k])) return false;
            return true;
        }
        case Kind::Dict: {
            const Dict& x = a.as_dict();
            const Dict& y = b.as_dict();
            if (x.items.size() != y.items.size()) return false;
            for (const auto& [k, v] : x.items) {
                const Value* w = y.find(k);
                if (!w || !py_equal(v, *w)) return false;
            }
            return true;
        }
        case Kind::Namespace: return &a.namespace_vars() == &b.namespace_vars();
        case Kind::Callable: return &a.as_callable() == &b.as_callable();
        case Kind::Iterator: return &a.iterator_state() == &b.iterator_state();
        default: return false;
    }
}

int py_compare(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            const double x = a.as_float(), y = b.as_float();
            if (std::isnan(x) || std::isnan(y)) throw JinjaError("comparing NaN is not supported");
            return x < y ? -1 : x > y ? 1 : 0;
        }
        return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
        (a.seq_kind() == SeqKind::List || a.seq_kind() == SeqKind::Tuple)) {
        const auto& x = a.items();
        const auto& y = b.items();
        for (size_t k = 0; k < x.size() && k < y.size(); ++k)
            if (!py_equal(x[k], y[k])) return py_compare(x[k], y[k]);
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    throw JinjaError(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" +
                     b.type_name() + "'");
}

std::vector<Value> iterate(const Value& v) {
    switch (v.kind()) {
        case Kind::Undefined: return {};
        case Kind::String: {
            std::vector<Value> out;
            for (auto cp : code_points(v.as_string())) out.push_back(Value::str(std::string(cp)));
            return out;
        }
        case Kind::List: return v.items();
        case Kind::Dict: {
            std::vector<Value> out;
            for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::str(k));
            return out;
        }
        case Kind::Iterator: {
            IteratorState& st = v.iterator_state();
            std::vector<Value> out(st.items.begin() + std::ptrdiff_t(st.pos), st.items.end());
            st.pos = st.items.size();
            return out;
        }
        default: throw JinjaError(std::string("'") + v.type_name() + "' object is not iterable");
    }
}

size_t py_len(const Value& v) {
    switch (v.kind()) {
        case Kind::Undefined: return 0;
        case Kind::String: return code_point_count(v.as_string());
        case Kind::List: return v.items().size();
        case Kind::Dict: return v.as_dict().items.size();
        default: throw JinjaError(std::string("object of type '") + v.type_name() + "' has no len()");
    }
}

static void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    for (size_t i = 0; i < s.size();) {
        char32_t cp;
        size_t n = decode_utf8(s, i, cp);
        if (n == 0) {
            cp = 0xfffd;
            n = 1;
        }
        char buf[16];
        switch (cp) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
                    if (cp >= 0x10000) {
                        const char32_t v = cp - 0x10000;
                        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xd800 + (v >> 10)),
                                      unsigned(0xdc00 + (v & 0x3ff)));
                    } else {
                        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
                    }
                    out += buf;
                } else {
                    out.append(s.substr(i, n));
                }
        }
        i += n;
    }
    out += '"';
}

static void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
    if (depth > 200) throw JinjaError("tojson of a value nested deeper than 200");
    if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
    const auto newline = [&](int level) {
        out += '\n';
        for (int k = 0; k < level; ++k) out += o.indent;
    };
    switch (v.kind()) {
        case Kind::None: out += "null"; return;
        case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
        case Kind::Int: out += std::to_string(v.as_int()); return;
        case Kind::Float: {
            const double d = v.as_float();
            out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : py_float_repr(d);
            return;
        }
        case Kind::String: json_string(out, v.as_string(), o.ensure_ascii); return;
        case Kind::List:
            if (v.seq_kind() == SeqKind::List || v.seq_kind() == SeqKind::Tuple) {
                const auto& items = v.items();
                if (items.empty()) {
                    out += "[]";
                    return;
                }
                out += '[';
                for (size_t k = 0; k < items.size(); ++k) {
                    if (k) out += o.item_separator;
                    if (o.has_indent) newline(depth + 1);
                    json_value(out, items[k], o, depth + 1);
                }
                if (o.has_indent) newline(depth);
                out += ']';
                return;
            }
            break;
        case Kind::Dict: {
            std::vector<const std::pair<std::string, Value>*> entries;
            for (const auto& e : v.as_dict().items) entries.push_back(&e);
            if (o.sort_keys)
                std::stable_sort(entries.begin(), entries.end(),
                                 [](const auto* a, const auto* b) { return a->first < b->first; });
            if (entries.empty()) {
                out += "{}";
                return;
            }
            out += '{';
            for (size_t k = 0; k < entries.size(); ++k) {
                if (k) out += o.item_separator;
                if (o.has_indent) newline(depth + 1);
                json_string(out, entries[k]->first, o.ensure_ascii);
                out += o.key_separator;
                json_value(out, entries[k]->second, o, depth + 1);
            }
            if (o.has_indent) newline(depth);
            out += '}';
            return;
        }
        default: break;
    }
    throw JinjaError(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
}

std::string to_json(const Value& v, const JsonOptions& options) {
    std::string out;
    json_value(out, v, options, 0);
    if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
    return out;
}

Value from_json(const Json& json) {
    switch (json.kind()) {
        case Json::Kind::Null: return Value::none();
        case Json::Kind::Bool: return Value::of(json.as_bool());
        case Json::Kind::Number: return json.is_integer() ? Value::integer(json.as_integer()) : Value::real(json.as_number());
        case Json::Kind::String: return Value::str(json.as_string());
        case Json::Kind::Array: {
            std::vector<Value> items;
            for (const auto& x : json.as_array()) items.push_back(from_json(x));
            return Value::list(std::move(items));
        }
        case Json::Kind::Object: {
            Dict d;
            for (const auto& [k, x] : json.as_object()) d.items.emplace_back(k, from_json(x));
            return Value::dict(std::move(d));
        }
    }
    return Value::none();
}

}  // namespace kvscope::jinja
