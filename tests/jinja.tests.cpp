// The Jinja engine (core/text/jinja/): hand-computed cases for each rule, then every real template of
// tests/data/chat_templates/ and the one-rule snippets of tests/data/jinja_snippets.json against Jinja2 set
// up as transformers sets it up ("[reference]", driven by
// tests/jinja.cmake: tests/reference/chat_template_reference.py writes the expected renderings first).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "base/errors.h"
#include "io/json.h"
#include "text/jinja/template.h"

using namespace kvscope;
using namespace kvscope::jinja;

namespace {

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Renders `source` with variables given as a JSON object.
std::string render(const std::string& source, const std::string& variables_json = "{}", RenderOptions o = {}) {
    Dict vars;
    const Json doc = Json::parse(variables_json);
    for (const auto& [k, v] : doc.as_object()) vars.set(k, from_json(v));
    return JinjaTemplate::parse(source, "t").render(vars, o);
}

std::string refusal(const std::string& source, const std::string& variables_json = "{}") {
    try {
        render(source, variables_json);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "(rendered)";
}

}  // namespace

TEST_CASE("whitespace: trim_blocks, lstrip_blocks, - and +, comments, newlines", "[jinja]") {
    // trim_blocks drops the one newline after %}; lstrip_blocks the indentation before {%
    CHECK(render("  {% if true %}\n  x\n  {% endif %}\nend\n") == "  x\nend");
    CHECK(render("a\n  {# c #}\nb") == "a\nb");
    CHECK(render("{{ 'a' }}  \n  {% if true %}y{% endif %}") == "a  \ny");  // text before the tag on its line
    CHECK(render("a  {%- if true %}b{% endif -%}  \n c") == "abc");
    CHECK(render("  {%+ if true %}x{% endif %}") == "  x");
    CHECK(render("{% if true +%}\nx{% endif %}") == "\nx");
    CHECK(render("  {{ 'v' }}\n") == "  v");  // {{ is never lstripped; the final newline goes
    CHECK(render("x\r\ny\rz\n\n") == "x\ny\nz\n");
    CHECK(render("{{- ' a ' -}}") == " a ");
    CHECK(render("x \n {{- 'y' }}") == "xy");
    CHECK(render("{% if true %}\n\nx{% endif %}") == "\nx");
}

TEST_CASE("values print as Python prints them", "[jinja]") {
    CHECK(render("{{ none }}|{{ true }}|{{ 1.0 }}|{{ 0.1 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.00001 }}|{{ 7 / 2 }}") ==
          "None|True|1.0|0.1|1e+16|1000000000000000.0|1e-05|3.5");
    CHECK(render("{{ [1, 'a', none, true, 1.5, {'k': (1,)}] }}") == "[1, 'a', None, True, 1.5, {'k': (1,)}]");
    CHECK(render("{{ [\"it's\", 'say \"hi\"', 'a\\nb'] }}") == "[\"it's\", 'say \"hi\"', 'a\\nb']");
    CHECK(render("{{ {'a': 1}.items() }}") == "dict_items([('a', 1)])");
    CHECK(render("{{ 'x' ~ none ~ true ~ 2 }}") == "xNoneTrue2");
    CHECK(render("{{ undefined_thing }}|{{ undefined_thing ~ 'a' }}") == "|a");
    CHECK(render("{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns }}") ==
          "2<Namespace {'a': 2}>");
}

TEST_CASE("operators follow Python", "[jinja]") {
    CHECK(render("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 'ab' * 2 }} {{ [1] + [2] }}") ==
          "-4 2 -2 1024 0.5 abab [1, 2]");
    CHECK(render("{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}") == "TrueTrueTrueTrueFalse");
    CHECK(render("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}") == "TrueTrueTrueTrue");
    CHECK(render("{{ 'a' if false }}|{{ 'a' if false else 'b' }}|{{ none or 'x' }}|{{ 0 and 1 }}") == "|b|x|0");
    CHECK(render("{{ -x|abs }}", R"({"x": 3})") == "3");  // abs(-x): filters bind tighter than unary minus
    CHECK(render("{{ not x is defined }}") == "True");
    CHECK(refusal("{{ 'a' + 1 }}").find("t:1:8: unsupported operand") != std::string::npos);
    CHECK(refusal("{{ 1 // 0 }}").find("modulo by zero") != std::string::npos);
}

TEST_CASE("subscripts, slices and attribute fallbacks", "[jinja]") {
    const std::string m = R"({"m": {"role": "user", "content": "hé!", "items": "k"}, "l": [1, 2, 3]})";
    CHECK(render("{{ m.role }}{{ m['content'] }}{{ m.content[1] }}{{ m.content[::-1] }}", m) == "userhé!é!éh");
    CHECK(render("{{ l[1:] }}{{ l[-1] }}{{ l[::-1] }}{{ l[-5:2] }}{{ l[7] }}", m) == "[2, 3]3[3, 2, 1][1, 2]");
    CHECK(render("{{ m['items'] }}|{{ m.missing }}|{{ none.x }}", m) == "k||");
    CHECK(render("{{ m.items()|list }}", m) == "[('role', 'user'), ('content', 'hé!'), ('items', 'k')]");
    CHECK(refusal("{{ x.y }}").find("'x' is undefined") != std::string::npos);
    CHECK(refusal("{{ m.missing.deeper }}", m).find("'missing' is undefined") != std::string::npos);
}

TEST_CASE("for loops: loop variables, else, filters, unpacking, break, continue, scope", "[jinja]") {
    CHECK(render("{% for a in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                 "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}") ==
          "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
    CHECK(render("{% for a in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}") == "-2;1-3;2-;");
    CHECK(render("{% for x in [] %}A{% else %}E{% endfor %}{% for x in undefined_seq %}A{% else %}U{% endfor %}") == "EU");
    CHECK(render("{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }}{% endfor %}") == "2/24/2");
    CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}") == "a=1,b=2,");
    CHECK(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}") == "13");
    CHECK(render("{% for i in [1,2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}") == "[a][]");
    CHECK(render("{% set x = 'o' %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}[{{ x }}]{% endfor %}{{ x }}") ==
          "[o][1][o][2]o");
    CHECK(render("{% for c in 'hé' %}{{ c }}.{% endfor %}") == "h.é.");
}

TEST_CASE("set, block set, macros, filter blocks", "[jinja]") {
    CHECK(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}") == "12");
    CHECK(render("{% set x %}  in {{ 1 }} {% endset %}[{{ x }}]") == "[  in 1 ]");
    CHECK(render("{% macro m(a, b='x') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}") == "1x1243");
    CHECK(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}") == "ABC D");
    CHECK(render("a{% generation %}b{{ 'c' }}{% endgeneration %}d") == "abcd");  // transformers' assistant-mask tag
    CHECK(refusal("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").find("takes not more than 1") != std::string::npos);
    CHECK(refusal("{% set d = {} %}{% set d.x = 1 %}").find("non-namespace") != std::string::npos);
}

TEST_CASE("filters", "[jinja]") {
    const std::string msgs = R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})";
    CHECK(render("{{ '  a  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'héllo'|length }}|{{ x|length }}|{{ [1,2]|count }}") ==
          "a|hi|5|0|2");
    CHECK(render("{{ messages|selectattr('role', 'equalto', 'system')|list }}", msgs) == "[{'role': 'system', 'content': 's'}]");
    CHECK(render("{{ messages|rejectattr('role', 'eq', 'system')|map(attribute='content')|join(',') }}", msgs) == "u");
    CHECK(render("{{ messages|map(attribute='role')|list }}", msgs) == "['system', 'user']");
    CHECK(render("{% set g = [1,2,3]|select('odd') %}{% for x in g %}{{ x }}{% endfor %}|{% for x in g %}{{ x }}{% endfor %}") ==
          "13|");  // a generator is used up by its first loop
    CHECK(render("{% if []|select %}truthy{% endif %}") == "truthy");
    CHECK(render("{{ [1,2,3]|first }}{{ []|first }}|{{ [1,2]|last }}|{{ 'abc'|list }}|{{ {'a': 1}|list }}") ==
          "1|2|['a', 'b', 'c']|['a']");
    CHECK(render("{{ x|default('a') }}{{ false|default('b', true) }}{{ false|d('c') }}") == "abFalse");
    CHECK(render("{{ 'héllo ÿ ß'|upper }}|{{ 'Hello World-foo bar'|title }}|{{ 'hELLO'|capitalize }}|{{ 'ÀB'|lower }}") ==
          "HÉLLO Ÿ SS|Hello World-Foo Bar|Hello|àb");
    CHECK(render("{{ 'x'|indent(2) }}|{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}") == "x|a\n  b\n\n  c|  a\n  b");
    CHECK(render("{{ [1,2,1]|unique|list }}{{ ['A','a']|unique|list }}{{ [3,1,2]|sort }}{{ 'abc'|reverse }}") ==
          "[1, 2]['A'][1, 2, 3]cba");
    CHECK(render("{{ '3'|int + 1 }} {{ '2.5'|float }} {{ 'x'|int }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }}") ==
          "4 2.5 0 2.0 4.0 2.67 3");
    CHECK(render("{{ \"'\"|safe + '<a & \"b\">' + 'c'|safe }}|{{ ('x'|safe ~ '<') + '<' }}") == "'&lt;a &amp; &#34;b&#34;&gt;c|x<<");
    CHECK(render("{{ {'role': 'u'}|attr('role') }}|{{ namespace(a=1)|attr('a') }}|{{ ({'k': 1}|attr('items'))()|list }}") ==
          "|1|[('k', 1)]");
    CHECK(render("{{ 'a-b-a'|replace('a', 'x') }}{{ 5|string ~ 1 }}") == "x-b-x51");
    CHECK(refusal("{{ 'ἀ'|upper }}").find("not supported") != std::string::npos);
    CHECK(refusal("{{ x|wordwrap }}").find("t:1:6: the filter 'wordwrap' is not supported") != std::string::npos);
}

