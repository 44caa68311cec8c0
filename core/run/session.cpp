#include "run/session.h"

#include <algorithm>

#include "base/clock.h"
#include "base/errors.h"
#include "run/options.h"

namespace kvscope {
// The checks live with the option table (run/options.h), which every caller shares.
void validate(const SessionOptions& o) { check(RunOptions{o, GroupOptions{}}, {}, neutral_words); }

Session::Session(std::shared_ptr<const Model> model, SessionOptions options, SessionSetup setup)
    : options_(options), setup_(std::move(setup)) {
    parts_.model = std::move(model);
    validate(options_);
    validate(options_.kv_quant, parts_.model->config().head_dim());
    for (TokenId id : options_.forced_tokens) parts_.model->check_token(id);
    window_ = options_.window;
    sinks_ = options_.sinks;
    if (options_.eviction.kind == EvictionPolicyKind::WindowSinks) {
        // The window rule inside a chunk; the policy's flags then mark what left it (eviction.h).
        window_ = options_.eviction.budget - options_.eviction.sinks + 1;
        sinks_ = options_.eviction.sinks;
    }
    if (options_.kv_quant.format == KvQuant::Int4 && window_ > 0)
        throw UsageError("{kv_quant} int4 groups keys of consecutive positions and keeps them all: {-window}");
    // A model's own sliding windows are part of its computation; a second, user-chosen window on top
    // would be neither the model nor a clean experiment, so the two are not combined.
    if (window_ > 0 && parts_.model->config().has_sliding_layers())
        throw UsageError("this model has its own sliding window (" + parts_.model->config().describe_windows() +
                         "): {window} cannot be combined with it");
    // Learned or sinusoidal positions are added to the input once; only rotary keys carry a position
    // that attention can re-read, so only they can be re-numbered inside the cache.
    if (options_.sink_positions == SinkPositions::Cache && parts_.model->config().family != Family::Llama)
        throw UsageError("sink positions \"cache\" need rotary positions; this model adds its positions to the input "
                         "(" + std::string(to_string(parts_.model->config().family)) + "), so its sinks keep text positions");
}

void Session::set_source(std::vector<TokenId> source) {
    const ModelConfig& cfg = parts_.model->config();
    if (!cfg.encoder_decoder) throw UsageError("this model is decoder-only: it takes no source");
    if (source.empty()) throw UsageError("the source is empty");
    if (int64_t(source.size()) > cfg.n_ctx)
        throw UsageError("the source has " + std::to_string(source.size()) + " tokens, the model's n_positions is " +
                         std::to_string(cfg.n_ctx));
    for (TokenId id : source) parts_.model->check_token(id);
    parts_.source = std::move(source);
    parts_.prompt.clear();  // set_prompt again: the workspace is sized for the source too
}

void Session::set_prompt(std::vector<TokenId> prompt) {
    const ModelConfig& cfg = parts_.model->config();
    if (cfg.encoder_decoder) {
        if (parts_.source.empty()) throw UsageError("an encoder-decoder model needs a source first ({source})");
        prompt.insert(prompt.begin(), TokenId(cfg.decoder_start_token_id));
        // The decoder's K/V depend on the source through cross-attention; blocks and files know only tokens.
        if (options_.share_prefix || parts_.prompt_cache)
            throw UsageError("prefix sharing and prompt caches key K/V by the decoder's tokens, but an encoder-decoder's "
                             "K/V also depend on the source: not available for this model");
    }
    if (prompt.empty()) throw UsageError("the prompt is empty");
    for (TokenId id : prompt) parts_.model->check_token(id);
    const int64_t n_total = int64_t(prompt.size()) + options_.max_new_tokens;
    if (n_total > cfg.n_ctx)
        throw UsageError("prompt (" + std::to_string(prompt.size()) + " tokens) + max new tokens (" +
                         std::to_string(options_.max_new_tokens) + ") = " + std::to_string(n_total) +
                         " exceeds the model's " + cfg.positions_key() + " (" + std::to_string(cfg.n_ctx) +
                         "); positions are absolute, a window does not lift this");
    parts_.prompt = std::move(prompt);
    const int64_t P = int64_t(parts_.prompt.size());
    const int64_t chunk = options_.prefill_chunk > 0 ? std::min(options_.prefill_chunk, P) : P;
    int64_t capacity = n_total;
    if (options_.block_size > 0) {
        std::shared_ptr<BlockPool> pool = setup_.pool;
        if (!pool)
            pool = std::make_shared<BlockPool>(cfg.n_layer, cfg.kv_heads(), cfg.head_dim(), options_.block_size,
                                               pool_blocks_for(n_total, options_.block_size), parts_.model->weights().bf16);
        else if (pool->n_layer() != cfg.n_layer || pool->n_head() != cfg.kv_heads() || pool->head_dim() != cfg.head_dim() ||
                 pool->block_size() != options_.block_size || pool->bf16() != parts_.model->weights().bf16)
            throw UsageError("the shared block pool was made for another model shape, block size or KV dtype");
        cache_ = KvCache(std::move(pool), n_total, window_, sinks_, setup_.sequence, cfg.has_sliding_layers());
        cache_.set_sink_positions(options_.sink_positions);
    } else {
        capacity = chunk_capacity(n_total, chunk);
        cache_ = parts_.model->make_cache(capacity, window_, sinks_, options_.kv_quant, chunk);
        cache_.set_sink_positions(options_.sink_positions);
    }
    workspace_ = Workspace(cfg, capacity, 1, std::max(capacity, int64_t(parts_.source.size())));
    sampler_ = Sampler(options_.sampling, cfg.n_vocab);
    parts_.eviction.start(options_.eviction, cfg.n_layer, cfg.kv_heads(), cfg.n_head / cfg.kv_heads(), n_total);
    parts_.logits.assign(size_t(cfg.n_vocab), 0.0f);
    parts_.generated.reserve(size_t(options_.max_new_tokens));
    parts_.latest = StepRecord{};
    parts_.edits.clear();
    parts_.latest.prediction.top.reserve(size_t(options_.n_top));
    parts_.turns.start(Turn{0, parts_.prompt, "", options_.max_new_tokens});
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
        if (setup_.pool && window_ == 0) {
            // Other sequences draw on the same blocks: this turn may only take what is free now. (With a
            // window, blocks that leave it return to the pool as the turn runs: each step checks then.)
            const int64_t mapped = int64_t(cache_.pages().table().size());
            const int64_t needed = (n_total + B - 1) / B - mapped;
            if (needed > pool->n_free())
                throw UsageError("the shared block pool has " + std::to_string(pool->n_free()) + " of its " +
                                 std::to_string(pool->n_blocks()) + " blocks free; this turn needs " + std::to_string(needed) +
                                 " more to reach " + std::to_string(n_total) + " positions");
        } else if (!setup_.pool) {
            pool->grow(blocks);
        }
        cache_.grow(n_total);
    } else {
        cache_.grow(chunk_capacity(n_total, chunk));
    }
    parts_.eviction.grow(n_total);
    const int64_t capacity = cache_.capacity();
    if (capacity > workspace_.max_rows() || capacity > workspace_.max_keys())
        workspace_ = Workspace(parts_.model->config(), capacity, 1, capacity);
}

