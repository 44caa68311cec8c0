#include "analysis/heads.h"

#include <algorithm>

#include "base/errors.h"
#include "run/session.h"
#include "text/corpus.h"

namespace kvscope {
namespace {

// Runs the whole prompt as one recorded prefill step and calls fn(attention map) for every head.
template <typename F> void for_each_head(const std::shared_ptr<const Model>& model, const std::vector<TokenId>& prompt, F&& fn) {
    SessionOptions so;
    so.max_new_tokens = 1;
    so.record = true;
    Session session(model, so);
    session.set_prompt(prompt);
    session.step(Phase::Prefill);
    const ModelConfig& c = model->config();
    for (int64_t il = 0; il < c.n_layer; ++il)
        for (int64_t h = 0; h < c.n_head; ++h) fn(il * c.n_head + h, attention_map(session.trace(), 0, il, h));
}

// Weight from query position q to key position k (0 when k is not a column).
double weight(const AttentionMap& m, int64_t q, int64_t k) {
    const int64_t r = q - m.query_positions.front(), col = k - m.key_positions.front();
    if (r < 0 || r >= m.n_query || col < 0 || col >= m.n_key) return 0;
    return m.weights[size_t(r * m.n_key + col)];
}

// Adds prompt's scores, divided by n_prompts: previous-token over it, induction over it repeated once.
void add_scores(const std::shared_ptr<const Model>& model, const std::vector<TokenId>& text, const std::vector<TokenId>& span,
                double n_prompts, std::vector<HeadScore>& scores) {
    const int64_t n_text = int64_t(text.size()), n_span = int64_t(span.size());
    for_each_head(model, text, [&](int64_t i, const AttentionMap& m) {
        double sum = 0;
        for (int64_t t = 1; t < n_text; ++t) sum += weight(m, t, t - 1);
        scores[size_t(i)].previous_token += sum / double(n_text - 1) / n_prompts;
    });
    std::vector<TokenId> rep = span;
    rep.insert(rep.end(), span.begin(), span.end());
    for_each_head(model, rep, [&](int64_t i, const AttentionMap& m) {
        double sum = 0;
        for (int64_t k = 0; k + 1 < n_span; ++k) sum += weight(m, n_span + k, k + 1);
        scores[size_t(i)].induction += sum / double(n_span - 1) / n_prompts;
    });
}

}  // namespace

std::vector<HeadScore> head_scores(std::shared_ptr<const Model> model, const HeadProbeOptions& o) {
    if (o.prompts.empty() && !model->tokenizer())
        throw LoadError(model->dir(), "has no vocab.json/merges.txt", "head scores probe with text and letter tokens");
    const ModelConfig& c = model->config();
    if (c.encoder_decoder)
        throw UsageError("head scores probe a decoder-only model's self-attention on prompts alone; " + model->dir() +
                         " is an encoder-decoder model, whose decoder also needs a source");
    std::vector<HeadScore> scores(size_t(c.n_layer * c.n_head));
    for (int64_t il = 0; il < c.n_layer; ++il)
        for (int64_t h = 0; h < c.n_head; ++h) scores[size_t(il * c.n_head + h)].layer = il, scores[size_t(il * c.n_head + h)].head = h;

    if (!o.prompts.empty()) {
        for (const std::vector<TokenId>& p : o.prompts) {
            const int64_t n = int64_t(p.size());
            if (n < 2) throw UsageError("head scores need a prompt of 2 or more tokens, got " + std::to_string(n));
            if (2 * n >= c.n_ctx)
                throw UsageError("head scores repeat the prompt once (induction): " + std::to_string(n) + " tokens make " +
                                 std::to_string(2 * n) + " positions, the model has " + std::to_string(c.n_ctx) +
                                 " (max_position_embeddings); give at most " + std::to_string((c.n_ctx - 1) / 2));
        }
        for (const std::vector<TokenId>& p : o.prompts) add_scores(model, p, p, double(o.prompts.size()), scores);
        return scores;
    }
    const Corpus corpus(*model->tokenizer(), o.seed);
    const int64_t n_text = std::clamp<int64_t>(o.text_tokens, 2, c.n_ctx - 1);
    const int64_t span = std::clamp<int64_t>(o.span, 2, (c.n_ctx - 1) / 2);
    const int64_t n_prompts = std::max<int64_t>(1, o.n_prompts);
    for (int64_t p = 0; p < n_prompts; ++p) {
        Rng rng(mix_seed(o.seed, 2, uint64_t(p)));
        add_scores(model, corpus.text(mix_seed(o.seed, 1, uint64_t(p)), n_text), corpus.random_span(rng, span),
                   double(n_prompts), scores);
    }
    return scores;
}

}  // namespace kvscope
