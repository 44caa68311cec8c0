// ChatConversation: the tokens each user message appends to the cache. The reference is the template's
// whole rendering of the conversation, encoded at once: the first turn's tokens, the reply as the model
// would have sampled it, and the next turn's tokens must concatenate to exactly those ids, whether the
// reply stopped at the end-of-turn token (then in the cache) or ran out of tokens (then the next turn
// closes it).
//
// The folder is chat_folder.h's: assets/llama-gqa with Llama 3's special tokens and template.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/errors.h"
#include "chat_folder.h"
#include "forward/model.h"
#include "io/json_write.h"
#include "run/chat_conversation.h"
#include "run/session.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST_CASE("a chat's turns concatenate to the whole conversation's rendering", "[chat]") {
    const std::shared_ptr<const Model> model = Model::load(kvtest::llama3_chat_folder("chat_conversation"));
    const Tokenizer& tok = *model->tokenizer();
    ChatConversation chat = ChatConversation::open(model);
    REQUIRE(chat.end_of_turn() == 765);
    REQUIRE(chat.stop_tokens().front() == 765);  // then the tokenizer's end of text, when it is another token
    if (auto eos = tok.end_of_text(); eos && *eos != 765) CHECK(chat.stop_tokens() == std::vector<TokenId>{765, *eos});

    const ChatMessage system{"system", "Be brief."}, u0{"user", "Hello there"}, u1{"user", "What is a cat?"};
    chat.add_system(system.content);
    const std::vector<TokenId> first = chat.next_turn(u0, {}, {}).ids;
    CHECK(first == encode_chat(tok, chat.chat_template().render({system, u0}, true)));
    chat.add(u0, {});

    const std::vector<TokenId> whole =
        encode_chat(tok, chat.chat_template().render({system, u0, {"assistant", "Hi!"}, u1}, true));
    const std::vector<TokenId> reply = encode_chat(tok, "Hi!");
    SECTION("the reply stopped at the end of turn: it is in the cache") {
        const std::vector<TokenId> said = concat(reply, {765});
        const ChatTurn next = chat.next_turn(u1, concat(first, said), said);
        CHECK_FALSE(next.rolled_back);
        CHECK(next.keep == int64_t(first.size() + said.size()));
        CHECK(concat(concat(first, said), next.ids) == whole);
    }
    SECTION("the reply ran out of tokens: the next turn closes it") {
        const ChatTurn next = chat.next_turn(u1, concat(first, reply), reply);
        CHECK(next.ids.front() == 765);
        CHECK(next.keep == int64_t(first.size() + reply.size()));
        CHECK(concat(concat(first, reply), next.ids) == whole);
    }
    SECTION("a reply the template trims is re-rendered: the cache keeps the common token prefix") {
        // Llama 3's template renders trim(content): the reply's trailing spaces are not in the rendering
        const std::vector<TokenId> spaced = concat(reply, encode_chat(tok, "  "));
        const std::vector<TokenId> said = concat(spaced, {765});
        const ChatTurn next = chat.next_turn(u1, concat(first, said), said);
        CHECK(next.rolled_back);
        size_t common = 0;  // computed here from the whole rendering's ids
        while (common < whole.size() && common < first.size() + said.size() && whole[common] == concat(first, said)[common]) ++common;
        CHECK(next.keep == int64_t(common));
        CHECK(next.keep >= int64_t(first.size()));
        CHECK(concat(std::vector<TokenId>(whole.begin(), whole.begin() + next.keep), next.ids) == whole);
    }
    SECTION("truncate goes back to an earlier turn") {
        const std::vector<TokenId> said = concat(reply, {765});
        const ChatTurn next = chat.next_turn(u1, concat(first, said), said);
        chat.add(u1, said);
        CHECK(chat.n_turns() == 2);
        CHECK(chat.reply(0) == "Hi!");
        chat.truncate(1);
        CHECK(chat.n_turns() == 1);
        CHECK(chat.next_turn(u1, concat(first, said), said).ids == next.ids);
        chat.truncate(0);
        CHECK(chat.next_turn(u0, {}, {}).ids == first);
        CHECK_THROWS_AS(chat.add_system("again"), UsageError);
    }
}

