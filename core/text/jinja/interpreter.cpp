#include "text/jinja/interpreter.h"

#include <climits>
#include <cmath>

#include "base/errors.h"
#include "text/jinja/builtins.h"

namespace kvscope::jinja {
namespace {

constexpr int k_max_call_depth = 100;

bool add_overflows(int64_t a, int64_t b, int64_t& r) { return __builtin_add_overflow(a, b, &r); }
bool sub_overflows(int64_t a, int64_t b, int64_t& r) { return __builtin_sub_overflow(a, b, &r); }
bool mul_overflows(int64_t a, int64_t b, int64_t& r) { return __builtin_mul_overflow(a, b, &r); }

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
    throw JinjaError(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" +
                     b.type_name() + "'");
}

void check_undefined(const Value& v) {
    if (v.is_undefined()) throw JinjaError("'" + (v.undefined_name().empty() ? std::string("value") : v.undefined_name()) + "' is undefined");
}

Value arith(const std::string& op, const Value& a, const Value& b) {
    check_undefined(a);
    check_undefined(b);
    if (op == "+" && a.is_string() && b.is_string()) {
        // markupsafe: Markup + str (either side) escapes the plain str and stays Markup
        if (a.is_markup() || b.is_markup())
            return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                                 (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
        return Value::str(a.as_string() + b.as_string());
    }
    if (op == "+" && a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
        (a.seq_kind() == SeqKind::List || a.seq_kind() == SeqKind::Tuple)) {
        std::vector<Value> items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(items), a.seq_kind());
    }
    if (op == "*" && ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))) return arith(op, b, a);
    if (op == "*" && (a.is_int() || a.is_bool()) && (b.is_string() || b.is_list())) {
        if (b.is_list() && b.seq_kind() != SeqKind::List && b.seq_kind() != SeqKind::Tuple) unsupported("*", a, b);
        const int64_t n = std::max<int64_t>(0, a.as_int());
        const size_t unit = b.is_string() ? b.as_string().size() : b.items().size();
        if (unit && uint64_t(n) > (b.is_string() ? k_max_text_bytes : k_max_items) / unit)
            throw JinjaError("a repetition longer than the engine's limits");
        if (b.is_string()) {
            std::string s;
            for (int64_t k = 0; k < n; ++k) s += b.as_string();
            return Value::str(std::move(s));
        }
        std::vector<Value> items;
        for (int64_t k = 0; k < n; ++k) items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(items), b.seq_kind());
    }
    if (op == "%" && a.is_string()) throw JinjaError("string formatting with % is not supported");
    if (!a.is_number() || !b.is_number()) unsupported(op.c_str(), a, b);
    const bool real = a.is_float() || b.is_float();
    if (op == "/") {
        if (b.as_float() == 0) throw JinjaError("division by zero");
        return Value::real(a.as_float() / b.as_float());
    }
    if (op == "**") {
        if (!real && b.as_int() >= 0) {
            int64_t r = 1, base = a.as_int();
            for (int64_t e = b.as_int(); e > 0; --e)
                if (mul_overflows(r, base, r)) throw JinjaError("an integer result beyond 64 bits");
            return Value::integer(r);
        }
        if (a.as_float() == 0 && b.as_float() < 0) throw JinjaError("0.0 cannot be raised to a negative power");
        if (a.as_float() < 0 && std::floor(b.as_float()) != b.as_float())
            throw JinjaError("a negative number raised to a fractional power is not supported");
        return Value::real(std::pow(a.as_float(), b.as_float()));
    }
    if (real) {
        const double x = a.as_float(), y = b.as_float();
        if (op == "+") return Value::real(x + y);
        if (op == "-") return Value::real(x - y);
        if (op == "*") return Value::real(x * y);
        if (y == 0) throw JinjaError("float division by zero");
        if (op == "//") return Value::real(std::floor(x / y));
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::real(m);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+" && !add_overflows(x, y, r)) return Value::integer(r);
    if (op == "-" && !sub_overflows(x, y, r)) return Value::integer(r);
    if (op == "*" && !mul_overflows(x, y, r)) return Value::integer(r);
    if (op == "//" || op == "%") {
        if (y == 0) throw JinjaError("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) throw JinjaError("an integer result beyond 64 bits");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
        }
        return Value::integer(op == "//" ? q : m);
    }
    throw JinjaError("an integer result beyond 64 bits");
}