void Session::append_turn(std::vector<TokenId> tokens, int64_t max_new_tokens, std::string role, int64_t keep) {
    if (keep >= 0 && !parts_.prompt.empty() && keep < int64_t(parts_.prompt.size() + parts_.generated.size()))
        return rollback_turn(keep, std::move(tokens), max_new_tokens, std::move(role));
    const ModelConfig& cfg = parts_.model->config();
    if (max_new_tokens < 1) throw UsageError("max new tokens must be >= 1, got " + std::to_string(max_new_tokens));
    // A turn's reply limit is a cap, not a reservation: the reply stops at the model's context too, so a
    // conversation may grow to n_ctx (the turn itself must leave room for one reply token).
    if (parts_.prompt.empty()) {  // the first turn: a prompt like any other
        if (int64_t(tokens.size()) < cfg.n_ctx) max_new_tokens = std::min(max_new_tokens, cfg.n_ctx - int64_t(tokens.size()));
        const int64_t before = options_.max_new_tokens;
        options_.max_new_tokens = max_new_tokens;
        try {
            set_prompt(std::move(tokens));
        } catch (...) {
            options_.max_new_tokens = before;
            throw;
        }
        parts_.turns.front().role = std::move(role);
        return;
    }
    if (cfg.encoder_decoder)
        throw UsageError("a new turn appends to the decoder's cache, but an encoder-decoder's K/V also depend on the "
                         "source: not available for this model");
    if (next() == Next::Prefill) throw UsageError("the prompt is not all in the cache yet: prefill it before a new turn");
    if (tokens.empty()) throw UsageError("the new turn is empty");
    for (TokenId id : tokens) parts_.model->check_token(id);
    const int64_t n_before = int64_t(parts_.prompt.size() + parts_.generated.size()), n_new = int64_t(tokens.size());
    if (n_before + n_new >= cfg.n_ctx)
        throw UsageError("the conversation so far (" + std::to_string(n_before) + " tokens) + this turn (" +
                         std::to_string(n_new) + ") = " + std::to_string(n_before + n_new) +
                         " leaves no room for a reply in the model's " + cfg.positions_key() + " (" +
                         std::to_string(cfg.n_ctx) + ")");
    max_new_tokens = std::min(max_new_tokens, cfg.n_ctx - n_before - n_new);
    const int64_t n_total = n_before + n_new + max_new_tokens;
    // The first prefill step also feeds the reply's last token: sampled, never yet read by the model.
    const int64_t to_prefill = n_before - cache_.next_position() + n_new;
    fit_turn(n_total, options_.prefill_chunk > 0 ? std::min(options_.prefill_chunk, to_prefill) : to_prefill);
    std::optional<TurnUndo> undo;
    if (options_.history)
        undo = TurnUndo{undo_.size(), parts_.prompt.size(), parts_.generated, parts_.n_prompt_done, options_.max_new_tokens};
    parts_.prompt.insert(parts_.prompt.end(), parts_.generated.begin(), parts_.generated.end());
    parts_.prompt.insert(parts_.prompt.end(), tokens.begin(), tokens.end());
    parts_.generated.clear();
    parts_.generated.reserve(size_t(max_new_tokens));
    parts_.n_prompt_done = cache_.next_position();
    options_.max_new_tokens = max_new_tokens;
    parts_.turns.append(Turn{n_before, std::move(tokens), std::move(role), max_new_tokens}, std::move(undo));
}

