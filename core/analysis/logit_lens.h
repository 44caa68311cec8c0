#pragma once
// The logit lens: what the model would predict if it stopped after each layer. The residual stream a
// step recorded (RecordedRows::residual) goes through the model's final norm and output layer at every
// depth, exactly as the last layer's output does in the forward pass (and the final soft-cap, Gemma 3):
// depth L reproduces the step's own logits bit for bit.
//
//   logit_lens(model, rows, row, n_top)   depths 0..L of computed row `row`: 0 = the embeddings, d = after
//                                         layer d - 1 ... L = after the last layer; each with its top
//                                         tokens (softmax probabilities) and entropy. Throws UsageError
//                                         when the step was run without recording or `row` is outside it
#include <cstdint>
#include <vector>

#include "forward/model.h"
#include "run/sampler.h"
#include "run/trace.h"

namespace kvscope {

struct LensDepth {
    std::vector<TokenProbability> top;  // (n_top) most likely tokens, descending
    double entropy = 0;                 // nats
};

struct LogitLens {
    int64_t row = 0;                    // the computed row read
    std::vector<LensDepth> depths;      // (L + 1)
};

LogitLens logit_lens(const Model& model, const RecordedRows& rows, int64_t row, int64_t n_top);

}  // namespace kvscope