// "[key]", an undefined item's name in errors (appended piecewise: GCC 12 warns falsely on "[" + string&&).
std::string bracketed(const std::string& key) {
    std::string s = "[";
    s += key;
    s += ']';
    return s;
}

// Namespaces are the one mutable value: one stored in another could hold itself, a cycle of shared
// pointers that is never freed and prints forever.
bool holds_namespace(const Value& v, int depth) {
    if (depth > 300) throw JinjaError("a value nested deeper than 300");
    if (v.is_namespace()) return true;
    if (v.is_list())
        for (const auto& x : v.items())
            if (holds_namespace(x, depth + 1)) return true;
    if (v.is_dict())
        for (const auto& [k, x] : v.as_dict().items)
            if (holds_namespace(x, depth + 1)) return true;
    return false;
}

bool contains(const Value& container, const Value& x) {
    switch (container.kind()) {
        case Kind::Undefined: return false;
        case Kind::String:
            if (!x.is_string())
                throw JinjaError(std::string("'in <string>' requires string as left operand, not ") + x.type_name());
            return container.as_string().find(x.as_string()) != std::string::npos;
        case Kind::List:
            for (const auto& v : container.items())
                if (py_equal(v, x)) return true;
            return false;
        case Kind::Dict: return x.is_string() && container.as_dict().find(x.as_string()) != nullptr;
        case Kind::Iterator: {
            IteratorState& st = container.iterator_state();
            while (st.pos < st.items.size())
                if (py_equal(st.items[st.pos++], x)) return true;
            return false;
        }
        default:
            throw JinjaError(std::string("argument of type '") + container.type_name() + "' is not iterable");
    }
}

// Python's slice.indices() for a sequence of n items.
std::vector<size_t> slice_positions(int64_t n, const Value& start, const Value& stop, const Value& step) {
    const auto as_index = [](const Value& v) {
        if (!v.is_int() && !v.is_bool())
            throw JinjaError("slice indices must be integers or None");
        return v.as_int();
    };
    const int64_t st = step.is_none() || step.is_undefined() ? 1 : as_index(step);
    if (st == 0) throw JinjaError("slice step cannot be zero");
    const auto clamp = [&](const Value& v, int64_t dflt) {
        if (v.is_none() || v.is_undefined()) return dflt;
        int64_t k = as_index(v);
        if (k < 0) k += n;
        if (st > 0) return std::clamp<int64_t>(k, 0, n);
        return std::clamp<int64_t>(k, -1, n - 1);
    };
    const int64_t lo = clamp(start, st > 0 ? 0 : n - 1);
    const int64_t hi = clamp(stop, st > 0 ? n : -1);
    std::vector<size_t> out;
    for (int64_t k = lo; st > 0 ? k < hi : k > hi; k += st) out.push_back(size_t(k));
    return out;
}

}  // namespace

Interpreter::Interpreter(std::string origin, RenderOptions options)
    : origin_(std::move(origin)), options_(options), scope_(std::make_shared<Scope>()) {}

void Interpreter::fail(const std::string& what) const {
    throw UsageError(origin_ + ":" + std::to_string(pos_.line) + ":" + std::to_string(pos_.column) + ": " + what);
}

void Interpreter::tick(size_t n) {
    work_ += n;
    if (work_ > options_.max_work)
        throw JinjaError("the template does more than " + std::to_string(options_.max_work) + " units of work");
}

