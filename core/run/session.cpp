#include "run/session.h"

#include <algorithm>

#include "base/clock.h"
#include "base/errors.h"
#include "run/options.h"

namespace kvscope {
// The checks live with the option table (run/options.h), which every caller shares.
void validate(const SessionOptions& o) { check(RunOptions{o, GroupOptions{}}, {}, neutral_words); }

Session::Session(std::shared_ptr<const Model> model, SessionOptions options)
    : model_(std::move(model)), options_(options) {
    validate(options_);
    validate(options_.kv_quant, model_->config().head_dim());
    for (TokenId id : options_.forced_tokens) model_->check_token(id);
    window_ = options_.window;
    sinks_ = options_.sinks;
    if (options_.eviction.kind == EvictionPolicyKind::WindowSinks) {
        // The window rule inside a chunk; the policy's flags then mark what left it (eviction.h).
        window_ = options_.eviction.budget - options_.eviction.sinks + 1;
        sinks_ = options_.eviction.sinks;
    }
    if (options_.kv_quant.format == KvQuant::Int4 && window_ > 0)
        throw UsageError("--kv-quant int4 groups keys of consecutive positions and keeps them all: leave out --window");
    // A model's own sliding windows are part of its computation; a second, user-chosen window on top
    // would be neither the model nor a clean experiment, so the two are not combined.
    if (window_ > 0 && model_->config().has_sliding_layers())
        throw UsageError("this model has its own sliding window (" + model_->config().describe_windows() +
                         "): --window cannot be combined with it");
    // Learned or sinusoidal positions are added to the input once; only rotary keys carry a position
    // that attention can re-read, so only they can be re-numbered inside the cache.
    if (options_.sink_positions == SinkPositions::Cache && model_->config().family != Family::Llama)
        throw UsageError("sink positions \"cache\" need rotary positions; this model adds its positions to the input "
                         "(" + std::string(to_string(model_->config().family)) + "), so its sinks keep text positions");
}

void Session::set_source(std::vector<TokenId> source) {
    const ModelConfig& cfg = model_->config();
    if (!cfg.encoder_decoder) throw UsageError("this model is decoder-only: it takes no source");
    if (source.empty()) throw UsageError("the source is empty");
    if (int64_t(source.size()) > cfg.n_ctx)
        throw UsageError("the source has " + std::to_string(source.size()) + " tokens, the model's n_positions is " +
                         std::to_string(cfg.n_ctx));
    for (TokenId id : source) model_->check_token(id);
    source_ = std::move(source);
    prompt_.clear();  // set_prompt again: the workspace is sized for the source too
}

void Session::set_prompt(std::vector<TokenId> prompt) {
    const ModelConfig& cfg = model_->config();
    if (cfg.encoder_decoder) {
        if (source_.empty()) throw UsageError("an encoder-decoder model needs a source first (--source or --source-ids)");
        prompt.insert(prompt.begin(), TokenId(cfg.decoder_start_token_id));
        // The decoder's K/V depend on the source through cross-attention; blocks and files know only tokens.
        if (options_.share_prefix || prompt_cache_)
            throw UsageError("prefix sharing and prompt caches key K/V by the decoder's tokens, but an encoder-decoder's "
                             "K/V also depend on the source: not available for this model");
    }
    if (prompt.empty()) throw UsageError("the prompt is empty");
    for (TokenId id : prompt) model_->check_token(id);
    const int64_t n_total = int64_t(prompt.size()) + options_.max_new_tokens;
    if (n_total > cfg.n_ctx)
        throw UsageError("prompt (" + std::to_string(prompt.size()) + " tokens) + max new tokens (" +
                         std::to_string(options_.max_new_tokens) + ") = " + std::to_string(n_total) +
                         " exceeds the model's " + cfg.positions_key() + " (" + std::to_string(cfg.n_ctx) +
                         "); positions are absolute, a window does not lift this");
    prompt_ = std::move(prompt);
    const int64_t P = int64_t(prompt_.size());
    const int64_t chunk = options_.prefill_chunk > 0 ? std::min(options_.prefill_chunk, P) : P;
    int64_t capacity = n_total;
    if (options_.block_size > 0) {
        std::shared_ptr<BlockPool> pool = shared_pool_;
        if (!pool)
            pool = std::make_shared<BlockPool>(cfg.n_layer, cfg.kv_heads(), cfg.head_dim(), options_.block_size,
                                               pool_blocks_for(n_total, options_.block_size), model_->weights().bf16);
        else if (pool->n_layer() != cfg.n_layer || pool->n_head() != cfg.kv_heads() || pool->head_dim() != cfg.head_dim() ||
                 pool->block_size() != options_.block_size || pool->bf16() != model_->weights().bf16)
            throw UsageError("the shared block pool was made for another model shape, block size or KV dtype");
        cache_ = KvCache(std::move(pool), n_total, window_, sinks_, sequence_);
        cache_.set_sink_positions(options_.sink_positions);
    } else {
        capacity = chunk_capacity(n_total, chunk);
        cache_ = model_->make_cache(capacity, window_, sinks_, options_.kv_quant);
        cache_.set_sink_positions(options_.sink_positions);
    }
    workspace_ = Workspace(cfg, capacity, 1, std::max(capacity, int64_t(source_.size())));
    sampler_ = Sampler(options_.sampling, cfg.n_vocab);
    policy_ = options_.eviction.active()
                  ? EvictionPolicy(options_.eviction, cfg.n_layer, cfg.kv_heads(), cfg.n_head / cfg.kv_heads(), n_total)
                  : EvictionPolicy{};
    logits_.assign(size_t(cfg.n_vocab), 0.0f);
    generated_.reserve(size_t(options_.max_new_tokens));
    latest_ = StepRecord{};
    pending_edits_.clear();
    pending_edit_undo_.clear();
    latest_.prediction.top.reserve(size_t(options_.n_top));
    turns_ = {Turn{0, P, "", options_.max_new_tokens}};
    turn_undo_.clear();
    reset();
}

int64_t Session::chunk_capacity(int64_t n_total, int64_t chunk) const {
    // Without a window every position stays alive. With one, a chunk of n needs W-1+n slots (kv_cache.h).
    if (window_ == 0) return n_total;
    return std::min(n_total, sinks_ + window_ + chunk - 1);
}

void Session::fit_turn(int64_t n_total, int64_t chunk) {
    if (cache_.pages().active()) {
        const int64_t B = options_.block_size, blocks = pool_blocks_for(n_total, B);
        std::shared_ptr<BlockPool> pool = cache_.pages().share_pool();
        if (shared_pool_ && window_ == 0) {
            // Other sequences draw on the same blocks: this turn may only take what is free now. (With a
            // window, blocks that leave it return to the pool as the turn runs: each step checks then.)
            const int64_t mapped = int64_t(cache_.pages().table().size());
            const int64_t needed = (n_total + B - 1) / B - mapped;
            if (needed > pool->n_free())
                throw UsageError("the shared block pool has " + std::to_string(pool->n_free()) + " of its " +
                                 std::to_string(pool->n_blocks()) + " blocks free; this turn needs " + std::to_string(needed) +
                                 " more to reach " + std::to_string(n_total) + " positions");
        } else if (!shared_pool_) {
            pool->grow(blocks);
        }
        cache_.grow(n_total);
    } else {
        cache_.grow(chunk_capacity(n_total, chunk));
    }
    policy_.grow(n_total);
    const int64_t capacity = cache_.capacity();
    if (capacity > workspace_.max_rows() || capacity > workspace_.max_keys())
        workspace_ = Workspace(model_->config(), capacity, 1, capacity);
}

void Session::append_turn(std::vector<TokenId> tokens, int64_t max_new_tokens, std::string role) {
    const ModelConfig& cfg = model_->config();
    if (max_new_tokens < 1) throw UsageError("max new tokens must be >= 1, got " + std::to_string(max_new_tokens));
    if (prompt_.empty()) {  // the first turn: a prompt like any other
        const int64_t before = options_.max_new_tokens;
        options_.max_new_tokens = max_new_tokens;
        try {
            set_prompt(std::move(tokens));
        } catch (...) {
            options_.max_new_tokens = before;
            throw;
        }
        turns_.front().role = std::move(role);
        return;
    }
    if (cfg.encoder_decoder)
        throw UsageError("a new turn appends to the decoder's cache, but an encoder-decoder's K/V also depend on the "
                         "source: not available for this model");
    if (next() == Next::Prefill) throw UsageError("the prompt is not all in the cache yet: prefill it before a new turn");
    if (tokens.empty()) throw UsageError("the new turn is empty");
    for (TokenId id : tokens) model_->check_token(id);
    const int64_t n_before = int64_t(prompt_.size() + generated_.size()), n_new = int64_t(tokens.size());
    const int64_t n_total = n_before + n_new + max_new_tokens;
    if (n_total > cfg.n_ctx)
        throw UsageError("the conversation so far (" + std::to_string(n_before) + " tokens) + this turn (" +
                         std::to_string(n_new) + ") + max new tokens (" + std::to_string(max_new_tokens) + ") = " +
                         std::to_string(n_total) + " exceeds the model's " + cfg.positions_key() + " (" +
                         std::to_string(cfg.n_ctx) + ")");
    // The first prefill step also feeds the reply's last token: sampled, never yet read by the model.
    const int64_t to_prefill = n_before - cache_.next_position() + n_new;
    fit_turn(n_total, options_.prefill_chunk > 0 ? std::min(options_.prefill_chunk, to_prefill) : to_prefill);
    if (options_.history)
        turn_undo_.push_back(TurnUndo{undo_.size(), prompt_.size(), generated_, n_prompt_done_, options_.max_new_tokens});
    prompt_.insert(prompt_.end(), generated_.begin(), generated_.end());
    prompt_.insert(prompt_.end(), tokens.begin(), tokens.end());
    generated_.clear();
    generated_.reserve(size_t(max_new_tokens));
    n_prompt_done_ = cache_.next_position();
    options_.max_new_tokens = max_new_tokens;
    turns_.push_back(Turn{n_before, n_new, std::move(role), max_new_tokens});
}

bool Session::stopped_by_token() const {
    return !generated_.empty() &&
           std::find(options_.stop_tokens.begin(), options_.stop_tokens.end(), generated_.back()) != options_.stop_tokens.end();
}

void Session::reset() {
    if (turns_.size() > 1) {
        prompt_.resize(size_t(turns_.front().n_appended));
        options_.max_new_tokens = turns_.front().max_new_tokens;
        turns_.resize(1);
    }
    turn_undo_.clear();
    generated_.clear();
    n_prompt_done_ = 0;
    cache_.reset();
    policy_.reset();
    encoder_.reset();
    sampler_.set_rng_state(options_.sampling.seed);
    trace_.clear();
    undo_.clear();
    pending_edits_.clear();
    pending_edit_undo_.clear();
    latest_.id.tokens.clear();
    latest_.id.index = 0;
    std::fill(logits_.begin(), logits_.end(), 0.0f);
}

Session::Next Session::next() const {
    if (prompt_.empty()) return Next::Done;
    if (n_prompt_done_ < int64_t(prompt_.size())) return Next::Prefill;
    if (int64_t(generated_.size()) < options_.max_new_tokens && !stopped_by_token()) return Next::Decode;
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
        p.n_adopted = 0;
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
        u.encoder = encoder_;
        if (policy_.active()) u.policy = policy_.save(cache_.next_position());
        undo_.push_back(std::move(u));
    }
    p.ran_encoder = false;
    if (model_->config().encoder_decoder && (!encoder_ || !options_.use_cache)) run_encoder(p);
    if (phase == Phase::Prefill && prompt_cache_ && options_.use_cache) adopt_prompt_cache(p);
    if (phase == Phase::Prefill && options_.share_prefix && options_.use_cache && p.n_adopted == 0) adopt_shared_prefix(p);
    p.chunk = Chunk{};
    p.chunk.cache = &cache_;
    p.chunk.tokens = p.tokens.data() + p.n_adopted;
    p.chunk.n_tokens = int64_t(p.tokens.size()) - p.n_adopted;
    p.chunk.logits = p.predicts ? logits_.data() : nullptr;
    p.chunk.probe = options_.record ? &p.probe : nullptr;
    p.chunk.encoder = encoder_.get();
    if (policy_.observing()) {
        const ModelConfig& cfg = model_->config();
        queries_.resize(size_t(cfg.n_layer * p.chunk.n_tokens * cfg.q_width()));
        p.chunk.queries = queries_.data();
    }
}