void Session::rollback_turn(int64_t keep, std::vector<TokenId> tokens, int64_t max_new_tokens, std::string role) {
    const ModelConfig& cfg = parts_.model->config();
    const int64_t n_before = int64_t(parts_.prompt.size() + parts_.generated.size());
    if (parts_.prompt.empty() || keep >= n_before) return append_turn(std::move(tokens), max_new_tokens, std::move(role));
    if (keep < 0) throw UsageError("a turn cannot keep " + std::to_string(keep) + " positions");
    if (max_new_tokens < 1) throw UsageError("max new tokens must be >= 1, got " + std::to_string(max_new_tokens));
    if (cfg.encoder_decoder)
        throw UsageError("a new turn appends to the decoder's cache, but an encoder-decoder's K/V also depend on the "
                         "source: not available for this model");
    if (next() == Next::Prefill) throw UsageError("the prompt is not all in the cache yet: prefill it before a new turn");
    if (tokens.empty()) throw UsageError("the new turn is empty");
    if (!parts_.edits.pending().empty())
        throw UsageError("a turn that rolls the cache back drops the pending cache edits' positions: step back over them first");
    for (TokenId id : tokens) parts_.model->check_token(id);
    const int64_t n_new = int64_t(tokens.size());
    if (keep + n_new >= cfg.n_ctx)
        throw UsageError("the conversation kept (" + std::to_string(keep) + " tokens) + this turn (" + std::to_string(n_new) +
                         ") leaves no room for a reply in the model's " + cfg.positions_key() + " (" +
                         std::to_string(cfg.n_ctx) + ")");
    max_new_tokens = std::min(max_new_tokens, cfg.n_ctx - keep - n_new);
    // pass 1: how much of the cache stays. A ring keeps positions 0..cut-1 when each still sits in its slot
    // (no wrap overwrote it) and no quantized residual or eviction state refers past them; anything else
    // (paged, int4, an eviction policy) is emptied and the whole conversation prefilled again.
    int64_t cut = std::min(keep, cache_.next_position());
    const bool ring_cut = !cache_.pages().active() && !cache_.format().int4() && !parts_.eviction.active();
    for (int64_t p = 0; p < cut && ring_cut; ++p)
        if (!cache_.alive(p)) cut = 0;
    if (!ring_cut) cut = 0;
    const int64_t to_prefill = keep - cut + n_new;
    fit_turn(keep + n_new + max_new_tokens, options_.prefill_chunk > 0 ? std::min(options_.prefill_chunk, to_prefill) : to_prefill);
    // pass 2: cut the cache back (forget the slots of positions >= cut, as undoing those steps would)
    if (cut > 0) {
        KvCacheCheckpoint to;
        to.next_position = cut;
        cache_.restore(to);
    } else {
        cache_.reset();
        parts_.eviction.reset();
    }
    // pass 3: the tokens. No earlier step or turn can be undone now: the rows they would restore are gone.
    std::vector<TokenId> all = all_tokens();
    all.resize(size_t(keep));
    all.insert(all.end(), tokens.begin(), tokens.end());
    parts_.prompt = std::move(all);
    parts_.generated.clear();
    parts_.generated.reserve(size_t(max_new_tokens));
    parts_.n_prompt_done = cut;
    options_.max_new_tokens = max_new_tokens;
    undo_.clear();
    parts_.turns.forget_undo();
    parts_.turns.append(Turn{keep, std::move(tokens), std::move(role), max_new_tokens}, std::nullopt);
}

