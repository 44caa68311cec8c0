// str and dict methods, the globals transformers' environment provides, Python's case mapping and strip.
#include <cstring>
#include <ctime>

#include "base/utf8.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"

namespace kvscope::jinja {

ArgBinder::ArgBinder(const char* callee, CallArgs& args, std::initializer_list<const char*> names)
    : bound(names.size()), present(names.size(), false) {
    if (args.positional.size() > names.size())
        throw JinjaError(std::string(callee) + "() takes at most " + std::to_string(names.size()) + " argument(s)");
    for (size_t k = 0; k < args.positional.size(); ++k) {
        bound[k] = args.positional[k];
        present[k] = true;
    }
    for (auto& [key, v] : args.keyword) {
        size_t k = 0;
        for (const char* n : names) {
            if (key == n) break;
            ++k;
        }
        if (k == names.size()) throw JinjaError(std::string(callee) + "() got an unexpected keyword argument '" + key + "'");
        if (present[k]) throw JinjaError(std::string(callee) + "() got multiple values for argument '" + key + "'");
        bound[k] = v;
        present[k] = true;
    }
}

std::string html_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

static char32_t decode_at(std::string_view s, size_t i, size_t& n) {
    char32_t cp;
    n = decode_utf8(s, i, cp);
    if (n == 0) {
        n = 1;
        return static_cast<unsigned char>(s[i]);
    }
    return cp;
}

// Case pairs kvscope knows: ASCII, Latin-1 (with ß -> SS, ÿ <-> Ÿ, µ -> Μ) and basic Cyrillic. A code point
// in a block with other case mappings is refused: Python would map it and this table would not.
static bool cased_elsewhere(char32_t cp) {
    return (cp >= 0x100 && cp <= 0x24f) || (cp >= 0x370 && cp <= 0x3ff) || (cp >= 0x460 && cp <= 0x58f) ||
           (cp >= 0x10a0 && cp <= 0x10ff) || (cp >= 0x13a0 && cp <= 0x13ff) || (cp >= 0x1c80 && cp <= 0x1cbf) ||
           (cp >= 0x1e00 && cp <= 0x1fff) || (cp >= 0x2126 && cp <= 0x2184) || (cp >= 0x24b6 && cp <= 0x24e9) ||
           (cp >= 0x2c00 && cp <= 0x2d2f) || (cp >= 0xa640 && cp <= 0xa7ff) || (cp >= 0xab70 && cp <= 0xabbf) ||
           (cp >= 0xfb00 && cp <= 0xfb17) || (cp >= 0xff21 && cp <= 0xff5a) || (cp >= 0x10400 && cp <= 0x104ff) ||
           (cp >= 0x10c80 && cp <= 0x10cff) || (cp >= 0x118a0 && cp <= 0x118ff) || (cp >= 0x16e40 && cp <= 0x16e9f) ||
           (cp >= 0x1e900 && cp <= 0x1e95f);
}

static void map_one(std::string& out, char32_t cp, bool upper) {
    if (cp < 0x80) {
        out += char(upper ? std::toupper(int(cp)) : std::tolower(int(cp)));
        return;
    }
    if (cased_elsewhere(cp)) throw JinjaError("changing the case of this text (a letter outside ASCII, Latin-1 and basic Cyrillic) is not supported");
    if (upper) {
        if (cp == 0xdf) { out += "SS"; return; }
        if (cp == 0xff) { append_utf8(out, 0x178); return; }
        if (cp == 0xb5) { append_utf8(out, 0x39c); return; }
        if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) cp -= 0x20;
        else if (cp >= 0x430 && cp <= 0x44f) cp -= 0x20;
        else if (cp >= 0x450 && cp <= 0x45f) cp -= 0x50;
    } else {
        if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) cp += 0x20;
        else if (cp >= 0x410 && cp <= 0x42f) cp += 0x20;
        else if (cp >= 0x400 && cp <= 0x40f) cp += 0x50;
    }
    append_utf8(out, cp);
}

