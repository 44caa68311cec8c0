// The command queue and its worker thread (see commands.h). Every Session call of the app is in this file.
#include "commands.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../cli_args.h"
#include "../cli_kv.h"
#include "errors.h"
#include "export.h"
#include "json.h"

namespace kvscope::gui {
namespace {

constexpr size_t kMaxQueued = 64;  // more than anyone types ahead; beyond it intents are refused
constexpr int64_t kMaxSequences = 16;  // a batch the Memory panel can still draw legibly

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

SessionOptions shadow_options(SessionOptions o) {
    o.record = false;  // the shadow only contributes logits, time and FLOPs
    return o;
}

// Intents that end a run in progress (the others wait for it, or apply between two of its steps).
bool stops_run(Command::Kind k) {
    using K = Command::Kind;
    return k == K::Pause || k == K::Back || k == K::Reset || k == K::SetPrompt || k == K::SetSource || k == K::SetOptions ||
           k == K::LoadModel;
}

bool is_step(Command::Kind k) {
    using K = Command::Kind;
    return k == K::Prefill || k == K::Decode || k == K::Step || k == K::Run;
}

}  // namespace

std::string token_text(const Model& model, TokenId id) {
    if (!model.tokenizer() || id < 0 || id >= model.tokenizer()->n_vocab()) return "<" + std::to_string(id) + ">";
    return display_bytes(model.tokenizer()->token_bytes(id));
}

std::vector<TokenId> encode_prompt(const Model& m, const std::string& text) {
    if (m.tokenizer()) return m.tokenizer()->encode(text, false);
    std::vector<TokenId> ids;
    for (int64_t id : parse_id_list(text, "prompt ids"))
        ids.push_back(TokenId(id));
    return ids;
}

int64_t MemoryState::n_mapped() const {
    int64_t n = 0;
    for (const Block& b : blocks) n += b.seqs.empty() ? 0 : 1;
    return n;
}

int64_t MemoryState::n_unshared() const {
    int64_t n = 0;
    for (const auto& t : tables)
        for (int32_t b : t) n += b >= 0 ? 1 : 0;
    return n;
}

const MemoryState* Snapshot::memory_at(int64_t step) const {
    if (memory.empty()) return nullptr;
    if (step < 0 || size_t(selected) >= sequences.size()) return memory.back().get();
    // The first batch step after which the selected sequence had run step `step`.
    for (const auto& m : memory)
        if (size_t(selected) < m->n_steps.size() && m->n_steps[size_t(selected)] > size_t(step)) return m.get();
    return memory.back().get();
}

// ---- UI side ----

Controller::Controller(std::shared_ptr<const Model> model, SessionOptions options) {
    options.record = true;
    const bool ed = model->config().encoder_decoder;
    rebuild(std::move(model), options, BatchOptions{});
    set_status(ed ? "encoder-decoder: the source is '" + source_text_ + "'; the prompt may stay empty. Press Prefill (or Space)"
                  : std::string("type a prompt, then press Prefill (or Space)"));
    publish();
    worker_ = std::thread([this] { worker_loop(); });
}

Controller::~Controller() {
    {
        std::lock_guard<std::mutex> lock(m_);
        stop_ = true;
        queue_.clear();
    }
    cv_.notify_all();
    worker_.join();
}

bool Controller::push(Command c) {
    using K = Command::Kind;
    {
        std::lock_guard<std::mutex> lock(m_);
        if (c.kind == K::SetPrompt) {
            ++prompt_edits_pushed_;
            c.n = int64_t(prompt_edits_pushed_);
            // Typing while the worker is busy: only the newest text matters.
            if (!queue_.empty() && queue_.back().kind == K::SetPrompt) {
                queue_.back() = std::move(c);
                return true;
            }
        }
        if (c.kind == K::SetSource) {
            ++source_edits_pushed_;
            c.n = int64_t(source_edits_pushed_);
            if (!queue_.empty() && queue_.back().kind == K::SetSource) {
                queue_.back() = std::move(c);
                return true;
            }
        }
        if (queue_.size() >= kMaxQueued) {
            notice_ = "busy: " + std::to_string(queue_.size()) + " intents are already waiting; this one was dropped";
            return false;
        }
        notice_.clear();
        queue_.push_back(std::move(c));
    }
    cv_.notify_all();
    return true;
}

std::shared_ptr<const Snapshot> Controller::snapshot() const {
    std::lock_guard<std::mutex> lock(m_);
    return snap_;
}

Progress Controller::progress() const {
    std::lock_guard<std::mutex> lock(m_);
    Progress p;
    p.busy = working_ || !queue_.empty() || run_left_ != 0;
    p.activity = p.busy ? activity_ : std::string();
    p.elapsed_s = p.busy ? now_s() - activity_start_ : 0;
    p.running = run_left_ != 0;
    p.run_done = run_done_;
    p.run_total = run_total_;
    p.run_limit = run_limit_;
    p.queued = queue_.size();
    p.notice = notice_;
    return p;
}

bool Controller::busy() const {
    std::lock_guard<std::mutex> lock(m_);
    return working_ || !queue_.empty() || run_left_ != 0;
}

void Controller::wait_idle() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !working_ && queue_.empty() && run_left_ == 0; });
}