bool stopped_by_token(const Session& s) {
    const std::vector<TokenId>& generated = s.parts().generated;
    const std::vector<TokenId>& stop = s.options().stop_tokens;
    return !generated.empty() && std::find(stop.begin(), stop.end(), generated.back()) != stop.end();
}

void Session::reset() {
    if (parts_.turns.size() > 1) {
        parts_.prompt.resize(size_t(parts_.turns.front().n_appended()));
        options_.max_new_tokens = parts_.turns.front().max_new_tokens;
    }
    parts_.turns.keep_first();
    parts_.generated.clear();
    parts_.n_prompt_done = 0;
    cache_.reset();
    parts_.eviction.reset();
    parts_.encoder.reset();
    sampler_.set_rng_state(options_.sampling.seed);
    trace_.clear();
    undo_.clear();
    parts_.edits.clear();
    parts_.latest.id.tokens.clear();
    parts_.latest.id.index = 0;
    std::fill(parts_.logits.begin(), parts_.logits.end(), 0.0f);
}

Session::Next Session::next() const {
    if (parts_.prompt.empty()) return Next::Done;
    if (parts_.n_prompt_done < int64_t(parts_.prompt.size())) return Next::Prefill;
    if (int64_t(parts_.generated.size()) < options_.max_new_tokens && !stopped_by_token(*this)) return Next::Decode;
    return Next::Done;
}

const StepRecord& Session::step(std::optional<Phase> phase) {
    if (phase) return run_step(*phase);  // prepare() refuses a phase that is not next
    switch (next()) {
        case Next::Prefill: return run_step(Phase::Prefill);
        case Next::Decode: return run_step(Phase::Decode);
        case Next::Done: break;
    }
    throw UsageError(parts_.prompt.empty() ? "no prompt is set" : "generation is finished: step back or reset");
}

