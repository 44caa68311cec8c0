#include "text/jinja/parser.h"

#include <initializer_list>

#include "base/errors.h"
#include "text/jinja/builtins.h"

namespace kvscope::jinja {
namespace {

constexpr int k_max_depth = 200;
// Operator chains (a + b + c ..., a.b.c ..., x|f|g ...) build trees as deep as they are long; the evaluator
// and the tree's destructor recurse over them, so one tag's expression is bounded in nodes.
constexpr int k_max_nodes_per_tag = 2000;

class Parser {
public:
    Parser(const std::vector<Token>& tokens, const std::string& origin) : t_(tokens), origin_(origin) {}

    Program program() {
        Program p;
        p.body = body({});
        return p;
    }

private:
    const std::vector<Token>& t_;
    const std::string& origin_;
    size_t i_ = 0;
    int depth_ = 0;
    int loops_ = 0;
    int nodes_ = 0;  // nodes made since the current tag opened

    struct Depth {
        Parser& p;
        explicit Depth(Parser& parser, SourcePos pos) : p(parser) {
            if (++p.depth_ > k_max_depth) p.fail(pos, "nesting deeper than 200 is not supported");
        }
        ~Depth() { --p.depth_; }
    };

    [[noreturn]] void fail(SourcePos p, const std::string& what) const {
        throw UsageError(origin_ + ":" + std::to_string(p.line) + ":" + std::to_string(p.column) + ": " + what);
    }
    const Token& cur() const { return t_[i_]; }
    const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
    bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
    bool accept_op(const char* op) {
        if (!is_op(op)) return false;
        ++i_;
        return true;
    }
    bool accept_name(const char* name) {
        if (!is_name(name)) return false;
        ++i_;
        return true;
    }
    static std::string describe(const Token& t) {
        switch (t.type) {
            case Tok::Text: return "template text";
            case Tok::VarBegin: return "'{{'";
            case Tok::VarEnd: return "'}}'";
            case Tok::BlockBegin: return "'{%'";
            case Tok::BlockEnd: return "'%}'";
            case Tok::Eof: return "the end of the template";
            case Tok::String: return "a string";
            default: return "'" + t.text + "'";
        }
    }
    void expect_op(const char* op) {
        if (!accept_op(op)) fail(cur().pos, std::string("expected '") + op + "', found " + describe(cur()));
    }
    void expect(Tok type, const char* what) {
        if (cur().type != type) fail(cur().pos, std::string("expected ") + what + ", found " + describe(cur()));
        ++i_;
    }
    std::string expect_name(const char* what) {
        if (cur().type != Tok::Name) fail(cur().pos, std::string("expected ") + what + ", found " + describe(cur()));
        return t_[i_++].text;
    }

    ExprPtr node(Expr::K kind, SourcePos pos) {
        if (++nodes_ > k_max_nodes_per_tag) fail(pos, "an expression of more than 2000 parts in one tag is not supported");
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->pos = pos;
        return e;
    }

    // ---- statements ----

    // Statements until a {% NAME %} with NAME in `stop`; leaves i_ on that NAME token.
    Body body(std::initializer_list<const char*> stop) {
        Depth guard(*this, cur().pos);
        Body out;
        while (true) {
            const Token& t = cur();
            nodes_ = 0;
            if (t.type == Tok::Eof) {
                if (stop.size() == 0) return out;
                fail(t.pos, std::string("the template ends before {% ") + *(stop.end() - 1) + " %}");  // the closing tag
            }
            if (t.type == Tok::Text) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::K::Text;
                s->pos = t.pos;
                s->text = t.text;
                out.push_back(std::move(s));
                ++i_;
            } else if (t.type == Tok::VarBegin) {
                ++i_;
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::K::Print;
                s->pos = t.pos;
                s->expr = tuple_expr(true);
                expect(Tok::VarEnd, "'}}'");
                out.push_back(std::move(s));
            } else if (t.type == Tok::BlockBegin) {
                const Token& name = peek();
                if (name.type == Tok::Name)
                    for (const char* s : stop)
                        if (name.text == s) {
                            ++i_;
                            return out;
                        }
                ++i_;
                out.push_back(statement());
            } else {
                fail(t.pos, "unexpected " + describe(t));
            }
        }
    }