bool Controller::execute(const Command& c) {
    const uint64_t errors = snapshot()->n_errors;
    push(c);
    wait_idle();
    return snapshot()->n_errors == errors;
}

void Controller::set_wake(std::function<void()> wake) {
    std::lock_guard<std::mutex> lock(m_);
    wake_ = std::move(wake);
}

uint64_t Controller::prompt_edits() const {
    std::lock_guard<std::mutex> lock(m_);
    return prompt_edits_pushed_;
}

uint64_t Controller::source_edits() const {
    std::lock_guard<std::mutex> lock(m_);
    return source_edits_pushed_;
}

// ---- worker side ----

void Controller::worker_loop() {
#ifdef __linux__
    // Steps yield to drawing when both want the cores: a lower priority for this thread and for the
    // engine's pool threads when they are first started from here (Linux threads inherit it).
    setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 8);
#endif
    for (;;) {
        Command c;
        bool have = false;
        {
            std::unique_lock<std::mutex> lock(m_);
            working_ = false;
            cv_.notify_all();  // wait_idle() may be waiting
            // A run takes the next step unless an intent that can apply between steps is waiting; step
            // intents wait for the run to end, so "decode, decode, decode" makes three steps.
            cv_.wait(lock, [&] {
                return stop_ || run_left_ != 0 || !queue_.empty();
            });
            if (stop_) return;
            if (!queue_.empty() && (run_left_ == 0 || !is_step(queue_.front().kind))) {
                c = std::move(queue_.front());
                queue_.pop_front();
                have = true;
                if (stops_run(c.kind) && c.kind != Command::Kind::Pause) run_left_ = 0;
            }
            working_ = true;
        }
        if (have) {
            try {
                apply(c);
            } catch (const UsageError& e) {
                set_status(e.what(), true);
            } catch (const LoadError& e) {
                set_status(e.what(), true);
            } catch (const JsonError& e) {
                set_status(e.what(), true);
            } catch (const std::exception& e) {
                set_status(e.what(), true);
            }
            if (status_error_) {
                std::lock_guard<std::mutex> lock(m_);
                run_left_ = 0;
            }
        } else {
            try {
                run_step();
            } catch (const std::exception& e) {
                std::lock_guard<std::mutex> lock(m_);
                run_left_ = 0;
                status_ = e.what();
                status_error_ = true;
                ++n_errors_;
            }
        }
        publish();
    }
}

void Controller::set_status(std::string s, bool error) {
    status_ = std::move(s);
    status_error_ = error;
    if (error) ++n_errors_;
}

void Controller::set_activity(std::string what) {
    std::lock_guard<std::mutex> lock(m_);
    activity_ = std::move(what);
    activity_start_ = now_s();
}