static bool is_cased_letter(char32_t cp) {
    if (cp < 0x80) return std::isalpha(int(cp)) != 0;
    return (cp >= 0xc0 && cp <= 0xff && cp != 0xd7 && cp != 0xf7) || cp == 0xb5 || cp == 0xaa || cp == 0xba ||
           (cp >= 0x400 && cp <= 0x45f) || cased_elsewhere(cp);
}

std::string case_map(std::string_view s, bool upper) {
    std::string out;
    for (size_t i = 0, n; i < s.size(); i += n) map_one(out, decode_at(s, i, n), upper);
    return out;
}

std::string py_capitalize(std::string_view s) {
    std::string out;
    for (size_t i = 0, n; i < s.size(); i += n) map_one(out, decode_at(s, i, n), i == 0);
    return out;
}

// str.title(): a letter after a cased letter is lowered, any other letter is raised.
std::string py_title(std::string_view s) {
    std::string out;
    bool previous_cased = false;
    for (size_t i = 0, n; i < s.size(); i += n) {
        const char32_t cp = decode_at(s, i, n);
        map_one(out, cp, !previous_cased);
        previous_cased = is_cased_letter(cp) && cp != 0xaa && cp != 0xba;
    }
    return out;
}

std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
    const bool whitespace = chars.is_none() || chars.is_undefined();
    if (!whitespace && !chars.is_string()) throw JinjaError("strip arg must be None or str");
    const auto cps = code_points(s);
    const auto strip_it = [&](std::string_view cp) {
        if (whitespace) {
            char32_t c;
            return decode_utf8(cp, 0, c) != 0 && is_py_space(c);
        }
        for (auto x : code_points(chars.as_string()))
            if (x == cp) return true;
        return false;
    };
    size_t lo = 0, hi = cps.size();
    if (left)
        while (lo < hi && strip_it(cps[lo])) ++lo;
    if (right)
        while (hi > lo && strip_it(cps[hi - 1])) --hi;
    std::string out;
    for (size_t k = lo; k < hi; ++k) out.append(cps[k]);
    return out;
}

static Value py_split(std::string_view s, const Value& sep, const Value& maxsplit_v, bool from_right) {
    const int64_t maxsplit = maxsplit_v.is_undefined() ? -1 : maxsplit_v.as_int();
    std::vector<std::string> parts;
    if (sep.is_none() || sep.is_undefined()) {
        // runs of whitespace separate; leading and trailing whitespace gives no empty parts
        auto cps = code_points(s);
        if (from_right && maxsplit >= 0) throw JinjaError("rsplit() with a limit and no separator is not supported");
        std::string word;
        bool in_word = false;
        int64_t splits = 0;
        for (size_t k = 0; k < cps.size(); ++k) {
            char32_t c;
            const bool space = decode_utf8(cps[k], 0, c) != 0 && is_py_space(c);
            if (maxsplit >= 0 && splits >= maxsplit && !in_word && !space) {
                std::string rest;  // the remainder keeps its trailing whitespace, as in Python
                for (size_t j = k; j < cps.size(); ++j) rest.append(cps[j]);
                parts.push_back(std::move(rest));
                word.clear();
                break;
            }
            if (space) {
                if (in_word) {
                    parts.push_back(word);
                    word.clear();
                    ++splits;
                }
                in_word = false;
            } else {
                word.append(cps[k]);
                in_word = true;
            }
        }
        if (in_word) parts.push_back(word);
    } else {
        if (!sep.is_string()) throw JinjaError("must be str or None");
        const std::string& d = sep.as_string();
        if (d.empty()) throw JinjaError("empty separator");
        std::string text(s);
        if (!from_right) {
            size_t start = 0;
            int64_t splits = 0;
            while (maxsplit < 0 || splits < maxsplit) {
                const size_t at = text.find(d, start);
                if (at == std::string::npos) break;
                parts.push_back(text.substr(start, at - start));
                start = at + d.size();
                ++splits;
            }
            parts.push_back(text.substr(start));
        } else {
            size_t end = text.size();
            int64_t splits = 0;
            std::vector<std::string> rev;
            while ((maxsplit < 0 || splits < maxsplit) && end >= d.size()) {
                const size_t at = text.rfind(d, end - d.size());
                if (at == std::string::npos) break;
                rev.push_back(text.substr(at + d.size(), end - at - d.size()));
                end = at;
                ++splits;
            }
            rev.push_back(text.substr(0, end));
            parts.assign(rev.rbegin(), rev.rend());
        }
    }
    std::vector<Value> out;
    for (auto& p : parts) out.push_back(Value::str(std::move(p)));
    return Value::list(std::move(out));
}

