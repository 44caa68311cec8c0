#include "run/session_group.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "run/options.h"
#include "run/session_batch.h"

namespace kvscope {

SessionGroup::SessionGroup(std::shared_ptr<const Model> model, SessionOptions options, GroupOptions group)
    : model_(std::move(model)), options_(std::move(options)), group_(std::move(group)) {
    check(RunOptions{options_, group_}, {}, neutral_words);  // every combination, for every caller (run/options.h)
    if (!group_.prompt_cache.empty() && model_->config().encoder_decoder)
        throw UsageError("a prompt cache file keys K/V by the decoder's tokens, but an encoder-decoder's K/V also "
                         "depend on the source: not available for this model");
    sessions_ = make_sessions();
}

std::vector<std::unique_ptr<Session>> SessionGroup::make_sessions(const std::shared_ptr<BlockPool>& pool) const {
    std::vector<std::unique_ptr<Session>> made;
    for (int64_t i = 0; i < group_.n_seq; ++i) {
        SessionOptions o = options_;
        o.sampling.seed = options_.sampling.seed + uint64_t(i);
        made.push_back(std::make_unique<Session>(model_, o, SessionSetup{pool, int32_t(i)}));
    }
    return made;
}

std::vector<const Session*> SessionGroup::sessions() const {
    std::vector<const Session*> all;
    for (const auto& s : sessions_) all.push_back(s.get());
    return all;
}

void SessionGroup::set_prompts(std::vector<std::vector<TokenId>> prompts, std::vector<TokenId> source) {
    if (int64_t(prompts.size()) != group_.n_seq)
        throw UsageError("the group has " + std::to_string(group_.n_seq) + " sequences but got " +
                         std::to_string(prompts.size()) + " prompts");
    const ModelConfig& c = model_->config();
    std::shared_ptr<BlockPool> pool;
    if (options_.block_size > 0) {
        // Every sequence at full length, plus one block each for a copy on write of a shared partial block.
        const int64_t start = c.encoder_decoder ? 1 : 0;  // the decoder start token set_prompt adds
        int64_t n_blocks = 0;
        for (const auto& p : prompts)
            n_blocks += pool_blocks_for(int64_t(p.size()) + start + options_.max_new_tokens, options_.block_size) + 1;
        pool = std::make_shared<BlockPool>(c.n_layer, c.kv_heads(), c.head_dim(), options_.block_size, n_blocks,
                                           model_->weights().bf16);
        pool->log_events(group_.pool_views);
    }
    std::vector<std::unique_ptr<Session>> made = make_sessions(pool);
    for (size_t i = 0; i < made.size(); ++i) {
        if (c.encoder_decoder) made[i]->set_source(source);
        made[i]->set_prompt(std::move(prompts[i]));
    }
    // Nothing threw: the new sessions replace the old ones (whose blocks go back to the old pool).
    sessions_ = std::move(made);
    pool_ = std::move(pool);
    std::vector<Session*> all;
    for (auto& s : sessions_) all.push_back(s.get());
    batch_ws_ = all.size() > 1 ? make_batch_workspace(all) : Workspace();
    adopted_.clear();
    views_.clear();
    if (pool_) pool_->take_events();  // the mapping of empty tables: nothing happened yet
    record_view();
    file_.reset();
    loaded_.reset();
    if (!group_.prompt_cache.empty()) open_prompt_cache_file();
}

void SessionGroup::open_prompt_cache_file() {
    PromptCacheFileState f;
    f.path = group_.prompt_cache;
    f.read_only = group_.prompt_cache_read_only;
    // The cache stores rows as the weights' dtype makes them.
    if (!fingerprint_) fingerprint_ = model_fingerprint(*model_, model_->weights().bf16);
    std::error_code ec;
    std::shared_ptr<const PromptCache> loaded;
    if (std::filesystem::exists(f.path, ec))
        loaded = std::make_shared<const PromptCache>(read_prompt_cache(f.path, *fingerprint_));
    else if (!f.read_only)
        ensure_writable(f.path);
    f.existed = loaded != nullptr;
    sessions_[0]->use_prompt_cache(loaded);
    loaded_ = std::move(loaded);
    file_ = std::move(f);
}

Session::Next SessionGroup::next() const {
    Session::Next n = Session::Next::Done;
    for (const auto& s : sessions_) {
        if (s->next() == Session::Next::Prefill) return Session::Next::Prefill;
        if (s->next() == Session::Next::Decode) n = Session::Next::Decode;
    }
    return n;
}

void SessionGroup::step() {
    if (next() == Session::Next::Done)
        throw UsageError(has_prompts() ? "generation is finished: step back or reset" : "no prompt is set");
    std::vector<int64_t> done_before;  // (N) prompt + generated tokens before the step: who moves
    for (const auto& s : sessions_) done_before.push_back(s->parts().n_prompt_done + int64_t(s->parts().generated.size()));
    if (sessions_.size() == 1) {
        sessions_[0]->step();
    } else {
        std::vector<Session*> all;
        for (auto& s : sessions_) all.push_back(s.get());
        step_batch(all, batch_ws_);
    }
    std::vector<Adopted> adopted(sessions_.size());
    for (size_t i = 0; i < sessions_.size(); ++i) {
        const Session& s = *sessions_[i];
        if (s.parts().n_prompt_done + int64_t(s.parts().generated.size()) == done_before[i] || !latest(s)) continue;
        const StepRecord& r = *latest(s);
        if (r.cost.adopted_from == StepCost::Source::SharedPrefix) adopted[i].shared = r.cost.n_adopted;
        if (r.cost.adopted_from == StepCost::Source::PromptCache) adopted[i].file = r.cost.n_adopted;
    }
    adopted_.push_back(std::move(adopted));
    decide_prompt_cache_file();
    record_view();
}

void SessionGroup::decide_prompt_cache_file() {
    Session& s = *sessions_[0];
    if (!file_ || file_->decided || s.next() == Session::Next::Prefill || !s.options().use_cache) return;
    file_->decided = true;
    for (const auto& step : adopted_) file_->loaded_positions += step[0].file;
    using Left = PromptCacheFileState::Left;
    const std::vector<TokenId>& prompt = s.parts().prompt;
    if (loaded_ && loaded_->tokens.size() >= prompt.size() &&
        std::equal(prompt.begin(), prompt.end(), loaded_->tokens.begin())) {
        file_->left = loaded_->tokens.size() == prompt.size() ? Left::HoldsPrompt : Left::HoldsLonger;
        return;
    }
    if (file_->read_only) {
        file_->left = Left::ReadOnly;
        return;
    }
    if (!holds_every_position(s.cache(), int64_t(prompt.size()))) {
        file_->left = Left::WindowOnly;
        return;
    }
    write_prompt_cache(file_->path, *fingerprint_, s.parts().prompt, s.cache());
    file_->written = true;
    file_->written_positions = int64_t(s.parts().prompt.size());
}

void SessionGroup::append_turn(std::vector<TokenId> ids, int64_t max_new_tokens, std::string role, int64_t keep) {
    if (sessions_.size() != 1) throw UsageError("a chat runs one sequence: set sequences to 1");
    sessions_[0]->append_turn(std::move(ids), max_new_tokens, std::move(role), keep);
}

const CacheEditRecord& SessionGroup::apply_edit(CacheEdit edit) {
    if (sessions_.size() != 1)
        throw UsageError("cache edits work on one sequence: this batch has " + std::to_string(sessions_.size()));
    return sessions_[0]->apply_edit(std::move(edit));
}

bool SessionGroup::step_back() {
    if (sessions_.size() == 1) {
        // A turn appended after the last step is taken back first; it ran no group step.
        const Session& s = *sessions_[0];
        const int64_t last_turn = int64_t(s.parts().turns.size()) - 1;
        if (last_turn > 0 && (s.trace().empty() || s.trace().back().id.turn < last_turn)) return sessions_[0]->step_back();
        if (!s.parts().edits.pending().empty()) return sessions_[0]->step_back();  // an edit after the last step
    }
    // A group step stepped every sequence not yet done, so exactly those whose trace holds the most steps
    // ran in the last one; undo them newest sequence first.
    size_t newest = 0;
    for (const auto& s : sessions_) newest = std::max(newest, s->trace().size());
    if (newest == 0) return false;
    bool undone = false;  // false: the newest steps came before a chat turn that rolled the cache back
    for (size_t j = sessions_.size(); j-- > 0;)
        if (sessions_[j]->trace().size() == newest) undone |= sessions_[j]->step_back();
    if (!undone) return false;
    if (!adopted_.empty()) adopted_.pop_back();
    if (pool_) pool_->take_events();  // the undo's releases: not part of any step
    if (views_.size() > adopted_.size() + 1) views_.resize(adopted_.size() + 1);
    return true;
}

void SessionGroup::reset() {
    for (size_t j = sessions_.size(); j-- > 0;) sessions_[j]->reset();
    adopted_.clear();
    if (pool_) pool_->take_events();
    if (views_.size() > 1) views_.resize(1);
    if (file_) open_prompt_cache_file();  // the first run may have written it: load it this time
}

void SessionGroup::set_use_cache(bool on) {
    options_.use_cache = on;
    for (auto& s : sessions_) s->set_use_cache(on);
}

void SessionGroup::record_view() {
    if (!pool_ || !group_.pool_views) return;
    PoolView v = pool_->view();
    v.group_step = int64_t(adopted_.size()) - 1;
    v.events = pool_->take_events();
    for (size_t i = 0; i < sessions_.size(); ++i) {
        const KvCache& cache = sessions_[i]->cache();
        v.tables.push_back(cache.pages().table());
        for (size_t k = 0; k < v.tables.back().size(); ++k)
            if (const int32_t b = v.tables.back()[k]; b >= 0) {
                v.blocks[size_t(b)].seqs.push_back(int32_t(i));
                v.blocks[size_t(b)].logical = int64_t(k);
            }
        v.n_steps.push_back(sessions_[i]->trace().size());
        int64_t shared = 0;
        for (const auto& step : adopted_) shared += step[i].shared;
        v.adopted.push_back(shared);
    }
    views_.push_back(std::make_shared<const PoolView>(std::move(v)));
}

GroupMemory SessionGroup::memory() const {
    GroupMemory m;
    m.sequences = size();
    m.paged = pool_ != nullptr;
    for (const auto& step : adopted_)
        for (const Adopted& a : step) {
            m.shared_positions += a.shared;
            m.cache_file_positions += a.file;
        }
    std::multiset<int32_t> mapped;
    if (!sessions_.empty()) {
        const KvCache& c = sessions_.front()->cache();
        m.bytes_per_position = c.view().bytes_per_position;
        m.kv_format = c.format().quantized() ? to_string(c.format().quant().format) : c.format().bf16() ? "bf16" : "f32";
    }
    for (const auto& s : sessions_) {
        m.positions += s->cache().next_position();
        const KvCacheView view = s->cache().view();
        if (!pool_) m.bytes += view.bytes_capacity;
        m.bytes_held += view.bytes_used;
        if (s == sessions_.front()) {
            m.layer_window = view.layer_window;
            m.layer_positions_held = view.layer_held;
            if (view.sliding_kept_whole) m.sliding_kept_whole = view.sliding_kept_whole;
        }
        if (m.kv_format == "int4") {  // what bytes_capacity holds beyond the packed rows (row_format.h Int4Rows)
            const int64_t residual = view.bytes_capacity - s->cache().capacity() * view.bytes_per_position;
            const ModelConfig& cfg = model_->config();
            m.bytes_residual += residual;
            m.residual_slots = residual / (2 * cfg.n_layer * cfg.kv_width() * int64_t(sizeof(float)));
        }
        for (int32_t b : s->cache().pages().table())
            if (b >= 0) mapped.insert(b);
    }
    m.bytes_unshared = m.bytes;
    if (!pool_) return m;
    m.block_size = pool_->block_size();
    m.blocks_mapped = int64_t(mapped.size());
    for (auto it = mapped.begin(); it != mapped.end(); it = mapped.upper_bound(*it)) {
        ++m.blocks_distinct;
        if (mapped.count(*it) > 1) ++m.blocks_shared;
    }
    m.bytes = m.blocks_distinct * pool_->bytes_per_block();
    m.bytes_unshared = m.blocks_mapped * pool_->bytes_per_block();
    m.copies_on_write = pool_->stats().copies_on_write;
    return m;
}

const char* left_reason(PromptCacheFileState::Left l) {
    using Left = PromptCacheFileState::Left;
    switch (l) {
        case Left::No: return "";
        case Left::HoldsPrompt: return "it already holds this prompt";
        case Left::HoldsLonger: return "it holds this prompt and more (a file is never shortened)";
        case Left::ReadOnly: return "read-only";
        case Left::WindowOnly: return "the model's sliding layers store only their window and the prompt went in in parts "
                                      "(chunks or a loaded prefix): its first positions are gone from them";
    }
    return "";
}

const PoolView* pool_view_at(const std::vector<std::shared_ptr<const PoolView>>& views, int64_t seq, int64_t step) {
    if (views.empty()) return nullptr;
    if (step < 0 || seq < 0) return views.back().get();
    // The first group step after which sequence `seq` had run step `step`.
    for (const auto& v : views)
        if (size_t(seq) < v->n_steps.size() && v->n_steps[size_t(seq)] > size_t(step)) return v.get();
    return views.back().get();
}

}  // namespace kvscope
