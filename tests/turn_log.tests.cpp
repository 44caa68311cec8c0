// The turns of a session and how appended turns are taken back (turn_log.h).
//
// Independent computation: the turns are written down here with the positions a chat of those lengths
// has (each turn starts after the previous turns' prompt and reply), and step_back order is last in,
// first out, reached only at the step count the append was made at.
#include <catch2/catch.hpp>

#include <vector>

#include "run/turn_log.h"

using namespace kvscope;

namespace {

// Three turns: prompts of 5, 3 and 2 tokens, replies of 4 and 6 tokens between them.
const std::vector<Turn> kTurns = {Turn{0, {1, 2, 3, 4, 5}, "user", 4}, Turn{5 + 4, {6, 7, 8}, "user", 6},
                                  Turn{5 + 4 + 3 + 6, {9, 10}, "tool", 1}};

TurnUndo undo_at(size_t n_steps, size_t n_prompt, std::vector<TokenId> generated, int64_t max_new) {
    return TurnUndo{n_steps, n_prompt, std::move(generated), int64_t(n_prompt), max_new};
}

}  // namespace

TEST_CASE("turns are kept oldest first and taken back newest first", "[turn_log]") {
    TurnLog log;
    log.start(kTurns[0]);
    CHECK(log.size() == 1);
    CHECK_FALSE(log.appended_at(0));
    log.append(kTurns[1], undo_at(2, 5, {11, 12, 13, 14}, 4));  // the session had 2 undo entries then
    log.append(kTurns[2], undo_at(7, 12, {21, 22, 23, 24, 25, 26}, 6));
    REQUIRE(log.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
        CHECK(log[i].first_position == kTurns[i].first_position);
        CHECK(log[i].ids == kTurns[i].ids);
        CHECK(log.list()[i].role == kTurns[i].role);
    }
    CHECK(log.back().first_position == 18);
    // The newest append is reached only at the step count it was made at.
    CHECK_FALSE(log.appended_at(6));
    CHECK(log.appended_at(7));
    const TurnUndo turn_two = log.take_back();
    CHECK(turn_two.n_prompt == 12);
    CHECK(turn_two.generated == std::vector<TokenId>{21, 22, 23, 24, 25, 26});
    CHECK(turn_two.max_new_tokens == 6);
    CHECK(log.size() == 2);
    CHECK(log.appended_at(2));
    const TurnUndo first = log.take_back();
    CHECK(first.n_prompt == 5);
    CHECK(first.generated == std::vector<TokenId>{11, 12, 13, 14});
    CHECK(log.size() == 1);
    CHECK_FALSE(log.appended_at(0));
}

TEST_CASE("keep_first drops later turns and what would take them back", "[turn_log]") {
    TurnLog log;
    log.start(kTurns[0]);
    log.append(kTurns[1], undo_at(3, 5, {1, 2, 3, 4}, 4));
    log.append(kTurns[2], undo_at(5, 12, {5, 6, 7, 8, 9, 10}, 6));
    CHECK(log.appended_at(5));
    log.keep_first();
    REQUIRE(log.size() == 1);
    CHECK(log.front().n_appended() == 5);
    CHECK_FALSE(log.appended_at(3));
    log.start(kTurns[1]);  // a new prompt replaces the log
    CHECK(log.size() == 1);
    CHECK(log.front().first_position == 9);
}

TEST_CASE("without history a turn cannot be taken back", "[turn_log]") {
    TurnLog log;
    log.start(kTurns[0]);
    log.append(kTurns[1], std::nullopt);
    log.append(kTurns[2], std::nullopt);
    CHECK(log.size() == 3);
    for (size_t n_steps : {0, 1, 2, 3}) CHECK_FALSE(log.appended_at(n_steps));
}
