#include "analysis/logit_lens.h"

#include <cmath>
#include <string>

#include "base/errors.h"
#include "forward/layers.h"
#include "kernels/kernels.h"

namespace kvscope {

LogitLens logit_lens(const Model& model, const RecordedRows& rows, int64_t row, int64_t n_top) {
    const ModelConfig& cfg = model.config();
    const Weights& w = model.weights();
    const int64_t L = cfg.n_layer, C = cfg.n_embd, V = cfg.n_vocab;
    if (rows.residual.empty()) throw UsageError("the logit lens needs a step run with recording on");
    const int64_t R = int64_t(rows.residual.size()) / ((L + 1) * C);
    if (row < 0 || row >= R)
        throw UsageError("row " + std::to_string(row) + " is outside the step's " + std::to_string(R) + " computed rows");
    LogitLens lens;
    lens.row = row;
    std::vector<float> normed(static_cast<size_t>(C)), logits(static_cast<size_t>(V));  // (C), (V)
    Sampler greedy(SamplerOptions{}, V);  // softmax at temperature 1, for probabilities and entropy
    for (int64_t d = 0; d <= L; ++d) {
        const float* x = rows.residual.data() + (d * R + row) * C;
        // As forward() turns its last row into logits: final norm, output layer, soft-cap.
        if (w.ln_f_weight) normalize(cfg, normed.data(), x, w.ln_f_weight, w.ln_f_bias, 1);
        else std::copy(x, x + C, normed.begin());
        matmul_nk(logits.data(), normed.data(), w.lm_head_weight, w.lm_head_bias, 1, C, V);
        if (cfg.final_logit_softcap > 0) {
            const float cap = float(cfg.final_logit_softcap);
            for (float& v : logits) v = std::tanh(v / cap) * cap;
        }
        greedy.sample(logits.data());
        lens.depths.push_back({greedy.top(n_top), greedy.entropy()});
    }
    return lens;
}

}  // namespace kvscope