void Interpreter::charge(const Value& v) {
    if (v.is_string()) tick(v.as_string().size() / 64);
    else if (v.is_list()) tick(v.items().size());
}

void Interpreter::emit(const std::string& s) {
    if (out_->size() + s.size() > k_max_text_bytes) throw JinjaError("the rendered text would exceed 16 MiB");
    out_->append(s);
}

std::string Interpreter::run(const Program& program, const Dict& variables) {
    for (const auto& [k, v] : variables.items) scope_->vars[k] = v;
    std::string out;
    out_ = &out;
    try {
        exec(program.body);
    } catch (const JinjaError& e) {
        fail(e.what());
    }
    return out;
}

Value Interpreter::lookup(const std::string& name) const {
    for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
        auto it = s->vars.find(name);
        if (it != s->vars.end()) return it->second;
    }
    Value g = global_value(name);
    if (!g.is_undefined()) return g;
    return Value::undefined(name);
}

void Interpreter::assign(const std::string& name, Value v) { scope_->vars[name] = std::move(v); }

void Interpreter::assign_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
        assign(targets[0], v);
        return;
    }
    std::vector<Value> items = iterate(v);
    if (items.size() != targets.size())
        throw JinjaError("cannot unpack " + std::to_string(items.size()) + " values into " +
                         std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k]);
}

