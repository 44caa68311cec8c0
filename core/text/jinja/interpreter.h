#pragma once
// Runs a parsed template (ast.h) over variables, with Jinja2's semantics as transformers configures it.
// Used through template.h; builtins (filters, tests, methods, globals) call back into it.
//
//   Interpreter(origin, options)     one render; not reusable, not thread-safe
//   run(program, variables)          the rendered text; throws UsageError "ORIGIN:LINE:COLUMN: what"
//   call(fn, args)                   calls a macro, builtin or bound method
//   attribute(obj, name)             obj.name: Jinja2's getattr, falling back to obj[name]
//   item(obj, key)                   obj[key]: Jinja2's getitem, falling back to getattr for a string key
//   tick(n)                          counts n units of work; over the budget the render is refused
//   options()                        the RenderOptions (today's date for strftime_now)
//
// Scopes follow Jinja2: each for-loop iteration starts a fresh scope over the enclosing one (a `set` in
// a loop body is gone after the iteration — templates use namespace() to carry values out), `if` makes
// no scope, a macro call gets a scope over the one it was defined in (a macro called after that scope
// ended is refused). Limits: RenderOptions::max_work units of work (a statement, a loop iteration, an
// item a filter touches, 64 bytes of a string an operator or filter builds), macro calls nested 100
// deep, values nested 300 deep, every string and the output at most 16 MiB; a namespace may not hold
// itself or another namespace.
#include <memory>
#include <string>
#include <unordered_map>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace kvscope::jinja {

struct RenderOptions {
    int year = 2026, month = 1, day = 1;  // what strftime_now() formats (time of day 00:00:00)
    size_t max_work = 5'000'000;          // units of work (see tick) before the render is refused
};

struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
};

class Interpreter {
public:
    Interpreter(std::string origin, RenderOptions options);

    std::string run(const Program& program, const Dict& variables);

    Value call(const Value& fn, CallArgs& args);
    Value attribute(const Value& obj, const std::string& name);
    Value item(const Value& obj, const Value& key);
    void tick(size_t n = 1);
    const RenderOptions& options() const { return options_; }

private:
    enum class Flow { Normal, Break, Continue };

    std::string origin_;
    RenderOptions options_;
    std::shared_ptr<Scope> scope_;
    std::string* out_ = nullptr;
    SourcePos pos_;
    size_t work_ = 0;
    int call_depth_ = 0;

    [[noreturn]] void fail(const std::string& what) const;
    void emit(const std::string& s);
    void charge(const Value& v);  // ticks for the bytes or items a result holds

    Flow exec(const Body& body);
    Flow exec_stmt(const Stmt& s);
    Flow exec_for(const Stmt& s);
    void exec_set(const Stmt& s);
    void define_macro(const Stmt& s);
    std::string capture(const Body& body);

    Value eval(const Expr& e);
    Value eval_binary(const Expr& e);
    Value eval_compare(const Expr& e);
    Value eval_filter(const Expr& e, const Value* input);
    Value eval_call(const Expr& e);
    Value eval_slice(const Expr& e);
    CallArgs eval_args(const Expr& e, size_t first);

    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value v);
    void assign_targets(const std::vector<std::string>& targets, const Value& v);
    void error_in_undefined(const Value& v) const;
};

}  // namespace kvscope::jinja
