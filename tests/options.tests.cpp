// The option table (core/run/options.h): every option reads and writes its field, the names each front end
// uses are unique, and the one check of combinations speaks in option names that each front end renders.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "base/errors.h"
#include "run/options.h"

using namespace kvscope;

namespace {

std::string first_problem(const RunOptions& v, const std::vector<const OptionSpec*>& given, const OptionWords& words) {
    const std::vector<std::string> found = problems(v, given);
    return found.empty() ? "" : render(found.front(), words);
}

// Whether `word` is new to `seen` (it is added either way).
bool first_time(std::set<std::string>& seen, const std::string& word) {
    const bool is_new = seen.count(word) == 0;
    seen.insert(word);
    return is_new;
}

}  // namespace

TEST_CASE("option table: names, flags, labels and script keys are each unique", "[options]") {
    std::set<std::string> names, flags, labels, keys;
    for (const OptionSpec& o : option_table()) {
        INFO(o.name);
        CHECK(first_time(names, o.name));
        if (*o.flag) CHECK(first_time(flags, o.flag));
        if (*o.label) CHECK(first_time(labels, o.label));
        if (*o.script_key) CHECK(first_time(keys, o.script_key));
        CHECK(option_named(o.name) == &o);
        if (*o.flag) CHECK(option_by_flag(o.flag) == &o);
        if (*o.script_key) CHECK(option_by_script_key(o.script_key) == &o);
        CHECK((*o.flag || *o.script_key));  // every option reaches at least one front end
        CHECK(*o.help);
        CHECK(bool(o.applies) == bool(o.needs));
    }
}

TEST_CASE("option table: set then get gives the value back, in the field it names", "[options]") {
    for (const OptionSpec& o : option_table()) {
        INFO(o.name);
        RunOptions v;
        set_option(v, o, default_text(o));  // the default is always a value the option takes
        CHECK(o.get(v) == default_text(o));
        std::string other;
        switch (o.kind) {
        case OptionKind::Int: other = std::to_string(std::max<int64_t>(o.min, 2) + 1); break;
        case OptionKind::Real: other = "0.5"; break;
        case OptionKind::Switch: other = default_text(o) == "1" ? "0" : "1"; break;
        case OptionKind::Choice: other = choices_of(o).back() == default_text(o) ? choices_of(o).front() : choices_of(o).back(); break;
        case OptionKind::Text: other = "file.kvp"; break;
        }
        set_option(v, o, other);
        CHECK(o.get(v) == other);
        CHECK(o.get(RunOptions{}) != other);  // the value went into v, not a shared default
    }
}

TEST_CASE("option table: a bad value is refused in the words asked for", "[options]") {
    RunOptions v;
    CHECK_THROWS_WITH(set_option(v, *option_named("window"), "x"), "window wants a whole number, got 'x'");
    CHECK_THROWS_WITH(set_option(v, *option_named("kv_quant"), "int3",
                                 [](const OptionSpec& o) { return std::string(o.script_key) + "="; }),
                      "kv-quant= takes none, int8, int4 or fp8, got 'int3'");
    CHECK_THROWS_WITH(set_option(v, *option_named("evict"), "7"), Catch::Contains("0..4"));
    set_option(v, *option_named("evict"), "2");  // a choice's index, as the window's scripts give it
    CHECK(v.session.eviction.kind == EvictionPolicyKind::H2O);
}

TEST_CASE("one check: each front end reads the same refusal in its own words", "[options]") {
    RunOptions v;
    v.group.prompt_cache = "p.kvp";
    v.session.window = 8;
    CHECK(first_problem(v, {}, cli_words) ==
          "--prompt-cache keeps rows computed with every position visible: leave out --window");
    CHECK(first_problem(v, {}, label_words) ==
          "prompt cache keeps rows computed with every position visible: leave out window");
    CHECK(first_problem(v, {}, neutral_words) ==
          "prompt_cache keeps rows computed with every position visible: leave out window");
    CHECK_NOTHROW(validate(v.session));  // the session alone is fine: the combination is the group's
    v.session.window = 0;
    v.session.kv_quant.format = KvQuant::Int8;
    v.session.block_size = 4;
    CHECK(first_problem(v, {}, cli_words) == "--prompt-cache keeps float32 rows: leave out --kv-quant");
    v.group.prompt_cache.clear();
    CHECK(first_problem(v, {}, cli_words) ==
          "--kv-quant int8 stores packed rows in the contiguous cache only: leave out --block-size");
    CHECK(first_problem(v, {}, label_words) ==
          "K/V format int8 stores packed rows in the contiguous cache only: leave out block size");
}

