#pragma once
// What a session produced, collected for bit-exact comparisons between runs (session and paged cache
// tests): the generated tokens, every prediction's logits, and the step records.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "run/session.h"
#include "test_models.h"

namespace kvtest {

struct Run {
    std::vector<int32_t> generated;
    std::vector<std::vector<float>> logits;  // of each step that predicted a token, in order
    std::vector<std::shared_ptr<const kvscope::StepRecord>> records;
};

inline Run collect(const kvscope::Session& s) {
    Run r;
    r.generated = s.parts().generated;
    for (size_t i = 0; i < s.trace().size(); ++i) {
        r.records.push_back(s.trace().share(i));
        if (!s.trace()[i].prediction.logits.empty()) r.logits.push_back(s.trace()[i].prediction.logits);
    }
    return r;
}

// A session over `prompt` with options `o`, stepped until done.
inline Run run_to_end(std::shared_ptr<const kvscope::Model> model, const kvscope::SessionOptions& o,
                      const std::vector<int32_t>& prompt) {
    kvscope::Session s(std::move(model), o);
    s.set_prompt(prompt);
    while (s.next() != kvscope::Session::Next::Done) s.step();
    return collect(s);
}

inline void require_identical(const Run& got, const Run& want) {
    REQUIRE(got.generated == want.generated);
    REQUIRE(got.logits.size() == want.logits.size());
    for (size_t i = 0; i < got.logits.size(); ++i) {
        const std::string m = first_mismatch(got.logits[i], want.logits[i]);
        INFO("prediction " << i << ": " << m);
        REQUIRE(m.empty());
    }
}

}  // namespace kvtest
