#pragma once
// Template text to tokens, with the whitespace rules of the environment transformers' apply_chat_template
// sets up (Jinja2 with trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False).
//
//   lex(source)       the tokens, ending with Eof; throws UsageError naming line:column for an unclosed
//                     tag, comment or string, or a character no expression may hold
//
// What the lexer does to the text around tags, in Jinja2's order:
//   1. newlines: "\r\n" and "\r" become "\n"; one final "\n" of the template is dropped
//   2. "{%-", "{{-", "{#-" remove all whitespace before the tag (Python's str.isspace, newlines included);
//      "-%}", "-}}", "-#}" remove all whitespace after it
//   3. lstrip_blocks: spaces and tabs (any whitespace but "\n") between a line's start and "{%" or "{#"
//      are removed, unless the tag opens with "{%+"; "{{" is never stripped
//   4. trim_blocks: one "\n" right after "%}" or "#}" is removed, unless the tag closes with "+%}"
// Comments produce no token. "{% raw %}" is not supported (the parser refuses it by name).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::jinja {

struct SourcePos {
    int line = 1;
    int column = 1;
};

enum class Tok {
    Text,        // template text between tags (after the whitespace rules)
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,        // identifiers, keywords included (if, for, in, not, and, true, none ...)
    String,      // a string literal, escapes decoded
    Int,
    Float,
    Op,          // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } . , : |
    Eof,
};

struct Token {
    Tok type;
    std::string text;  // Text's data, a Name, a String's decoded value, an Op, a number's source
    SourcePos pos;
    int64_t integer = 0;
    double real = 0;
};

// `origin` prefixes error messages ("chat template" or a file name).
std::vector<Token> lex(std::string_view source, const std::string& origin);

}  // namespace kvscope::jinja