TEST_CASE("one check: an option given where it changes nothing is refused", "[options]") {
    RunOptions v;
    const std::vector<const OptionSpec*> group = {option_named("kv_group")};
    CHECK(first_problem(v, group, cli_words) == "--kv-group is a parameter of int4 K/V: give --kv-quant int4 too");
    v.session.kv_quant.format = KvQuant::Int4;
    CHECK(first_problem(v, group, cli_words).empty());

    const std::vector<const OptionSpec*> obs = {option_named("evict_obs")};
    CHECK(first_problem(v, obs, cli_words) == "--evict-obs is a parameter of an eviction policy: give --evict POLICY too");
    v.session.kv_quant.format = KvQuant::None;
    v.session.eviction.kind = EvictionPolicyKind::H2O;
    v.session.eviction.budget = 8;
    CHECK(first_problem(v, obs, cli_words) == "--evict-obs is a parameter of snapkv and pyramid: --evict h2o does not use it");
    CHECK(first_problem(v, obs, label_words) ==
          "evict observation window is a parameter of snapkv and pyramid: eviction h2o does not use it");
    v.session.eviction.kind = EvictionPolicyKind::SnapKV;
    CHECK(first_problem(v, obs, cli_words).empty());
}

TEST_CASE("one check: every message's option names render (no placeholder is left over)", "[options]") {
    RunOptions v;
    v.group.prompt_cache = "p.kvp";
    v.group.n_seq = 2;
    v.session.window = 4;
    v.session.sinks = 1;
    v.session.use_cache = false;
    v.session.kv_quant.format = KvQuant::Int4;
    v.session.block_size = 4;
    v.session.eviction.kind = EvictionPolicyKind::H2O;
    v.session.eviction.budget = 4;
    std::vector<const OptionSpec*> given;
    for (const OptionSpec& o : option_table()) given.push_back(&o);
    const std::vector<std::string> found = problems(v, given);
    CHECK(found.size() >= 8);
    for (const std::string& m : found) {
        INFO(m);
        CHECK_THAT(render(m, label_words), !Catch::Contains("{") && !Catch::Contains("--"));
        CHECK_THAT(render(m, cli_words), !Catch::Contains("{"));
    }
}

TEST_CASE("the window asks to leave an option out in its own terms: untick, set back, empty", "[options]") {
    RunOptions v;
    v.group.prompt_cache = "p.kvp";
    v.session.use_cache = false;
    const std::vector<std::string> found = problems(v, {});
    REQUIRE(!found.empty());
    CHECK(render(found.front(), cli_words) == "--prompt-cache loads and saves the KV cache's rows: leave out --no-cache");
    CHECK(render_labels(found.front()) == "prompt cache loads and saves the KV cache's rows: untick KV cache off");
    CHECK(render_labels("{-window}; {-evict}; {-prompt_cache}") ==
          "set window to 0; set eviction to oracle-off; empty the prompt cache box");
    CHECK(render("{-window}", neutral_words) == "leave out window");
}

TEST_CASE("messages name inputs that are not options, and each front end says them its own way", "[options]") {
    const std::string m = "no such folder ({model} wants a folder); {lab_config} 'x': {encoder_source}, {dtype}, {source}";
    CHECK(render(m, cli_words) == "no such folder (--model wants a folder); --config 'x': --source, --dtype, "
                                  "--source or --source-ids");
    CHECK(render_labels(m) == "no such folder (the model path box wants a folder); configuration 'x': a source, "
                              "kvscope gui --dtype, the Source box");
    CHECK(render("{unknown} and {{ jinja }} stay", cli_words) == "{unknown} and {{ jinja }} stay");
    CHECK(option_named("model") == nullptr);  // inputs are no session options: the table stays 25 long
    CHECK(input_named("window") == option_named("window"));
    CHECK(option_by_lab_key("g") == option_named("kv_group"));
    CHECK(option_by_lab_key("budget") == option_named("kv_budget"));
    CHECK(option_by_lab_key("seed") == nullptr);
}

TEST_CASE("one check: oracle-off asked for by name refuses a window and no cache, not a prompt cache", "[options]") {
    const std::vector<const OptionSpec*> evict = {option_named("evict")};
    RunOptions v;
    v.session.window = 8;
    CHECK(first_problem(v, {}, cli_words).empty());  // no policy asked for: a plain window
    CHECK(first_problem(v, evict, cli_words) ==
          "--evict oracle-off keeps every position, a window hides all but the last ones: leave out --window");
    CHECK(render_labels(problems(v, evict).front()) ==
          "eviction oracle-off keeps every position, a window hides all but the last ones: set window to 0");
    v.session.window = 0;
    v.session.use_cache = false;
    CHECK(first_problem(v, evict, cli_words) ==
          "--evict oracle-off keeps every row of the KV cache, and there is no cache: leave out --no-cache");
    v.session.use_cache = true;
    v.group.prompt_cache = "p.kvp";
    CHECK(first_problem(v, evict, cli_words).empty());  // nothing is evicted: the file's rows stay as without a policy
}