TEST_CASE("a folder without a chat template is refused in one line", "[chat]") {
    const fs::path assets = fs::path(KVSCOPE_TEST_DATA) / ".." / ".." / "assets" / "llama-gqa";
    try {
        ChatConversation::open(Model::load(assets.string()));
        FAIL("opened a chat without a template");
    } catch (const UsageError& e) {
        CHECK_THAT(e.what(), Catch::Contains("no chat template"));
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
}

TEST_CASE("a turns file is parsed whole: every line checked before any is used", "[chat]") {
    const std::vector<ChatMessage> plain = parse_chat_turns("hi\n\n  \r\nthere\r\nlast", "t.txt", false);
    REQUIRE(plain.size() == 3);
    CHECK(plain[0].role == "user");
    CHECK(plain[0].content == "hi");
    CHECK(plain[1].content == "there");
    CHECK(plain[2].content == "last");
    const std::vector<ChatMessage> jsonl = parse_chat_turns(
        "{\"role\": \"system\", \"content\": \"Be brief.\"}\n{\"role\": \"user\", \"content\": \"a\\nb\"}\n", "t.jsonl", true);
    REQUIRE(jsonl.size() == 2);
    CHECK(jsonl[0].role == "system");
    CHECK(jsonl[1].content == "a\nb");
    // line 2 is bad: nothing of the file is returned, the error names the line
    CHECK_THROWS_WITH(parse_chat_turns("{\"role\": \"user\", \"content\": \"hi\"}\n{\"role\": \"tool\", \"content\": \"42\"}\n",
                                       "t.jsonl", true),
                      Catch::StartsWith("t.jsonl line 2: role \"tool\""));
    CHECK_THROWS_AS(parse_chat_turns("{\"role\": \"user\", \"content\": \"hi\"}\n{\"role\": \"system\", \"content\": \"x\"}", "t.jsonl", true),
                    UsageError);
    CHECK_THROWS_WITH(parse_chat_turns("\n{\"role\": \"user\"}", "t.jsonl", true), Catch::StartsWith("t.jsonl line 2: expected"));
    CHECK_THROWS_WITH(parse_chat_turns("{", "t.jsonl", true), Catch::StartsWith("t.jsonl line 1: not valid JSON"));
}

namespace {

struct TurnCost {
    int64_t rows_reused = 0;    // by the turn's first prefill step
    int64_t rows_computed = 0;  // by all its prefill steps
};

// One chat turn as `kvscope chat` runs it: next_turn, add, rewind_turn, then prefill and decode to the end.
TurnCost run_turn(Session& session, ChatConversation& chat, const ChatMessage& message, ChatTurn& turn, int64_t max_new = 6) {
    std::vector<TokenId> conversation = session.parts().prompt;
    conversation.insert(conversation.end(), session.parts().generated.begin(), session.parts().generated.end());
    const std::vector<TokenId> reply = chat.n_turns() > 0 ? session.parts().generated : std::vector<TokenId>{};
    turn = chat.next_turn(message, conversation, reply);
    chat.add(message, reply);
    session.append_turn(turn.ids, max_new, "user", turn.keep);
    TurnCost c;
    bool first = true;
    while (session.next() != Session::Next::Done) {
        const bool prefill = session.next() == Session::Next::Prefill;
        const StepRecord& r = session.step();
        if (prefill && first) c.rows_reused = r.cost.n_rows_reused;
        if (prefill) c.rows_computed += r.cost.n_rows_computed;
        first = false;
    }
    return c;
}

std::vector<TokenId> all_tokens(const Session& s) {
    return concat(s.parts().prompt, s.parts().generated);
}

}  // namespace

TEST_CASE("any template: SmolLM2-Instruct's chats for three turns, turns 2 and 3 computing only their new tokens", "[chat]") {
    const std::string smol = kvtest::read_text(fs::path(KVSCOPE_TEST_DATA) / "chat_templates" / "quoted-HuggingFaceTB-SmolLM2-Instruct.jinja");
    const std::shared_ptr<const Model> model = Model::load(kvtest::chatml_chat_folder("chat_conversation", "smollm2-chat", smol));
    const Tokenizer& tok = *model->tokenizer();
    ChatConversation chat = ChatConversation::open(model);
    CHECK(!chat.chat_template().family());   // not one of the four texts known by heart
    REQUIRE(tok.end_of_text());
    // <|im_end|>: after the probe's reply (and eos_token); then the vocabulary's <|endoftext|>
    CHECK(chat.stop_tokens() == std::vector<TokenId>{764, *tok.end_of_text()});
    SessionOptions o;
    o.max_new_tokens = 6;
    o.stop_tokens = chat.stop_tokens();
    Session session(model, o);

    // The rendering written out by hand from the template text: default system message, ChatML turns.
    const std::string system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";
    auto user = [](const std::string& u) { return "<|im_start|>user\n" + u + "<|im_end|>\n<|im_start|>assistant\n"; };
    const std::vector<std::string> said = {"Hello there", "What is a cat?", "And a dog?"};
    std::string text = system + user(said[0]);
    for (size_t k = 0; k < said.size(); ++k) {
        INFO("turn " << k + 1);
        ChatTurn turn;
        const int64_t before = int64_t(all_tokens(session).size());
        const std::vector<TokenId> reply = session.parts().generated;
        const TurnCost cost = run_turn(session, chat, {"user", said[k]}, turn);
        if (k == 0) {
            CHECK(turn.ids == encode_chat(tok, text));
            continue;
        }
        std::vector<TokenId> shown = reply;
        const bool stopped = shown.back() == 764;
        if (stopped) shown.pop_back();
        text += tok.decode(shown) + "<|im_end|>\n" + user(said[k]);
        // the cache holds the conversation as rendered, only the new turn's tokens were computed
        const std::vector<TokenId> prompt = session.parts().prompt;
        CHECK(tok.decode(prompt) == text);
        CHECK_FALSE(turn.rolled_back);
        CHECK(turn.keep == before);
        CHECK(cost.rows_reused == before - 1);  // the reply's last token was sampled, never fed
        CHECK(cost.rows_computed == int64_t(turn.ids.size()) + 1);
        CHECK(cost.rows_computed == int64_t(prompt.size()) - (before - 1));
    }
}

TEST_CASE("a template that re-renders history: Qwen3 drops a reply's <think> block, the cache rolls back to the common prefix", "[chat]") {
    const std::shared_ptr<const Model> model =
        Model::load(kvtest::chatml_chat_folder("chat_conversation", "qwen3-chat", std::string(chat_template_text(ChatFamily::Qwen3))));
    const Tokenizer& tok = *model->tokenizer();
    ChatConversation chat = ChatConversation::open(model);
    REQUIRE(chat.end_of_turn() == 764);
    SessionOptions o;
    o.max_new_tokens = 32;
    o.stop_tokens = chat.stop_tokens();
    // teacher forcing: the first reply thinks, then answers, then ends its turn
    o.forced_tokens = concat(encode_chat(tok, "<think>\nr\n</think>\n\nans"), {764});
    Session session(model, o);
    ChatTurn turn;
    run_turn(session, chat, {"user", "u1"}, turn, 32);
    REQUIRE(session.parts().generated == o.forced_tokens);

    // Qwen3's rendering of the next turn, by hand: the earlier reply without its <think> block
    const std::string asked = "<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n";
    const std::string whole = asked + "ans<|im_end|>\n<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n";
    const int64_t before = int64_t(all_tokens(session).size());
    const int64_t common = int64_t(encode_chat(tok, asked).size());  // the reply's first token differs ("<" vs "ans")
    const TurnCost cost = run_turn(session, chat, {"user", "u2"}, turn, 32);
    CHECK(turn.rolled_back);
    CHECK(turn.keep == common);
    CHECK(session.parts().prompt == encode_chat(tok, whole));
    CHECK(cost.rows_reused == common);
    CHECK(cost.rows_computed == int64_t(encode_chat(tok, whole).size()) - common);
    CHECK(before > common);
    // the rolled-back turn cannot be stepped back over, beyond its own steps
    while (session.step_back()) {}
    CHECK(session.parts().prompt == encode_chat(tok, whole));
}

TEST_CASE("stop tokens come from the folder: the template's end of turn, generation_config.json, eos_token", "[chat]") {
    const std::string chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    const fs::path dir = kvtest::chatml_chat_folder("chat_conversation", "stops-chat", chatml);
    // eos_token is not the template's end of turn here; generation_config.json lists two more ids
    kvtest::write_text(dir / "tokenizer_config.json",
                       json_text(JsonOut{{"chat_template", chatml}, {"eos_token", {{"content", "<|endoftext|>"}}}}));
    kvtest::write_text(dir / "generation_config.json", "{\"eos_token_id\": [766, 5, 764]}");
    ChatConversation chat = ChatConversation::open(Model::load(dir.string()));
    // 764 <|im_end|>: the special token after the probe's reply; 766, 5 (764 once); 767 <|endoftext|>
    CHECK(chat.stop_tokens() == std::vector<TokenId>{764, 766, 5, 767});
    kvtest::write_text(dir / "generation_config.json", "{\"eos_token_id\": 5}");
    CHECK(ChatConversation::open(Model::load(dir.string())).stop_tokens() == std::vector<TokenId>{764, 5, 767});
    kvtest::write_text(dir / "generation_config.json", "{\"eos_token_id\": \"</s>\"}");
    CHECK_THROWS_WITH(ChatConversation::open(Model::load(dir.string())), Catch::Contains("eos_token_id is not an int"));
    // a template that writes plain text after a reply: no end of turn from it, the others remain
    fs::remove(dir / "generation_config.json");
    kvtest::write_text(dir / "chat_template.jinja", "{% for m in messages %}{{ m.content }}\n\n{% endfor %}");
    CHECK(ChatConversation::open(Model::load(dir.string())).stop_tokens() == std::vector<TokenId>{767});
    // and a vocabulary without <|endoftext|>: nothing would end a reply but --max-new-tokens; refused
    std::string vocab = kvtest::read_text(dir / "vocab.json");
    const size_t at = vocab.find("\"<|endoftext|>\"");
    REQUIRE(at != std::string::npos);
    vocab.replace(at, 15, "\"<|plain767|>\"");
    kvtest::write_text(dir / "vocab.json", vocab);
    CHECK_THROWS_WITH(ChatConversation::open(Model::load(dir.string())), Catch::Contains("no token ends a reply"));
}