void Controller::publish() {
    auto s = std::make_shared<Snapshot>();
    Session& session = sel();
    s->model_ptr = session.share_model();
    s->main_trace = session.trace();
    s->has_shadow = shadow_ != nullptr;
    if (shadow_) s->shadow_trace = shadow_->trace();
    s->shadow_diverged = shadow_diverged_;
    s->compare = compare_;
    s->prompt_ids = session.prompt();
    s->generated_ids = session.generated();
    s->session_options = session.options();
    s->session_options.sampling.seed = sessions_[0]->options().sampling.seed;  // the batch's base seed
    s->next_phase = session.next();
    s->prompt_text = prompt_text_;
    s->prompt_edits = prompt_edits_applied_;
    s->source_text = source_text_;
    s->source_ids = session.source();
    s->source_edits = source_edits_applied_;
    s->generation = generation_;
    s->status = status_;
    s->status_error = status_error_;
    s->n_errors = n_errors_;
    s->last_export = last_export_;
    s->heads = heads_;
    for (const auto& q : sessions_)
        s->sequences.push_back({q->trace(), q->prompt(), q->generated(), q->options().sampling.seed, q->next()});
    s->selected = selected_;
    s->batch = batch_;
    s->memory = memory_;
    std::function<void()> wake;
    {
        std::lock_guard<std::mutex> lock(m_);
        snap_ = std::move(s);
        wake = wake_;
    }
    if (wake) wake();
}

std::vector<TokenId> Controller::encode(const Model& model, const std::string& text) const {
    return encode_prompt(model, text);
}

void Controller::rebuild(std::shared_ptr<const Model> model, SessionOptions options, BatchOptions batch) {
    options.record = true;
    validate(options);
    if (batch.n_seq < 1 || batch.n_seq > kMaxSequences)
        throw UsageError("sequences must be 1.." + std::to_string(kMaxSequences) + ", got " + std::to_string(batch.n_seq));
    if (batch.suffixes.size() > size_t(batch.n_seq)) batch.suffixes.resize(size_t(batch.n_seq));
    if (!batch.prompt_cache.empty() && batch.n_seq > 1)
        throw UsageError("a prompt cache file works with one sequence (the batch has " + std::to_string(batch.n_seq) + ")");
    std::vector<std::unique_ptr<Session>> fresh;
    for (int64_t i = 0; i < batch.n_seq; ++i) {
        SessionOptions o = options;
        o.sampling.seed = options.sampling.seed + uint64_t(i);
        fresh.push_back(std::make_unique<Session>(model, o));
    }
    std::unique_ptr<Session> fresh_shadow;
    if (compare_ && batch.n_seq == 1) {
        SessionOptions so = shadow_options(options);
        so.use_cache = !options.use_cache;
        fresh_shadow = std::make_unique<Session>(model, so);
    }
    sessions_ = std::move(fresh);
    selected_ = 0;
    batch_ = std::move(batch);
    prompt_cache_.reset();
    shadow_ = std::move(fresh_shadow);
    shadow_diverged_ = false;
    if (model->config().encoder_decoder && source_text_.empty()) source_text_ = kDefaultSource;
    // Keep the prompt when it still fits the new model/options; otherwise start empty.
    if (has_input()) {
        try {
            set_prompts();
        } catch (const UsageError&) {
            for (auto& q : sessions_) q = std::make_unique<Session>(model, q->options());
            pool_.reset();
            memory_.clear();
        }
    }
    {
        std::lock_guard<std::mutex> lock(m_);
        run_left_ = 0;
    }
    ++generation_;
}

std::vector<Session*> Controller::all_sessions() const {
    std::vector<Session*> all;
    for (const auto& q : sessions_) all.push_back(q.get());
    return all;
}

Session::Next Controller::batch_next() const {
    Session::Next n = Session::Next::Done;
    for (const auto& q : sessions_) {
        if (q->next() == Session::Next::Prefill) return Session::Next::Prefill;
        if (q->next() == Session::Next::Decode) n = Session::Next::Decode;
    }
    return n;
}

bool Controller::has_input() const {
    return !prompt_text_.empty() || (sessions_[0]->model().config().encoder_decoder && !source_text_.empty());
}

void Controller::set_input(Session& s, std::vector<TokenId> prompt) {
    if (s.model().config().encoder_decoder) s.set_source(encode(s.model(), source_text_));
    s.set_prompt(std::move(prompt));
}