std::vector<TokenId> Session::all_tokens() const {
    std::vector<TokenId> all = parts_.prompt;
    all.insert(all.end(), parts_.generated.begin(), parts_.generated.end());
    return all;
}

void Session::prepare(Pending& p, Phase phase) {
    if (phase == Phase::Prefill) {
        if (next() != Next::Prefill) throw UsageError("the prompt is already in the cache: decode instead");
        const int64_t P = int64_t(parts_.prompt.size());
        const int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : P;
        const int64_t n = std::min(chunk, P - parts_.n_prompt_done);
        p.tokens = std::span<const TokenId>(parts_.prompt).subspan(size_t(parts_.n_prompt_done), size_t(n));
        p.predicts = parts_.n_prompt_done + n == P;
        p.n_adopted = 0;
    } else {
        if (next() != Next::Decode)
            throw UsageError(next() == Next::Prefill ? "prefill the prompt first" : "generation is finished");
        p.tokens = std::span<const TokenId>(parts_.generated).last(1);
        p.predicts = true;
    }
    p.phase = phase;
    p.started = seconds_now();
    if (options_.history) {
        Undo u;
        u.cache = cache_.checkpoint(int64_t(p.tokens.size()));
        u.rng_state = sampler_.rng_state();
        u.n_generated = parts_.generated.size();
        u.n_prompt_done = parts_.n_prompt_done;
        u.logits = parts_.logits;
        u.encoder = parts_.encoder;
        u.eviction = parts_.eviction.save(cache_.next_position());
        undo_.push_back(std::move(u));
    }
    p.ran_encoder = false;
    if (parts_.model->config().encoder_decoder && (!parts_.encoder || !options_.use_cache)) run_encoder(p);
    if (phase == Phase::Prefill && parts_.prompt_cache && options_.use_cache) adopt_prompt_cache(p);
    if (phase == Phase::Prefill && options_.share_prefix && options_.use_cache && p.n_adopted == 0) adopt_shared_prefix(p);
    p.chunk = Chunk{};
    p.chunk.cache = &cache_;
    p.chunk.tokens = p.tokens.data() + p.n_adopted;
    p.chunk.n_tokens = int64_t(p.tokens.size()) - p.n_adopted;
    p.chunk.logits = p.predicts ? parts_.logits.data() : nullptr;
    p.chunk.probe = options_.record ? &p.probe : nullptr;
    p.chunk.encoder = parts_.encoder.get();
    p.chunk.queries = parts_.eviction.queries(parts_.model->config(), p.chunk.n_tokens);
}

void Session::evict_after(Pending& p) {
    p.evictions.clear();
    if (!parts_.eviction.active()) return;
    const int64_t n = p.chunk.n_tokens, first = cache_.next_position() - n, P = int64_t(parts_.prompt.size());
    const bool prompt_done = p.phase == Phase::Decode || parts_.n_prompt_done + int64_t(p.tokens.size()) >= P;
    // The block the step began writing into is not held by its checkpoint: it stays mapped until a later step.
    const int64_t B = cache_.pages().block_size();
    const int64_t started = first - p.n_adopted;  // where the step's checkpoint was taken
    const int64_t keep_block = B > 0 && options_.history && started % B != 0 ? started / B : -1;
    parts_.eviction.after_step(parts_.model->config(), cache_, p.chunk.queries, first, n, P, prompt_done, keep_block,
                               p.evictions);
    if (options_.history) undo_.back().eviction.events = p.evictions;
}

void Session::run_encoder(Pending& p) {
    // Once per source with the cache on; a model without a cache recomputes it at every step.
    const double t0 = seconds_now();
    parts_.encoder = encode(*parts_.model, parts_.source, options_.record);
    p.compute_seconds += seconds_now() - t0;
    p.ran_encoder = true;
}