Interpreter::Flow Interpreter::exec(const Body& body) {
    for (const auto& s : body) {
        const Flow f = exec_stmt(*s);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s) {
    tick();
    pos_ = s.pos;
    switch (s.kind) {
        case Stmt::K::Text: emit(s.text); return Flow::Normal;
        case Stmt::K::Print: {
            Value v = eval(*s.expr);
            const std::string text = py_str(v);
            tick(text.size() / 64);
            emit(text);
            return Flow::Normal;
        }
        case Stmt::K::If:
            for (const auto& [cond, body] : s.branches) {
                if (eval(*cond).truthy()) return exec(body);
            }
            return exec(s.else_body);
        case Stmt::K::For: return exec_for(s);
        case Stmt::K::Set: exec_set(s); return Flow::Normal;
        case Stmt::K::SetBlock: {
            Value v = Value::str(capture(s.body));
            if (s.filter) v = eval_filter(*s.filter, &v);
            assign(s.targets[0], v);
            return Flow::Normal;
        }
        case Stmt::K::Macro: define_macro(s); return Flow::Normal;
        case Stmt::K::FilterBlock: {
            Value v = Value::str(capture(s.body));
            if (s.filter) v = eval_filter(*s.filter, &v);
            emit(py_str(v));
            return Flow::Normal;
        }
        case Stmt::K::Break: return Flow::Break;
        case Stmt::K::Continue: return Flow::Continue;
    }
    return Flow::Normal;
}

std::string Interpreter::capture(const Body& body) {
    std::string buffer;
    std::string* saved_out = out_;
    auto saved_scope = scope_;
    out_ = &buffer;
    scope_ = std::make_shared<Scope>(Scope{{}, saved_scope});
    try {
        exec(body);
    } catch (...) {
        out_ = saved_out;
        scope_ = saved_scope;
        throw;
    }
    out_ = saved_out;
    scope_ = saved_scope;
    return buffer;
}

void Interpreter::exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    if (s.attr_of.empty()) {
        assign_targets(s.targets, v);
        return;
    }
    pos_ = s.pos;
    Value ns = lookup(s.attr_of);
    if (!ns.is_namespace()) throw JinjaError("cannot assign attribute on non-namespace object");
    if (holds_namespace(v, 0)) throw JinjaError("a namespace inside a namespace is not supported");
    ns.namespace_vars().set(s.targets[0], std::move(v));
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
    const Value seq = eval(*s.expr);
    std::vector<Value> items = iterate(seq);
    tick(items.size());
    auto outer = scope_;
    if (s.cond) {  // the `if` filter runs first: loop.length and loop.index count only what it keeps
        std::vector<Value> kept;
        for (const auto& item : items) {
            scope_ = std::make_shared<Scope>(Scope{{}, outer});
            assign_targets(s.targets, item);
            if (eval(*s.cond).truthy()) kept.push_back(item);
        }
        scope_ = outer;
        items = std::move(kept);
    }
    const int64_t n = int64_t(items.size());
    for (int64_t k = 0; k < n; ++k) {
        tick();
        scope_ = std::make_shared<Scope>(Scope{{}, outer});
        Dict loop;
        loop.items = {{"index", Value::integer(k + 1)},
                      {"index0", Value::integer(k)},
                      {"revindex", Value::integer(n - k)},
                      {"revindex0", Value::integer(n - k - 1)},
                      {"first", Value::of(k == 0)},
                      {"last", Value::of(k == n - 1)},
                      {"length", Value::integer(n)},
                      {"depth", Value::integer(1)},
                      {"depth0", Value::integer(0)},
                      {"previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("previtem")},
                      {"nextitem", k + 1 < n ? items[size_t(k + 1)] : Value::undefined("nextitem")},
                      {"cycle", Value::callable("cycle", [k](Interpreter&, CallArgs& a) {
                           if (a.positional.empty()) throw JinjaError("no items for cycling given");
                           return a.positional[size_t(k) % a.positional.size()];
                       })}};
        assign("loop", Value::dict(std::move(loop)));
        assign_targets(s.targets, items[size_t(k)]);
        Flow f;
        try {
            f = exec(s.body);
        } catch (...) {
            scope_ = outer;
            throw;
        }
        scope_ = outer;
        if (f == Flow::Break) break;
    }
    scope_ = outer;
    if (n == 0) return exec(s.else_body);
    return Flow::Normal;
}

void Interpreter::define_macro(const Stmt& s) {
    const Stmt* macro = &s;
    std::weak_ptr<Scope> weak_closure = scope_;  // the macro lives in this scope: a strong pointer would be a cycle
    const std::string name = s.targets[0];
    assign(name, Value::callable(name, [macro, weak_closure, name](Interpreter& in, CallArgs& args) {
        std::shared_ptr<Scope> closure = weak_closure.lock();
        if (!closure) throw JinjaError("macro '" + name + "' called after the block that defined it ended");
        if (args.positional.size() > macro->params.size())
            throw JinjaError("macro '" + name + "' takes not more than " + std::to_string(macro->params.size()) +
                             " argument(s)");
        if (++in.call_depth_ > k_max_call_depth) throw JinjaError("macro calls nested more than 100 deep");
        auto saved_scope = in.scope_;
        std::string* saved_out = in.out_;
        const SourcePos saved_pos = in.pos_;
        in.scope_ = std::make_shared<Scope>(Scope{{}, closure});
        std::string buffer;
        in.out_ = &buffer;
        try {
            std::vector<bool> set(macro->params.size(), false);
            for (size_t k = 0; k < args.positional.size(); ++k) {
                in.assign(macro->params[k].first, args.positional[k]);
                set[k] = true;
            }
            for (auto& [key, v] : args.keyword) {
                size_t k = 0;
                while (k < macro->params.size() && macro->params[k].first != key) ++k;
                if (k == macro->params.size()) throw JinjaError("macro '" + name + "' takes no keyword argument '" + key + "'");
                if (set[k]) throw JinjaError("macro '" + name + "' got multiple values for argument '" + key + "'");
                in.assign(key, v);
                set[k] = true;
            }
            for (size_t k = 0; k < macro->params.size(); ++k)
                if (!set[k])
                    in.assign(macro->params[k].first, macro->params[k].second ? in.eval(*macro->params[k].second)
                                                                              : Value::undefined(macro->params[k].first));
            in.exec(macro->body);
        } catch (...) {
            in.scope_ = saved_scope;
            in.out_ = saved_out;
            --in.call_depth_;
            throw;
        }
        in.scope_ = saved_scope;
        in.out_ = saved_out;
        in.pos_ = saved_pos;
        --in.call_depth_;
        return Value::str(std::move(buffer));
    }));
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
    if (fn.is_undefined()) check_undefined(fn);
    if (!fn.is_callable()) throw JinjaError(std::string("'") + fn.type_name() + "' object is not callable");
    return fn.as_callable().call(*this, args);
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k]));
    for (const auto& [key, x] : e.kwargs) a.keyword.emplace_back(key, eval(*x));
    return a;
}