void Controller::set_prompts() {
    const Model& model = sessions_[0]->model();
    if (model.config().encoder_decoder && source_text_.empty())
        throw UsageError("an encoder-decoder model needs a source: type the encoder's input in the source box");
    const std::vector<TokenId> prompt = encode(model, prompt_text_);
    std::vector<std::vector<TokenId>> ids(sessions_.size(), prompt);
    for (size_t i = 0; i < ids.size() && i < batch_.suffixes.size(); ++i)
        if (!batch_.suffixes[i].empty()) {
            const std::vector<TokenId> tail = encode(model, batch_.suffixes[i]);
            ids[i].insert(ids[i].end(), tail.begin(), tail.end());
        }
    // One pool for the batch, sized for every sequence at full length plus a copy-on-write block each;
    // a fresh one per prompt, since set_prompt drops the old caches' blocks without returning them.
    const SessionOptions& o = sessions_[0]->options();
    pool_.reset();
    if (o.block_size > 0 && (!prompt.empty() || model.config().encoder_decoder)) {
        const ModelConfig& c = model.config();
        int64_t n_blocks = 0;
        for (const auto& p : ids) n_blocks += Session::pool_blocks_for(int64_t(p.size()) + o.max_new_tokens, o.block_size) + 1;
        pool_ = std::make_shared<BlockPool>(c.n_layer, c.n_head, c.head_dim(), o.block_size, n_blocks);
    }
    for (size_t i = 0; i < sessions_.size(); ++i) {
        if (pool_) sessions_[i]->use_pool(pool_);
        set_input(*sessions_[i], ids[i]);
    }
    if (shadow_) set_input(*shadow_, ids[0]);
    batch_ws_.reset();
    if (sessions_.size() > 1) batch_ws_ = std::make_unique<Workspace>(Session::make_batch_workspace(all_sessions()));
    memory_.clear();
    record_memory();
    attach_prompt_cache();  // last: a refused file throws, and the session stands without it
}

void Controller::attach_prompt_cache() {
    prompt_cache_.reset();
    if (batch_.prompt_cache.empty() || sessions_[0]->prompt().empty()) return;
    if (sessions_[0]->model().config().encoder_decoder)
        throw UsageError("a prompt cache file keys K/V by the decoder's tokens, but an encoder-decoder's K/V also "
                         "depend on the source: not available for this model");
    // Refused files (another model, damaged) throw LoadError with one line; the session runs without.
    set_activity("checking prompt cache " + batch_.prompt_cache);
    auto use = std::make_shared<PromptCacheUse>(open_prompt_cache(batch_.prompt_cache, sessions_[0]->model()));
    sessions_[0]->use_prompt_cache(use->loaded);
    prompt_cache_ = std::move(use);
}

void Controller::save_prompt_cache_after_prefill() {
    Session& s = *sessions_[0];
    if (!prompt_cache_ || prompt_cache_->written || s.next() == Session::Next::Prefill || !s.options().use_cache) return;
    save_prompt_cache(*prompt_cache_, s.model(), s);
}

MemoryState Controller::memory_state() const {
    MemoryState m;
    const BlockPool& pool = *pool_;
    m.block_size = pool.block_size();
    m.bytes_per_block = pool.bytes_per_block();
    m.blocks.resize(size_t(pool.n_blocks()));
    for (int32_t b = 0; b < int32_t(pool.n_blocks()); ++b) {
        MemoryState::Block& k = m.blocks[size_t(b)];
        k.refs = int32_t(pool.ref_count(b));
        if (k.refs > 0) {
            k.tokens.assign(pool.content(b).begin(), pool.content(b).end());
            k.chain = pool.chain(b);
        }
    }
    for (size_t i = 0; i < sessions_.size(); ++i) {
        const KvCache& cache = sessions_[i]->cache();
        m.tables.push_back(cache.paged() ? cache.block_table() : std::vector<int32_t>{});
        for (size_t k = 0; k < m.tables.back().size(); ++k)
            if (const int32_t b = m.tables.back()[k]; b >= 0) {
                m.blocks[size_t(b)].seqs.push_back(int32_t(i));
                m.blocks[size_t(b)].logical = int64_t(k);
            }
        m.n_steps.push_back(sessions_[i]->trace().size());
        int64_t adopted = 0;
        const Trace& t = sessions_[i]->trace();
        for (size_t j = 0; j < t.size(); ++j)
            if (t[j].cost.adopted_from == StepCost::Source::SharedPrefix) adopted += t[j].cost.n_adopted;
        m.adopted.push_back(adopted);
    }
    m.n_free = pool.n_free();
    m.copies_on_write = pool.stats().copies_on_write;
    m.positions_adopted = pool.stats().positions_adopted;
    return m;
}

