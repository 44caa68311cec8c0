#include "session.h"

#include <algorithm>

#include "clock.h"
#include "errors.h"

namespace kvscope {
void validate(const SessionOptions& o) {
    if (o.prefill_chunk < 0) throw UsageError("prefill chunk must be >= 1 (or 0 for the whole prompt)");
    if (o.window < 0) throw UsageError("window must be >= 1 (or 0 for no window)");
    if (o.max_new_tokens < 1) throw UsageError("max new tokens must be >= 1, got " + std::to_string(o.max_new_tokens));
    if (o.n_top < 0) throw UsageError("n_top must be >= 0");
    validate(o.sampling);
}

Session::Session(std::shared_ptr<const Model> model, SessionOptions options)
    : model_(std::move(model)), options_(options) {
    validate(options_);
}

void Session::set_prompt(std::vector<TokenId> prompt) {
    const ModelConfig& cfg = model_->config();
    if (prompt.empty()) throw UsageError("the prompt is empty");
    for (TokenId id : prompt) model_->check_token(id);
    const int64_t n_total = int64_t(prompt.size()) + options_.max_new_tokens;
    if (n_total > cfg.n_ctx)
        throw UsageError("prompt (" + std::to_string(prompt.size()) + " tokens) + max new tokens (" +
                         std::to_string(options_.max_new_tokens) + ") = " + std::to_string(n_total) +
                         " exceeds the model's n_positions (" + std::to_string(cfg.n_ctx) +
                         "); positions are absolute, a window does not lift this");
    prompt_ = std::move(prompt);
    const int64_t P = int64_t(prompt_.size());
    const int64_t chunk = options_.prefill_chunk > 0 ? std::min(options_.prefill_chunk, P) : P;
    // Without a window every position stays alive. With one, a chunk of n needs W-1+n slots (kv_cache.h).
    int64_t capacity = n_total;
    if (options_.window > 0) capacity = std::min(n_total, options_.window + chunk - 1);
    cache_ = model_->make_cache(capacity, options_.window);
    workspace_ = Workspace(cfg, capacity, 1, capacity);
    sampler_ = Sampler(options_.sampling, cfg.n_vocab);
    logits_.assign(size_t(cfg.n_vocab), 0.0f);
    generated_.reserve(size_t(options_.max_new_tokens));
    latest_ = StepRecord{};
    latest_.top.reserve(size_t(options_.n_top));
    reset();
}

void Session::reset() {
    generated_.clear();
    n_prompt_done_ = 0;
    cache_.reset();
    sampler_.set_rng_state(options_.sampling.seed);
    trace_.clear();
    undo_.clear();
    latest_.tokens.clear();
    latest_.index = 0;
    std::fill(logits_.begin(), logits_.end(), 0.0f);
}

Session::Next Session::next() const {
    if (prompt_.empty()) return Next::Done;
    if (n_prompt_done_ < int64_t(prompt_.size())) return Next::Prefill;
    if (int64_t(generated_.size()) < options_.max_new_tokens) return Next::Decode;
    return Next::Done;
}

const StepRecord& Session::step() {
    switch (next()) {
        case Next::Prefill: return prefill_step();
        case Next::Decode: return decode_step();
        case Next::Done: break;
    }
    throw UsageError(prompt_.empty() ? "no prompt is set" : "generation is finished: step back or reset");
}

std::vector<TokenId> Session::all_tokens() const {
    std::vector<TokenId> all = prompt_;
    all.insert(all.end(), generated_.begin(), generated_.end());
    return all;
}

void Session::prepare(Pending& p, Phase phase) {
    if (phase == Phase::Prefill) {
        if (next() != Next::Prefill) throw UsageError("the prompt is already in the cache: decode instead");
        const int64_t P = int64_t(prompt_.size());
        const int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : P;
        const int64_t n = std::min(chunk, P - n_prompt_done_);
        p.tokens = std::span<const TokenId>(prompt_).subspan(size_t(n_prompt_done_), size_t(n));
        p.predicts = n_prompt_done_ + n == P;
    } else {
        if (next() != Next::Decode)
            throw UsageError(next() == Next::Prefill ? "prefill the prompt first" : "generation is finished");
        p.tokens = std::span<const TokenId>(generated_).last(1);
        p.predicts = true;
    }
    p.phase = phase;
    p.started = seconds_now();
    if (options_.history) {
        Undo u;
        u.cache = cache_.checkpoint(int64_t(p.tokens.size()));
        u.rng_state = sampler_.rng_state();
        u.n_generated = generated_.size();
        u.n_prompt_done = n_prompt_done_;
        u.logits = logits_;
        undo_.push_back(std::move(u));
    }
    p.chunk = Chunk{};
    p.chunk.cache = &cache_;
    p.chunk.tokens = p.tokens.data();
    p.chunk.n_tokens = int64_t(p.tokens.size());
    p.chunk.logits = p.predicts ? logits_.data() : nullptr;
    p.chunk.probe = options_.record ? &p.probe : nullptr;
}

const StepRecord& Session::finish(Pending& p, double flops, int64_t first_computed, int64_t n_computed,
                                  int64_t n_reused) {
    const ModelConfig& cfg = model_->config();
    // With history the record is a new immutable object in the trace; without, `latest_` is refilled in
    // place, its vectors keeping their capacity, so a decode step allocates nothing.
    std::shared_ptr<StepRecord> fresh = options_.history ? std::make_shared<StepRecord>() : nullptr;
    StepRecord* rec = fresh ? fresh.get() : &latest_;
    rec->index = options_.history ? int64_t(trace_.size()) : latest_.index + (latest_.tokens.empty() ? 0 : 1);
    rec->phase = p.phase;
    rec->cache_on = options_.use_cache;
    rec->first_position = cache_.next_position() - int64_t(p.tokens.size());
    rec->tokens.assign(p.tokens.begin(), p.tokens.end());  // before generated_ grows under the span
    rec->n_rows_computed = n_computed;
    rec->first_computed_position = first_computed;
    rec->n_rows_reused = n_reused;
    rec->window = options_.window;
    rec->shift_cache_hidden_pairs = shift_cache_hidden_pairs(rec->first_position, int64_t(rec->tokens.size()), options_.window);
    rec->n_layer = cfg.n_layer;
    rec->n_head = cfg.n_head;
    rec->head_dim = cfg.head_dim();
    if (p.phase == Phase::Prefill) n_prompt_done_ += int64_t(rec->tokens.size());
    if (p.predicts) {
        const TokenId chosen = sampler_.sample(logits_.data());
        generated_.push_back(chosen);
        rec->chosen = chosen;
        sampler_.top(options_.n_top, rec->top);
        rec->entropy = sampler_.entropy();
        rec->logits.assign(logits_.begin(), logits_.end());
    } else {
        rec->chosen.reset();
        rec->top.clear();
        rec->entropy = 0;
        rec->logits.clear();
    }
    rec->flops = flops;
    rec->seconds = seconds_now() - p.started;
    rec->cache_capacity = cache_.capacity();
    rec->cache_used = cache_.used();
    rec->write_slot = cache_.write_slot();
    rec->next_position = cache_.next_position();
    rec->cache_bytes_used = cache_.bytes_used();
    rec->cache_bytes_capacity = cache_.bytes_capacity();
    rec->slot_positions.assign(cache_.slot_positions().begin(), cache_.slot_positions().end());
    if (options_.record) {
        rec->q = std::move(p.probe.q);
        rec->k = std::move(p.probe.k);
        rec->v = std::move(p.probe.v);
    }
    if (!fresh) return latest_;
    trace_.append(std::move(fresh));
    return trace_.back();
}

const StepRecord* Session::latest() const {
    if (options_.history) return trace_.empty() ? nullptr : &trace_.back();
    return latest_.tokens.empty() ? nullptr : &latest_;
}

const StepRecord& Session::run_uncached(Pending& p) {
    // Recompute every position 0..end from an empty cache, as a model without a KV cache must. The
    // ring may be smaller than the sequence (window), so the recompute runs in chunks that fit it;
    // rows do not depend on chunking (kernels.h), so this is the same arithmetic as one big pass.
    const std::vector<TokenId> all = all_tokens();
    const int64_t end = cache_.next_position() + p.chunk.n_tokens;
    cache_.reset();
    // A chunk of n needs W-1+n slots once the ring wraps. When the sequence fits the ring it never
    // wraps (and W may exceed the ring: set_prompt clamps the capacity to the sequence), so one pass.
    const int64_t piece = options_.window > 0 && end > cache_.capacity() ? cache_.capacity() - options_.window + 1
                                                                         : cache_.capacity();
    double flops = 0;
    ChunkProbe whole;
    const int64_t C = model_->config().n_embd, L = model_->config().n_layer;
    if (options_.record)
        for (auto* buf : {&whole.q, &whole.k, &whole.v}) buf->assign(size_t(L * end * C), 0.0f);
    for (int64_t start = 0; start < end; start += piece) {
        const int64_t n = std::min(piece, end - start);
        Chunk ch;
        ch.cache = &cache_;
        ch.tokens = all.data() + start;
        ch.n_tokens = n;
        ch.logits = start + n == end ? p.chunk.logits : nullptr;
        ch.probe = options_.record ? &p.probe : nullptr;
        forward(*model_, std::span<Chunk>(&ch, 1), workspace_);
        flops += ch.flops;
        if (options_.record)
            for (int64_t il = 0; il < L; ++il)
                for (auto [src, dst] : {std::pair{&p.probe.q, &whole.q}, {&p.probe.k, &whole.k}, {&p.probe.v, &whole.v}})
                    std::copy(src->begin() + il * n * C, src->begin() + (il + 1) * n * C,
                              dst->begin() + (il * end + start) * C);
    }
    p.probe = std::move(whole);
    return finish(p, flops, 0, end, 0);
}

const StepRecord& Session::prefill_step() {
    Pending p;
    prepare(p, Phase::Prefill);
    if (!options_.use_cache) return run_uncached(p);
    const int64_t first = cache_.next_position();
    forward(*model_, std::span<Chunk>(&p.chunk, 1), workspace_);
    return finish(p, p.chunk.flops, first, p.chunk.n_tokens, first - cache_.visible_from(first));
}

const StepRecord& Session::decode_step() {
    Pending p;
    prepare(p, Phase::Decode);
    if (!options_.use_cache) return run_uncached(p);
    const int64_t first = cache_.next_position();
    forward(*model_, std::span<Chunk>(&p.chunk, 1), workspace_);
    return finish(p, p.chunk.flops, first, 1, first - cache_.visible_from(first));
}

bool Session::step_back() {
    if (undo_.empty()) return false;
    Undo& u = undo_.back();
    cache_.restore(u.cache);
    sampler_.set_rng_state(u.rng_state);
    generated_.resize(u.n_generated);
    n_prompt_done_ = u.n_prompt_done;
    logits_ = std::move(u.logits);
    undo_.pop_back();
    trace_.truncate(trace_.size() - 1);
    return true;
}

Workspace Session::make_batch_workspace(std::span<Session* const> sessions) {
    int64_t rows = 0, keys = 0;
    for (Session* s : sessions) {
        rows += s->cache_.capacity();
        keys = std::max(keys, s->cache_.capacity());
    }
    return Workspace(sessions.front()->model_->config(), rows, int64_t(sessions.size()), keys);
}

void Session::step_batch(std::span<Session* const> sessions, Workspace& ws) {
    std::vector<Session*> together;
    for (Session* s : sessions) {
        if (s->next() == Next::Done) continue;
        if (!s->options_.use_cache) s->step();  // a recompute has nothing to share with the others
        else together.push_back(s);
    }
    if (together.empty()) return;
    std::vector<Pending> pending(together.size());
    std::vector<Chunk> chunks;
    std::vector<int64_t> first(together.size());
    for (size_t i = 0; i < together.size(); ++i) {
        Session* s = together[i];
        s->prepare(pending[i], s->next() == Next::Prefill ? Phase::Prefill : Phase::Decode);
        first[i] = s->cache_.next_position();
        chunks.push_back(pending[i].chunk);
    }
    try {
        forward(*together.front()->model_, std::span<Chunk>(chunks), ws);
    } catch (...) {
        // forward() checks every chunk before it writes, so the caches are untouched: only the undo
        // entries prepare() pushed must go, or a later step_back would undo a step that never ran.
        for (Session* s : together) s->undo_.pop_back();
        throw;
    }
    for (size_t i = 0; i < together.size(); ++i) {
        Session* s = together[i];
        s->finish(pending[i], chunks[i].flops, first[i], chunks[i].n_tokens,
                  first[i] - s->cache_.visible_from(first[i]));
    }
}

}  // namespace kvscope