Value Interpreter::attribute(const Value& obj, const std::string& name) {
    check_undefined(obj);
    switch (obj.kind()) {
        case Kind::Dict: {
            Value m = method(*this, obj, name);
            if (!m.is_undefined()) return m;
            const Value* v = obj.as_dict().find(name);
            return v ? *v : Value::undefined(name);
        }
        case Kind::Namespace: {
            const Value* v = obj.namespace_vars().find(name);
            return v ? *v : Value::undefined(name);
        }
        default: return method(*this, obj, name);
    }
}

Value Interpreter::item(const Value& obj, const Value& key) {
    check_undefined(obj);
    if (obj.is_dict() && key.is_string()) {
        const Value* v = obj.as_dict().find(key.as_string());
        if (v) return *v;
    } else if ((obj.is_list() && obj.seq_kind() != SeqKind::DictItems && obj.seq_kind() != SeqKind::DictKeys &&
                obj.seq_kind() != SeqKind::DictValues) || obj.is_string()) {
        if (key.is_int() || key.is_bool()) {
            const int64_t n = obj.is_list() ? int64_t(obj.items().size()) : int64_t(py_len(obj));
            int64_t k = key.as_int();
            if (k < 0) k += n;
            if (k < 0 || k >= n) return Value::undefined(bracketed(std::to_string(key.as_int())));
            if (obj.is_list()) return obj.items()[size_t(k)];
            return Value::str(std::string(code_points(obj.as_string())[size_t(k)]));
        }
    }
    if (key.is_string()) return attribute(obj, key.as_string());
    return Value::undefined(bracketed(py_str(key)));
}

