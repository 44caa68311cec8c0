#pragma once
// Tokens to a syntax tree (ast.h), for the statements and expressions Hugging Face chat templates use.
//
//   parse(tokens, origin)   the Program; throws UsageError "ORIGIN:LINE:COLUMN: what" for a syntax error,
//                           a tag or operator outside the subset, an unknown filter or test, or nesting
//                           deeper than 200 (expressions and blocks)
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (names, tuples, namespace
// attributes, block set with filters), macro, filter blocks, break/continue (inside a for), and
// transformers' generation/endgeneration (rendered as its body). Refused by name: raw, include, import,
// from, extends, block, call, with, autoescape, do, recursive loops, *args/**kwargs in calls.
// Operator precedence is Jinja2's: `if`-else < or < and < not < comparisons and in < + - < ~ < * / // %
// < ** < unary minus < postfix (. [] ()), filters and `is` tests (so `-x|abs` is abs(-x)).
#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace kvscope::jinja {

Program parse(const std::vector<Token>& tokens, const std::string& origin);

}  // namespace kvscope::jinja