    std::unique_ptr<Stmt> statement() {
        const Token& t = cur();
        if (t.type != Tok::Name) fail(t.pos, "expected a tag name after '{%', found " + describe(t));
        const std::string tag = t.text;
        auto s = std::make_unique<Stmt>();
        s->pos = t.pos;
        ++i_;
        if (tag == "if") return if_stmt(std::move(s));
        if (tag == "for") return for_stmt(std::move(s));
        if (tag == "set") return set_stmt(std::move(s));
        if (tag == "macro") return macro_stmt(std::move(s));
        if (tag == "filter") {
            s->kind = Stmt::K::FilterBlock;
            s->filter = block_filter();
            expect(Tok::BlockEnd, "'%}'");
            s->body = body({"endfilter"});
            end_tag("endfilter");
            return s;
        }
        if (tag == "generation") {  // transformers' AssistantTracker: renders its body
            s->kind = Stmt::K::FilterBlock;
            expect(Tok::BlockEnd, "'%}'");
            s->body = body({"endgeneration"});
            end_tag("endgeneration");
            return s;
        }
        if (tag == "break" || tag == "continue") {
            if (loops_ == 0) fail(s->pos, "{% " + tag + " %} outside a for loop");
            s->kind = tag == "break" ? Stmt::K::Break : Stmt::K::Continue;
            expect(Tok::BlockEnd, "'%}'");
            return s;
        }
        for (const char* known : {"raw", "include", "import", "from", "extends", "block", "call", "with",
                                  "autoescape", "do", "trans", "pluralize"})
            if (tag == known) fail(s->pos, "the tag {% " + tag + " %} is not supported");
        fail(s->pos, "unknown tag {% " + tag + " %}");
    }

    void end_tag(const char* name) {
        ++i_;  // the end name, already matched by body()
        (void)name;
        expect(Tok::BlockEnd, "'%}'");
    }

    std::unique_ptr<Stmt> if_stmt(std::unique_ptr<Stmt> s) {
        s->kind = Stmt::K::If;
        while (true) {
            ExprPtr cond = tuple_expr(true);
            expect(Tok::BlockEnd, "'%}'");
            Body b = body({"elif", "else", "endif"});
            s->branches.emplace_back(std::move(cond), std::move(b));
            const std::string which = cur().text;
            ++i_;
            if (which == "elif") continue;
            if (which == "else") {
                expect(Tok::BlockEnd, "'%}'");
                s->else_body = body({"endif"});
                ++i_;
            }
            expect(Tok::BlockEnd, "'%}'");
            return s;
        }
    }

    std::vector<std::string> targets() {
        std::vector<std::string> out;
        const bool paren = accept_op("(");
        do {
            out.push_back(expect_name("a variable name"));
        } while (accept_op(","));
        if (paren) expect_op(")");
        return out;
    }

    std::unique_ptr<Stmt> for_stmt(std::unique_ptr<Stmt> s) {
        s->kind = Stmt::K::For;
        s->targets = targets();
        if (!accept_name("in")) fail(cur().pos, "expected 'in' in a for tag, found " + describe(cur()));
        s->expr = tuple_expr(false);
        if (accept_name("if")) s->cond = expression(true);
        if (is_name("recursive")) fail(cur().pos, "recursive for loops are not supported");
        expect(Tok::BlockEnd, "'%}'");
        ++loops_;
        s->body = body({"else", "endfor"});
        --loops_;
        if (cur().text == "else") {
            ++i_;
            expect(Tok::BlockEnd, "'%}'");
            s->else_body = body({"endfor"});
        }
        end_tag("endfor");
        return s;
    }