void Session::adopt_shared_prefix(Pending& p) {
    // Map the longest prefix other sequences of the pool hold, but compute at least the prompt's last
    // token: its logits are the prediction. The undo entry above already covers the adoption.
    const int64_t P = int64_t(parts_.prompt.size()), start = parts_.n_prompt_done;
    if (cache_.next_position() != start || start % options_.block_size != 0) return;
    p.before_adoption = cache_.checkpoint(0);
    const int64_t adopted = cache_.adopt_prefix(std::span<const TokenId>(parts_.prompt).subspan(0, size_t(P - 1)), P - 1) - start;
    if (adopted <= 0) return;
    const int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : P;
    const int64_t computed = std::min(chunk, P - start - adopted);
    p.tokens = std::span<const TokenId>(parts_.prompt).subspan(size_t(start), size_t(adopted + computed));
    p.n_adopted = adopted;
    p.adopted_from = StepCost::Source::SharedPrefix;
    p.predicts = start + adopted + computed == P;
}

void Session::adopt_prompt_cache(Pending& p) {
    if (parts_.n_prompt_done != 0 || cache_.next_position() != 0) return;
    const int64_t n = matching_prefix(*parts_.prompt_cache, parts_.prompt, cache_);
    if (n <= 0) return;
    p.before_adoption = cache_.checkpoint(0);
    restore_prompt_cache(*parts_.prompt_cache, n, cache_);
    const int64_t P = int64_t(parts_.prompt.size());
    const int64_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : P;
    const int64_t computed = std::min(chunk, P - n);
    p.tokens = std::span<const TokenId>(parts_.prompt).subspan(0, size_t(n + computed));
    p.n_adopted = n;
    p.adopted_from = StepCost::Source::PromptCache;
    p.predicts = n + computed == P;
}

void Session::abandon(Pending& p) {
    if (options_.history) {
        cache_.restore(undo_.back().cache);  // taken before the adoption too
        parts_.encoder = std::move(undo_.back().encoder);
        if (p.forward_ran) parts_.logits = std::move(undo_.back().logits);
        undo_.pop_back();
    } else if (p.forward_ran) {
        reset();  // the cache moved on and nothing says how it was
    } else if (p.before_adoption) {
        cache_.restore(*p.before_adoption);
    }
}

void Session::record_adopted_rows(RecordedRows& rows, int64_t first, int64_t n) const {
    // Per query head, as the forward pass records k and v (a shared K/V head once for each of its queries).
    const ModelConfig& cfg = parts_.model->config();
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

int64_t pool_blocks_for(int64_t n_positions, int64_t block_size) {
    return (n_positions + block_size - 1) / block_size + 1;  // + 1: a copy-on-write of a shared last block
}

const StepRecord& Session::finish(Pending& p, double flops, int64_t first_computed, int64_t n_computed,
                                  int64_t n_reused) {
    const ModelConfig& cfg = parts_.model->config();
    // With history the record is a new immutable object in the trace; without, `parts_.latest` is refilled in
    // place, its vectors keeping their capacity, so a decode step allocates nothing.
    std::shared_ptr<StepRecord> fresh = options_.history ? std::make_shared<StepRecord>() : nullptr;
    StepRecord* rec = fresh ? fresh.get() : &parts_.latest;
    StepId& id = rec->id;
    id.index = options_.history ? int64_t(trace_.size()) : parts_.latest.id.index + (parts_.latest.id.tokens.empty() ? 0 : 1);
    id.phase = p.phase;
    id.cache_on = options_.use_cache;
    id.first_position = cache_.next_position() - int64_t(p.tokens.size());
    id.tokens.assign(p.tokens.begin(), p.tokens.end());  // before parts_.generated grows under the span
    id.window = window_;
    id.sinks = cache_.visibility().sinks;
    id.sink_positions = cache_.visibility().sink_positions;
    id.turn = int64_t(parts_.turns.size()) - 1;
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
        rows.rotary_inv_freq = parts_.model->rotary_inv_freq();
        rows.local_rotary_inv_freq = parts_.model->local_rotary_inv_freq();
    }
    if (p.phase == Phase::Prefill) parts_.n_prompt_done += int64_t(id.tokens.size());
    Prediction& pred = rec->prediction;
    if (p.predicts) {
        // The sampler runs either way: top and entropy describe the model's distribution, forced or not.
        const TokenId sampled = p.sampled ? *p.sampled : sampler_.sample(parts_.logits.data());
        pred.forced = parts_.generated.size() < options_.forced_tokens.size();
        const TokenId chosen = pred.forced ? options_.forced_tokens[parts_.generated.size()] : sampled;
        parts_.generated.push_back(chosen);
        pred.chosen = chosen;
        sampler_.top(options_.n_top, pred.top);
        pred.entropy = sampler_.entropy();
        pred.logits.assign(parts_.logits.begin(), parts_.logits.end());
    } else {
        pred.chosen.reset();
        pred.forced = false;
        pred.top.clear();
        pred.entropy = 0;
        pred.logits.clear();
    }
    cost.flops = flops + (p.ran_encoder ? parts_.encoder->flops : 0.0);
    rows.encoder = parts_.encoder;
    rows.ran_encoder = p.ran_encoder;
    cost.seconds = seconds_now() - p.started;
    cost.compute_seconds = p.compute_seconds;
    rec->eviction.policy = parts_.eviction.active() ? eviction_policy_name(options_.eviction.kind) : "";
    rec->eviction.events.assign(p.evictions.begin(), p.evictions.end());
    rec->edits = parts_.edits.pending();
    if (options_.history) undo_.back().edits = std::move(parts_.edits);
    parts_.edits.clear();
    rec->cache = cache_.view(std::move(rec->cache));
    if (options_.record) {
        rows.q = std::move(p.probe.q);
        rows.k = std::move(p.probe.k);
        rows.v = std::move(p.probe.v);
        rows.cross_q = std::move(p.probe.cross_q);
        rows.residual = std::move(p.probe.residual);
    }
    if (!fresh) return parts_.latest;
    trace_.append(std::move(fresh));
    return trace_.back();
}