void Session::evict_after(Pending& p) {
    p.evictions.clear();
    if (!policy_.active()) return;
    const int64_t n = p.chunk.n_tokens, first = cache_.next_position() - n, P = int64_t(prompt_.size());
    if (p.chunk.queries) policy_.observe_chunk(model_->config(), cache_, p.chunk.queries, first, n, P);
    const bool prompt_done = p.phase == Phase::Decode || n_prompt_done_ + int64_t(p.tokens.size()) >= P;
    policy_.decide(cache_, prompt_done, p.evictions);
    for (const EvictionEvent& e : p.evictions) cache_.set_evicted(e.layer, e.kv_head, e.position, true);
    // The block the step began writing into is not held by its checkpoint: it stays mapped until a later step.
    const int64_t B = cache_.pages().block_size();
    const int64_t started = first - p.n_adopted;  // where the step's checkpoint was taken
    cache_.return_evicted_blocks(B > 0 && options_.history && started % B != 0 ? started / B : -1);
    if (options_.history) undo_.back().evictions = p.evictions;
}

void Session::run_encoder(Pending& p) {
    // Once per source with the cache on; a model without a cache recomputes it at every step.
    const double t0 = seconds_now();
    encoder_ = encode(*model_, source_, options_.record);
    p.compute_seconds += seconds_now() - t0;
    p.ran_encoder = true;
}