TEST_CASE("tojson is transformers' json.dumps", "[jinja]") {
    CHECK(render("{{ {'a': 'é\n\"<', 'b': [1, 2.0, none, true]}|tojson }}") ==
          "{\"a\": \"é\\n\\\"<\", \"b\": [1, 2.0, null, true]}");
    CHECK(render("{{ {'a': {'b': []}, 'c': {}}|tojson(indent=2) }}") == "{\n  \"a\": {\n    \"b\": []\n  },\n  \"c\": {}\n}");
    CHECK(render("{{ 'é'|tojson(ensure_ascii=true) }}{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}") == "\"\\u00e9\"{\"a\": 2, \"b\": 1}");
    CHECK(render("{{ [1, 2]|tojson(separators=(',', ':')) }}|{{ 'tab\there\x01'|tojson }}") == "[1,2]|\"tab\\there\\u0001\"");
    CHECK(refusal("{{ x|tojson }}").find("not JSON serializable") != std::string::npos);
}

TEST_CASE("tests", "[jinja]") {
    CHECK(render("{{ 5 is number }}{{ true is number }}{{ true is integer }}{{ none is mapping }}{{ 'a' is iterable }}"
                 "{{ x is iterable }}{{ x is sequence }}{{ {} is mapping }}{{ none is none }}{{ 1.5 is float }}") ==
          "TrueTrueFalseFalseTrueTrueTrueTrueTrueTrue");
    CHECK(render("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is in 'cat' }}{{ x is not defined }}"
                 "{{ true is true }}{{ 1 is true }}{{ 'b' is eq 'b' }}{{ 'ABC' is upper }}") ==
          "TrueTrueTrueTrueTrueTrueFalseTrueTrue");
}