    std::unique_ptr<Stmt> set_stmt(std::unique_ptr<Stmt> s) {
        s->kind = Stmt::K::Set;
        const std::string first = expect_name("a variable name");
        if (accept_op(".")) {
            s->attr_of = first;
            s->targets.push_back(expect_name("an attribute name"));
        } else {
            s->targets.push_back(first);
            while (accept_op(",")) s->targets.push_back(expect_name("a variable name"));
        }
        if (accept_op("=")) {
            s->expr = tuple_expr(true);
            expect(Tok::BlockEnd, "'%}'");
            return s;
        }
        if (!s->attr_of.empty() || s->targets.size() != 1) fail(cur().pos, "expected '=' in a set tag");
        s->kind = Stmt::K::SetBlock;
        if (is_op("|")) s->filter = filters(nullptr);
        expect(Tok::BlockEnd, "'%}'");
        s->body = body({"endset"});
        end_tag("endset");
        return s;
    }

    std::unique_ptr<Stmt> macro_stmt(std::unique_ptr<Stmt> s) {
        s->kind = Stmt::K::Macro;
        s->targets.push_back(expect_name("a macro name"));
        expect_op("(");
        bool defaults = false;
        while (!is_op(")")) {
            std::string param = expect_name("a parameter name");
            ExprPtr def;
            if (accept_op("=")) {
                def = expression(true);
                defaults = true;
            } else if (defaults) {
                fail(cur().pos, "a parameter without a default follows one with a default");
            }
            s->params.emplace_back(std::move(param), std::move(def));
            if (!accept_op(",")) break;
        }
        expect_op(")");
        expect(Tok::BlockEnd, "'%}'");
        const int saved = loops_;
        loops_ = 0;
        s->body = body({"endmacro"});
        loops_ = saved;
        end_tag("endmacro");
        return s;
    }

    // ---- expressions ----

    ExprPtr tuple_expr(bool with_cond) {
        const SourcePos pos = cur().pos;
        ExprPtr first = expression(with_cond);
        if (!is_op(",")) return first;
        auto t = node(Expr::K::Tuple, pos);
        t->args.push_back(std::move(first));
        while (accept_op(",")) {
            if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_name("if")) break;
            t->args.push_back(expression(with_cond));
        }
        return t;
    }

    ExprPtr expression(bool with_cond) {
        Depth guard(*this, cur().pos);
        ExprPtr e = or_expr();
        if (!with_cond) return e;
        while (is_name("if")) {
            const SourcePos pos = cur().pos;
            ++i_;
            auto c = node(Expr::K::Cond, pos);
            ExprPtr test = or_expr();
            ExprPtr other = accept_name("else") ? expression(true) : nullptr;
            c->args.push_back(std::move(e));
            c->args.push_back(std::move(test));
            c->args.push_back(std::move(other));
            e = std::move(c);
        }
        return e;
    }

    ExprPtr binary(ExprPtr left, const std::string& op, ExprPtr right, SourcePos pos) {
        auto b = node(Expr::K::Binary, pos);
        b->name = op;
        b->args.push_back(std::move(left));
        b->args.push_back(std::move(right));
        return b;
    }

    ExprPtr or_expr() {
        ExprPtr e = and_expr();
        while (is_name("or")) {
            const SourcePos pos = t_[i_++].pos;
            e = binary(std::move(e), "or", and_expr(), pos);
        }
        return e;
    }
    ExprPtr and_expr() {
        ExprPtr e = not_expr();
        while (is_name("and")) {
            const SourcePos pos = t_[i_++].pos;
            e = binary(std::move(e), "and", not_expr(), pos);
        }
        return e;
    }
    ExprPtr not_expr() {
        if (is_name("not")) {
            Depth guard(*this, cur().pos);
            auto n = node(Expr::K::Not, t_[i_++].pos);
            n->args.push_back(not_expr());
            return n;
        }
        return compare();
    }