void Session::adopt_shared_prefix(Pending& p) {
    // Map the longest prefix other sequences of the pool hold, but compute at least the prompt's last
    // token: its logits are the prediction. The undo entry above already covers the adoption.
    const int64_t P = int64_t(prompt_.size()), start = n_prompt_done_;
    if (cache_.next_position() != start || start % options_.block_size != 0) return;
    p.before_adoption = cache_.checkpoint(0);
    const int64_t adopted = cache_.adopt_prefix(std::span<const TokenId>(prompt_).subspan(0, size_t(P - 1)), P - 1) - start;
    if (adopted <= 0) return;
    const int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : P;
    const int64_t computed = std::min(chunk, P - start - adopted);
    p.tokens = std::span<const TokenId>(prompt_).subspan(size_t(start), size_t(adopted + computed));
    p.n_adopted = adopted;
    p.adopted_from = StepCost::Source::SharedPrefix;
    p.predicts = start + adopted + computed == P;
}

void Session::adopt_prompt_cache(Pending& p) {
    if (n_prompt_done_ != 0 || cache_.next_position() != 0) return;
    const int64_t n = matching_prefix(*prompt_cache_, prompt_, cache_);
    if (n <= 0) return;
    p.before_adoption = cache_.checkpoint(0);
    restore_prompt_cache(*prompt_cache_, n, cache_);
    const int64_t P = int64_t(prompt_.size());
    const int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : P;
    const int64_t computed = std::min(chunk, P - n);
    p.tokens = std::span<const TokenId>(prompt_).subspan(0, size_t(n + computed));
    p.n_adopted = n;
    p.adopted_from = StepCost::Source::PromptCache;
    p.predicts = n + computed == P;
}