const StepRecord* latest(const Session& s) {
    if (s.options().history) return s.trace().empty() ? nullptr : &s.trace().back();
    return s.parts().latest.id.tokens.empty() ? nullptr : &s.parts().latest;
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
    KvCache scratch = paged ? parts_.model->make_cache(end, window_, sinks_) : KvCache{};
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
    const int64_t C = parts_.model->config().n_embd, Q = parts_.model->config().q_width(), L = parts_.model->config().n_layer;
    const bool cross = parts_.model->config().encoder_decoder;
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
        ch.encoder = parts_.encoder.get();
        const double t0 = seconds_now();
        forward(*parts_.model, std::span<Chunk>(&ch, 1), workspace_);
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
        const int64_t H = parts_.model->config().kv_heads();
        std::vector<float> k_row(size_t(parts_.model->config().head_dim())), v_row(k_row.size());  // (D) each
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
    const ModelConfig& cfg = parts_.model->config();
    const int64_t index = options_.history ? int64_t(trace_.size()) : parts_.latest.id.index + (parts_.latest.id.tokens.empty() ? 0 : 1);
    const int64_t last_position = first_position + p.chunk.n_tokens - 1;
    const std::string where = layer < cfg.n_layer ? "layer " + std::to_string(layer)
                                                                : std::string("the output layer (final norm and lm_head)");
    throw LoadError(parts_.model->dir(),
                    "step " + std::to_string(index) + " (" + (p.phase == Phase::Prefill ? "prefill" : "decode") +
                        (last_position > first_position ? ", positions " + std::to_string(first_position) + "-" +
                                                               std::to_string(last_position)
                                                         : ", position " + std::to_string(first_position)) +
                        "): " + where + " produced NaN or infinity; no token was sampled",
                    "a weight or config.json value makes float32 overflow there");
}