Value Interpreter::eval(const Expr& e) {
    pos_ = e.pos;
    switch (e.kind) {
        case Expr::K::Literal: return e.value;
        case Expr::K::Name: return lookup(e.name);
        case Expr::K::Attr: {
            Value obj = eval(*e.args[0]);
            pos_ = e.pos;
            return attribute(obj, e.name);
        }
        case Expr::K::Item: {
            Value obj = eval(*e.args[0]);
            Value key = eval(*e.args[1]);
            pos_ = e.pos;
            return item(obj, key);
        }
        case Expr::K::Slice: return eval_slice(e);
        case Expr::K::Call: return eval_call(e);
        case Expr::K::Filter: return eval_filter(e, nullptr);
        case Expr::K::Test: {
            Value v = eval(*e.args[0]);
            CallArgs a = eval_args(e, 1);
            pos_ = e.pos;
            return Value::of(apply_test(*this, e.name, v, a) != e.negated);
        }
        case Expr::K::Not: return Value::of(!eval(*e.args[0]).truthy());
        case Expr::K::Neg: case Expr::K::Pos: {
            Value v = eval(*e.args[0]);
            pos_ = e.pos;
            check_undefined(v);
            if (!v.is_number()) throw JinjaError(std::string("bad operand type for unary ") +
                                                 (e.kind == Expr::K::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
            if (e.kind == Expr::K::Pos) return v.is_bool() ? Value::integer(v.as_int()) : v;
            if (v.is_float()) return Value::real(-v.as_float());
            if (v.as_int() == INT64_MIN) throw JinjaError("an integer result beyond 64 bits");
            return Value::integer(-v.as_int());
        }
        case Expr::K::Binary: return eval_binary(e);
        case Expr::K::Compare: return eval_compare(e);
        case Expr::K::Cond:
            if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
            return e.args[2] ? eval(*e.args[2]) : Value::undefined();
        case Expr::K::List: case Expr::K::Tuple: {
            std::vector<Value> items;
            for (const auto& x : e.args) items.push_back(eval(*x));
            return Value::list(std::move(items), e.kind == Expr::K::List ? SeqKind::List : SeqKind::Tuple);
        }
        case Expr::K::Dict: {
            Dict d;
            for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
                Value key = eval(*e.args[k]);
                if (!key.is_string()) {
                    pos_ = e.args[k]->pos;
                    throw JinjaError("dict keys other than strings are not supported");
                }
                d.set(key.as_string(), eval(*e.args[k + 1]));
            }
            return Value::dict(std::move(d));
        }
    }
    return Value::undefined();
}

Value Interpreter::eval_binary(const Expr& e) {
    Value a = eval(*e.args[0]);
    if (e.name == "and") return a.truthy() ? eval(*e.args[1]) : a;
    if (e.name == "or") return a.truthy() ? a : eval(*e.args[1]);
    Value b = eval(*e.args[1]);
    pos_ = e.pos;
    Value r = e.name == "~" ? Value::str(py_str(a) + py_str(b)) : arith(e.name, a, b);
    charge(r);
    return r;
}

Value Interpreter::eval_compare(const Expr& e) {
    Value left = eval(*e.args[0]);
    for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1]);
        pos_ = e.pos;
        const std::string& op = e.ops[k];
        bool ok;
        if (op == "==") ok = py_equal(left, right);
        else if (op == "!=") ok = !py_equal(left, right);
        else if (op == "in") ok = contains(right, left);
        else if (op == "notin") ok = !contains(right, left);
        else {
            check_undefined(left);
            check_undefined(right);
            const int c = py_compare(left, right);
            ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        }
        if (!ok) return Value::of(false);
        left = std::move(right);
    }
    return Value::of(true);
}

Value Interpreter::eval_filter(const Expr& e, const Value* input) {
    // in a {% filter %} block or a block set, the innermost filter's operand is the rendered body
    Value v = !e.args[0] ? *input : e.args[0]->kind == Expr::K::Filter ? eval_filter(*e.args[0], input) : eval(*e.args[0]);
    CallArgs a = eval_args(e, 1);
    pos_ = e.pos;
    Value r = apply_filter(*this, e.name, v, a);
    charge(r);
    return r;
}

Value Interpreter::eval_call(const Expr& e) {
    Value fn = eval(*e.args[0]);
    CallArgs a = eval_args(e, 1);
    pos_ = e.pos;
    Value r = call(fn, a);
    charge(r);
    return r;
}

Value Interpreter::eval_slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    Value parts[3];
    for (int k = 0; k < 3; ++k) parts[k] = e.args[size_t(k) + 1] ? eval(*e.args[size_t(k) + 1]) : Value::none();
    pos_ = e.pos;
    check_undefined(obj);
    if (obj.is_string()) {
        const auto cps = code_points(obj.as_string());
        std::string out;
        for (size_t k : slice_positions(int64_t(cps.size()), parts[0], parts[1], parts[2])) out.append(cps[k]);
        return Value::str(std::move(out));
    }
    if (obj.is_list() && (obj.seq_kind() == SeqKind::List || obj.seq_kind() == SeqKind::Tuple ||
                          obj.seq_kind() == SeqKind::Range)) {
        std::vector<Value> out;
        for (size_t k : slice_positions(int64_t(obj.items().size()), parts[0], parts[1], parts[2]))
            out.push_back(obj.items()[k]);
        if (obj.seq_kind() == SeqKind::Range) throw JinjaError("slicing a range() is not supported");
        return Value::list(std::move(out), obj.seq_kind());
    }
    return Value::undefined("[:]");
}

}  // namespace kvscope::jinja