void Session::abandon(Pending& p) {
    if (options_.history) {
        cache_.restore(undo_.back().cache);  // taken before the adoption too
        encoder_ = std::move(undo_.back().encoder);
        if (p.forward_ran) logits_ = std::move(undo_.back().logits);
        undo_.pop_back();
    } else if (p.forward_ran) {
        reset();  // the cache moved on and nothing says how it was
    } else if (p.before_adoption) {
        cache_.restore(*p.before_adoption);
    }
}

void Session::record_adopted_rows(RecordedRows& rows, int64_t first, int64_t n) const {
    // Per query head, as the forward pass records k and v (a shared K/V head once for each of its queries).
    const ModelConfig& cfg = model_->config();
    const int64_t L = cache_.shape().n_layer, H = cfg.n_head, D = cache_.shape().head_dim, C = H * D;
    rows.k_adopted.assign(size_t(L * n * C), 0.0f);
    rows.v_adopted.assign(size_t(L * n * C), 0.0f);
    for (int64_t il = 0; il < L; ++il)
        for (int64_t a = 0; a < n; ++a)
            for (int64_t h = 0; h < H; ++h) {
                const size_t at = size_t((il * n + a) * C + h * D);
                const KvRows kv_rows = cache_.rows(il, cfg.kv_head_of(h));
                kv_rows.copy_key(first + a, rows.k_adopted.data() + at);
                kv_rows.copy_value(first + a, rows.v_adopted.data() + at);
            }
}

int64_t Session::pool_blocks_for(int64_t n_positions, int64_t block_size) {
    return (n_positions + block_size - 1) / block_size + 1;  // + 1: a copy-on-write of a shared last block
}

const StepRecord& Session::finish(Pending& p, double flops, int64_t first_computed, int64_t n_computed,
                                  int64_t n_reused) {
    const ModelConfig& cfg = model_->config();
    // With history the record is a new immutable object in the trace; without, `latest_` is refilled in
    // place, its vectors keeping their capacity, so a decode step allocates nothing.
    std::shared_ptr<StepRecord> fresh = options_.history ? std::make_shared<StepRecord>() : nullptr;
    StepRecord* rec = fresh ? fresh.get() : &latest_;
    StepId& id = rec->id;
    id.index = options_.history ? int64_t(trace_.size()) : latest_.id.index + (latest_.id.tokens.empty() ? 0 : 1);
    id.phase = p.phase;
    id.cache_on = options_.use_cache;
    id.first_position = cache_.next_position() - int64_t(p.tokens.size());
    id.tokens.assign(p.tokens.begin(), p.tokens.end());  // before generated_ grows under the span
    id.window = window_;
    id.sinks = cache_.visibility().sinks;
    id.sink_positions = cache_.visibility().sink_positions;
    id.turn = int64_t(turns_.size()) - 1;
    id.shift_cache_hidden_pairs =
        shift_cache_hidden_pairs(id.first_position, int64_t(id.tokens.size()), window_);
    StepCost& cost = rec->cost;
    cost.n_rows_computed = n_computed;
    cost.first_computed_position = first_computed;
    cost.n_rows_reused = n_reused;
    cost.n_adopted = p.n_adopted;
    cost.adopted_from = p.adopted_from;
    RecordedRows& rows = rec->rows;
    if (options_.record && p.n_adopted > 0) record_adopted_rows(rows, id.first_position, p.n_adopted);
    else {
        rows.k_adopted.clear();
        rows.v_adopted.clear();
    }
    rows.n_layer = cfg.n_layer;
    rows.n_head = cfg.n_head;
    rows.n_kv_head = cfg.kv_heads();
    rows.head_dim = cfg.head_dim();
    rows.attention_scale = cfg.attention_scale();
    if (cfg.has_sliding_layers()) rows.layer_window = cfg.layer_window;
    if (id.sink_positions == SinkPositions::Cache) {
        rows.rotary_inv_freq = model_->rotary_inv_freq();
        rows.local_rotary_inv_freq = model_->local_rotary_inv_freq();
    }
    if (p.phase == Phase::Prefill) n_prompt_done_ += int64_t(id.tokens.size());
    Prediction& pred = rec->prediction;
    if (p.predicts) {
        // The sampler runs either way: top and entropy describe the model's distribution, forced or not.
        const TokenId sampled = sampler_.sample(logits_.data());
        pred.forced = generated_.size() < options_.forced_tokens.size();
        const TokenId chosen = pred.forced ? options_.forced_tokens[generated_.size()] : sampled;
        generated_.push_back(chosen);
        pred.chosen = chosen;
        sampler_.top(options_.n_top, pred.top);
        pred.entropy = sampler_.entropy();
        pred.logits.assign(logits_.begin(), logits_.end());
    } else {
        pred.chosen.reset();
        pred.forced = false;
        pred.top.clear();
        pred.entropy = 0;
        pred.logits.clear();
    }
    cost.flops = flops + (p.ran_encoder ? encoder_->flops : 0.0);
    rows.encoder = encoder_;
    rows.ran_encoder = p.ran_encoder;
    cost.seconds = seconds_now() - p.started;
    cost.compute_seconds = p.compute_seconds;
    rec->eviction.policy = policy_.active() ? eviction_policy_name(options_.eviction.kind) : "";
    rec->eviction.events.assign(p.evictions.begin(), p.evictions.end());
    rec->edits = pending_edits_;
    if (options_.history) {
        undo_.back().edits = std::move(pending_edits_);
        undo_.back().edit_undo = std::move(pending_edit_undo_);
    }
    pending_edits_.clear();
    pending_edit_undo_.clear();
    rec->cache = cache_.view(std::move(rec->cache));
    if (options_.record) {
        rows.q = std::move(p.probe.q);
        rows.k = std::move(p.probe.k);
        rows.v = std::move(p.probe.v);
        rows.cross_q = std::move(p.probe.cross_q);
        rows.residual = std::move(p.probe.residual);
    }
    if (!fresh) return latest_;
    trace_.append(std::move(fresh));
    return trace_.back();
}