const StepRecord& Session::run_step(Phase phase) {
    Pending p;
    prepare(p, phase);
    const int64_t first = cache_.next_position();
    try {
        if (!options_.use_cache && parts_.eviction.active())
            throw UsageError(std::string("eviction policy ") + eviction_policy_name(options_.eviction.kind) +
                             " evicts from the KV cache: keep the cache on");
        if (!options_.use_cache) return run_uncached(p);
        const double t0 = seconds_now();
        forward(*parts_.model, std::span<Chunk>(&p.chunk, 1), workspace_);
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
    if (parts_.edits.newest_after(parts_.turns.size())) {
        parts_.edits.undo_newest(cache_);  // the newest change is an edit made after the last step (and after any turn)
        return true;
    }
    if (parts_.turns.appended_at(undo_.size())) {
        // The newest change is an append_turn: take the turn back, the cache is as it was before it.
        const TurnUndo t = parts_.turns.take_back();
        parts_.prompt.resize(t.n_prompt);
        parts_.generated.assign(t.generated.begin(), t.generated.end());
        parts_.n_prompt_done = t.n_prompt_done;
        options_.max_new_tokens = t.max_new_tokens;
        return true;
    }
    if (undo_.empty()) return false;
    Undo& u = undo_.back();
    // The cache first: a block the step returned to the pool comes back, then its flags are cleared.
    cache_.restore(u.cache);
    parts_.eviction.take_back(cache_, u.eviction);
    sampler_.set_rng_state(u.rng_state);
    parts_.generated.resize(u.n_generated);
    parts_.n_prompt_done = u.n_prompt_done;
    parts_.logits = std::move(u.logits);
    parts_.encoder = std::move(u.encoder);
    parts_.edits = std::move(u.edits);  // the step's edits are pending again, as before it ran
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
    out.assign(size_t(parts_.model->config().n_vocab), 0.0f);
    // The next step's forward pass, then the cache back as it was (its slot, flags and pointer).
    KvCacheCheckpoint before = cache_.checkpoint(1);
    Chunk ch;
    ch.cache = &cache_;
    ch.tokens = all.data() + position;
    ch.n_tokens = 1;
    ch.logits = out.data();
    ch.encoder = parts_.encoder.get();
    try {
        forward(*parts_.model, std::span<Chunk>(&ch, 1), workspace_);
    } catch (...) {
        cache_.restore(before);
        throw;
    }
    cache_.restore(before);
}

const CacheEditRecord& Session::apply_edit(CacheEdit edit) {
    const ModelConfig& cfg = parts_.model->config();
    const int64_t L = cfg.n_layer, K = cfg.kv_heads(), D = cfg.head_dim(), p = edit.position;
    // pass 1: validate; nothing changes before every check passed
    if (cache_.pages().active()) throw UsageError("cache edits work on the ring cache: {-block_size}");
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
        if (cache_.format().quantized()) throw UsageError("patch writes float rows: {-kv_quant}");
        if (int64_t(edit.rows.size()) != L * 2 * K * D)
            throw UsageError("the patch rows hold " + std::to_string(edit.rows.size()) + " values, this model's " +
                             std::to_string(L * 2 * K * D) + " (L x 2 x K x D): is the source another model's?");
    }
    EditUndo u;
    u.n_turns = parts_.turns.size();
    u.entries = EditLog::changes(cache_, edit, L, K);
    // pass 2: the unedited next-step logits (those of the last step's cache, before any pending edit)
    if (parts_.edits.empty())
        next_step_logits(u.logits_before);
    else
        u.logits_before = parts_.edits.logits_before();
    // pass 3: apply, keeping what step_back needs to put it back
    const int64_t n_changed = int64_t(u.entries.size() / 2);
    parts_.edits.apply(cache_, edit, std::move(u));
    CacheEditRecord r;
    r.n_changed = n_changed;
    try {
        std::vector<float> after;  // (V)
        next_step_logits(after);
        r.effect = compare_distributions(parts_.edits.logits_before(), after, 5);
    } catch (...) {
        parts_.edits.record(CacheEditRecord{edit, 0, {}});
        parts_.edits.undo_newest(cache_);
        throw;
    }
    r.effect.position = cache_.next_position();
    r.effect.token = all_tokens()[size_t(r.effect.position)];
    r.edit = std::move(edit);
    parts_.edits.record(std::move(r));
    return parts_.edits.pending().back();
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
    side.step(Phase::Prefill);
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

}  // namespace kvscope