static bool affix_match(const std::string& s, const Value& affix, bool start) {
    const auto one = [&](const Value& a) {
        if (!a.is_string()) throw JinjaError("startswith/endswith first arg must be str or a tuple of str");
        const std::string& x = a.as_string();
        if (x.size() > s.size()) return false;
        return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (affix.is_list() && affix.seq_kind() == SeqKind::Tuple) {
        for (const auto& a : affix.items())
            if (one(a)) return true;
        return false;
    }
    return one(affix);
}

static Value str_replace(const std::string& s, const Value& old_v, const Value& new_v, const Value& count_v) {
    if (!old_v.is_string() || !new_v.is_string()) throw JinjaError("replace() arguments must be str");
    const std::string& from = old_v.as_string();
    const std::string& to = new_v.as_string();
    int64_t count = count_v.is_undefined() || count_v.is_none() ? -1 : count_v.as_int();
    std::string out;
    if (from.empty()) {  // Python inserts `to` between every code point and at both ends
        const auto cps = code_points(s);
        for (size_t k = 0; k <= cps.size(); ++k) {
            if (count < 0 || int64_t(k) < count) out += to;
            if (k < cps.size()) out.append(cps[k]);
            if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
        }
        return Value::str(std::move(out));
    }
    size_t start = 0;
    while (count != 0) {
        const size_t at = s.find(from, start);
        if (at == std::string::npos) break;
        out.append(s, start, at - start);
        out += to;
        if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
        start = at + from.size();
        if (count > 0) --count;
    }
    out.append(s, start, std::string::npos);
    return Value::str(std::move(out));
}

static Value str_method(Interpreter& in, const std::string& s, const std::string& name, CallArgs& a) {
    const auto bind = [&](std::initializer_list<const char*> names) { return ArgBinder(name.c_str(), a, names); };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        ArgBinder b = bind({"chars"});
        return Value::str(py_strip(s, b[0], name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        ArgBinder b = bind({"sep", "maxsplit"});
        return py_split(s, b[0], b[1], name == "rsplit");
    }
    if (name == "startswith" || name == "endswith") {
        ArgBinder b = bind({"prefix"});
        return Value::of(affix_match(s, b[0], name == "startswith"));
    }
    if (name == "upper" || name == "lower") return Value::str(case_map(s, name == "upper"));
    if (name == "title") return Value::str(py_title(s));
    if (name == "capitalize") return Value::str(py_capitalize(s));
    if (name == "replace") {
        ArgBinder b = bind({"old", "new", "count"});
        return str_replace(s, b[0], b[1], b[2]);
    }
    if (name == "join") {
        ArgBinder b = bind({"iterable"});
        std::string out;
        bool first = true;
        for (const auto& x : iterate(b[0])) {
            if (!x.is_string()) throw JinjaError(std::string("sequence item: expected str instance, ") + x.type_name() + " found");
            if (!first) out += s;
            out += x.as_string();
            first = false;
            if (out.size() > k_max_text_bytes) throw JinjaError("a string longer than 16 MiB");
        }
        return Value::str(std::move(out));
    }
    if (name == "find" || name == "rfind" || name == "count") {
        ArgBinder b = bind({"sub"});
        if (!b[0].is_string()) throw JinjaError("must be str");
        const std::string& sub = b[0].as_string();
        if (name == "count") {
            if (sub.empty()) return Value::integer(int64_t(code_point_count(s)) + 1);
            int64_t n = 0;
            for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
            return Value::integer(n);
        }
        const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
        return Value::integer(at == std::string::npos ? -1 : int64_t(code_point_count(std::string_view(s).substr(0, at))));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
        if (s.empty()) return Value::of(false);
        for (size_t i = 0, n; i < s.size(); i += n) {
            const char32_t cp = decode_at(s, i, n);
            if (cp >= 0x80 && name != "isspace") throw JinjaError(name + "() of text outside ASCII is not supported");
            const bool ok = name == "isdigit" ? std::isdigit(int(cp)) != 0
                          : name == "isalpha" ? std::isalpha(int(cp)) != 0
                          : name == "isalnum" ? std::isalnum(int(cp)) != 0 : is_py_space(cp);
            if (!ok) return Value::of(false);
        }
        return Value::of(true);
    }
    (void)in;
    throw JinjaError("the str method '" + name + "' is not supported");
}

static const char* const k_str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                            "upper", "lower", "title", "capitalize", "replace", "join", "find",
                                            "rfind", "count", "isdigit", "isalpha", "isalnum", "isspace"};
// Python str methods kvscope does not run: calling one is refused (looking one up is not an error).
static const char* const k_other_str_methods[] = {"format", "format_map", "splitlines", "partition", "rpartition", "center",
                                                  "ljust", "rjust", "zfill", "expandtabs", "swapcase", "casefold",
                                                  "encode", "index", "rindex", "islower", "isupper", "istitle",
                                                  "isdecimal", "isnumeric", "isidentifier", "isprintable", "isascii",
                                                  "removeprefix", "removesuffix", "translate", "maketrans"};

static Value dict_method(Interpreter& in, const Value& self, const std::string& name, CallArgs& a) {
    const Dict& d = self.as_dict();
    if (name == "get") {
        ArgBinder b(name.c_str(), a, {"key", "default"});
        if (!b.present[0]) throw JinjaError("get expected at least 1 argument, got 0");
        const Value* v = b[0].is_string() ? d.find(b[0].as_string()) : nullptr;
        return v ? *v : (b.present[1] ? b[1] : Value::none());
    }
    ArgBinder b(name.c_str(), a, {});
    std::vector<Value> out;
    in.tick(d.items.size());
    for (const auto& [k, v] : d.items) {
        if (name == "items") out.push_back(Value::tuple({Value::str(k), v}));
        else if (name == "keys") out.push_back(Value::str(k));
        else out.push_back(v);
    }
    if (name == "copy") return self;
    return Value::list(std::move(out), name == "items" ? SeqKind::DictItems : name == "keys" ? SeqKind::DictKeys : SeqKind::DictValues);
}

Value method(Interpreter& in, const Value& self, const std::string& name) {
    (void)in;
    const auto refused = [&](const char* what) {
        const std::string full = std::string(self.type_name()) + "." + name;
        return Value::callable(name, [full, what](Interpreter&, CallArgs&) -> Value {
            throw JinjaError("calling " + full + "() is not supported (" + what + ")");
        });
    };
    if (self.is_string()) {
        for (const char* m : k_str_methods)
            if (name == m) {
                const std::string s = self.as_string();
                return Value::callable(name, [s, name](Interpreter& i, CallArgs& a) { return str_method(i, s, name, a); });
            }
        for (const char* m : k_other_str_methods)
            if (name == m) return refused("kvscope does not implement it");
        return Value::undefined(name);
    }
    if (self.is_dict()) {
        if (name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy")
            return Value::callable(name, [self, name](Interpreter& i, CallArgs& a) { return dict_method(i, self, name, a); });
        if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" || name == "popitem")
            return refused("Hugging Face's sandbox forbids changing a dict");
        return Value::undefined(name);
    }
    if (self.is_list()) {
        if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
            name == "sort" || name == "reverse" || name == "clear")
            return refused("Hugging Face's sandbox forbids changing a list");
        if (name == "index" || name == "count" || name == "copy" || name == "start" || name == "stop" ||
            name == "step" || name == "mapping")
            return refused("kvscope does not implement it");
        return Value::undefined(name);
    }
    if (self.is_number() && (name == "real" || name == "imag" || name == "numerator" || name == "denominator" ||
                             name == "conjugate" || name == "bit_length" || name == "is_integer" || name == "hex" ||
                             name == "as_integer_ratio" || name == "to_bytes" || name == "bit_count"))
        throw JinjaError("the number attribute '" + name + "' is not supported");
    return Value::undefined(name);
}

static Value make_range(Interpreter& in, CallArgs& a) {
    if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3)
        throw JinjaError("range() takes 1 to 3 integer arguments");
    for (const auto& v : a.positional)
        if (!v.is_int() && !v.is_bool()) throw JinjaError(std::string("'") + v.type_name() + "' object cannot be interpreted as an integer");
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
    } else {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() == 3) step = a.positional[2].as_int();
    }
    if (step == 0) throw JinjaError("range() arg 3 must not be zero");
    std::vector<Value> items;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (items.size() >= 100000) throw JinjaError("range too big, max 100000 items (Jinja2's sandbox limit)");
        items.push_back(Value::integer(k));
    }
    in.tick(items.size());
    return Value::list(std::move(items), SeqKind::Range);
}

