#pragma once
// The syntax tree the parser builds and the interpreter walks: one Expr node type and one Stmt node type,
// each a kind plus the fields that kind uses (written next to each kind). Every node keeps its line:column.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace kvscope::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Expr {
    enum class K {
        Literal,   // value
        Name,      // name
        Attr,      // a.name            args[0] = a
        Item,      // a[b]              args[0] = a, args[1] = b
        Slice,     // a[b:c:d]          args[0] = a; args[1..3] = start, stop, step (nullptr when left out)
        Call,      // f(args, kw)       args[0] = f, then the positional arguments; kwargs
        Filter,    // x | name(args)    args[0] = x (nullptr in a {% filter %} block), then arguments; kwargs
        Test,      // x is [not] name   args[0] = x, then arguments; negated
        Not,       // not x             args[0]
        Neg,       // -x                args[0]
        Pos,       // +x                args[0]
        Binary,    // op in name: and or + - * / // % ** ~ in notin; args[0], args[1]
        Compare,   // a op b op c ...   args = operands, ops = operators (== != < > <= >=)
        Cond,      // a if b else c     args[0] = a, args[1] = b, args[2] = c (nullptr without else)
        List,      // [a, b]            args
        Tuple,     // (a, b)            args
        Dict,      // {k: v}            args = k0, v0, k1, v1 ...
    };
    K kind;
    SourcePos pos;
    std::string name;  // Name, Attr, Filter, Test, Binary's operator
    Value value;       // Literal
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;  // Compare
    bool negated = false;          // Test
};

struct Stmt {
    enum class K {
        Text,      // text
        Print,     // {{ expr }}
        If,        // branches: (cond, body) ...; else_body
        For,       // targets in expr [if cond] body [else else_body]
        Set,       // targets = expr, or attr_of.attr = expr (namespace attribute)
        SetBlock,  // {% set targets[0] [| filter] %} body {% endset %}   filter: a Filter Expr or nullptr
        Macro,     // {% macro name(params) %} body
        FilterBlock,  // {% filter f %} body: filter is the Filter Expr with args[0] = nullptr
        Break,
        Continue,
    };
    K kind;
    SourcePos pos;
    std::string text;
    ExprPtr expr;                  // Print, For's iterable, Set's value
    ExprPtr cond;                  // For's `if` filter
    ExprPtr filter;                // SetBlock, FilterBlock
    std::vector<std::string> targets;  // For, Set (several: tuple unpacking), SetBlock, Macro's name in targets[0]
    std::string attr_of;           // Set on a namespace attribute: `set attr_of.targets[0] = ...`
    std::vector<std::pair<ExprPtr, Body>> branches;  // If
    Body body;                     // For, SetBlock, Macro, FilterBlock
    Body else_body;                // If, For
    std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name and default (nullptr when none)
};

struct Program {
    Body body;
};

}  // namespace kvscope::jinja
