#include "run/turn_log.h"

#include <cassert>

namespace kvscope {

void TurnLog::start(Turn first) {
    turns_ = {std::move(first)};
    undo_.clear();
}

void TurnLog::append(Turn turn, std::optional<TurnUndo> undo) {
    if (undo) undo_.push_back(std::move(*undo));
    turns_.push_back(std::move(turn));
}

TurnUndo TurnLog::take_back() {
    assert(!undo_.empty() && turns_.size() > 1 && "take_back: no appended turn to take back");
    TurnUndo u = std::move(undo_.back());
    undo_.pop_back();
    turns_.pop_back();
    return u;
}

void TurnLog::keep_first() {
    if (turns_.size() > 1) turns_.resize(1);
    undo_.clear();
}

}  // namespace kvscope