void Controller::record_memory() {
    if (!pool_) return;
    MemoryState m = memory_state();
    m.batch_step = int64_t(memory_.size()) - 1;
    if (!memory_.empty()) {
        // What this step did, from the difference to the state before it.
        const MemoryState& before = *memory_.back();
        for (size_t b = 0; b < m.blocks.size(); ++b) {
            MemoryState::Block& now = m.blocks[b];
            const MemoryState::Block& was = before.blocks[b];
            if (was.seqs.empty() && !now.seqs.empty()) now.change |= MemoryState::Allocated;
            if (!was.seqs.empty() && now.seqs.empty() && now.refs == 0) now.change |= MemoryState::Freed;
            if (now.seqs.size() > 1 && now.seqs.size() > was.seqs.size()) now.change |= MemoryState::Shared;
        }
        int64_t n_copies = m.copies_on_write - before.copies_on_write;
        auto mark_copy = [&](int32_t b, int32_t from) {
            m.blocks[size_t(b)].change = uint8_t((m.blocks[size_t(b)].change & ~MemoryState::Allocated) | MemoryState::Copied);
            m.blocks[size_t(b)].copied_from = from;
            --n_copies;
        };
        // pass 1: a table entry that moved from one block to another is a copy-on-write (nothing else remaps)
        for (size_t i = 0; i < m.tables.size() && i < before.tables.size(); ++i)
            for (size_t k = 0; k < m.tables[i].size() && k < before.tables[i].size(); ++k) {
                const int32_t a = before.tables[i][k], b = m.tables[i][k];
                if (a >= 0 && b >= 0 && a != b && n_copies > 0) mark_copy(b, a);
            }
        // pass 2: a sequence that adopted a partly filled block and wrote into it in the same step: its new
        // block has the chain of a block an earlier sequence maps at the same place (the one it copied)
        for (int32_t b = 0; b < int32_t(m.blocks.size()) && n_copies > 0; ++b) {
            const MemoryState::Block& nb = m.blocks[size_t(b)];
            if (!(nb.change & MemoryState::Allocated) || nb.seqs.empty()) continue;
            for (int32_t a = 0; a < int32_t(m.blocks.size()); ++a) {
                const MemoryState::Block& na = m.blocks[size_t(a)];
                if (a == b || na.seqs.empty() || na.chain != nb.chain || na.logical != nb.logical ||
                    na.seqs.front() >= nb.seqs.front())
                    continue;
                mark_copy(b, a);
                break;
            }
        }
    }
    memory_.push_back(std::make_shared<const MemoryState>(std::move(m)));
}

void Controller::sync_shadow() {
    shadow_.reset();
    shadow_diverged_ = false;
    if (!compare_ || sessions_.size() > 1) return;  // a batch has no shadow
    Session& session = *sessions_[0];
    SessionOptions so = shadow_options(session.options());
    auto s = std::make_unique<Session>(session.share_model(), so);
    if (!session.prompt().empty()) {
        if (session.model().config().encoder_decoder) {
            // The session's prompt begins with the decoder start token, which set_prompt adds again.
            s->set_source(session.source());
            s->set_prompt(std::vector<TokenId>(session.prompt().begin() + 1, session.prompt().end()));
        } else {
            s->set_prompt(session.prompt());
        }
        const Trace& t = session.trace();
        if (t.size() > 0) set_activity("replaying " + std::to_string(t.size()) + " step(s) the other way");
        for (size_t i = 0; i < t.size(); ++i) {
            s->set_use_cache(!t[i].id.cache_on);
            s->step();
            if (s->trace().back().prediction.chosen != t[i].prediction.chosen) {
                shadow_diverged_ = true;
                return;
            }
        }
    }
    shadow_ = std::move(s);
}