const StepRecord* Session::latest() const {
    if (options_.history) return trace_.empty() ? nullptr : &trace_.back();
    return latest_.id.tokens.empty() ? nullptr : &latest_;
}

const StepRecord& Session::run_uncached(Pending& p) {
    // Recompute every position 0..end from an empty cache, as a model without a KV cache must. The
    // ring may be smaller than the sequence (window), so the recompute runs in chunks that fit it;
    // rows do not depend on chunking (kernels.h), so this is the same arithmetic as one big pass.
    const std::vector<TokenId> all = all_tokens();
    const int64_t end = cache_.next_position() + p.chunk.n_tokens;
    // A paged cache keeps its blocks (other sequences may share them): the recompute runs in a scratch
    // ring, and only the new positions' rows, equal bit for bit, are then written to the paged cache.
    const bool paged = cache_.pages().active();
    KvCache scratch = paged ? model_->make_cache(end, window_, sinks_) : KvCache{};
    scratch.set_sink_positions(options_.sink_positions);
    KvCache& target = paged ? scratch : cache_;
    const int64_t first_new = cache_.next_position();
    target.reset();
    // A chunk of n needs W-1+n slots once the ring wraps. When the sequence fits the ring it never
    // wraps (and W may exceed the ring: set_prompt clamps the capacity to the sequence), so one pass.
    const int64_t piece = window_ > 0 && end > target.capacity()
                              ? target.capacity() - target.visibility().sinks - window_ + 1
                              : target.capacity();
    double flops = 0;
    ChunkProbe whole;
    // q, k and v rows are H * D wide (k and v per query head), which differs from the hidden width when a
    // model sets head_dim (Gemma 3, Qwen3); cross-attention queries and the residual stream are C wide.
    const int64_t C = model_->config().n_embd, Q = model_->config().q_width(), L = model_->config().n_layer;
    const bool cross = model_->config().encoder_decoder;
    if (options_.record) {
        for (auto* buf : {&whole.q, &whole.k, &whole.v}) buf->assign(size_t(L * end * Q), 0.0f);
        if (cross) whole.cross_q.assign(size_t(L * end * C), 0.0f);
        whole.residual.assign(size_t((L + 1) * end * C), 0.0f);
    }
    for (int64_t start = 0; start < end; start += piece) {
        const int64_t n = std::min(piece, end - start);
        Chunk ch;
        ch.cache = &target;
        ch.tokens = all.data() + start;
        ch.n_tokens = n;
        ch.logits = start + n == end ? p.chunk.logits : nullptr;
        ch.probe = options_.record ? &p.probe : nullptr;
        ch.encoder = encoder_.get();
        const double t0 = seconds_now();
        forward(*model_, std::span<Chunk>(&ch, 1), workspace_);
        p.forward_ran = true;
        p.compute_seconds += seconds_now() - t0;
        refuse_non_finite(p, ch.non_finite_layer, first_new);
        flops += ch.flops;
        if (options_.record) {
            struct Part { std::vector<float>* src; std::vector<float>* dst; int64_t width, slots; };
            for (Part part : {Part{&p.probe.q, &whole.q, Q, L}, Part{&p.probe.k, &whole.k, Q, L},
                              Part{&p.probe.v, &whole.v, Q, L}, Part{&p.probe.cross_q, &whole.cross_q, C, L},
                              Part{&p.probe.residual, &whole.residual, C, L + 1}})
                if (!part.src->empty())
                    for (int64_t il = 0; il < part.slots; ++il)
                        std::copy(part.src->begin() + il * n * part.width, part.src->begin() + (il + 1) * n * part.width,
                                  part.dst->begin() + (il * end + start) * part.width);
        }
    }
    p.probe = std::move(whole);
    if (paged) {
        cache_.prepare(all.data() + first_new, end - first_new);
        const int64_t H = model_->config().kv_heads();
        std::vector<float> k_row(size_t(model_->config().head_dim())), v_row(k_row.size());  // (D) each
        for (int64_t il = 0; il < L; ++il)
            for (int64_t pos = first_new; pos < end; ++pos)
                for (int64_t h = 0; h < H; ++h) {
                    const KvRows from = scratch.rows(il, h);
                    from.copy_key(pos, k_row.data());
                    from.copy_value(pos, v_row.data());
                    cache_.write(il, h, pos, k_row.data(), v_row.data());
                }
        cache_.advance(end - first_new);
    }
    return finish(p, flops, 0, end, 0);
}

