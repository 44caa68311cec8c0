#pragma once
// What a lesson step checks before the learner goes on: a fixed vocabulary of predicates over the
// Snapshot (the engine's record: step records, the shadow run without the cache, the block pool, the
// lab's report), each declared once in lesson_checks.cpp's table with the fields it reads and the code
// that evaluates it. docs/window.md "Lessons" lists them.
//
//   LessonCheck                     one predicate as a lesson file gives it (`is` and its fields)
//   lesson_check_fields(is)         the fields predicate `is` reads; nullptr when there is no such predicate
//   lesson_check_names()            "phase, cache_rows, ..." for messages
//   CheckResult, CheckValue         waiting / passed / failed, one line saying why, the values compared
//   check_all(checks, snap)         every predicate; the first that does not pass decides the state
//
// Threads: pure functions of their arguments.
#include <cstdint>
#include <string>
#include <vector>

#include "logic/snapshot.h"

namespace kvscope::gui {

struct LessonCheck {
    std::string is;
    std::string phase;              // phase: "prefill" | "decode"
    std::string equals;             // cache_rows, rows_computed, visible_keys: a number or a reference name
    int64_t layer = -1, head = -1;  // induction, visible_keys, rotary_score: -1 = the default (see the table)
    double min = 0;                 // induction (weight), flops_saved (ratio), blocks_shared (count)
    std::string config;             // lab_tradeoff: the lab configuration's name
};

const std::vector<const char*>* lesson_check_fields(const std::string& is);
std::string lesson_check_names();

struct CheckValue {
    std::string name;               // "<is>" or "<is>.<what>", e.g. "flops_saved.ratio"
    double actual = 0, expected = 0;
};
struct CheckResult {
    enum class State { Waiting, Passed, Failed };
    State state = State::Waiting;
    std::string message;            // waiting: what to do; passed: what the record shows; failed: expected vs shown
    std::vector<CheckValue> values; // what was compared
    bool passed() const { return state == State::Passed; }
};
const char* check_state_name(CheckResult::State s);  // "waiting" | "passed" | "failed"

CheckResult check_all(const std::vector<LessonCheck>& checks, const Snapshot& snap);

}  // namespace kvscope::gui