TEST_CASE("str and dict methods", "[jinja]") {
    CHECK(render("{{ 'a,b,,c'.split(',') }}{{ '  a b  '.split() }}{{ ' a b  c '.split(none, 1) }}{{ 'a b c'.rsplit(' ', 1) }}") ==
          "['a', 'b', '', 'c']['a', 'b']['a', 'b  c ']['a b', 'c']");
    CHECK(render("{{ 'xxhixx'.strip('x') }}{{ '\n\nhi\n'.lstrip('\n') }}{{ 'hi  '.rstrip() }}|{{ 'abc'.startswith(('x', 'a')) }}"
                 "{{ 'abc'.endswith('bc') }}{{ '-'.join(['a', 'b']) }}{{ 'aXbX'.replace('X', '.', 1) }}") ==
          "hihi\nhi|TrueTruea-ba.bX");
    CHECK(render("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d.keys()|list }}{{ d.values()|list }}", R"({"d": {"a": 1}})") ==
          "1None5['a'][1]");
    CHECK(refusal("{{ [1].append(2) }}").find("forbids changing a list") != std::string::npos);
}

TEST_CASE("globals: raise_exception, strftime_now, range, namespace", "[jinja]") {
    CHECK(refusal("line one\n  {{ raise_exception('Roles must alternate') }}") ==
          "t:2:6: the template raised an error: Roles must alternate");
    RenderOptions o;
    o.year = 2024, o.month = 7, o.day = 26;
    CHECK(render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A %B %-d') }}", "{}", o) == "26 Jul 2024|Friday July 26");
    CHECK(render("{{ range(3)|list }}{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}") == "[0, 1, 2]135");
}

TEST_CASE("refusals name the construct and its line:column, and limits hold", "[jinja]") {
    CHECK(refusal("a\n{% include 'x' %}") == "t:2:4: the tag {% include %} is not supported");
    CHECK(refusal("{% for x in y recursive %}{% endfor %}").find("recursive") != std::string::npos);
    CHECK(refusal("{% if true %}x") == "t:1:15: the template ends before {% endif %}");
    CHECK(refusal("{% for x in y %}") == "t:1:17: the template ends before {% endfor %}");
    CHECK(refusal("{{ 'abc }}").find("t:1:4: a string literal is never closed") != std::string::npos);
    CHECK(refusal("{% break %}").find("outside a for loop") != std::string::npos);
    CHECK(refusal("ok \xff") == "t: the template is not valid UTF-8 (at byte 3)");
    CHECK(refusal("{{ 'x' * 20000000 }}").find("limits") != std::string::npos);
    CHECK(refusal("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").find("more than 5000000 units of work") !=
          std::string::npos);
    CHECK(refusal("{{ 1" + [] { std::string s; for (int k = 0; k < 3000; ++k) s += " + 1"; return s; }() + " }}")
              .find("more than 2000 parts") != std::string::npos);
    CHECK(refusal("{% set ns = namespace(a=1) %}{% set ns.me = [ns] %}").find("namespace inside a namespace") != std::string::npos);
    CHECK(refusal("{% set ns = namespace(x=1) %}{% for i in range(400) %}{% set ns.x = [ns.x] %}{% endfor %}")
              .find("nested deeper than 300") != std::string::npos);
    CHECK(refusal("{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% endmacro %}{% set ns.m = m %}{% endfor %}{{ ns.m() }}")
              .find("after the block that defined it ended") != std::string::npos);
    CHECK(refusal("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}").find("100 deep") != std::string::npos);
    CHECK(refusal("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}").find("nesting deeper") != std::string::npos);
    CHECK(refusal("{% for x in range(2000) %}{{ 'y' * 10000000 }}{% endfor %}").find("16 MiB") != std::string::npos);
}

TEST_CASE("real chat templates render byte for byte as Jinja2 does", "[.][reference]") {
    const char* expected_path = std::getenv("KVSCOPE_JINJA_EXPECTED");
    REQUIRE(expected_path);
    const std::string dir = std::string(KVSCOPE_TEST_DATA) + "/chat_templates/";
    std::ifstream in(expected_path);
    REQUIRE(in);
    std::map<std::string, std::string> sources;
    size_t n = 0, same = 0, refused_both = 0, mismatched = 0;
    std::map<std::string, size_t> per_template_fail;
    std::ostringstream report;
    std::string line;
    while (std::getline(in, line)) {
        const Json doc = Json::parse(line);
        const std::string file = doc.find("template")->as_string();
        const Json* inline_source = doc.find("source");  // a snippet of tests/data/jinja_snippets.json
        if (!sources.count(file)) sources[file] = inline_source ? inline_source->as_string() : read_text(dir + file);
        Dict vars;
        for (const auto& [k, v] : doc.find("variables")->as_object()) vars.set(k, from_json(v));
        const std::string date = doc.find("date")->as_string();
        RenderOptions o;
        o.year = std::stoi(date.substr(0, 4)), o.month = std::stoi(date.substr(5, 2)), o.day = std::stoi(date.substr(8, 2));
        const Json* text = doc.find("text");
        const Json* error = doc.find("error");
        std::string got, got_error;
        try {
            got = JinjaTemplate::parse(sources[file], file).render(vars, o);
        } catch (const UsageError& e) {
            got_error = e.what();
        }
        ++n;
        bool ok;
        if (!text->is_null()) {
            ok = got_error.empty() && got == text->as_string();
        } else {
            ok = !got_error.empty();
            // the template's own raise_exception message must be the one kvscope names
            const std::string type = error->find("type")->as_string();
            if (ok && type == "TemplateError")
                ok = got_error.find("raised an error: " + error->find("message")->as_string().substr(0, 40)) != std::string::npos;
            if (ok) ++refused_both;
        }
        if (ok) {
            ++same;
            continue;
        }
        ++mismatched;
        if (per_template_fail[file]++ < 1) {
            report << file << " / " << doc.find("conversation")->as_string()
                               << " agp=" << doc.find("variables")->find("add_generation_prompt")->as_bool() << "\n";
            if (!text->is_null()) {
                size_t k = 0;
                while (k < got.size() && k < text->as_string().size() && got[k] == text->as_string()[k]) ++k;
                report << "  first difference at byte " << k << ": kvscope "
                              << (got_error.empty() ? json_escape(got.substr(k, 60)) : "refused: " + got_error)
                              << " | Jinja2 " << json_escape(text->as_string().substr(k, 60)) << "\n";
            } else {
                report << "  Jinja2 raised " << error->find("type")->as_string() << ": "
                              << error->find("message")->as_string() << " | kvscope "
                              << (got_error.empty() ? "rendered " + json_escape(got.substr(0, 80)) : got_error) << "\n";
            }
        }
    }
    report << same << " of " << n << " renderings agree (" << refused_both << " refused by both), "
                       << sources.size() << " templates, " << mismatched << " differ" << "\n";
    WARN(report.str());
    CHECK(n > 0);
    CHECK(mismatched == 0);
}