static Value strftime_now(Interpreter& in, CallArgs& a) {
    ArgBinder b("strftime_now", a, {"format"});
    if (!b[0].is_string()) throw JinjaError("strftime_now() takes a format string");
    const RenderOptions& o = in.options();
    std::tm tm{};
    tm.tm_year = o.year - 1900;
    tm.tm_mon = o.month - 1;
    tm.tm_mday = o.day;
    tm.tm_isdst = -1;
    std::time_t t = timegm(&tm);  // fills in the weekday and the day of the year
    gmtime_r(&t, &tm);
    const std::string& fmt = b[0].as_string();
    if (fmt.find("%Z") != std::string::npos || fmt.find("%z") != std::string::npos || fmt.find("%c") != std::string::npos ||
        fmt.find("%x") != std::string::npos || fmt.find("%X") != std::string::npos)
        throw JinjaError("strftime_now() with a time zone or locale field is not supported");
    std::string out(fmt.size() * 8 + 64, '\0');
    const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    if (n == 0 && !fmt.empty()) throw JinjaError("strftime_now() format gives no text or too much");
    out.resize(n);
    return Value::str(std::move(out));
}

Value global_value(const std::string& name) {
    if (name == "raise_exception")
        return Value::callable(name, [](Interpreter&, CallArgs& a) -> Value {
            const std::string msg = a.positional.empty() ? "" : py_str(a.positional[0]);
            std::string line;
            for (char c : msg) line += c == '\n' ? ' ' : c;
            throw JinjaError("the template raised an error: " + line);
        });
    if (name == "strftime_now") return Value::callable(name, strftime_now);
    if (name == "range") return Value::callable(name, make_range);
    if (name == "namespace" || name == "dict")
        return Value::callable(name, [name](Interpreter&, CallArgs& a) {
            Dict d;
            if (a.positional.size() > 1) throw JinjaError(name + "() takes at most 1 positional argument");
            if (!a.positional.empty()) {
                if (!a.positional[0].is_dict()) throw JinjaError(name + "() of a " + a.positional[0].type_name() + " is not supported");
                d = a.positional[0].as_dict();
            }
            for (auto& [k, v] : a.keyword) d.set(k, v);
            return name == "dict" ? Value::dict(std::move(d)) : Value::namespace_(std::move(d));
        });
    for (const char* other : {"lipsum", "cycler", "joiner"})
        if (name == other)
            return Value::callable(name, [name](Interpreter&, CallArgs&) -> Value {
                throw JinjaError("the global function " + name + "() is not supported");
            });
    return Value::undefined(name);
}

}  // namespace kvscope::jinja