void Session::refuse_non_finite(const Pending& p, int64_t layer, int64_t first_position) const {
    if (layer < 0) return;
    const ModelConfig& cfg = model_->config();
    const int64_t index = options_.history ? int64_t(trace_.size()) : latest_.id.index + (latest_.id.tokens.empty() ? 0 : 1);
    const int64_t last_position = first_position + p.chunk.n_tokens - 1;
    const std::string where = layer < cfg.n_layer ? "layer " + std::to_string(layer)
                                                                : std::string("the output layer (final norm and lm_head)");
    throw LoadError(model_->dir(),
                    "step " + std::to_string(index) + " (" + (p.phase == Phase::Prefill ? "prefill" : "decode") +
                        (last_position > first_position ? ", positions " + std::to_string(first_position) + "-" +
                                                               std::to_string(last_position)
                                                         : ", position " + std::to_string(first_position)) +
                        "): " + where + " produced NaN or infinity; no token was sampled",
                    "a weight or config.json value makes float32 overflow there");
}

const StepRecord& Session::prefill_step() { return run_step(Phase::Prefill); }
const StepRecord& Session::decode_step() { return run_step(Phase::Decode); }

const StepRecord& Session::run_step(Phase phase) {
    Pending p;
    prepare(p, phase);
    const int64_t first = cache_.next_position();
    try {
        if (!options_.use_cache && policy_.active())
            throw UsageError(std::string("eviction policy ") + eviction_policy_name(options_.eviction.kind) +
                             " evicts from the KV cache: keep the cache on");
        if (!options_.use_cache) return run_uncached(p);
        const double t0 = seconds_now();
        forward(*model_, std::span<Chunk>(&p.chunk, 1), workspace_);
        p.forward_ran = true;
        p.compute_seconds += seconds_now() - t0;
        refuse_non_finite(p, p.chunk.non_finite_layer, first);
    } catch (...) {
        abandon(p);  // take back what prepare() (and a forward pass that ran) did
        throw;
    }
    evict_after(p);
    return finish(p, p.chunk.flops, first, p.chunk.n_tokens, cache_.visibility().visible_keys(first).count() - 1);
}

bool Session::step_back() {
    if (!pending_edit_undo_.empty() && pending_edit_undo_.back().n_turns == turns_.size()) {
        undo_edit();  // the newest change is an edit made after the last step (and after any turn)
        return true;
    }
    if (!turn_undo_.empty() && turn_undo_.back().n_undo == undo_.size()) {
        // The newest change is an append_turn: take the turn back, the cache is as it was before it.
        TurnUndo& t = turn_undo_.back();
        prompt_.resize(t.n_prompt);
        generated_.assign(t.generated.begin(), t.generated.end());
        n_prompt_done_ = t.n_prompt_done;
        options_.max_new_tokens = t.max_new_tokens;
        turns_.pop_back();
        turn_undo_.pop_back();
        return true;
    }
    if (undo_.empty()) return false;
    Undo& u = undo_.back();
    // The cache first: a block the step returned to the pool comes back, then its flags are cleared.
    cache_.restore(u.cache);
    for (auto e = u.evictions.rbegin(); e != u.evictions.rend(); ++e)
        cache_.set_evicted(e->layer, e->kv_head, e->position, e->restored);
    if (policy_.active()) policy_.load(u.policy);
    sampler_.set_rng_state(u.rng_state);
    generated_.resize(u.n_generated);
    n_prompt_done_ = u.n_prompt_done;
    logits_ = std::move(u.logits);
    encoder_ = std::move(u.encoder);
    pending_edits_ = std::move(u.edits);  // the step's edits are pending again, as before it ran
    pending_edit_undo_ = std::move(u.edit_undo);
    undo_.pop_back();
    trace_.truncate(trace_.size() - 1);
    return true;
}