    ExprPtr compare() {
        const SourcePos pos = cur().pos;
        ExprPtr first = math1();
        std::unique_ptr<Expr> c;
        while (true) {
            std::string op;
            if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
                op = t_[i_++].text;
            } else if (is_name("in")) {
                ++i_;
                op = "in";
            } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
                i_ += 2;
                op = "notin";
            } else {
                break;
            }
            if (!c) {
                c = node(Expr::K::Compare, pos);
                c->args.push_back(std::move(first));
            }
            c->ops.push_back(op);
            c->args.push_back(math1());
        }
        return c ? std::move(c) : std::move(first);
    }

    ExprPtr math1() {
        ExprPtr e = concat();
        while (is_op("+") || is_op("-")) {
            const Token& t = t_[i_++];
            e = binary(std::move(e), t.text, concat(), t.pos);
        }
        return e;
    }
    ExprPtr concat() {
        ExprPtr e = math2();
        while (is_op("~")) {
            const SourcePos pos = t_[i_++].pos;
            e = binary(std::move(e), "~", math2(), pos);
        }
        return e;
    }
    ExprPtr math2() {
        ExprPtr e = power();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token& t = t_[i_++];
            e = binary(std::move(e), t.text, power(), t.pos);
        }
        return e;
    }
    ExprPtr power() {
        ExprPtr e = unary(true);
        while (is_op("**")) {
            const SourcePos pos = t_[i_++].pos;
            e = binary(std::move(e), "**", unary(true), pos);
        }
        return e;
    }

    ExprPtr unary(bool with_filter) {
        Depth guard(*this, cur().pos);
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            const Token& t = t_[i_++];
            e = node(t.text == "-" ? Expr::K::Neg : Expr::K::Pos, t.pos);
            e->args.push_back(unary(false));
        } else {
            e = primary();
        }
        e = postfix(std::move(e));
        if (with_filter) e = filter_chain(std::move(e));
        return e;
    }

    ExprPtr primary() {
        const Token& t = cur();
        switch (t.type) {
            case Tok::Name: {
                ++i_;
                if (t.text == "true" || t.text == "True") return literal(Value::of(true), t.pos);
                if (t.text == "false" || t.text == "False") return literal(Value::of(false), t.pos);
                if (t.text == "none" || t.text == "None") return literal(Value::none(), t.pos);
                auto n = node(Expr::K::Name, t.pos);
                n->name = t.text;
                return n;
            }
            case Tok::String: {
                std::string s;
                while (cur().type == Tok::String) s += t_[i_++].text;  // adjacent literals join
                return literal(Value::str(std::move(s)), t.pos);
            }
            case Tok::Int: ++i_; return literal(Value::integer(t.integer), t.pos);
            case Tok::Float: ++i_; return literal(Value::real(t.real), t.pos);
            case Tok::Op:
                if (t.text == "(") return paren();
                if (t.text == "[") return list_literal();
                if (t.text == "{") return dict_literal();
                break;
            default: break;
        }
        fail(t.pos, "unexpected " + describe(t) + " in an expression");
    }

    ExprPtr literal(Value v, SourcePos pos) {
        auto e = node(Expr::K::Literal, pos);
        e->value = std::move(v);
        return e;
    }

    ExprPtr paren() {
        const SourcePos pos = t_[i_++].pos;
        if (accept_op(")")) return node(Expr::K::Tuple, pos);
        ExprPtr first = expression(true);
        if (accept_op(")")) return first;
        auto t = node(Expr::K::Tuple, pos);
        t->args.push_back(std::move(first));
        while (accept_op(",")) {
            if (is_op(")")) break;
            t->args.push_back(expression(true));
        }
        expect_op(")");
        return t;
    }

    ExprPtr list_literal() {
        auto l = node(Expr::K::List, t_[i_++].pos);
        while (!is_op("]")) {
            l->args.push_back(expression(true));
            if (!accept_op(",")) break;
        }
        expect_op("]");
        return l;
    }

    ExprPtr dict_literal() {
        auto d = node(Expr::K::Dict, t_[i_++].pos);
        while (!is_op("}")) {
            d->args.push_back(expression(true));
            expect_op(":");
            d->args.push_back(expression(true));
            if (!accept_op(",")) break;
        }
        expect_op("}");
        return d;
    }

    ExprPtr postfix(ExprPtr e) {
        while (true) {
            const SourcePos pos = cur().pos;
            if (accept_op(".")) {
                if (cur().type == Tok::Int) {
                    auto item = node(Expr::K::Item, pos);
                    item->args.push_back(std::move(e));
                    item->args.push_back(literal(Value::integer(cur().integer), cur().pos));
                    ++i_;
                    e = std::move(item);
                    continue;
                }
                auto a = node(Expr::K::Attr, pos);
                a->name = expect_name("an attribute name");
                a->args.push_back(std::move(e));
                e = std::move(a);
            } else if (is_op("[")) {
                e = subscript(std::move(e));
            } else if (is_op("(")) {
                e = call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr subscript(ExprPtr e) {
        const SourcePos pos = t_[i_++].pos;
        ExprPtr parts[3];
        int colons = 0;
        while (true) {
            if (is_op(":")) {
                if (++colons > 2) fail(cur().pos, "a slice with more than two ':'");
                ++i_;
                continue;
            }
            if (is_op("]")) break;
            if (parts[colons]) fail(cur().pos, "expected ']' or ':' in a subscript");
            parts[colons] = expression(true);
            if (is_op(",")) fail(cur().pos, "tuple subscripts are not supported");
        }
        expect_op("]");
        if (colons == 0) {
            if (!parts[0]) fail(pos, "an empty subscript");
            auto item = node(Expr::K::Item, pos);
            item->args.push_back(std::move(e));
            item->args.push_back(std::move(parts[0]));
            return item;
        }
        auto s = node(Expr::K::Slice, pos);
        s->args.push_back(std::move(e));
        for (auto& p : parts) s->args.push_back(std::move(p));
        return s;
    }

    void call_args(Expr& target) {
        expect_op("(");
        while (!is_op(")")) {
            if (is_op("*") || is_op("**")) fail(cur().pos, "*args and **kwargs in calls are not supported");
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                std::string key = t_[i_].text;
                i_ += 2;
                target.kwargs.emplace_back(std::move(key), expression(true));
            } else {
                if (!target.kwargs.empty()) fail(cur().pos, "a positional argument after a keyword argument");
                target.args.push_back(expression(true));
            }
            if (!accept_op(",")) break;
        }
        expect_op(")");
    }

    ExprPtr call(ExprPtr fn) {
        auto c = node(Expr::K::Call, fn->pos);
        c->args.push_back(std::move(fn));
        call_args(*c);
        return c;
    }

    // `| name(args)` filters and `is [not] name args` tests after an operand (`x` may be nullptr: a
    // {% filter %} block's or a block set's filter applies to the rendered body).
    ExprPtr filters(ExprPtr x) {
        if (!is_op("|")) fail(cur().pos, "expected '|' and a filter name, found " + describe(cur()));
        return filter_chain(std::move(x));
    }

    // {% filter name(args) | more %}: the first filter has no '|'.
    ExprPtr block_filter() {
        const SourcePos pos = cur().pos;
        auto f = node(Expr::K::Filter, pos);
        f->name = expect_name("a filter name");
        if (!is_known_filter(f->name)) fail(pos, "the filter '" + f->name + "' is not supported");
        f->args.push_back(nullptr);
        if (is_op("(")) call_args(*f);
        return filter_chain(std::move(f));
    }

    ExprPtr filter_chain(ExprPtr e) {
        while (true) {
            if (is_op("|")) {
                ++i_;
                const SourcePos pos = cur().pos;
                auto f = node(Expr::K::Filter, pos);
                f->name = expect_name("a filter name");
                if (!is_known_filter(f->name)) fail(pos, "the filter '" + f->name + "' is not supported");
                f->args.push_back(std::move(e));
                if (is_op("(")) call_args(*f);
                e = std::move(f);
            } else if (is_name("is")) {
                ++i_;
                auto t = node(Expr::K::Test, cur().pos);
                t->negated = accept_name("not");
                const SourcePos pos = cur().pos;
                t->name = expect_name("a test name");
                if (!is_known_test(t->name)) fail(pos, "the test '" + t->name + "' is not supported");
                t->args.push_back(std::move(e));
                if (is_op("(")) {
                    call_args(*t);
                } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                            cur().type == Tok::Float || is_op("[") || is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and")) {
                    if (is_name("is")) fail(cur().pos, "'is' after a test");
                    t->args.push_back(postfix(primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = call(std::move(e));
            } else {
                return e;
            }
        }
    }
};

}  // namespace

Program parse(const std::vector<Token>& tokens, const std::string& origin) {
    return Parser(tokens, origin).program();
}

}  // namespace kvscope::jinja
