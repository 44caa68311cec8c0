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
    const std::vector<TokenId> first = chat.tokens_for(u0, std::nullopt);
    CHECK(first == encode_chat(tok, chat.chat_template().render({system, u0}, true)));
    chat.add(u0);

    const std::vector<TokenId> whole =
        encode_chat(tok, chat.chat_template().render({system, u0, {"assistant", "Hi!"}, u1}, true));
    const std::vector<TokenId> reply = encode_chat(tok, "Hi!");
    SECTION("the reply stopped at the end of turn: it is in the cache") {
        const std::vector<TokenId> next = chat.tokens_for(u1, chat.end_of_turn());
        CHECK(concat(concat(concat(first, reply), {765}), next) == whole);
    }
    SECTION("the reply ran out of tokens: the next turn closes it") {
        const std::vector<TokenId> next = chat.tokens_for(u1, std::nullopt);
        CHECK(next.front() == 765);
        CHECK(concat(concat(first, reply), next) == whole);
    }
    SECTION("truncate goes back to an earlier turn") {
        const std::vector<TokenId> next = chat.tokens_for(u1, chat.end_of_turn());
        chat.add(u1);
        CHECK(chat.n_turns() == 2);
        chat.truncate(1);
        CHECK(chat.n_turns() == 1);
        CHECK(chat.tokens_for(u1, chat.end_of_turn()) == next);
        chat.truncate(0);
        CHECK(chat.tokens_for(u0, std::nullopt) == first);
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