bool Controller::step_once() {
    if (sessions_.size() > 1) {
        if (batch_next() == Session::Next::Done) return false;
        set_activity("batch step " + std::to_string(memory_.empty() ? 0 : memory_.size() - 1) + ": " +
                     std::to_string(sessions_.size()) + " sequences");
        const std::vector<Session*> all = all_sessions();
        Session::step_batch(all, *batch_ws_);
        record_memory();
        return true;
    }
    Session& session = *sessions_[0];
    const Session::Next next = session.next();
    if (next == Session::Next::Done) return false;
    {
        const int64_t n_prompt = int64_t(session.prompt().size());
        const int64_t done = session.n_prompt_done();
        const int64_t chunk = session.options().prefill_chunk;
        const int64_t n = next == Session::Next::Prefill ? (chunk > 0 ? std::min(chunk, n_prompt - done) : n_prompt - done) : 1;
        const bool cache = session.options().use_cache;
        const int64_t rows = cache ? n : done + int64_t(session.generated().size()) + n;
        set_activity(std::string(next == Session::Next::Prefill ? "prefill" : "decode") + " step " +
                     std::to_string(session.trace().size()) + ": " + std::to_string(n) + " new token(s), " +
                     std::to_string(rows) + " row(s) computed (cache " + (cache ? "ON)" : "OFF)"));
    }
    const StepRecord& r = session.step();
    record_memory();
    save_prompt_cache_after_prefill();
    if (shadow_ && !shadow_diverged_) {
        // Show the step now; the other way (often the slow cache-off one) follows.
        publish();
        set_activity("the same step with the cache " + std::string(r.id.cache_on ? "OFF" : "ON") + " (comparison)");
        shadow_->set_use_cache(!r.id.cache_on);
        const StepRecord& s = shadow_->step();
        if (s.prediction.chosen != r.prediction.chosen) shadow_diverged_ = true;  // sampling split on a near tie: stop comparing
    }
    return true;
}

void Controller::run_step() {
    const Session::Next next = batch_next();
    if (next == Session::Next::Done || (run_decode_only_ && next != Session::Next::Decode)) {
        std::lock_guard<std::mutex> lock(m_);
        run_left_ = 0;
    } else {
        step_once();
        std::lock_guard<std::mutex> lock(m_);
        ++run_done_;
        if (run_left_ > 0) --run_left_;
    }
    if (run_left_ == 0) {
        const StepRecord* last = sel().trace().empty() ? nullptr : &sel().trace().back();
        set_status("ran " + std::to_string(run_done_) + " step(s)" +
                   (last ? "; now at position " + std::to_string(last->cache.next_position) : std::string()));
    } else {
        set_status("running: " + std::to_string(run_done_) +
                   (run_total_ > 0 ? " / " + std::to_string(run_total_) : std::string()) + " steps");
    }
}

