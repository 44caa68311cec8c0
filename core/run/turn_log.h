#pragma once
// The turns of one Session: where each set_prompt / append_turn put its tokens, and how to take an
// appended turn back. Session owns one; callers read it through Session::parts().turns.
//
//   start(first)                one turn (set_prompt): the log holds only it, nothing to take back
//   append(turn, undo)          a new turn after the others; `undo` (history on) says how to take it back
//   appended_at(n_steps)        the newest change is an append made when the session had n_steps undo entries
//   take_back()                 drop the newest turn; returns what it replaced (prompt size, reply, ...)
//   keep_first()                back to the first turn alone (Session::reset)
//   forget_undo()               no earlier turn can be taken back any more (a chat turn that rolled the
//                               cache back: Session::append_turn with keep)
//   list() / size() / [i]       the turns, oldest first
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "run/trace.h"

namespace kvscope {

struct TurnUndo {                // what append_turn changed, for step_back
    size_t n_steps = 0;          // the session's undo entries when the turn was appended
    size_t n_prompt = 0;         // prompt length before the turn
    std::vector<TokenId> generated;  // the reply the turn moved into the prompt
    int64_t n_prompt_done = 0;
    int64_t max_new_tokens = 0;
};

class TurnLog {
public:
    void start(Turn first);
    void append(Turn turn, std::optional<TurnUndo> undo);
    bool appended_at(size_t n_steps) const { return !undo_.empty() && undo_.back().n_steps == n_steps; }
    TurnUndo take_back();        // asserts appended_at() held for some step count
    void keep_first();
    void forget_undo() { undo_.clear(); }

    const std::vector<Turn>& list() const { return turns_; }
    size_t size() const { return turns_.size(); }
    bool empty() const { return turns_.empty(); }
    const Turn& operator[](size_t i) const { return turns_[i]; }
    const Turn& front() const { return turns_.front(); }
    const Turn& back() const { return turns_.back(); }
    Turn& front() { return turns_.front(); }
    std::vector<Turn>::const_iterator begin() const { return turns_.begin(); }
    std::vector<Turn>::const_iterator end() const { return turns_.end(); }

private:
    std::vector<Turn> turns_;
    std::vector<TurnUndo> undo_;  // the turns since the last forget_undo() when history is on, else empty
};

}  // namespace kvscope