void Session::next_step_logits(std::vector<float>& out) {
    const int64_t position = cache_.next_position();
    const std::vector<TokenId> all = all_tokens();
    if (position >= int64_t(all.size()))
        throw UsageError("there is no next token to predict from at position " + std::to_string(position));
    require_fits(cache_, 1);
    out.assign(size_t(model_->config().n_vocab), 0.0f);
    // The next step's forward pass, then the cache back as it was (its slot, flags and pointer).
    KvCacheCheckpoint before = cache_.checkpoint(1);
    Chunk ch;
    ch.cache = &cache_;
    ch.tokens = all.data() + position;
    ch.n_tokens = 1;
    ch.logits = out.data();
    ch.encoder = encoder_.get();
    try {
        forward(*model_, std::span<Chunk>(&ch, 1), workspace_);
    } catch (...) {
        cache_.restore(before);
        throw;
    }
    cache_.restore(before);
}

const CacheEditRecord& Session::apply_edit(CacheEdit edit) {
    const ModelConfig& cfg = model_->config();
    const int64_t L = cfg.n_layer, K = cfg.kv_heads(), D = cfg.head_dim(), p = edit.position;
    // pass 1: validate; nothing changes before every check passed
    if (cache_.pages().active()) throw UsageError("cache edits work on the ring cache: leave out --block-size");
    if (!options_.use_cache) throw UsageError("the cache is off: turn it on to edit it");
    if (cache_.next_position() == 0) throw UsageError("the cache is empty: run a step first");
    if (!cache_.alive(p))
        throw UsageError("position " + std::to_string(p) + " is not in the cache (positions 0.." +
                         std::to_string(cache_.next_position() - 1) + " were written" +
                         (cache_.visibility().window > 0 ? "; the window keeps only the recent ones)" : ")"));
    if (edit.layer < -1 || edit.layer >= L)
        throw UsageError("layer " + std::to_string(edit.layer) + " does not exist (the model has " +
                         std::to_string(L) + " layers, 0.." + std::to_string(L - 1) + "; -1 = all)");
    if (edit.kv_head < -1 || edit.kv_head >= K)
        throw UsageError("K/V head " + std::to_string(edit.kv_head) + " does not exist (the model has " +
                         std::to_string(K) + " K/V heads, 0.." + std::to_string(K - 1) + "; -1 = all)");
    if (edit.kind == CacheEditKind::Patch) {
        if (cache_.format().quantized()) throw UsageError("patch writes float rows: leave out --kv-quant");
        if (int64_t(edit.rows.size()) != L * 2 * K * D)
            throw UsageError("the patch rows hold " + std::to_string(edit.rows.size()) + " values, this model's " +
                             std::to_string(L * 2 * K * D) + " (L x 2 x K x D): is the source another model's?");
    }
    EditUndo u;
    u.n_turns = turns_.size();
    for (int64_t il = std::max<int64_t>(edit.layer, 0); il < (edit.layer < 0 ? L : edit.layer + 1); ++il)
        for (int64_t h = std::max<int64_t>(edit.kv_head, 0); h < (edit.kv_head < 0 ? K : edit.kv_head + 1); ++h) {
            const bool flagged = cache_.rows(il, h).evicted(p);
            if ((edit.kind == CacheEditKind::Evict && flagged) || (edit.kind == CacheEditKind::Restore && !flagged))
                continue;
            u.entries.insert(u.entries.end(), {int32_t(il), int32_t(h)});
        }
    if (u.entries.empty())
        throw UsageError("position " + std::to_string(p) +
                         (edit.kind == CacheEditKind::Evict ? " is already evicted in every layer and head asked: nothing to evict"
                                                            : " is not evicted in any layer and head asked: nothing to restore"));
    // pass 2: the unedited next-step logits (those of the last step's cache, before any pending edit)
    if (pending_edit_undo_.empty())
        next_step_logits(u.logits_before);
    else
        u.logits_before = pending_edit_undo_.front().logits_before;
    // pass 3: apply, keeping what step_back needs to put it back
    const size_t n = u.entries.size() / 2;
    if (edit.kind == CacheEditKind::Patch) {
        u.rows.resize(n * 2 * size_t(D));
        u.flags.resize(n);
    }
    for (size_t i = 0; i < n; ++i) {
        const int64_t il = u.entries[2 * i], h = u.entries[2 * i + 1];
        switch (edit.kind) {
            case CacheEditKind::Evict: cache_.set_evicted(il, h, p, true); break;
            case CacheEditKind::Restore: cache_.set_evicted(il, h, p, false); break;
            case CacheEditKind::Patch: {
                float* old = u.rows.data() + i * 2 * size_t(D);
                const KvRows rows = cache_.rows(il, h);
                rows.copy_key(p, old);
                rows.copy_value(p, old + D);
                u.flags[i] = rows.evicted(p) ? 1 : 0;
                const float* k = edit.rows.data() + size_t(((il * 2 + 0) * K + h) * D);
                const float* v = edit.rows.data() + size_t(((il * 2 + 1) * K + h) * D);
                cache_.write(il, h, p, k, v);  // clears the flag: a patch changes rows only, so set it again
                if (u.flags[i]) cache_.set_evicted(il, h, p, true);
                break;
            }
        }
    }
    pending_edit_undo_.push_back(std::move(u));
    CacheEditRecord r;
    r.n_changed = int64_t(n);
    try {
        std::vector<float> after;  // (V)
        next_step_logits(after);
        r.effect = compare_distributions(pending_edit_undo_.back().logits_before, after, 5);
    } catch (...) {
        pending_edits_.push_back(CacheEditRecord{edit, 0, {}});
        undo_edit();
        throw;
    }
    r.effect.position = cache_.next_position();
    r.effect.token = all_tokens()[size_t(r.effect.position)];
    r.edit = std::move(edit);
    pending_edits_.push_back(std::move(r));
    return pending_edits_.back();
}