void Controller::apply(const Command& c) {
    using K = Command::Kind;
    Session& s = sel();
    auto describe = [&](const StepRecord& r) {
        std::string msg = std::string(phase_name(r.id.phase)) + " step " + std::to_string(r.id.index) + ": " +
                          std::to_string(r.id.tokens.size()) + " token(s) at position " + std::to_string(r.id.first_position);
        if (r.prediction.chosen) msg += ", next token " + std::to_string(*r.prediction.chosen) + " '" + token_text(s.model(), *r.prediction.chosen) + "'";
        return msg;
    };
    auto no_more = [&] {
        return UsageError(s.prompt().empty() ? "no prompt is set" : "generation is finished: step back or reset");
    };
    set_activity("");
    switch (c.kind) {
    case K::SetPrompt: {
        prompt_text_ = c.text;
        prompt_edits_applied_ = uint64_t(std::max<int64_t>(0, c.n));
        set_prompts();
        shadow_diverged_ = false;
        if (!shadow_ && compare_) sync_shadow();
        const bool ed = s.model().config().encoder_decoder;
        set_status("prompt: " + std::to_string(s.prompt().size() - (ed ? 1 : 0)) + " tokens" +
                   (ed ? " after the decoder start token, source " + std::to_string(s.source().size()) + " tokens"
                       : std::string()) +
                   (sessions_.size() > 1 ? " (sequence " + std::to_string(selected_) + " of " +
                                               std::to_string(sessions_.size()) + ")" : std::string()) +
                   "; press Prefill");
        return;
    }
    case K::SetSource: {
        if (!s.model().config().encoder_decoder)
            throw UsageError(s.model().dir() + " is decoder-only: it takes no source (load an encoder-decoder model)");
        source_text_ = c.text;
        source_edits_applied_ = uint64_t(std::max<int64_t>(0, c.n));
        set_prompts();
        shadow_diverged_ = false;
        if (!shadow_ && compare_) sync_shadow();
        set_status("source: " + std::to_string(s.source().size()) +
                   " tokens for the encoder; the first prefill step runs it and fills the cross-attention cache");
        return;
    }
    case K::Prefill:
        if (batch_next() != Session::Next::Prefill)
            throw UsageError(s.prompt().empty() ? "no prompt is set" : "the prompt is already in the cache: decode instead");
        step_once();
        set_status(describe(s.trace().back()));
        return;
    case K::Step:
        if (batch_next() == Session::Next::Done) throw no_more();
        step_once();
        set_status(describe(s.trace().back()));
        return;
    case K::Decode:
    case K::Run: {
        const Session::Next next = batch_next();
        if (c.kind == K::Decode && next != Session::Next::Decode)
            throw UsageError(s.prompt().empty() ? "no prompt is set"
                             : next == Session::Next::Prefill ? "prefill the prompt first"
                                                              : "generation is finished: step back or reset");
        if (c.kind == K::Run && next == Session::Next::Done) throw no_more();
        // Steps a run to the end would take: the rest of the prompt's chunks plus the tokens still to generate.
        const int64_t chunk = s.options().prefill_chunk;
        const int64_t left_prompt = int64_t(s.prompt().size()) - s.n_prompt_done();
        const int64_t prefill_steps = left_prompt <= 0 ? 0 : chunk > 0 ? (left_prompt + chunk - 1) / chunk : 1;
        const int64_t decode_steps = s.options().max_new_tokens - int64_t(s.generated().size()) - (left_prompt > 0 ? 1 : 0) + 1;
        std::lock_guard<std::mutex> lock(m_);
        run_left_ = c.n < 0 ? -1 : c.n;
        run_total_ = c.n < 0 ? -1 : c.n;
        run_limit_ = c.n < 0 ? std::max<int64_t>(1, prefill_steps + std::max<int64_t>(0, decode_steps - 1)) : c.n;
        run_done_ = 0;
        run_decode_only_ = c.kind == K::Decode;
        if (run_left_ == 0) status_ = "nothing to run";
        return;
    }
    case K::Pause: {
        std::lock_guard<std::mutex> lock(m_);
        if (run_left_) status_ = "paused after " + std::to_string(run_done_) + " step(s)", status_error_ = false;
        run_left_ = 0;
        return;
    }
    case K::Back:
        if (sessions_.size() > 1) {
            // Batch step b stepped every sequence not yet done, so exactly those whose trace holds the most
            // steps ran in the last one; undo them newest sequence first.
            for (int64_t i = 0; i < c.n; ++i) {
                size_t b = 0;
                for (const auto& q : sessions_) b = std::max(b, q->trace().size());
                if (b == 0) throw UsageError("nothing to step back: no step has run");
                for (size_t j = sessions_.size(); j-- > 0;)
                    if (sessions_[j]->trace().size() == b) sessions_[j]->step_back();
                if (memory_.size() > b) memory_.resize(b);
            }
            set_status("stepped back to " + std::to_string(s.trace().size()) + " step(s)");
            return;
        }
        for (int64_t i = 0; i < c.n; ++i) {
            if (!s.step_back()) throw UsageError("nothing to step back: no step has run");
            if (memory_.size() > s.trace().size() + 1) memory_.resize(s.trace().size() + 1);
            if (shadow_ && !shadow_diverged_) {
                // The shadow may lag when a step's comparison was cut short by an error.
                if (shadow_->trace().size() > s.trace().size()) shadow_->step_back();
            }
        }
        if (shadow_diverged_ || (shadow_ && shadow_->trace().size() != s.trace().size())) sync_shadow();
        set_status("stepped back to " + std::to_string(s.trace().size()) + " step(s)");
        return;
    case K::Reset:
        for (size_t j = sessions_.size(); j-- > 0;) sessions_[j]->reset();
        if (prompt_cache_ && !prompt_cache_->loaded) attach_prompt_cache();  // written since: load it next time
        if (memory_.size() > 1) memory_.resize(1);
        sync_shadow();
        set_status("reset: the cache is empty, same prompt");
        return;
    case K::Cache:
        for (auto& q : sessions_) q->set_use_cache(c.on);
        set_status(c.on ? "cache ON: the next steps reuse cached K/V" : "cache OFF: the next steps recompute every position");
        return;
    case K::Compare:
        compare_ = c.on;
        sync_shadow();
        set_status(c.on ? "comparing every step with the cache switch flipped" : "comparison off");
        return;
    case K::SetOptions: {
        SessionOptions o = c.options;
        o.use_cache = s.options().use_cache;
        rebuild(s.share_model(), o, c.batch);
        set_status(sessions_.size() > 1 ? "options applied: " + std::to_string(sessions_.size()) + " sequences restarted"
                                        : "options applied; the session restarted");
        return;
    }
    case K::LoadModel: {
        set_activity("loading model " + c.text);
        // The weight format the app was started with (--dtype) stays; a failed load throws and the model stays.
        const WeightFormat format = s.model().weights().bf16 ? WeightFormat::BF16 : WeightFormat::F32;
        std::shared_ptr<const Model> m = Model::load(c.text, format);
        SessionOptions o = sessions_[0]->options();  // the base seed
        rebuild(m, o, batch_);
        heads_.clear();
        if (sel().prompt().empty() && !prompt_text_.empty()) prompt_text_.clear();
        set_status("loaded " + c.text +
                   (m->config().encoder_decoder ? ": an encoder-decoder; source '" + source_text_ +
                                                      "' (edit it above the prompt), press Prefill"
                                                : std::string()));
        return;
    }
    case K::ExportStep:
    case K::ExportSession: {
        if (s.trace().empty()) throw UsageError("nothing to export yet: run a step first");
        set_activity("exporting to " + c.text);
        std::error_code ec;
        std::filesystem::create_directories(c.text, ec);
        if (ec || !std::filesystem::is_directory(c.text)) throw UsageError("cannot create folder " + c.text);
        ExportScope scope;
        if (c.layer >= 0) scope.layer = c.layer;
        if (c.head >= 0) scope.head = c.head;
        if (c.kind == K::ExportStep) {
            size_t step = c.step < 0 ? s.trace().size() - 1 : size_t(c.step);
            if (step >= s.trace().size()) throw UsageError("no step " + std::to_string(step) + " to export");
            last_export_ = export_step(s.trace(), step, s.model().tokenizer(), c.text, scope);
            set_status("exported step " + std::to_string(step) + " to " + last_export_);
        } else {
            export_trace(s.trace(), s.model().tokenizer(), c.text, scope);
            last_export_ = c.text;
            set_status("exported " + std::to_string(s.trace().size()) + " steps to " + c.text);
        }
        return;
    }
    case K::ExplainHeads: {
        if (s.model().config().encoder_decoder)
            throw UsageError("head scores run decoder-only probe prompts: not measured for encoder-decoder models");
        set_activity("measuring every head on probe prompts");
        heads_ = head_scores(s.share_model());
        set_status("measured " + std::to_string(heads_.size()) + " heads: previous-token and induction scores");
        return;
    }
    case K::Select:
        if (c.n < 0 || c.n >= int64_t(sessions_.size()))
            throw UsageError("no sequence " + std::to_string(c.n) + ": the batch has " + std::to_string(sessions_.size()));
        selected_ = c.n;
        set_status("showing sequence " + std::to_string(c.n) + " of " + std::to_string(sessions_.size()));
        return;
    }
}

}  // namespace kvscope::gui