void Session::undo_edit() {
    const CacheEdit& e = pending_edits_.back().edit;
    const EditUndo& u = pending_edit_undo_.back();
    const int64_t D = cache_.shape().head_dim, p = e.position;
    for (size_t i = u.entries.size() / 2; i-- > 0;) {
        const int64_t il = u.entries[2 * i], h = u.entries[2 * i + 1];
        switch (e.kind) {
            case CacheEditKind::Evict: cache_.set_evicted(il, h, p, false); break;
            case CacheEditKind::Restore: cache_.set_evicted(il, h, p, true); break;
            case CacheEditKind::Patch: {
                const float* old = u.rows.data() + i * 2 * size_t(D);
                cache_.write(il, h, p, old, old + D);
                if (u.flags[i]) cache_.set_evicted(il, h, p, true);
                break;
            }
        }
    }
    pending_edits_.pop_back();
    pending_edit_undo_.pop_back();
}

std::vector<float> kv_rows_of_run(std::shared_ptr<const Model> model, SessionOptions options, std::vector<TokenId> tokens,
                                  int64_t position) {
    if (position < 0 || position >= int64_t(tokens.size()))
        throw UsageError("the patch source has " + std::to_string(tokens.size()) + " tokens: it has no position " +
                         std::to_string(position));
    if (model->config().encoder_decoder) throw UsageError("patching encoder-decoder models is not supported yet");
    tokens.resize(size_t(position + 1));
    // A side run with the same arithmetic (window, sinks, storage), nothing recorded, nothing evicted.
    options.history = false;
    options.record = false;
    options.eviction = EvictionSpec{};
    options.max_new_tokens = 1;
    options.prefill_chunk = 0;
    options.block_size = 0;
    options.share_prefix = false;
    options.use_cache = true;
    Session side(model, options);
    side.set_prompt(tokens);
    side.prefill_step();
    const ModelConfig& cfg = model->config();
    const int64_t L = cfg.n_layer, K = cfg.kv_heads(), D = cfg.head_dim();
    std::vector<float> rows(size_t(L * 2 * K * D));  // (L, 2, K, D)
    for (int64_t il = 0; il < L; ++il)
        for (int64_t h = 0; h < K; ++h) {
            side.cache().rows(il, h).copy_key(position, rows.data() + ((il * 2 + 0) * K + h) * D);
            side.cache().rows(il, h).copy_value(position, rows.data() + ((il * 2 + 1) * K + h) * D);
        }
    return rows;
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
    bool first_sharer_ran = false;
    for (Session* s : sessions) {
        if (s->next() == Next::Done) continue;
        // A recompute has nothing to share with the others. The first sharing prefill goes alone, so
        // the blocks it fills are there when the others (batched) map their prompts; blocks still being
        // filled are never mapped (a block's tokens count only once written).
        const bool sharing_prefill = s->options_.share_prefix && s->next() == Next::Prefill;
        if (!s->options_.use_cache || (sharing_prefill && !first_sharer_ran)) {
            first_sharer_ran |= sharing_prefill;
            s->step();
        } else {
            together.push_back(s);
        }
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
    const double t0 = seconds_now();
    try {
        forward(*together.front()->model_, std::span<Chunk>(chunks), ws);
        for (Pending& p : pending) p.forward_ran = true;
        for (size_t i = 0; i < together.size(); ++i) together[i]->refuse_non_finite(pending[i], chunks[i].non_finite_layer, first[i]);
    } catch (...) {
        // forward() checks every chunk before it writes, so when it throws the caches are untouched:
        // only the undo entries prepare() pushed must go, or a later step_back would undo a step that
        // never ran. A non-finite chunk fails the whole batch, every cache put back.
        for (size_t i = 0; i < together.size(); ++i) together[i]->abandon(pending[i]);
        throw;
    }
    const double batch_seconds = seconds_now() - t0;
    for (size_t i = 0; i < together.size(); ++i) {
        Session* s = together[i];
        pending[i].compute_seconds += batch_seconds;
        s->evict_after(pending[i]);
        s->finish(pending[i], chunks[i].flops, first[i], chunks[i].n_tokens,
                  s->cache_.visibility().visible_keys(first[i]).count() - 1);
    }
}

}  // namespace kvscope
